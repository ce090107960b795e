"""``azserve bench serve``: the server's rows/s against the model's own rows/s, and peers.

One run, in order, on one machine:

1. the server (``azserve serve`` in a child process, or ``--server`` to target a running one)
   under P load processes x C coroutines, each coroutine sending one synthetic position per
   ``EvalClient.evaluate`` call; the server's status at both ends of the window gives its rows/s,
   batch-size histogram and busy time, the callers give latency; a game wider than
   ``client.sparse_policy`` allows is loaded sparse (``SPARSE_LEGAL`` legal actions a call);
2. with ``--sweep``, the same for other client counts, ``max_batch_size`` and
   ``max_queue_delay_us`` (one factor at a time around the config's values);
3. the model alone (``azserve.perf.model``, its own process, same backend settings and
   threads) at the batch sizes the server formed: the limit, so
   ``efficiency = server rows/s / model rows/s at those sizes``;
4. the peers (``azserve.perf.peers``).

Nothing runs concurrently with a measurement but the thing measured and its load.
"""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from azserve.perf.common import (
    ServerChild,
    ServerWindow,
    load_cfg,
    percentiles,
    server_status,
    weighted_rate,
)
from azserve.perf.load import run_load, worker_argv
from azserve.perf.model import ModelProbe
from azserve.perf.peers import run_peers
from azserve.sparse import wanted

SPARSE_LEGAL = 30
"""Legal actions per position of a sparse load (``client.sparse_policy``): a chess position's
usual count."""


def warmup_for(duration: float) -> float:
    """Seconds of load before a window opens: first batches of each shape allocate."""
    return min(5.0, max(1.0, 0.25 * duration))


def measure_point(
    args: argparse.Namespace,
    overrides: list[str],
    coroutines: int,
    workdir: Path,
    before_load: Callable[[], None] | None = None,
) -> dict[str, Any]:
    """One window of load on a fresh server (or on ``--server``); ``before_load`` runs once the
    server is up and still idle."""
    workdir.mkdir(parents=True, exist_ok=True)
    server = None
    if args.server:
        cfg = load_cfg(args.config, overrides)
        endpoint = args.server
    else:
        server = ServerChild(args.config, overrides, workdir)
        server.start()
        cfg, endpoint = server.cfg, server.endpoint
    model = cfg.server.model
    legal = SPARSE_LEGAL if wanted(cfg.client.sparse_policy, cfg.net.num_actions) else 0
    try:
        if before_load is not None:
            before_load()
        argvs = [
            worker_argv(
                workdir / "load",
                i,
                "azserve",
                endpoint,
                model,
                coroutines,
                cfg.net.obs_shape,
                max_rows=cfg.client.max_rows,
                legal=legal,
                num_actions=cfg.net.num_actions,
            )
            for i in range(args.processes)
        ]
        run = run_load(
            workdir / "load",
            argvs,
            warmup_for(args.duration),
            args.duration,
            status=server.status if server else lambda: server_status(endpoint, model),
        )
    finally:
        if server is not None:
            server.stop()
    assert run.status is not None
    win = ServerWindow.between(*run.status)
    point: dict[str, Any] = {
        "clients": args.processes * coroutines,
        "sparse_legal": legal,
        "max_batch_size": cfg.server.max_batch_size,
        "max_queue_delay_us": cfg.server.max_queue_delay_us,
        "positions_per_s": round(len(run.samples.t_done) / run.seconds, 1),
        "server_rows_per_s": round(win.rows_per_s, 1),
        "requests_per_s": round(win.requests / win.seconds, 1),
        "latency_ms": percentiles(run.samples.latency_ms()),
        "server_latency_ms": run.status[1]["latency_ms"],
        "mean_batch": round(win.mean_batch, 2),
        "batch_hist": win.batch_hist,
        "inference_busy_fraction": round(win.busy_fraction, 3),
        "load_cpu_cores": round(run.load_cpu_cores, 3) if run.load_cpu_cores is not None else None,
        "errors": run.samples.errors,
    }
    first, last = run.status
    if first.get("cpu_s") is not None and last.get("cpu_s") is not None:
        point["server_cpu_cores"] = round((last["cpu_s"] - first["cpu_s"]) / win.seconds, 3)
    if run.samples.errors:
        point["last_error"] = run.samples.last_error
    point["_batches"] = win.bucket_sizes(cfg.server.max_batch_size)
    return point


def sweep_points(
    args: argparse.Namespace, mbs: int, delay: int
) -> list[tuple[str, int, list[str], int]]:
    """(factor, value, extra overrides, coroutines per process), one factor at a time."""
    c = args.coroutines
    points: list[tuple[str, int, list[str], int]] = [
        ("clients", args.processes * k, [], k) for k in sorted({1, 8, 64, c}) if k != c
    ]
    if args.server:  # a running server's batching cannot be changed from here
        return points
    for b in sorted({16, 64, mbs} - {mbs}):
        if b < mbs:
            points.append(
                ("max_batch_size", b, [f"server.max_batch_size={b}", f"client.max_rows={b}"], c)
            )
    for d in sorted({0, 500, delay, 4 * delay} - {delay}):
        points.append(("max_queue_delay_us", d, [f"server.max_queue_delay_us={d}"], c))
    return points


