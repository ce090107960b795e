"""``azserve match``: a checkpoint against another engine, refereed."""

from __future__ import annotations

import argparse
from typing import Any

from azserve.cli.args import checkpoint_arg, common, sims_arg
from azserve.config.argtypes import int_in


def register(sub: Any) -> None:
    p = sub.add_parser(
        "match",
        help="a checkpoint against a GTP engine or OpenSpiel's MCTS: win rate with a 95%% CI",
        description="Play GAMES games against another engine, colours alternating, refereed "
        "by our rules; SGF files (Go), PGN files (chess), CSA files (shogi) and match.json go "
        "to --out. The opponent: a GTP command line (looked for on PATH, then /usr/games), "
        "openspiel-mcts:SIMS, for chess uci:CMD[;OPTION=VALUE...], for shogi "
        "usi:CMD[;OPTION=VALUE...], for both greedy.",
    )
    common(p, config_required=False)
    checkpoint_arg(p)
    p.add_argument(
        "--opponent",
        required=True,
        help='a GTP engine\'s command line ("gnugo --mode gtp --level 1"), openspiel-mcts:SIMS, '
        'random, checkpoint:PATH; chess: "uci:stockfish;Skill Level=0;movetime=50" or greedy; '
        'shogi: "usi:fairy-stockfish;Skill Level=-20;byoyomi=50" or greedy',
    )
    p.add_argument("--games", type=int_in(1, 100_000), default=40, help="games to play")
    sims_arg(p, "per move (default eval.sims)")
    p.add_argument(
        "--sample-moves",
        type=int_in(0, 1000),
        default=4,
        help="our first N moves drawn by visit count, so that games differ",
    )
    p.add_argument("--seed", type=int_in(0), default=0,
                   help="seed of those draws (each game's from it and its number)")  # fmt: skip
    p.add_argument("--out", default="match", help="directory for the SGF files and match.json")
    p.add_argument("--json", help="write the summary here too")
    p.add_argument("--jobs", type=int_in(1, 256), default=1,
                   help="games played at once, each in its own process on a core of its own, "
                   "with its own opponent engine; 1 plays them in this process")  # fmt: skip
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from azserve.arena.match import run_match

    return run_match(args)
