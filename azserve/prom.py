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
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric

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


class LoopCounter:
    """A counter for one event loop's hot path: ``inc`` is one addition (no lock), and
    ``value`` is read by the status reply and by a ``LoopMetrics`` collector at scrape time,
    so that each count is kept once."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0.0

    def inc(self, n: float = 1.0) -> None:
        self.value += n


class LoopHistogram:
    """A histogram for one event loop's hot path: ``observe`` is a bisect and three additions
    (no lock; prometheus_client's own costs about 4 us a call), exported at scrape time by a
    ``LoopMetrics`` collector on the same loop. Prometheus semantics: bucket ``le=b``
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

    def mean(self) -> float:
        return self.sum / self.count if self.count else 0.0


class LoopMetrics:
    """Collector of named ``LoopCounter`` and ``LoopHistogram`` series, read at scrape time:
    one family per name, one sample (set) per label set. Register it on a registry once;
    ``counter`` and ``histogram`` make and add series, before or after that."""

    def __init__(self) -> None:
        self._families: dict[str, tuple[str, str, list[str]]] = {}  # name -> kind, doc, labels
        self._series: dict[str, list[tuple[list[str], LoopCounter | LoopHistogram]]] = {}

    def counter(self, name: str, doc: str, **labels: str) -> LoopCounter:
        c = LoopCounter()
        self._add("counter", name, doc, labels, c)
        return c

    def histogram(
        self, name: str, doc: str, buckets: Sequence[float] = SECONDS, **labels: str
    ) -> LoopHistogram:
        h = LoopHistogram(buckets)
        self._add("histogram", name, doc, labels, h)
        return h

    def declare(self, kind: str, name: str, doc: str, labels: Sequence[str]) -> None:
        """A family exported (its HELP and TYPE) before any series of it exists: for series
        made on first use, such as one per error type."""
        known = self._families.setdefault(name, (kind, doc, list(labels)))
        if known[0] != kind or known[2] != list(labels):
            raise ValueError(f"metric {name}: {kind} {list(labels)} after {known[0]} {known[2]}")
        self._series.setdefault(name, [])

    def _add(
        self, kind: str, name: str, doc: str, labels: dict[str, str], m: LoopCounter | LoopHistogram
    ) -> None:
        self.declare(kind, name, doc, list(labels))
        self._series[name].append((list(labels.values()), m))

    def describe(self) -> list[Metric]:
        return []  # collected at scrape time only

    def collect(self) -> Iterator[Metric]:
        for name, (kind, doc, label_names) in self._families.items():
            family: Metric
            if kind == "counter":
                family = CounterMetricFamily(name, doc, labels=label_names)
                for values, c in self._series[name]:
                    family.add_metric(values, c.value)  # type: ignore[union-attr]
            else:
                family = HistogramMetricFamily(name, doc, labels=label_names)
                for values, h in self._series[name]:
                    assert isinstance(h, LoopHistogram)
                    cumulative, acc = [], 0
                    for bound, n in zip([*map(_bound, h.bounds), "+Inf"], h.counts):
                        acc += n
                        cumulative.append((bound, float(acc)))
                    family.add_metric(values, cumulative, sum_value=h.sum)
            yield family


def _bound(b: float) -> str:
    return str(float(b))


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