def add_efficiency(point: dict[str, Any], model: dict[str, Any]) -> None:
    """The model's own rows/s over the point's batches, and the server's share of it: per wall
    second (``efficiency``) and per CPU-second (``cpu_efficiency``: the share of the server's CPU
    time spent in the network, which other tenants of the machine cannot skew)."""
    batches = point.pop("_batches")
    rate = weighted_rate(batches, {int(s): m["positions_per_s"] for s, m in model.items()})
    point["model_positions_per_s"] = round(rate, 1)
    point["efficiency"] = round(point["server_rows_per_s"] / rate, 3) if rate else 0.0
    cpu_rate = weighted_rate(batches, {int(s): m["positions_per_cpu_s"] for s, m in model.items()})
    if point.get("server_cpu_cores") and cpu_rate:
        server_rows_per_cpu_s = point["server_rows_per_s"] / point["server_cpu_cores"]
        point["cpu_efficiency"] = round(server_rows_per_cpu_s / cpu_rate, 3)


def main(args: argparse.Namespace) -> dict[str, Any]:
    cfg = load_cfg(args.config, args.overrides)
    overrides = list(args.overrides)
    mbs = cfg.server.max_batch_size
    seconds = min(5.0, max(1.0, args.duration / 4))  # per batch size, per model measurement
    with tempfile.TemporaryDirectory(prefix="azserve-bench-serve-") as tmp:
        work = Path(tmp)
        # model probe (measures before and after) ; load -> server (base, sweep) ; peers
        with ModelProbe(args.config, overrides, work, cfg.backend.threads) as probe:
            before: dict[str, Any] = {}
            base = measure_point(
                args,
                overrides,
                args.coroutines,
                work / "base",
                before_load=lambda: before.update(probe.infer([1, mbs], seconds)),
            )
            sweep: list[dict[str, Any]] = []
            if args.sweep:
                for i, (factor, value, extra, coroutines) in enumerate(
                    sweep_points(args, mbs, cfg.server.max_queue_delay_us)
                ):
                    p = measure_point(args, overrides + extra, coroutines, work / f"sweep-{i}")
                    sweep.append({"factor": factor, "value": value, **p})
            sizes = {s for p in [base, *sweep] for s in p["_batches"]} | {1, mbs}
            model = probe.infer(sorted(sizes), seconds)
        for size, m in model.items():
            if size in before:  # the machine's other tenants come and go: average both ends
                m["positions_per_s_before"] = before[size]["positions_per_s"]
                m["positions_per_s_after"] = m["positions_per_s"]
                for key in ("positions_per_s", "positions_per_cpu_s"):
                    m[key] = round((m[key] + before[size][key]) / 2, 1)
        for p in [base, *sweep]:
            add_efficiency(p, model)
        peers_names = [p for p in args.peers.split(",") if p]
        peers = (
            run_peers(
                peers_names,
                args.config,
                overrides,
                args.processes,
                args.coroutines,
                args.duration,
                warmup_for(args.duration),
                work,
                model["1"],
            )
            if peers_names
            else {}
        )
    result: dict[str, Any] = {
        "bench": "serve",
        "config": args.config,
        "overrides": overrides,
        "duration_s": args.duration,
        "processes": args.processes,
        "coroutines": args.coroutines,
        "backend": {
            "kind": cfg.backend.kind,
            "threads": cfg.backend.threads,
            "dtype": cfg.backend.dtype,
            "compile": cfg.backend.torch.compile,
        },
        **base,
        "model_by_batch": model,
        "peers": peers,
    }
    for name, peer in peers.items():
        if "positions_per_s" in peer and peer["positions_per_s"]:
            result.setdefault("speedup", {})[name] = round(
                base["positions_per_s"] / peer["positions_per_s"], 2
            )
    if sweep:
        result["sweep"] = sweep
        if args.plot:
            plot_sweep(base, sweep, args.plot)
            result["plot"] = args.plot
    return result


def plot_sweep(base: dict[str, Any], sweep: list[dict[str, Any]], path: str) -> None:
    """Throughput against latency (p50 dashed, p99 solid), one line per factor swept."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    base_values = {
        "clients": base["clients"],
        "max_batch_size": base["max_batch_size"],
        "max_queue_delay_us": base["max_queue_delay_us"],
    }
    for factor, color in zip(base_values, ("tab:blue", "tab:orange", "tab:green")):
        pts = [p for p in sweep if p["factor"] == factor]
        if not pts:
            continue
        pts = sorted([*pts, {**base, "value": base_values[factor]}], key=lambda p: p["value"])
        x = [p["positions_per_s"] for p in pts]
        ax.plot(
            x, [p["latency_ms"]["p99"] for p in pts], "o-", color=color, label=f"{factor} (p99)"
        )
        ax.plot(
            x,
            [p["latency_ms"]["p50"] for p in pts],
            "x--",
            color=color,
            alpha=0.6,
            label=f"{factor} (p50)",
        )
        for p in pts:
            if p["value"] == base_values[factor]:
                continue  # the base point is named in the title
            ax.annotate(
                str(p["value"]),
                (p["positions_per_s"], p["latency_ms"]["p99"]),
                fontsize=7,
                textcoords="offset points",
                xytext=(3, 3),
            )
    ax.set_xlabel("positions/s through the server")
    ax.set_ylabel("latency per position (ms)")
    ax.set_yscale("log")
    base_label = ", ".join(f"{k}={v}" for k, v in base_values.items())
    ax.set_title(
        f"azserve bench serve --sweep\nbase point (in every line): {base_label}", fontsize=9
    )
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
