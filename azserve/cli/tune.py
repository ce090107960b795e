"""``azserve tune``: a search over a config's knobs by Ray Tune, each trial a real ``azserve
train`` for the same wall time, judged on one ladder; ASHA stops the weak ones early."""

from __future__ import annotations

import argparse
from typing import Any

from azserve.cli.args import overrides_arg
from azserve.config.argtypes import float_in, int_in, log_level


def register(sub: Any) -> None:
    p = sub.add_parser(
        "tune",
        help="search a config's knobs with Ray Tune: trials trained for equal time, rated on "
        "one ladder, the weak stopped early",
        description="Train one trial per point of the search (every combination of the "
        "--search values, or --trials of them), each a real azserve train in RUN_DIR/trials/ "
        "for the same wall time (--hours shared out). At a quarter, a half and the end of its "
        "time each trial's newest checkpoint is rated on one shared ladder (RUN_DIR/ladder, "
        "random play at 0 Elo) and Ray Tune's ASHA scheduler stops a trial below the median "
        "of its rung. At the end: RUN_DIR/best.toml (the best config, resolved), tune.json, "
        "tune.md (the table, also printed) and tune.png (rating against hours per trial). "
        "--resume continues an interrupted tune (docs/tune.md).",
    )
    p.add_argument("--config",
                   help="the base TOML config: a path, or a shipped config's name")  # fmt: skip
    overrides_arg(p, "of the base config, in every trial")
    p.add_argument(
        "--search",
        action="append",
        metavar="KEY=V1,V2,...",
        help="a config key and the values to try, comma-separated (repeatable: the trials are "
        "every combination): mcts.num_simulations=8,16,32",
    )
    p.add_argument("--hours", type=float_in(0, above=True),
                   help="wall time of all trials together (each gets HOURS x --concurrent / "
                   "trials), were none stopped early")  # fmt: skip
    p.add_argument("--run-dir", required=True, help="the tune's directory")
    p.add_argument("--trials", type=int_in(1),
                   help="this many points drawn from the search (seeded by --seed), not every "
                   "combination")  # fmt: skip
    p.add_argument("--resume", action="store_true",
                   help="continue the tune in RUN_DIR (Ray Tune's restore): trials that ended "
                   "are kept, the others train afresh")  # fmt: skip
    p.add_argument("--concurrent", type=int_in(1, 4096),
                   help="trials run at once (default 1: side by side on one machine they would "
                   "share its cores unevenly)")  # fmt: skip
    p.add_argument("--address",
                   help="a Ray cluster to run the trials on (ray start's address, or auto); "
                   "RUN_DIR must be on a filesystem every node mounts at the same path "
                   "(default: a Ray of its own on this machine)")  # fmt: skip
    p.add_argument("--trial-cpus", type=float_in(0), default=1.0,
                   help="CPUs Ray reserves for each trial")  # fmt: skip
    p.add_argument("--trial-gpus", type=float_in(0), default=0.0,
                   help="GPUs Ray reserves for each trial (0: the trial sees none)")  # fmt: skip
    p.add_argument("--ladder-games", type=int_in(1, 1_000_000),
                   help="ladder games at each rung of each trial (default 20)")  # fmt: skip
    p.add_argument(
        "--ladder-anchor",
        dest="ladder_anchors",
        action="append",
        help="a fixed opponent on the ladder, as azserve ladder's --anchor (repeatable; "
        "default: the config's ladder.anchors, random)",
    )
    p.add_argument("--ladder-jobs", type=int_in(1, 256),
                   help="ladder games played at once, one process each (default 1)")  # fmt: skip
    p.add_argument("--seed", type=int_in(0),
                   help="draws the --trials points and seeds the ladder's games (default 0)")  # fmt: skip
    p.add_argument("--log-level", type=log_level, default="INFO", help="DEBUG, INFO, ...")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from azserve.run.tune import run_tune_command

    return run_tune_command(args)
