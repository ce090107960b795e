"""``azserve bench serve|selfplay|swap|soak|chaos``: measurements that print JSON."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from azserve.cli.args import common
from azserve.config.argtypes import float_in, int_in
from azserve.files import emit


def register(sub: Any) -> None:
    seconds = float_in(0, 86_400, above=True)
    processes = int_in(1, 256)
    coroutines = int_in(1, 1 << 16)
    bench = sub.add_parser("bench", help="throughput benchmarks (JSON out)")
    bsub = bench.add_subparsers(dest="bench", required=True, metavar="BENCH")

    p = bsub.add_parser("serve", help="server rows/s against the model's own rows/s, and peers")
    common(p)
    p.add_argument("--duration", type=seconds, default=10.0, help="seconds per measurement")
    p.add_argument("--json", help="write the result here too")
    p.add_argument("--server", help="target a running server at this endpoint")
    p.add_argument("--processes", type=processes, default=2, help="load processes")
    p.add_argument("--coroutines", type=coroutines, default=512, help="coroutines per load process")
    p.add_argument(
        "--peers",
        default="naive,ray_serve,triton_single,triton_batched,azserve_triton",
        help="comma-separated peers to run side by side ('' = none)",
    )
    p.add_argument(
        "--sweep", action="store_true", help="vary clients, max_batch_size, max_queue_delay_us"
    )
    p.add_argument("--plot", help="throughput-latency plot (PNG) for --sweep")
    p.set_defaults(run=_run("azserve.perf.serve"))

    p = bsub.add_parser("selfplay", help="full self-play throughput and the bottleneck side")
    common(p)
    p.add_argument("--duration", type=seconds, default=30.0, help="seconds of self-play measured")
    p.add_argument("--json", help="write the result here too")
    p.add_argument("--learner", action="store_true", help="run the learner too")
    p.add_argument("--sweep", type=sims_sweep, help="e.g. sims=25,50,100,200")
    p.set_defaults(run=_run("azserve.perf.selfplay"))

    p = bsub.add_parser("swap", help="latency before, during and after repeated weight swaps")
    common(p)
    p.add_argument("--duration", type=seconds, default=10.0, help="seconds per phase")
    p.add_argument(
        "--swaps", type=int_in(1, 10_000), default=10, help="weight swaps during the swap phase"
    )
    p.add_argument("--processes", type=processes, default=2, help="load processes")
    p.add_argument("--coroutines", type=coroutines, default=512, help="coroutines per load process")
    p.add_argument("--json", help="write the result here too")
    p.set_defaults(run=_run("azserve.perf.swap"))

    p = bsub.add_parser(
        "soak", help="server, actors and learner for minutes: RSS and latency flat?"
    )
    common(p)
    p.add_argument(
        "--minutes",
        type=float_in(0, 10_080, above=True),
        default=30.0,
        help="soak length after first traffic",
    )
    p.add_argument(
        "--games",
        type=int_in(1, 1 << 20),
        default=5000,
        help="game coroutines in total, split over processes",
    )
    p.add_argument(
        "--warmup-s", type=float_in(0), help="seconds before the first window (default: 1/4)"
    )
    p.add_argument("--sample-s", type=seconds, help="seconds between samples (default: 1 to 10)")
    p.add_argument("--window-s", type=seconds, help="seconds per compared window (default: 1/5)")
    p.add_argument("--rss-bound", type=float_in(0), default=0.05, help="largest RSS growth, flat")
    p.add_argument(
        "--latency-bound",
        type=float_in(0, above=True),
        default=1.5,
        help="largest p99 last/first",
    )
    p.add_argument("--json", help="write the result here too")
    p.add_argument("--plot", help="RSS and latency over time (PNG)")
    p.add_argument("--keep-dir", help="keep the children's logs and the learner's run here")
    p.set_defaults(run=_run("azserve.perf.soak"))

    p = bsub.add_parser(
        "chaos", help="a fleet in network namespaces under random kills: anything lost? (root)"
    )
    common(p)
    p.add_argument(
        "--minutes", type=float_in(0, 10_080, above=True), default=60.0, help="launch length"
    )
    p.add_argument("--seed", type=int_in(0, 2**63 - 1), default=0, help="seeds the strikes")
    p.add_argument(
        "--interval",
        type=seconds_range,
        default=(20.0, 60.0),
        help="seconds between strikes, drawn uniformly: LO,HI (20,60)",
    )
    p.add_argument(
        "--recovery-s",
        type=seconds,
        default=120.0,
        help="the stated bound: every role back at work within it after each strike",
    )
    p.add_argument(
        "--quiet-s", type=float_in(0), default=45.0, help="no strike in the run's last seconds"
    )
    p.add_argument(
        "--games", type=int_in(1, 1 << 16), default=64, help="game coroutines per actor host"
    )
    p.add_argument(
        "--kinds",
        type=chaos_kinds,
        default=CHAOS_KINDS,
        help="comma-separated strikes, dealt in seeded rounds, of kill, stop, host, partition, "
        "link (kill,stop,host replays the runs made before the network strikes)",
    )
    p.add_argument(
        "--net-s",
        type=seconds_range,
        default=(2.0, 60.0),
        help="seconds a partition or bad link lasts, drawn uniformly: LO,HI",
    )
    p.add_argument(
        "--min-score",
        type=float_in(0, 1),
        default=0.5,
        help="sane final evaluation: score against random at least this",
    )
    p.add_argument(
        "--memory-mb",
        type=float_in(0, above=True),
        default=2048.0,
        help="the stated bound: no role's resident memory above it (MiB), strikes or not",
    )
    p.add_argument(
        "--throughput-s",
        type=seconds,
        default=60.0,
        help="the stated bound: games stored (or the learner's samples trained) back to 80%% "
        "of the run's median rate within it after each network strike heals",
    )
    p.add_argument(
        "--engine",
        choices=("ssh", "ray"),
        default="ssh",
        help="what launches the fleet: ssh (ip netns exec) or ray (a Ray node per host, a sixth "
        "host for Ray's head; docs/reliability.md, Chaos on Ray)",
    )
    p.add_argument("--work-dir", help="keep the fleet's run, logs and strikes here")
    p.add_argument("--json", help="write the result here too")
    p.set_defaults(run=_run("azserve.perf.chaos", exit_on="verdicts"))


CHAOS_KINDS = ("kill", "stop", "host", "partition", "link")
"""``azserve.perf.chaos.KINDS`` (spelled here so that the parser imports no bench)."""


def chaos_kinds(text: str) -> tuple[str, ...]:
    """An argparse type: comma-separated chaos strike kinds, each known, none twice."""
    kinds = tuple(k.strip() for k in text.split(",") if k.strip())
    bad = [k for k in kinds if k not in CHAOS_KINDS]
    if bad or not kinds or len(set(kinds)) != len(kinds):
        raise argparse.ArgumentTypeError(
            f"{text!r}: name each of {', '.join(CHAOS_KINDS)} at most once"
        )
    return kinds


def seconds_range(text: str) -> tuple[float, float]:
    """An argparse type: ``LO,HI`` seconds, 0 < LO <= HI."""
    try:
        lo, hi = (float(v) for v in text.split(","))
    except ValueError:
        lo = hi = -1.0
    if not 0 < lo <= hi <= 86_400:
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected LO,HI seconds with 0 < LO <= HI <= 86400, e.g. 20,60"
        )
    return lo, hi


def sims_sweep(text: str) -> str:
    """An argparse type: ``sims=25,50,100`` (simulation counts, each 1 to 1,048,576), kept as
    written for the bench to read."""
    key, _, values = text.partition("=")
    try:
        sims = [int(v) for v in values.split(",")]
    except ValueError:
        sims = []
    if key.strip() != "sims" or not sims or not all(1 <= n <= 1 << 20 for n in sims):
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected sims=N,N,... (each 1 to 1,048,576), e.g. sims=25,50,100"
        )
    return text


def _run(module: str, exit_on: str | None = None) -> Any:
    """The subcommand's run: the module's ``main(args)`` result emitted as JSON; with
    ``exit_on``, exit 1 unless ``result[exit_on]["ok"]``."""

    def run(args: argparse.Namespace) -> int:
        import importlib

        result = importlib.import_module(module).main(args)
        emit(result, args.json)
        if exit_on is not None and not result[exit_on]["ok"]:
            failed = [k for k, v in result[exit_on].items() if k != "ok" and not v]
            print(f"azserve bench: failed checks: {', '.join(failed)}", file=sys.stderr)
            return 1
        return 0

    return run
