"""Per-request cost of the server's latency metrics: the recent-window observe alone (what the
status reply needs) against window + Prometheus histogram (what ``observe`` does now),
interleaved, 5 rounds of 200k calls each, best round. Run:
``.venv/bin/python scripts/bench_prom_observe.py`` (docs/benchmarks.md, issue 16)."""

import timeit

from prometheus_client import CollectorRegistry, Histogram

from azserve.metrics import LatencyWindow
from azserve.prom import SECONDS
from azserve.server.metrics import ServerMetrics

m = ServerMetrics(lambda: 0, lambda: 0, lambda: 0)
window = LatencyWindow()
stock = Histogram("x", "", buckets=SECONDS, registry=CollectorRegistry())
runs: dict[str, list[float]] = {
    "window only": [],
    "window + histogram": [],
    "prometheus_client Histogram.observe": [],
}
for _ in range(5):
    for name, fn in (
        ("window only", lambda: window.observe(0.7)),
        ("window + histogram", lambda: m.latency.observe(0.7)),
        ("prometheus_client Histogram.observe", lambda: stock.observe(0.0007)),
    ):
        runs[name].append(timeit.timeit(fn, number=200_000) / 200_000)
base = min(runs["window only"])
for name, times in runs.items():
    print(f"{name}: {min(times) * 1e6:.2f} us/call ({min(times) / base:.2f}x window only)")
