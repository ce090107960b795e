"""Numbers set from outside a running learner: the reuse file and the threads file.

``azserve train``'s autopilot (``azserve.run.autopilot_learner``) moves the learner's reuse target
(``replay.reuse_target``: samples trained per sample inserted) and its torch threads while the
run runs, and writes each, as one number on one line, to its own file (``replay.reuse_file``,
``learner.threads_file``); the learner reads them when it starts and then once a second
(``follow``), handing every new number to ``Replay.set_reuse_target`` or to its step thread.

Files for the same reasons as the actors' games file (``actors.inflight``): no socket and no
message, only the newest number counts, a restarted learner finds the current one before its
first step, and the supervisor writes them atomically (temp file and rename), so a reader sees
the old number or the new one, never half of one.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

from azserve.files import atomic_write_bytes
from azserve.files import follow as follow_file

POLL_S = 1.0
"""Seconds between reads of a file."""


def read_number(path: str | Path) -> float | None:
    """The number the file holds, or None when it is missing or holds anything but a positive
    finite number (the caller keeps what it has)."""
    try:
        text = Path(path).read_text().strip()
    except OSError:
        return None
    try:
        number = float(text)
    except ValueError:
        return None
    return number if math.isfinite(number) and number > 0 else None


def write_number(path: str | Path, number: float) -> None:
    """Write the file atomically (a reader sees the old number or the new one)."""
    atomic_write_bytes(path, f"{number:g}\n".encode())


async def follow(path: str | Path, apply: Callable[[float], None], poll_s: float = POLL_S) -> None:
    """Read ``path`` every ``poll_s`` seconds, until cancelled, and call ``apply`` with each
    number that differs from the one before (the first read counts as a change: ``apply``
    must be idempotent)."""
    await follow_file(path, read_number, apply, poll_s)
