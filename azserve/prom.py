"""Prometheus export, the standard way (``prometheus_client``), for every role: one registry per
process with the process and platform collectors and ``azserve_build_info``, served over HTTP
on loopback by default, the URL logged at start-up.

Conventions: durations are histograms in seconds (``_bucket``, ``_sum``, ``_count``, so
``rate()`` and aggregation across processes work); counters end in ``_total``; labels only
where their values are bounded (model name, error type, role, game, reason).
"""

from __future__ import annotations

import asyncio
import bisect
import logging
import platform
from collections.abc import Iterator, Sequence
from importlib.metadata import PackageNotFoundError, version

import prometheus_client
from prometheus_client import (
    CollectorRegistry,
    Info,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.core import HistogramMetricFamily, Metric

from azserve.metrics import serve_metrics

log = logging.getLogger("azserve.prom")

prometheus_client.disable_created_metrics()  # no ``_created`` series: one sample per counter

SECONDS = (
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
)
"""Latency buckets (seconds): 100 us to 30 s."""


class LoopHistogram:
    """A histogram for one event loop's hot path: ``observe`` is a bisect and three additions
    (no lock; prometheus_client's own costs about 4 us a call), exported at scrape time by a
    ``LoopHistograms`` collector on the same loop. Prometheus semantics: bucket ``le=b``
    counts observations ``<= b``."""

    def __init__(self, buckets: Sequence[float] = SECONDS) -> None:
        self.bounds = list(buckets)
        self.counts = [0] * (len(self.bounds) + 1)
        self.sum = 0.0
        self.count = 0

    def observe(self, x: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, x)] += 1
        self.sum += x
        self.count += 1


class LoopHistograms:
    """Collector of named ``LoopHistogram`` series (``add``), one label set each."""

    def __init__(self) -> None:
        self._series: list[tuple[str, str, dict[str, str], LoopHistogram]] = []

    def add(self, name: str, doc: str, labels: dict[str, str], hist: LoopHistogram) -> None:
        self._series.append((name, doc, labels, hist))

    def collect(self) -> Iterator[Metric]:
        for name, doc, labels, h in self._series:
            family = HistogramMetricFamily(name, doc, labels=list(labels))
            cumulative, acc = [], 0
            for bound, n in zip([*map(str, h.bounds), "+Inf"], h.counts):
                acc += n
                cumulative.append((bound, float(acc)))
            family.add_metric(list(labels.values()), cumulative, sum_value=h.sum)
            yield family


def role_registry(role: str) -> CollectorRegistry:
    """A fresh registry for one process of ``role`` (server, learner, actor), with process,
    platform and build information."""
    registry = CollectorRegistry()
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    Info("azserve_build", "azserve build and role of this process", registry=registry).info(
        {"version": _version(), "role": role, "python": platform.python_version()}
    )
    return registry


def _version() -> str:
    try:
        return version("azserve")
    except PackageNotFoundError:
        return "unknown"


def render(registry: CollectorRegistry) -> str:
    """The registry in Prometheus text format."""
    return generate_latest(registry).decode()


async def start_endpoint(
    registry: CollectorRegistry, host: str, port: int, role: str
) -> asyncio.Server | None:
    """Serve ``registry`` on ``http://host:port/metrics`` from the running event loop (port 0:
    off). A port already taken is a warning, not a failure: metrics never stop a role."""
    if not port:
        return None
    try:
        server = await serve_metrics(host, port, lambda: render(registry))
    except OSError as exc:
        log.warning("%s metrics endpoint %s:%d not started: %s", role, host, port, exc)
        return None
    log.info("%s metrics on http://%s:%d/metrics", role, host, port)
    return server
