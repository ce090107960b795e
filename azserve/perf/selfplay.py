"""``azserve bench selfplay``: full self-play throughput and the side that limits it.

One run: the server (``azserve serve``), ``actors.processes`` actor processes (``azserve
actors``, sink = null unless ``--learner``) and, with ``--learner``, the learner, all as child
processes on private ipc endpoints. After a warm-up, one window of ``--duration`` seconds is
measured:

- the server's status at both ends: evaluations/s, batch sizes, ``inference_busy_fraction``
  (busy seconds / wall seconds);
- the actors' status lines (``actors.status_interval_s`` is set to 1 s, less for short runs)
  written inside the window: games/s, simulations/s, event-loop lag; positions/s = simulations/s
  / ``mcts.mean_simulations`` (one search per move: moves/s; with playout caps only
  ``mcts.full_search_fraction`` of them are recorded);
- the CPU time of the server and actor processes (``/proc``).

Then each side's capacity is measured alone, and converted to self-play positions/s:

- actor: simulations per CPU-second of ``azserve.perf.mcts`` (zero-cost evaluator) x actor
  processes, / simulations per position;
- inference: the model's own rows/s at the batch sizes the server formed, / evaluations per
  position;
- learner: trainer samples/s at ``trainer.batch_size``, / ``replay.reuse_target`` (each position
  is trained that many times), / ``mcts.full_search_fraction`` (moves per recorded position).

The ``bottleneck`` is the side with the smallest capacity. ``--sweep sims=25,50,...`` repeats the
run per ``mcts.num_simulations``.
"""

from __future__ import annotations

import argparse
import re
import signal
import tempfile
import time
from pathlib import Path
from typing import Any

from azserve.config.schema import Config
from azserve.errors import AzserveError, ConfigError
from azserve.metrics import bottleneck
from azserve.perf.common import (
    ServerChild,
    ServerWindow,
    cpu_seconds,
    load_cfg,
    overrides_args,
    python_argv,
    run_json_child,
    sleep_until,
    weighted_rate,
)
from azserve.perf.model import ModelProbe
from azserve.run.supervisor import Child, azserve_argv, child_env

SIDES = ("actor", "inference", "learner")

_STATUS = re.compile(
    r"games/s (?P<games>[\d.]+)\s+positions/s (?P<positions>[\d.]+)\s+sims/s (?P<sims>[\d.]+)\s+"
    r"evals/s (?P<evals>[\d.]+).*?loop lag (?P<lag>[\d.]+) ms"
)


_CACHE = re.compile(
    r"cache hit [\d.]+% hits (?P<hits>\d+) shared (?P<shared>\d+) misses (?P<misses>\d+) "
    r"entries (?P<entries>\d+) (?P<mb>[\d.]+) MB evictions (?P<evictions>\d+)"
)


def parse_status_lines(text: str) -> list[dict[str, float]]:
    """The rates in the actors' status lines (``actors.selfplay.SelfPlay._status_loop``)."""
    return [{k: float(v) for k, v in m.groupdict().items()} for m in _STATUS.finditer(text)]


def cache_window(actor_logs: list[str], evals_per_position: float) -> dict[str, Any] | None:
    """The evaluation caches over the window, from the cumulative counters of each actor
    process's first and last status line in it (``actors.evalcache.CacheStats.line``): lookups
    answered without a message, entries and memory at the end, evictions, and the network
    evaluations saved per self-play position. None when no cache reported."""
    totals = {k: 0.0 for k in ("hits", "shared", "misses", "entries", "mb", "evictions")}
    seen = False
    for text in actor_logs:
        lines = [{k: float(v) for k, v in m.groupdict().items()} for m in _CACHE.finditer(text)]
        if not lines:
            continue
        seen = True
        first, last = (
            (lines[0], lines[-1]) if len(lines) > 1 else (dict.fromkeys(totals, 0.0), lines[0])
        )
        for k in ("hits", "shared", "misses", "evictions"):
            totals[k] += last[k] - first[k]
        totals["entries"] += last["entries"]
        totals["mb"] += last["mb"]
    if not seen:
        return None
    saved = totals["hits"] + totals["shared"]
    lookups = saved + totals["misses"]
    rate = saved / lookups if lookups else 0.0
    return {
        "hit_rate": round(rate, 4),
        "joined_in_flight_fraction": round(totals["shared"] / lookups, 4) if lookups else 0.0,
        "entries": int(totals["entries"]),
        "mb": round(totals["mb"], 1),
        "evictions": int(totals["evictions"]),
        "evaluations_saved_per_position": round(rate * evals_per_position, 2),
    }


