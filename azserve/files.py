"""Bytes on disk and their checksums: atomic writes (temp file, fsync, rename), SHA-256, and
a small file followed while it changes."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")
P = TypeVar("P", bound="str | Path")


def checksum(data: bytes | memoryview) -> str:
    """Hex SHA-256 of a weights blob: carried next to it on the wire, kept by the server."""
    return hashlib.sha256(data).hexdigest()


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to a temp file in the same directory, fsync, then rename over ``path``.
    On any error (ENOSPC included) the temp file is removed and the old ``path`` is intact."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def emit(result: dict[str, Any], path: str | None) -> None:
    """Print the JSON result and write it to ``path`` when given."""
    text = json.dumps(result, indent=2, default=float)
    print(text, flush=True)
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(text + "\n")
        print(f"wrote {path}", file=sys.stderr)


async def follow(
    path: P,
    read: Callable[[P], T | None],
    apply: Callable[[T], None],
    poll_s: float,
) -> None:
    """Read ``path`` with ``read`` every ``poll_s`` seconds, until cancelled, and call
    ``apply`` with each value that differs from the one before (None, a missing or unreadable
    file, is passed over; the first value counts as a change: ``apply`` must be idempotent).
    The files an ``azserve train`` supervisor writes atomically for its children to follow."""
    last: T | None = None
    while True:
        got = read(path)
        if got is not None and got != last:
            last = got
            apply(got)
        await asyncio.sleep(poll_s)
