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
- **Throughput**: the learner's status lines (``HH:MM:SS ... samples/s S ... games N``, every
  few seconds) give games stored over time and the learner's samples trained per second; each
  side's run median (over windows of ``window_s``) is its norm. After each network strike
  heals, its recovery is the time until a window first brings either side back to
  ``1 - tolerance`` (80%) of its median, or None when the run ended within ``bound_s`` of the
  heal (not judged). Either side, because the fleet's throughput is the lesser of the two:
  where the learner is the bottleneck, games stored follow the rate limiter, which lets the
  actors' games in as bursts and pays them back, and what the fleet does is what the learner
  trains (a 60-minute Ray run: a learner back from a crash took the actors' unacked games at
  twice the median, then stored at half to four fifths of it for 100 s while it trained them,
  across a partition between two servers that never talk to each other). The verdict
  ``throughput_recovered``: every judged recovery within ``bound_s`` (``--throughput-s``); the
  recoveries of games stored alone are reported beside them.
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
STATUS_SAMPLES = re.compile(r"^(\d\d):(\d\d):(\d\d) I learner: .*?\bsamples/s (\d+)\b", re.M)


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


def _over_time(pattern: re.Pattern[str], log_text: str, start: datetime) -> list[tuple[float, int]]:
    """(seconds since ``start``, the line's number) for each of the learner's status lines
    that ``pattern`` matches; their clock reads ``HH:MM:SS`` of the day ``start`` began (a line
    before ``start``'s time of day is the next day's)."""
    out = []
    day = start.replace(hour=0, minute=0, second=0, microsecond=0)
    for m in pattern.finditer(log_text):
        at = day + timedelta(hours=int(m[1]), minutes=int(m[2]), seconds=int(m[3]))
        if at < start - timedelta(hours=12):
            at += timedelta(days=1)
        out.append(((at - start).total_seconds(), int(m[4])))
    return out


def games_over_time(log_text: str, start: datetime) -> list[tuple[float, int]]:
    """(seconds since ``start``, games stored) from the learner's status lines. A restarted
    learner's count starts again from its checkpoint: kept as written (``rates`` skips a
    fall)."""
    return _over_time(STATUS_GAMES, log_text, start)


def samples_over_time(log_text: str, start: datetime) -> list[tuple[float, int]]:
    """(seconds since ``start``, the learner's samples trained per second) from its status
    lines: a rate already, over the line's own interval."""
    return _over_time(STATUS_SAMPLES, log_text, start)


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


def mean_rates(series: list[tuple[float, int]], window_s: float) -> list[tuple[float, float]]:
    """(window's end, the mean of the rates in it) over consecutive windows of at least
    ``window_s``, for a series that is a rate already (``samples_over_time``)."""
    out: list[tuple[float, float]] = []
    if not series:
        return out
    t_start, values = series[0][0], []
    for t, v in series[1:]:
        values.append(v)
        if t - t_start >= window_s:
            out.append((t, sum(values) / len(values)))
            t_start, values = t, []
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
    log_text: str, start: datetime, heals: list[float], window_s: float, bound_s: float
) -> dict[str, object]:
    """Each side's run median and each healed network strike's recovery (the module
    docstring); ``heals``: seconds since ``start`` at which each strike healed."""
    games = rates(games_over_time(log_text, start), window_s)
    samples = mean_rates(samples_over_time(log_text, start), window_s)
    norm = statistics.median(r for _, r in games) if games else 0.0
    trained = statistics.median(r for _, r in samples) if samples else 0.0
    by_games = [recovery_s(games, h, norm, bound_s) for h in heals]
    by_samples = [recovery_s(samples, h, trained, bound_s) for h in heals]
    recoveries = [
        None if g is None and s is None else min(x for x in (g, s) if x is not None)
        for g, s in zip(by_games, by_samples, strict=True)
    ]
    return {
        "median_games_per_s": round(norm, 2),
        "median_samples_per_s": round(trained, 1),
        "window_s": window_s,
        "recovery_s": recoveries,
        "recovery_games_s": by_games,
        "bound_s": bound_s,
        "ok": all(r is None or r <= bound_s for r in recoveries),
    }


def now() -> datetime:
    """The wall clock in the log's terms (local time, as ``logging`` stamps it)."""
    return datetime.fromtimestamp(time.time())


__all__ = [
    "MemoryWatch",
    "games_over_time",
    "mean_rates",
    "now",
    "rates",
    "recovery_s",
    "rss_mb",
    "samples_over_time",
    "throughput",
]