class Run:
    """Server, actors and (optionally) learner of one self-play run, as child processes."""

    def __init__(self, args: argparse.Namespace, overrides: list[str], workdir: Path) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        learner_ep = f"ipc://{workdir}/learner.sock"
        self.server = ServerChild(args.config, overrides, workdir)
        sink = "learner" if args.learner else "null"
        # Status lines are the actors' counters: several per window, however short.
        interval = min(1.0, max(0.25, args.duration / 4))
        common = [
            *self.server.overrides,
            f"actors.status_interval_s={interval}",
            f"actors.sink={sink}",
            f"learner.bind={learner_ep}",  # actors.learner and learner.servers follow the binds
        ]
        self.cfg: Config = load_cfg(args.config, common)
        cfg_args = ["--config", args.config, *overrides_args(common)]
        self.actors = [
            Child(
                f"actor-{i}",
                azserve_argv("actors", *cfg_args, "--id", f"actor-{i}"),
                workdir / f"actor-{i}.log",
                child_env(1),
            )
            for i in range(self.cfg.actors.processes)
        ]
        self.learner = (
            Child(
                "learner",
                azserve_argv("learn", *cfg_args, "--run-dir", str(workdir / "learner-run")),
                workdir / "learner.log",
                child_env(self.cfg.learner.threads),
            )
            if args.learner
            else None
        )

    def measure(self, warmup: float, duration: float) -> dict[str, Any]:
        """Start everything, measure one window, stop everything (learner first, as ``train``)."""
        self.server.start()
        try:
            for child in [*([self.learner] if self.learner else []), *self.actors]:
                child.start()
            self._wait_traffic(timeout_s=180.0)
            sleep_until(time.monotonic() + warmup)
            self._check_alive()
            offsets = [_size(a.log_path) for a in self.actors]
            cpu0 = self._cpu()
            first = self.server.status()
            sleep_until(first["t"] + duration)
            last = self.server.status()
            cpu1 = self._cpu()
            self._check_alive()
            texts = [_read_from(a.log_path, off) for a, off in zip(self.actors, offsets)]
        finally:
            if self.learner is not None:  # SIGINT: it finishes its step and checkpoints
                self.learner.stop(timeout=60, sig=signal.SIGINT)
            for a in self.actors:
                a.stop(timeout=20)
            self.server.stop()
        win = ServerWindow.between(first, last)
        cpu = {}
        for side, start in cpu0.items():
            end = cpu1[side]
            if start is not None and end is not None:
                cpu[side] = (end - start) / win.seconds
        # The server's execution path and its compute threads at the end of the window.
        return {
            **summarize(win, texts, self.cfg, cpu),
            "server_cache": server_cache_window(first, last),
            "server_backend": last.get("backend"),
        }

    def _cpu(self) -> dict[str, float | None]:
        """CPU seconds so far of the server and of all actor processes together."""
        actors = [cpu_seconds(a.proc.pid if a.proc else None) for a in self.actors]
        server = self.server.child.proc
        return {
            "server": cpu_seconds(server.pid if server else None),
            "actors": None if None in actors else sum(a for a in actors if a is not None),
        }

    def _wait_traffic(self, timeout_s: float) -> None:
        """Wait for the first evaluations: actor processes take seconds to import and connect."""
        deadline = time.monotonic() + timeout_s
        while self.server.status()["rows"] == 0:
            self._check_alive()
            if time.monotonic() > deadline:
                raise AzserveError(f"no evaluation reached the server in {timeout_s:.0f} s")
            time.sleep(0.2)

    def _check_alive(self) -> None:
        for c in [self.server.child, *self.actors, *([self.learner] if self.learner else [])]:
            if c.poll() is not None:
                raise AzserveError(f"{c.name} exited with code {c.poll()}:\n{c.tail()}")


def _size(path: Path) -> int:
    return path.stat().st_size if path.exists() else 0


