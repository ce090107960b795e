"""``azserve train``: server, actors and learner on this machine, supervised."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from azserve.cli.args import budget_args, budget_overrides, common


def register(sub: Any) -> None:
    p = sub.add_parser("train", help="server, actors and learner on this machine")
    common(p)
    p.add_argument("--run-dir", required=True, help="output directory")
    p.add_argument("--resume", action="store_true", help="continue the run in RUN_DIR")
    budget_args(p)
    p.add_argument(
        "--no-progress", action="store_true", help="plain log lines instead of the live table"
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from azserve.config.schema import load_config
    from azserve.run.train import run_training

    cfg = load_config(args.config, budget_overrides(args))
    return run_training(cfg, Path(args.run_dir), resume=args.resume, progress=not args.no_progress)
