"""Prometheus export, the standard way (``prometheus_client``), for every role: one registry per
process with the process and platform collectors and ``azserve_build_info``, served over HTTP
on loopback by default, the URL logged at start-up.

Conventions: durations are histograms in seconds (``_bucket``, ``_sum``, ``_count``, so
``rate()`` and aggregation across processes work); counters end in ``_total``; labels only
where their values are bounded (model name, error type, role, game, reason).
"""

from __future__ import annotations

import asyncio
import logging
import platform
from importlib.metadata import PackageNotFoundError, version

import prometheus_client
from prometheus_client import (
    CollectorRegistry,
    Info,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)

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
