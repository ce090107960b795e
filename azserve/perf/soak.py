"""``azserve bench soak``: the whole system for many minutes; is anything growing?

One run, started the way ``bench selfplay --learner`` starts it (``selfplay.Run``): the server
(``azserve serve``), ``actors.processes`` actor processes (``azserve actors``, ``--games`` game
coroutines in total, split evenly) and the learner (``azserve learn``), all child processes on
private ipc endpoints in a temporary directory. The clock starts when the first evaluations
reach the server; every ``--sample-s`` seconds for ``--minutes`` it samples:

- per process (``/proc/PID``): resident memory (``VmRSS``), CPU cores used since the previous
  sample, threads, open file descriptors;
- a probe thread's latency since the previous sample: one position every 50 ms on the latest
  version, send to reply, so it waits in the server's queue like an actor's leaf;
- the server's status (one ``SyncClient`` kept open): rows/s and requests/s since the previous
  sample, its latency percentiles (receipt to reply, its last 8,192 requests), queued rows,
  error replies, dropped messages, resident versions, clients holding leases;
- each actor's status lines written since the previous sample: games/s, simulations/s,
  evaluations/s, event-loop lag, rows in flight in its EvalClient, trajectories waiting for the
  learner's ack, games abandoned;
- the learner's newest ``metrics.jsonl`` row (step, version, games, replay size) and the
  publishes its log says the server refused.

After ``--warmup-s`` the samples are compared in two windows of ``--window-s`` each, the first
after the warm-up and the last before the end, by their medians (one sample is noise):

- per process, RSS growth = (last-window median - first-window median) / first-window median;
  ``rss_flat`` when every process grew less than ``--rss-bound`` (5%);
- latency: last-window median of the probe's p99 / the first window's; ``latency_stable`` when
  it is at most ``--latency-bound``. The server's own percentiles are reported beside it, but
  8,192 requests are minutes at these rates, so they lag;
- leaks of tasks and futures, measured from outside (no process exposes task counts): RSS
  flat, the EvalClient's rows in flight never above ``games x mcts.leaves_in_flight`` per
  process (each game coroutine waits on at most that many leaves), trajectories pending an ack
  never above ``actors.max_outbox``; threads and fds per process (first and last window
  medians) and the server's clients with leases are reported. Not measured: the number of
  asyncio tasks and futures alive inside each process (see ``MEASURED``);
- errors: error replies to anything but a publish, dropped messages, games abandoned,
  trajectories rejected, probe errors; all must stay zero. Publishes the server refused
  (``Overloaded``: every resident version is latest, pinned or busy) are back-pressure that the
  learner retries: counted, not errors.
"""

from __future__ import annotations

import argparse
import contextlib
import shlex
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from azserve.errors import AzserveError
from azserve.perf.common import load_cfg, sleep_until
from azserve.perf.selfplay import Run
from azserve.perf.soak_sampling import Probe, Sampler
from azserve.perf.soak_verdicts import Timing, analyze, split_windows
from azserve.run.supervisor import Child
from azserve.sync_client import SyncClient

# --- the run ---------------------------------------------------------------------------------


def games_per_process(total: int, processes: int) -> int:
    """Game coroutines per actor process for ``total`` in all (at least 1 each)."""
    return max(1, round(total / max(1, processes)))


def soak(
    run: Run, metrics_path: Path, timing: Timing, log: Callable[[str], None] = lambda _: None
) -> list[dict[str, Any]]:
    """Start the run's children, sample them for ``timing.duration_s`` after the first
    evaluations, stop them (learner first, SIGINT, as ``train`` does). Returns the samples."""
    children = {
        "server": run.server.child,
        **({"learner": run.learner} if run.learner else {}),
        **{a.name: a for a in run.actors},
    }
    run.server.start()
    model = run.server.cfg.server.model
    client = SyncClient(run.server.endpoint, model, timeout_s=30.0)
    probe = Probe(run.server.endpoint, model, run.cfg.net.obs_shape)
    try:
        for child in children.values():
            if child is not run.server.child:
                child.start()

        def status() -> dict[str, Any]:
            st = client.status()
            st["t"] = time.monotonic()
            return st

        _wait_traffic(status, children.values(), timeout_s=180.0)
        probe.start()
        t0 = time.monotonic()
        sampler = Sampler(children, run.actors, status, metrics_path, probe, t0, timing.warmup_s)
        samples = []
        n = 1
        while True:
            sleep_until(t0 + n * timing.sample_s)
            _check_alive(children.values())
            samples.append(sampler.sample())
            log(_progress(samples[-1]))
            if samples[-1]["t_s"] >= timing.duration_s - 1e-6:
                break
            n += 1
    finally:
        probe.stop()
        client.close()
        _stop(run)
    return samples


