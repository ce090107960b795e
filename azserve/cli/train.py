"""``azserve train``: server, actors and learner on this machine, supervised."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from azserve.cli.args import budget_args, budget_overrides, common
from azserve.config.argtypes import int_in


def register(sub: Any) -> None:
    p = sub.add_parser("train", help="server, actors and learner on this machine")
    common(p)
    p.add_argument("--run-dir", required=True, help="output directory")
    p.add_argument("--resume", action="store_true", help="continue the run in RUN_DIR")
    budget_args(p)
    p.add_argument(
        "--no-progress", action="store_true", help="plain log lines instead of the live table"
    )
    p.add_argument("--web", type=int_in(0, 65535), metavar="PORT",
                   help="also serve the run's web pages on 127.0.0.1:PORT while it trains "
                   "(azserve web; docs/web.md)")  # fmt: skip
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from azserve.config.schema import load_config
    from azserve.run.train import run_training

    cfg = load_config(args.config, budget_overrides(args))
    run_dir = Path(args.run_dir)
    if args.web is None:
        return run_training(cfg, run_dir, resume=args.resume, progress=not args.no_progress)
    from azserve.web import run_at, serve_in_thread

    run_dir.mkdir(parents=True, exist_ok=True)  # the pages show it from its first file on
    with serve_in_thread([run_at(run_dir)], port=args.web) as web:
        print(f"azserve train: the run's pages at {web.url}", file=sys.stderr, flush=True)
        return run_training(cfg, run_dir, resume=args.resume, progress=not args.no_progress)
