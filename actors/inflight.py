"""Games in flight set from outside a running actor process: the games file.

``azserve train``'s autopilot (``azserve.run.autopilot``) decides how many games each actor
process keeps in play, and the rows per message of its search pool's lanes (the server's best
batch), and writes both, as one line of text, to one file (``actors.games_file``); each actor
process waits for it once the server answers (``wait_for_games``: the autopilot writes its first
line at the server's first status reply, from the server's own timings) and then follows it
(``follow``), handing every new line to ``SelfPlay.set_games``.

Why a file and not a message: it needs no socket, no protocol message and no ordering (the
newest line is all that counts); a restarted actor process finds the current line before its
first game; the supervisor writes it atomically (temp file and rename), so a reader sees the
old line or the new one, never half of one.
Polling once a second is cheap, and a decision every ``autopilot.interval_s`` (seconds) needs
no faster path.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from azserve.files import atomic_write_bytes
from azserve.files import follow as follow_file

log = logging.getLogger("actors.inflight")

POLL_S = 1.0
"""Seconds between reads of the games file."""
WAIT_S = 30.0
"""Longest wait for the first number once the server answers (``wait_for_games``)."""


class InFlight(NamedTuple):
    """What the games file sets: ``"GAMES ROWS"``, one line."""

    games: int
    """Games in flight in this process."""
    rows: int
    """Rows per message of the search pool's lanes (the server's best batch; 0: the client's
    ``client.max_rows``), so that two lanes are two full batches, not one padded one."""


def read_inflight(path: str | Path) -> InFlight | None:
    """What the file holds, or None when it is missing or holds anything else (the caller
    keeps what it has)."""
    try:
        fields = Path(path).read_text().split()
    except OSError:
        return None
    try:
        games, rows = (int(fields[0]), int(fields[1]) if len(fields) > 1 else 0)
    except (IndexError, ValueError):
        return None
    return InFlight(games, rows) if games >= 1 and rows >= 0 else None


def write_inflight(path: str | Path, setting: InFlight) -> None:
    """Write the file atomically (a reader sees the old line or the new one)."""
    atomic_write_bytes(path, f"{setting.games} {setting.rows}\n".encode())


async def wait_for_games(
    path: str | Path, stop: asyncio.Event, timeout_s: float = WAIT_S, poll_s: float = 0.1
) -> InFlight | None:
    """What ``path`` sets, once it is there: the autopilot writes it when the server first
    answers it, a moment after this process found the server. None when ``stop`` is set or
    ``timeout_s`` passed without it (the process then plays its configured count)."""
    deadline = time.monotonic() + timeout_s
    while not stop.is_set():
        got = read_inflight(path)
        if got is not None or time.monotonic() >= deadline:
            return got
        await asyncio.sleep(poll_s)
    return None


async def follow(
    path: str | Path, apply: Callable[[InFlight], None], poll_s: float = POLL_S
) -> None:
    """Read ``path`` every ``poll_s`` seconds, until cancelled, and call ``apply`` with each
    setting that differs from the one before (the first read counts as a change: ``apply``
    must be idempotent)."""
    await follow_file(path, read_inflight, apply, poll_s)
