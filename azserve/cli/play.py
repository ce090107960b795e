"""``azserve play``: play a checkpoint in the terminal."""

from __future__ import annotations

import argparse
from typing import Any

from actors.games import BUILTIN_GAMES
from azserve.cli.args import checkpoint_arg, common, sims_arg


def register(sub: Any) -> None:
    p = sub.add_parser("play", help="play the agent in the terminal")
    common(p, config_required=False)
    checkpoint_arg(p)
    sims_arg(p, "per agent move (default eval.sims)")
    p.add_argument(
        "--game",
        choices=tuple(BUILTIN_GAMES),
        help="the game of plain weights (checkpoints know it)",
    )
    p.add_argument("--first", choices=["human", "agent"], default="human", help="who moves first")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from azserve.engines.terminal import run_play

    return run_play(args)