def _read_from(path: Path, offset: int) -> str:
    with path.open("rb") as f:
        f.seek(offset)
        return f.read().decode(errors="replace")


def summarize(
    win: ServerWindow, actor_logs: list[str], cfg: Config, cpu: dict[str, float]
) -> dict[str, Any]:
    """Rates of one window: the server's counters, the sum over actor processes of each
    process's mean status-line rates, and CPU cores used (``cpu``: side -> CPU s per wall s)."""
    per_actor = [parse_status_lines(t) for t in actor_logs]
    totals = {k: 0.0 for k in ("games", "positions", "sims", "evals")}
    lags: list[float] = []
    for lines in per_actor:
        for k in totals:
            totals[k] += sum(line[k] for line in lines) / len(lines) if lines else 0.0
        lags.extend(line["lag"] for line in lines)
    return {
        "num_simulations": cfg.mcts.num_simulations,
        "games_per_s": round(totals["games"], 3),
        # One search per move, one training position per move: a steady rate, where finished
        # games (below) arrive in bursts, games having started together.
        "positions_per_s": round(totals["sims"] / cfg.mcts.mean_simulations, 2),
        "finished_positions_per_s": round(totals["positions"], 2),
        "simulations_per_s": round(totals["sims"], 1),
        "evaluations_per_s": round(win.rows_per_s, 1),
        "actor_evaluations_per_s": round(totals["evals"], 1),
        "mean_batch": round(win.mean_batch, 2),
        "batch_hist": win.batch_hist,
        "inference_busy_fraction": round(win.busy_fraction, 3),
        "event_loop_lag_ms": {
            "mean": round(sum(lags) / len(lags), 2) if lags else 0.0,
            "max": round(max(lags), 2) if lags else 0.0,
        },
        "status_lines": sum(len(lines) for lines in per_actor),
        "cpu_cores_used": {k: round(v, 3) for k, v in cpu.items()},
        # Positions evaluated per move searched, the cache's hits included (MCTS's own count).
        "cache": cache_window(
            actor_logs,
            totals["evals"] / (totals["sims"] / cfg.mcts.mean_simulations)
            if totals["sims"]
            else 0.0,
        ),
        "_batches": win.bucket_sizes(cfg.server.max_batch_size),
    }


def server_cache_window(first: dict[str, Any], last: dict[str, Any]) -> dict[str, Any] | None:
    """The server's evaluation cache (``server.cache_mb``) over the window, from its status
    at both ends: rows answered without the network, and its size at the end. None when off."""
    a, b = first.get("cache"), last.get("cache")
    if a is None or b is None:
        return None
    delta = {k: b[k] - a[k] for k in ("hits", "shared", "misses", "evictions")}
    lookups = delta["hits"] + delta["shared"] + delta["misses"]
    saved = delta["hits"] + delta["shared"]
    return {
        **delta,
        "hit_rate": round(saved / lookups, 4) if lookups else 0.0,
        "entries": b["entries"],
        "mb": round(b["bytes"] / 2**20, 2),
    }


def actor_capacity(cfg: Config, seconds: float, workdir: Path) -> dict[str, Any]:
    """``azserve.perf.mcts`` in a child: MCTS simulations per CPU-second, zero-cost evaluator.
    It shares its budget with OpenSpiel's bots when those are installed, hence the factor 4."""
    out = workdir / "mcts.json"
    argv = python_argv(
        "azserve.perf.mcts",
        "--seconds",
        str(4 * seconds),
        "--simulations",
        str(cfg.mcts.num_simulations),
        "--in-flight",
        str(max(2, cfg.mcts.leaves_in_flight)),
        "--json",
        str(out),
    )
    report = run_json_child(argv, out, 120 + 8 * seconds, 1, workdir / "mcts.log")
    if cfg.mcts.algorithm == "gumbel":
        name = "azserve_gumbel"  # one leaf at a time: sequential halving is sequential
    else:
        name = "azserve_in_flight" if cfg.mcts.leaves_in_flight > 1 else "azserve"
    return report.get(name, report)