def _wait_traffic(
    status: Callable[[], dict[str, Any]], children: Iterable[Child], timeout_s: float
) -> None:
    """Wait for the first evaluations: actor processes take seconds to import and connect."""
    deadline = time.monotonic() + timeout_s
    while status()["rows"] == 0:
        _check_alive(children)
        if time.monotonic() > deadline:
            raise AzserveError(f"no evaluation reached the server in {timeout_s:.0f} s")
        time.sleep(0.2)


def _check_alive(children: Iterable[Child]) -> None:
    for c in children:
        if c.poll() is not None:
            raise AzserveError(f"{c.name} exited with code {c.poll()}:\n{c.tail()}")


def _stop(run: Run) -> None:
    if run.learner is not None:  # SIGINT: it finishes its step and checkpoints
        run.learner.stop(timeout=60, sig=signal.SIGINT)
    for a in run.actors:
        a.stop(timeout=20)
    run.server.stop()


def _progress(s: dict[str, Any]) -> str:
    rss = " ".join(f"{n} {p['rss_mb']}" for n, p in s["processes"].items())
    lat = s["probe"]["latency_ms"]
    return (
        f"soak t={s['t_s']:.0f}s {s['phase']}: rss MB {rss}; rows/s {s['server']['rows_per_s']:.0f}"
        f" probe p50 {lat['p50']:.1f} p99 {lat['p99']:.1f} ms"
    )


MEASURED = {
    "measured": [
        "RSS (VmRSS), CPU cores, threads and open fds of every process, from /proc",
        "a probe: one position every 50 ms (closed loop) on the latest version, its latency "
        "(send to reply, queue included) per sample interval; the latency verdict uses it",
        "the server's status: latency percentiles over its last 8,192 requests (receipt to "
        "reply), rows/s, requests/s, queued rows, error replies, dropped messages, resident "
        "versions, clients holding leases",
        "actor status lines: games/s, simulations/s, evaluations/s, loop lag, EvalClient rows "
        "in flight (bound: games x mcts.leaves_in_flight), trajectories pending an ack (bound: "
        "actors.max_outbox), games abandoned by reason",
        "learner: metrics.jsonl (step, version, games, replay size, trajectories rejected) and "
        "its log's refused publishes by reason",
    ],
    "not_measured": [
        "asyncio tasks and futures alive inside each process (no process exposes a count): a "
        "leak of them shows only as RSS growth, or as rows in flight above the bound",
        "the server's per-client reply queues, except through its RSS",
        "the actors' own view of latency (EvalClient round trips, including coalescing and "
        "resends): not in their status line",
        "the actors' evaluation cache: off (actors.cache_mb=0) unless --set turns it on, as "
        "its fill up to its bound would read as RSS growth",
        "requests the EvalClient resent (not in the status line): they show only as server "
        "rows per actor evaluation above 1",
    ],
}


