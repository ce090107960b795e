"""What ``azserve bench chaos`` watches beside the strikes: each role's memory, sampled while
the fleet runs, and the fleet's throughput after every network strike heals.

- **Memory**: every ``interval_s`` the resident memory (``VmRSS``) of each target's azserve
  process (the learner, each server, each actor group's process: ``chaos.role_pids``), summed
  per target; the peak of each, and the peak while a network strike was on. The verdict
  ``memory_bounded``: no target's peak above ``--memory-mb``. The bound is what the queues and
  resends allow: a client's requests in flight are bounded by its games in flight, a server's
  replies by ``server.max_queued_replies`` per peer, an actor's unacked trajectories by
  ``actors.max_outbox``; a target that grows without bound while a peer is unreachable
  crosses it.
- **Throughput**: the learner's status lines (``HH:MM:SS ... games N``, every few seconds)
  give games stored over time, in windows of ``window_s``. After each network strike heals,
  its recovery is the time until a window first reaches ``1 - tolerance`` (80%) of its norm:
  the run's median rate, or the median of the windows in the ``before_s`` before the strike
  began when that is lower. A strike cannot be asked to bring back more than the fleet stored
  just before it: on 2 cores the learner-bound rate drifts by a third for minutes at a time,
  with no network strike on (a 60-minute Ray run: two 5-minute stretches at a median of 124
  games/s against the run's 166), and a heal in such a stretch would be blamed for it. None
  when the run ended within ``bound_s`` of the heal (not judged). The verdict
  ``throughput_recovered``: every judged recovery within ``bound_s`` (``--throughput-s``).
  The recoveries against the run's median alone are reported beside them.
"""

from __future__ import annotations

import re
import statistics
import threading
import time
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from pathlib import Path

STATUS_GAMES = re.compile(r"^(\d\d):(\d\d):(\d\d) I learner: .*?\bgames (\d+)\b", re.M)


def rss_mb(pid: int) -> float:
    """Resident memory of ``pid`` in MiB (0 when it is gone)."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0.0
    m = re.search(r"^VmRSS:\s+(\d+) kB", text, re.M)
    return int(m[1]) / 1024 if m else 0.0


class MemoryWatch:
    """Samples ``pids_of(target)`` for every target on a thread until ``stop``; ``striking()``
    says whether a network strike is on at the moment of a sample."""

    def __init__(
        self,
        targets: Iterable[str],
        pids_of: Callable[[str], list[int]],
        striking: Callable[[], bool],
        interval_s: float = 2.0,
    ) -> None:
        self.targets = list(targets)
        self._pids_of = pids_of
        self._striking = striking
        self.interval_s = interval_s
        self.peak_mb = dict.fromkeys(self.targets, 0.0)
        self.peak_in_strike_mb = dict.fromkeys(self.targets, 0.0)
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="chaos-memory", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop sampling (again, or before ``start``: nothing to do)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def sample(self) -> None:
        during = self._striking()
        for target in self.targets:
            mb = sum(rss_mb(pid) for pid in self._pids_of(target))
            self.peak_mb[target] = max(self.peak_mb[target], mb)
            if during:
                self.peak_in_strike_mb[target] = max(self.peak_in_strike_mb[target], mb)
        self.samples += 1

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sample()


def games_over_time(log_text: str, start: datetime) -> list[tuple[float, int]]:
    """(seconds since ``start``, games stored) from the learner's status lines, whose clock
    reads ``HH:MM:SS`` of the day ``start`` began (a line before ``start``'s time of day is
    the next day's). A restarted learner's count starts again from its checkpoint: kept as
    written (``rates`` skips a fall)."""
    out = []
    day = start.replace(hour=0, minute=0, second=0, microsecond=0)
    for m in STATUS_GAMES.finditer(log_text):
        at = day + timedelta(hours=int(m[1]), minutes=int(m[2]), seconds=int(m[3]))
        if at < start - timedelta(hours=12):
            at += timedelta(days=1)
        out.append(((at - start).total_seconds(), int(m[4])))
    return out


def rates(series: list[tuple[float, int]], window_s: float) -> list[tuple[float, float]]:
    """(window's end, games per second) over consecutive windows of at least ``window_s``;
    a window in which the count fell (a learner restarted) is left out."""
    out: list[tuple[float, float]] = []
    if not series:
        return out
    t_start, g_start = series[0]
    for t, g in series[1:]:
        if t - t_start >= window_s:
            if g >= g_start:
                out.append((t, (g - g_start) / (t - t_start)))
            t_start, g_start = t, g
    return out


def recovery_s(
    windows: list[tuple[float, float]], healed_at: float, norm: float, bound_s: float,
    tolerance: float = 0.2,
) -> float | None:  # fmt: skip
    """Seconds from ``healed_at`` to the end of the first window after it at or above
    ``(1 - tolerance) * norm``; ``bound_s + 1`` when none within ``bound_s`` though the run
    went on that long; None when the run ended sooner (not judged)."""
    for end, rate in windows:
        if end > healed_at and rate >= (1 - tolerance) * norm:
            return round(end - healed_at, 1)
    last = windows[-1][0] if windows else healed_at
    return bound_s + 1 if last - healed_at >= bound_s else None


def throughput(
    log_text: str,
    start: datetime,
    strikes: list[tuple[float, float]],
    window_s: float,
    bound_s: float,
    before_s: float = 120.0,
) -> dict[str, object]:
    """The run's median games per second and each network strike's recovery after its heal
    (the module docstring); ``strikes``: ``(began, healed)`` of each, in seconds since
    ``start``."""
    windows = rates(games_over_time(log_text, start), window_s)
    norm = statistics.median(r for _, r in windows) if windows else 0.0
    before: list[float | None] = []
    for began, _ in strikes:
        prior = [r for end, r in windows if began - before_s < end <= began]
        before.append(round(statistics.median(prior), 2) if prior else None)
    recoveries = [
        recovery_s(windows, healed, norm if b is None else min(norm, b), bound_s)
        for (_, healed), b in zip(strikes, before, strict=True)
    ]
    return {
        "median_games_per_s": round(norm, 2),
        "window_s": window_s,
        "before_s": before_s,
        "before_games_per_s": before,
        "recovery_s": recoveries,
        "recovery_vs_median_s": [recovery_s(windows, h, norm, bound_s) for _, h in strikes],
        "bound_s": bound_s,
        "ok": all(r is None or r <= bound_s for r in recoveries),
    }


def now() -> datetime:
    """The wall clock in the log's terms (local time, as ``logging`` stamps it)."""
    return datetime.fromtimestamp(time.time())


__all__ = ["MemoryWatch", "games_over_time", "now", "rates", "recovery_s", "rss_mb", "throughput"]