def verdict(
    point: dict[str, Any],
    cfg: Config,
    sims_per_core: float,
    model_rate: float,
    learner_samples: float,
) -> dict[str, Any]:
    """Each side's capacity in self-play positions/s, and the smallest.

    The actor side's rate is simulations per CPU-second *in this run* when the actors' CPU time
    could be read (it includes the client, the real priors and the game bookkeeping that the
    zero-cost bench leaves out), else ``sims_per_core`` from ``azserve.perf.mcts``."""
    pos = point["positions_per_s"]
    sims_per_pos = cfg.mcts.mean_simulations  # one search per move
    evals_per_pos = point["evaluations_per_s"] / pos if pos else cfg.mcts.num_simulations
    actor_cpu = point["cpu_cores_used"].get("actors")
    in_run = point["simulations_per_s"] / actor_cpu * cfg.actors.processes if actor_cpu else 0.0
    capacity = {
        "actor": (in_run or sims_per_core * cfg.actors.processes) / sims_per_pos,
        "inference": model_rate / evals_per_pos,
        "learner": learner_samples / cfg.replay.reuse_target / cfg.mcts.full_search_fraction,
    }
    # One flow through every side: each side's busy fraction is least capacity / its capacity.
    least = min(capacity.values())
    side = bottleneck({k: least / v if v > 0 else 1.0 for k, v in capacity.items()})
    return {
        "bottleneck": side,
        "capacity_positions_per_s": {k: round(v, 2) for k, v in capacity.items()},
        "actor_simulations_per_cpu_s": round(in_run / cfg.actors.processes, 1) if in_run else None,
        "evaluations_per_position": round(evals_per_pos, 2),
    }


def main(args: argparse.Namespace) -> dict[str, Any]:
    cfg = load_cfg(args.config, args.overrides)
    overrides = list(args.overrides)
    values = _sweep_values(args.sweep) if args.sweep else [cfg.mcts.num_simulations]
    warmup = min(10.0, max(2.0, 0.25 * args.duration))
    with tempfile.TemporaryDirectory(prefix="azserve-bench-selfplay-") as tmp:
        work = Path(tmp)
        with ModelProbe(args.config, overrides, work, cfg.backend.threads) as probe:
            # server <- actors (-> learner) per point; then each side alone
            points = []
            for i, sims in enumerate(values):
                extra = [f"mcts.num_simulations={sims}"] if args.sweep else []
                points.append(
                    Run(args, overrides + extra, work / f"run-{i}").measure(warmup, args.duration)
                )
            sizes = sorted({s for p in points for s in p["_batches"]} | {cfg.server.max_batch_size})
            model = probe.infer(sizes, min(5.0, max(1.0, args.duration / 6)))
            train = probe.train(max(2, min(10, int(args.duration / 3))))
        mcts = actor_capacity(cfg, min(10.0, max(0.5, args.duration / 4)), work)
    rates = {int(s): m["positions_per_s"] for s, m in model.items()}
    sims_per_core = float(mcts.get("simulations_per_s", 0.0))
    for p in points:
        model_rate = weighted_rate(p.pop("_batches"), rates)
        p["model_positions_per_s"] = round(model_rate, 1)
        p.update(verdict(p, cfg, sims_per_core, model_rate, train["samples_per_s"]))
    result: dict[str, Any] = {
        "bench": "selfplay",
        "config": args.config,
        "overrides": overrides,
        "duration_s": args.duration,
        "learner": bool(args.learner),
        "actor_processes": cfg.actors.processes,
        "games_per_process": cfg.actors.games,
        "backend": {
            "compile": cfg.backend.torch.compile,
            "dtype": cfg.backend.dtype,
            "threads": cfg.backend.threads,
            "auto_threads": cfg.backend.torch.auto_threads,
            "batch_buckets": list(cfg.backend.torch.batch_buckets),
        },
        "actors_cache_mb": cfg.actors.cache_mb,
        **points[0],
        "capacity": {
            "actor_simulations_per_s_zero_cost": sims_per_core,
            "model_by_batch": model,
            "learner": train,
        },
    }
    if args.sweep:
        result["sweep"] = points
    return result


def _sweep_values(text: str) -> list[int]:
    key, _, values = text.partition("=")
    if key.strip() != "sims" or not values:
        raise ConfigError(f"--sweep {text!r}: expected sims=25,50,100")
    return [int(v) for v in values.split(",")]
