"""The inference server's measurements: counters, the batch-size histogram, latency windows,
the compute busy clock, and the status line built from them."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from prometheus_client import Gauge
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from azserve.cachestats import CacheStats
from azserve.metrics import LatencyWindow, RateMeter
from azserve.prom import SECONDS, LoopCounter, LoopHistogram, LoopMetrics, render, role_registry

_ERRORS_DOC = "Error replies sent, by wire error type"

BATCH_BOUNDS: list[float] = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]
"""Rows-per-batch buckets."""


class _Latency:
    """Recent-window percentiles in ms (the status reply) and a Prometheus histogram in s."""

    def __init__(self, window: LatencyWindow, prom: LoopHistogram) -> None:
        self._window = window
        self._prom = prom

    def observe(self, ms: float) -> None:
        self._window.observe(ms)
        self._prom.observe(ms / 1e3)

    def percentiles(self, qs: tuple[float, ...] = (50, 90, 99)) -> dict[float, float]:
        return self._window.percentiles(qs)


class ServerMetrics:
    """Always-on server metrics: the ``status`` reply's counters and percentiles, and the
    Prometheus registry (``prom``, exported by ``render()``) with the same counts.

    ``queued_rows``, ``latest``, ``resident`` and the cache's stats (``cache``, None when it
    is off) are read at render time from the server.
    """

    def __init__(
        self,
        queued_rows: Callable[[], float],
        latest: Callable[[], float],
        resident: Callable[[], float],
        model: str = "default",
        cache: Callable[[], CacheStats | None] = lambda: None,
    ) -> None:
        self.prom = reg = role_registry("server")
        m = {"model": model}
        # Every count and histogram is kept once, in a lock-free series that the status reply
        # reads and the collector exports at scrape time.
        self._loop = loop = LoopMetrics()
        reg.register(loop)  # type: ignore[arg-type]

        def count(name: str, doc: str) -> LoopCounter:
            return loop.counter(name, doc, **m)

        def seconds(name: str, doc: str) -> _Latency:
            return _Latency(LatencyWindow(), loop.histogram(name, doc, SECONDS, **m))

        self.requests = count("azserve_requests", "Eval requests served")
        self.rows = count("azserve_rows", "Positions evaluated")
        self.batches = count("azserve_batches", "Batches run")
        self.dropped = count("azserve_dropped", "Messages dropped (unattributable)")
        self.replies_dropped = {
            reason: loop.counter(
                "azserve_replies_dropped",
                "Replies not sent, by reason: full (the peer's queue held "
                "server.max_queued_replies unread replies), gone (the peer had disconnected) "
                "or error (the send failed)",
                **m,
                reason=reason,
            )
            for reason in ("full", "gone", "error")
        }
        self.busy = count("azserve_compute_busy_seconds", "Seconds with a batch computing")
        self.swaps = count("azserve_weight_loads", "Weight versions loaded")
        self.auth_refused = count(
            "azserve_auth_refused", "CURVE handshakes refused (no CURVE, bad or unknown key)"
        )
        self.loads_refused = count(
            "azserve_loads_refused", "Weight loads refused: not from the learner's key"
        )
        self._errors: dict[str, LoopCounter] = {}  # wire error type -> count; see error()
        loop.declare("counter", "azserve_error_replies", _ERRORS_DOC, ["model", "type"])
        self._model = model
        self.batch = loop.histogram("azserve_batch_size", "Rows per batch", BATCH_BOUNDS, **m)
        self.queue_delay = seconds("azserve_queue_delay_seconds", "Receipt to batch start")
        self.compute = seconds("azserve_compute_seconds", "Backend time per batch")
        self.latency = seconds("azserve_latency_seconds", "Receipt to reply, per request")
        for name, doc, read in (
            ("azserve_queued_rows", "Rows waiting in batch queues", queued_rows),
            ("azserve_latest_version", "Latest weights version", latest),
            ("azserve_versions_resident", "Versions held", resident),
        ):
            Gauge(name, doc, ["model"], registry=reg).labels(**m).set_function(read)
        self._cache = cache
        reg.register(_CacheCollector(cache, model))
        self._rates = RateMeter()
        self._busy_since: float | None = None
        self._computing = 0

    def error(self, type_: str) -> None:
        """An error reply of wire type ``type_`` was sent (wire types are a fixed set)."""
        c = self._errors.get(type_)
        if c is None:
            c = self._errors[type_] = self._loop.counter(
                "azserve_error_replies",
                _ERRORS_DOC,
                model=self._model,
                type=type_,
            )
        c.inc()

    @property
    def errors(self) -> int:
        """Error replies sent, all types."""
        return int(sum(c.value for c in self._errors.values()))

    def render(self) -> str:
        """The Prometheus text of every server metric."""
        return render(self.prom)

    def mark_busy(self, delta: int, now: float) -> None:
        """A batch started (+1) or finished (-1): busy time is time with any batch computing."""
        if delta > 0 and self._computing == 0:
            self._busy_since = now
        self._computing += delta
        if delta < 0 and self._computing == 0 and self._busy_since is not None:
            self.busy.inc(now - self._busy_since)
            self._busy_since = None

    def busy_seconds(self, now: float) -> float:
        """Busy seconds so far, the batch computing now included."""
        running = now - self._busy_since if self._busy_since is not None else 0.0
        return self.busy.value + running

    def batch_done(self, rows: int, requests: int, compute_s: float) -> None:
        """A batch of ``requests`` was answered, ``rows`` of it computed (fewer than its rows
        with the server's cache; none when the cache answered all of them)."""
        self.requests.inc(requests)
        if not rows:
            return
        self.compute.observe(compute_s * 1e3)
        self.batches.inc()
        self.batch.observe(rows)
        self.rows.inc(rows)

    def counters(self) -> dict[str, Any]:
        """The counter part of the ``status`` reply."""
        return {
            "requests": int(self.requests.value),
            "rows": int(self.rows.value),
            "batches": int(self.batches.value),
            "mean_batch": self.batch.mean(),
            "batch_hist": dict(
                zip([str(b) for b in self.batch.bounds] + ["inf"], self.batch.counts)
            ),
            "errors": self.errors,
            "dropped": int(self.dropped.value),
            "replies_dropped": {k: int(c.value) for k, c in self.replies_dropped.items()},
            "busy_s": self.busy_seconds(time.monotonic()),
            "latency_ms": _named(self.latency.percentiles()),
            "queue_delay_ms": _named(self.queue_delay.percentiles()),
            "compute_ms": _named(self.compute.percentiles()),
            **({"cache": c.as_dict()} if (c := self._cache()) is not None else {}),
        }

    def status_line(self, now: float, queued_rows: int, resident: list[int], latest: int) -> str:
        """Rates since the previous status line, latency percentiles and versions."""
        rows_s = self._rates.rate("rows", self.rows.value, now)
        req_s = self._rates.rate("req", self.requests.value, now)
        busy = self._rates.rate("busy", self.busy_seconds(now), now)
        lat = self.latency.percentiles((50, 99))
        return (
            f"rows/s {rows_s:,.0f}  req/s {req_s:,.0f}  batch {self.batch.mean():.1f}  "
            f"busy {busy:.0%}  queued {queued_rows}  p50 {lat[50]:.1f} ms  p99 {lat[99]:.1f} ms  "
            f"versions {resident} latest {latest}  "
            f"errors {self.errors} dropped {int(self.dropped.value)}  "
            f"replies dropped {sum(int(c.value) for c in self.replies_dropped.values())}"
            + (f"  {c.line()}" if (c := self._cache()) is not None else "")
        )


class _CacheCollector:
    """The server cache's counts as Prometheus metrics, read at scrape time (none when off)."""

    def __init__(self, stats: Callable[[], CacheStats | None], model: str) -> None:
        self._stats = stats
        self._model = model

    def describe(self) -> list[Any]:
        return []  # read at scrape time only: the cache may be off

    def collect(self) -> Any:
        c = self._stats()
        if c is None:
            return
        for name, doc, value in (
            ("azserve_cache_hits", "Rows answered from the server's cache", c.hits),
            (
                "azserve_cache_shared",
                "Rows computed once for several requests of a batch",
                c.shared,
            ),
            ("azserve_cache_misses", "Rows computed with the server's cache on", c.misses),
            ("azserve_cache_evictions", "Server cache entries dropped for memory", c.evictions),
        ):
            family = CounterMetricFamily(name, doc, labels=["model"])
            family.add_metric([self._model], value)
            yield family
        for name, doc, value in (
            ("azserve_cache_entries", "Server cache entries", c.entries),
            ("azserve_cache_bytes", "Server cache estimated footprint", c.bytes),
        ):
            gauge = GaugeMetricFamily(name, doc, labels=["model"])
            gauge.add_metric([self._model], value)
            yield gauge


def _named(percentiles: dict[float, float]) -> dict[str, float]:
    return {f"p{int(q)}": v for q, v in percentiles.items()}
