"""Compute threads that follow the idle cores of the machine (``backend.torch.auto_threads``).

A pure rule (``next_threads``) on what ``IdleCores`` reads from ``/proc/stat``: the cores that
nobody (actors, learner, other tenants, this server) used since the last look. The rule adds
a thread when about a whole core was idle and takes one back when less than a quarter was, so
the server grows into the cores the actors and the learner leave free and gives them back when
they need them.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

GROW_IDLE = 0.75
"""Idle cores at or above which one more thread is worth trying."""
SHRINK_IDLE = 0.25
"""Idle cores below which a thread is given back (the machine is oversubscribed)."""


def thread_steps(max_threads: int) -> tuple[int, ...]:
    """The counts the rule moves between: 1, 2, 4, ... doubling, and ``max_threads``. A
    compiled graph is specialised to its thread count (inductor's OpenMP loops fix it when they
    are generated, and torch.compile guards on it), so each count costs a set of graphs
    compiled before serving: doubling keeps that set small on a many-core host."""
    steps = [1]
    while steps[-1] * 2 < max_threads:
        steps.append(steps[-1] * 2)
    if max_threads > 1:
        steps.append(max_threads)
    return tuple(steps)


def next_threads(current: int, idle_cores: float, steps: tuple[int, ...]) -> int:
    """The thread count after one look, one of ``steps`` (``thread_steps``): the next one up
    when the idle cores cover the step (``GROW_IDLE`` of a core short of it at most), the next
    one down when fewer than ``SHRINK_IDLE`` cores were idle, else ``current``'s step."""
    i = max([k for k, n in enumerate(steps) if n <= current], default=0)
    if i + 1 < len(steps) and idle_cores >= steps[i + 1] - steps[i] - (1 - GROW_IDLE):
        return steps[i + 1]
    if idle_cores < SHRINK_IDLE and i > 0:
        return steps[i - 1]
    return steps[i]


def machine_cores() -> int:
    """Cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


class IdleCores:
    """Idle cores since the previous ``sample()`` (from ``/proc/stat``'s idle + iowait ticks;
    ``None`` where there is no ``/proc/stat``)."""

    def __init__(self, stat: Path = Path("/proc/stat")) -> None:
        self._stat = stat
        self._last = self._read()

    def _read(self) -> tuple[float, float] | None:
        try:
            first = self._stat.read_text().split("\n", 1)[0].split()
        except OSError:
            return None
        ticks = [int(v) for v in first[1:]]
        idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)
        return idle / os.sysconf("SC_CLK_TCK"), time.monotonic()

    def sample(self) -> float | None:
        now = self._read()
        last, self._last = self._last, now
        if now is None or last is None or now[1] <= last[1]:
            return None
        return (now[0] - last[0]) / (now[1] - last[1])
