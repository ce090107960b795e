"""Cheap measurements for status lines and rows: a latency window (recent percentiles), rates,
the bottleneck rule, and the HTTP endpoint that serves Prometheus text. Counters and
histograms for Prometheus live in ``azserve.prom`` (one system: prometheus_client, fed by
lock-free loop series). Single-threaded use (the owning event loop)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable

import numpy as np

log = logging.getLogger(__name__)


class LatencyWindow:
    """The last ``size`` samples in a ring, for percentiles of recent behaviour."""

    def __init__(self, size: int = 8192) -> None:
        self._buf = np.zeros(size, np.float64)
        self._n = 0

    def observe(self, x: float) -> None:
        self._buf[self._n % len(self._buf)] = x
        self._n += 1

    def percentiles(self, qs: tuple[float, ...] = (50, 90, 99)) -> dict[float, float]:
        n = min(self._n, len(self._buf))
        if n == 0:
            return {q: 0.0 for q in qs}
        vals = np.percentile(self._buf[:n], qs)
        return dict(zip(qs, (float(v) for v in vals)))


class RateMeter:
    """Rates of counters between two reads (status lines, the live table): the one rate meter
    of every role. Counters only grow, so a rate is never negative; a counter that went back
    (a restarted process) reads as a fresh start, rate 0."""

    def __init__(self) -> None:
        self._last: dict[str, tuple[float, float]] = {}

    def rate(self, key: str, value: float, now: float | None = None) -> float:
        now = time.monotonic() if now is None else now
        prev = self._last.get(key)
        self._last[key] = (value, now)
        if prev is None or now <= prev[1] or value < prev[0]:
            return 0.0
        return (value - prev[0]) / (now - prev[1])

    def delta(self, key: str, value: float) -> float:
        """How much counter ``key`` grew since the previous read (0 on the first)."""
        prev = self._last.get(key)
        self._last[key] = (value, 0.0)
        return 0.0 if prev is None else value - prev[0]


class WindowRate:
    """Events per second over a sliding window, from sparse (time, total) marks: a rate that
    can be read at any moment (the replay's insert and sample rates), where ``RateMeter`` gives
    the rate between two reads."""

    def __init__(self, window_s: float, now: float) -> None:
        self.total = 0
        self._window_s = window_s
        self._marks: deque[tuple[float, int]] = deque([(now, 0)])

    def add(self, n: int, now: float) -> None:
        self.total += n
        # A mark per 1/16 window keeps the deque short whatever the event rate.
        if now - self._marks[-1][0] >= self._window_s / 16:
            self._marks.append((now, self.total))
        while len(self._marks) > 1 and now - self._marks[1][0] >= self._window_s:
            self._marks.popleft()

    def rate(self, now: float) -> float:
        t0, n0 = self._marks[0]
        return (self.total - n0) / (now - t0) if now > t0 else 0.0


SATURATED = 0.8
"""Busy fraction from which a side counts as the one holding the line back."""


def bottleneck(busy: dict[str, float]) -> str:
    """The one rule naming the side that limits throughput, used by the learner's metrics rows
    (and so the live table) and by ``bench selfplay``.

    ``busy`` maps sides (``learner``, ``inference``, optionally ``actor``) to the fraction of
    time they worked. Throughput is the minimum of the sides' capacities, and with one flow
    through all of them the side of least capacity is the busiest one. A consumer at or above
    ``SATURATED`` is the bottleneck (the busiest wins); if none is, the actors cannot feed the
    others, and the bottleneck is ``actor``.
    """
    side, frac = max(busy.items(), key=lambda kv: kv[1], default=("actor", 0.0))
    return side if frac >= SATURATED else "actor"


async def serve_metrics(host: str, port: int, render: Callable[[], str]) -> asyncio.Server:
    """A minimal HTTP endpoint answering every GET with the Prometheus text of ``render()``."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5.0)
            body = render().encode()
            writer.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\n"
                + f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
                + body
            )
            await writer.drain()
        except (
            asyncio.IncompleteReadError,
            asyncio.LimitOverrunError,
            TimeoutError,
            ConnectionError,
        ):
            pass  # a scraper that hung up or sent junk; nothing to answer
        finally:
            writer.close()

    return await asyncio.start_server(handle, host, port)
