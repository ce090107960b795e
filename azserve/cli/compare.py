"""``azserve compare``: candidate configs trained for equal minutes in turn, their curves in one image."""

from __future__ import annotations

import argparse
from typing import Any

from azserve.cli.args import overrides_arg
from azserve.config.argtypes import float_in, int_in, log_level


def register(sub: Any) -> None:
    p = sub.add_parser(
        "compare", help="train candidate configs for equal minutes in turn; curves in one image"
    )
    p.add_argument(
        "--config",
        action="append",
        required=True,
        help="a candidate's TOML config, a path or a shipped config's name (repeat)",
    )
    p.add_argument("--label", action="append", help="a candidate's name (default: file stem)")
    overrides_arg(p, "in every candidate")
    p.add_argument(
        "--set-in",
        nargs=2,
        action="append",
        metavar=("LABEL", "SECTION.KEY=VALUE"),
        help="override one config value in the candidate LABEL only, after --set (repeatable): "
        "one config, several arms",
    )
    p.add_argument("--log-level", type=log_level, default="INFO", help="DEBUG, INFO, ...")
    p.add_argument("--run-dir", required=True, help="one run directory per candidate goes here")
    p.add_argument(
        "--minutes",
        type=float_in(0, above=True),
        required=True,
        help="training time per candidate",
    )
    p.add_argument(
        "--keep-every",
        type=int_in(1),
        help="keep a checkpoint every N steps for the MCTS curve (checkpoint.keep_every)",
    )
    p.add_argument(
        "--no-progress", action="store_true", help="plain log lines instead of the live table"
    )
    p.add_argument(
        "--no-score",
        action="store_true",
        help="do not score kept checkpoints with MCTS: draw only the runs' own evaluations "
        "(e.g. finished runs linked into RUN_DIR under their labels)",
    )
    p.add_argument(
        "--ladder-games",
        type=int_in(0, 1_000_000),
        default=60,
        help="games on the candidates' shared rating ladder (RUN_DIR/ladder, random at 0 Elo): "
        "Elo against time in ladder.png, for every game; a rerun adds as many (0: none)",
    )
    p.add_argument(
        "--ladder-anchor",
        dest="ladder_anchors",
        action="append",
        help="a fixed opponent on that ladder, as azserve ladder's --anchor (repeatable; "
        "default: random)",
    )
    p.add_argument("--ladder-jobs", type=int_in(1, 256), default=1,
                   help="ladder games played at once, one process each")  # fmt: skip
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from azserve.run.compare import run_compare

    return run_compare(args)
