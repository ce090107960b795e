"""``azserve analyze``: the JSON-lines analysis engine on stdin/stdout."""

from __future__ import annotations

import argparse
from typing import Any

from actors.games import BUILTIN_GAMES
from azserve.cli.args import checkpoint_arg, common, sims_arg


def register(sub: Any) -> None:
    p = sub.add_parser("analyze", help="JSON-lines analysis engine (stdin -> stdout)")
    common(p, config_required=False)
    checkpoint_arg(p)
    sims_arg(p, "per position (0 = raw policy; default eval.sims)")
    p.add_argument(
        "--game",
        choices=tuple(BUILTIN_GAMES),
        help="the game of plain weights (checkpoints know it)",
    )
    p.add_argument("--input", default="-", help="input file ('-': stdin)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from azserve.engines.analyze import run_analyze

    return run_analyze(args)
