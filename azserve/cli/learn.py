"""``azserve learn``: the learner process (or one rank of a data-parallel learner)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from azserve.cli.args import common
from azserve.config.argtypes import int_in


def register(sub: Any) -> None:
    p = sub.add_parser("learn", help="learner process")
    common(p)
    p.add_argument("--run-dir", required=True, help="checkpoints, metrics.jsonl and config go here")
    p.add_argument(
        "--resume", action="store_true", help="continue from the last checkpoint in RUN_DIR"
    )
    p.add_argument(
        "--rank",
        type=int_in(1, 255),
        help="run as this rank (> 0) of a data-parallel learner, started by its rank 0",
    )
    p.add_argument("--rendezvous", help="where the ranks meet (tcp://host:port), with --rank")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    import signal

    import uvloop

    from azserve.config.schema import learner_settings, load_config, save_config
    from azserve.errors import ConfigError
    from azserve.lifecycle import stop_on_signals
    from learner.learn import Learner

    cfg = load_config(args.config, args.overrides)
    settings = learner_settings(cfg)
    if args.rank is not None:  # a rank > 0 of a data-parallel learner
        from learner.learn import run_rank

        if not args.rendezvous:
            raise ConfigError("--rank needs --rendezvous (rank 0 passes both)")
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # rank 0 stops the group
        return run_rank(settings, args.rank, args.rendezvous)
    saved = save_config(cfg, Path(args.run_dir) / "learner-config.toml")
    world = cfg.learner.processes
    ranks: list[Any] = []

    async def main() -> None:
        stop = stop_on_signals()
        group = None
        if world > 1:
            from azserve.model.device import resolve_device
            from azserve.run.ranks import loopback_rendezvous, start_ranks
            from learner.distributed import RankGroup

            rendezvous = cfg.learner.rendezvous or loopback_rendezvous()
            if cfg.learner.start_ranks:
                ranks.extend(start_ranks(saved, args.run_dir, world, rendezvous, args.log_level))
            device = resolve_device(cfg.trainer.device, "trainer.device")
            group = RankGroup(0, world, rendezvous, device, cfg.learner.rank_timeout_s)
        learner = Learner(settings, args.run_dir, resume=args.resume, group=group)
        await learner.run(stop)
        print(f"checkpoint: {learner.checkpoint_now()}", flush=True)

    try:
        uvloop.run(main())
    except OSError as exc:  # the stop checkpoint could not be written (disk full)
        print(f"azserve learn: final checkpoint not written: {exc}", file=sys.stderr)
        return 1
    finally:
        if ranks:
            from azserve.run.ranks import stop_ranks

            stop_ranks(ranks)
    return 0