def main(args: argparse.Namespace) -> dict[str, Any]:
    timing = Timing.from_args(args)
    cfg = load_cfg(args.config, args.overrides)
    per = games_per_process(args.games, cfg.actors.processes)
    # The evaluation cache off unless asked for: a bounded cache filling up to actors.cache_mb
    # would read as RSS growth and hide (or fake) a leak.
    overrides = ["actors.cache_mb=0", *args.overrides, f"actors.games={per}"]
    with _workdir(args.keep_dir) as tmp:
        ns = argparse.Namespace(config=args.config, learner=True, duration=timing.duration_s)
        work = tmp / "run"
        run = Run(ns, overrides, work)  # the learner's run dir is WORK/learner-run
        bounds = {
            "rss": args.rss_bound,
            "latency": args.latency_bound,
            "in_flight": per * max(1, run.cfg.mcts.leaves_in_flight),
            "pending": run.cfg.actors.max_outbox,
        }
        samples = soak(run, work / "learner-run" / "metrics.jsonl", timing, log=_stderr)
    result: dict[str, Any] = {
        "bench": "soak",
        "config": args.config,
        "overrides": overrides,
        "command": _command(),
        "minutes": args.minutes,
        "warmup_s": timing.warmup_s,
        "sample_s": timing.sample_s,
        "window_s": timing.window_s,
        "actor_processes": run.cfg.actors.processes,
        "games_per_process": per,
        "games_total": per * run.cfg.actors.processes,
        "num_simulations": run.cfg.mcts.num_simulations,
        "bounds": {"rss_growth": args.rss_bound, "latency_p99_ratio": args.latency_bound},
        **analyze(samples, timing, bounds),
        **MEASURED,
        "samples": samples,
    }
    if args.plot:
        plot(samples, timing, args.plot)
        result["plot"] = args.plot
    return result


@contextlib.contextmanager
def _workdir(keep: str | None) -> Iterator[Path]:
    """``keep`` (created; logs and the learner's run stay there), else a temporary directory.
    ipc socket paths must stay short (about 100 bytes), so keep it near the root."""
    if keep:
        path = Path(keep).resolve()
        path.mkdir(parents=True, exist_ok=True)
        yield path
        return
    with tempfile.TemporaryDirectory(prefix="azserve-bench-soak-") as tmp:
        yield Path(tmp)


def _command() -> str:
    return "azserve " + " ".join(shlex.quote(a) for a in sys.argv[1:])


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def plot(samples: Sequence[dict[str, Any]], timing: Timing, path: str) -> None:
    """PNG over time: RSS (MB) per process; latency p50/p99 (ms), the probe's and the server
    window's; the server's queued rows and each actor's rows in flight. The warm-up and the two
    windows are shaded."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = [s["t_s"] for s in samples]
    fig, (ax_rss, ax_lat, ax_q) = plt.subplots(3, 1, figsize=(9, 9), sharex=True)
    for name in samples[0]["processes"]:
        ax_rss.plot(t, [s["processes"][name]["rss_mb"] for s in samples], label=name)
    ax_rss.set_ylabel("RSS (MB)")
    ax_rss.legend(loc="best", fontsize="small")
    for q, color in (("p50", "tab:blue"), ("p99", "tab:red")):
        ax_lat.plot(
            t, [s["probe"]["latency_ms"][q] for s in samples], color=color, label=f"probe {q}"
        )
        ax_lat.plot(
            t,
            [s["server"]["latency_ms"].get(q) for s in samples],
            color=color,
            linestyle="--",
            alpha=0.6,
            label=f"server window {q}",
        )
    ax_lat.set_ylabel("latency (ms)")
    ax_lat.legend(loc="best", fontsize="small")
    ax_q.plot(t, [s["server"]["queued_rows"] for s in samples], label="server queued rows")
    for name in samples[0]["actors"]:
        ax_q.plot(
            t,
            [(s["actors"][name] or {}).get("in_flight_max") for s in samples],
            label=f"{name} rows in flight",
        )
    ax_q.set_ylabel("rows")
    ax_q.set_xlabel("time since first evaluation (s)")
    ax_q.legend(loc="best", fontsize="small")
    first, last = split_windows(samples, timing.warmup_s, timing.window_s)
    for ax in (ax_rss, ax_lat, ax_q):
        ax.axvspan(0, timing.warmup_s, color="0.9", label="_warm-up")
        for win in (first, last):
            if win:
                ax.axvspan(win[0]["t_s"], win[-1]["t_s"], color="tab:green", alpha=0.12)
        ax.grid(alpha=0.3)
    fig.suptitle("azserve bench soak (warm-up grey, compared windows green)")
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
