"""The inference server's measurements: counters, the batch-size histogram, latency windows,
the compute busy clock, and the status line built from them."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from azserve.metrics import RateMeter, Registry


class ServerMetrics:
    """Always-on server metrics, exported as Prometheus text by ``registry.render()``.

    ``queued_rows``, ``latest`` and ``resident`` are read at render time from the server.
    """

    def __init__(
        self,
        queued_rows: Callable[[], float],
        latest: Callable[[], float],
        resident: Callable[[], float],
    ) -> None:
        r = self.registry = Registry()
        self.requests = r.counter("azserve_requests_total", "Eval requests served")
        self.rows = r.counter("azserve_rows_total", "Positions evaluated")
        self.batches = r.counter("azserve_batches_total", "Batches run")
        self.errors = r.counter("azserve_error_replies_total", "Error replies sent")
        self.dropped = r.counter("azserve_dropped_total", "Messages dropped (unattributable)")
        self.busy = r.counter(
            "azserve_compute_busy_seconds_total", "Seconds with a batch computing"
        )
        self.swaps = r.counter("azserve_weight_loads_total", "Weight versions loaded")
        self.auth_refused = r.counter(
            "azserve_auth_refused_total", "CURVE handshakes refused (no CURVE, bad or unknown key)"
        )
        self.loads_refused = r.counter(
            "azserve_loads_refused_total", "Weight loads refused: not from the learner's key"
        )
        self.batch = r.histogram(
            "azserve_batch_size", "Rows per batch", [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]
        )
        self.queue_delay = r.latency("azserve_queue_delay_ms", "Time from receipt to batch start")
        self.compute = r.latency("azserve_compute_ms", "Backend time per batch")
        self.latency = r.latency("azserve_latency_ms", "Time from receipt to reply")
        r.gauge("azserve_queued_rows", "Rows waiting in batch queues", queued_rows)
        r.gauge("azserve_latest_version", "Latest weights version", latest)
        r.gauge("azserve_versions_resident", "Versions held", resident)
        self._rates = RateMeter()
        self._busy_since: float | None = None
        self._computing = 0

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
        self.compute.observe(compute_s * 1e3)
        self.batches.inc()
        self.batch.observe(rows)
        self.rows.inc(rows)
        self.requests.inc(requests)

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
            "errors": int(self.errors.value),
            "dropped": int(self.dropped.value),
            "busy_s": self.busy_seconds(time.monotonic()),
            "latency_ms": _named(self.latency.percentiles()),
            "queue_delay_ms": _named(self.queue_delay.percentiles()),
            "compute_ms": _named(self.compute.percentiles()),
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
            f"errors {int(self.errors.value)} dropped {int(self.dropped.value)}"
        )


def _named(percentiles: dict[float, float]) -> dict[str, float]:
    return {f"p{int(q)}": v for q, v in percentiles.items()}
