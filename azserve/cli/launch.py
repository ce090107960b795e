"""``azserve launch``: servers, actors and learner across hosts (Ray, Slurm or ssh)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from azserve.cli.args import budget_args, budget_overrides, common


def register(sub: Any) -> None:
    p = sub.add_parser(
        "launch", help="servers, actors and learner across hosts (Ray, Slurm or ssh)"
    )
    common(p)
    p.add_argument("--cluster", required=True, help="cluster file (TOML, docs/cluster.md)")
    p.add_argument(
        "--run-dir", required=True, help="output directory, on this machine (as for train)"
    )
    p.add_argument("--resume", action="store_true", help="continue the run in RUN_DIR")
    budget_args(p)
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="print the resolved plan and start nothing (works anywhere: a Slurm file outside "
        "an allocation shows placeholder nodes)",
    )
    p.add_argument(
        "--no-progress", action="store_true", help="plain status lines instead of a live table"
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from azserve.config.schema import load_config
    from azserve.run.cluster.run import ClusterRun, dry_run
    from azserve.run.cluster.spec import load_cluster

    spec = load_cluster(args.cluster)
    cfg = load_config(args.config, budget_overrides(args))
    if args.dry_run:
        print(dry_run(cfg, spec, Path(args.run_dir)))
        return 0
    run = ClusterRun(cfg, spec, Path(args.run_dir), args.resume, progress=not args.no_progress)
    return run.run()
