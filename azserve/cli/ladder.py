"""``azserve ladder``: rate runs' checkpoints against each other and anchors."""

from __future__ import annotations

import argparse
from typing import Any

from azserve.cli.args import sims_arg
from azserve.config.argtypes import float_in, int_in


def register(sub: Any) -> None:
    p = sub.add_parser(
        "ladder",
        help="rate a run's checkpoints against each other and anchors: Elo against time",
        description="Play games between the checkpoints of one or more runs and a set of "
        "anchors, store each game in OUT/games.jsonl (a second invocation continues it) and "
        "fit Elo ratings with 95% intervals, random play at 0: a table on stdout, "
        "OUT/ratings.json and OUT/ladder.png (Elo against hours, positions and steps).",
    )
    p.add_argument("runs", nargs="+", metavar="RUN", help="run directories (azserve train's)")
    p.add_argument(
        "--anchor",
        dest="anchors",
        action="append",
        help='a fixed opponent, repeatable: random, gtp:CMD ("gtp:gnugo --mode gtp --level '
        '1"), openspiel-mcts:SIMS, checkpoint:PATH, for chess greedy or uci:CMD[;OPTION=VALUE...] '
        ", for shogi greedy or usi:CMD[;OPTION=VALUE...] (default: random)",
    )
    p.add_argument("--games", type=int_in(1, 1_000_000), default=50,
                   help="new games to play in this invocation")  # fmt: skip
    p.add_argument("--minutes", type=float_in(0), default=0.0,
                   help="stop starting games after this long (0: no limit)")  # fmt: skip
    sims_arg(p, "per move for every checkpoint (default: the first run's eval.sims)")
    p.add_argument("--sample-moves", type=int_in(0, 1000), default=4,
                   help="each checkpoint's first N moves drawn by visit count")  # fmt: skip
    p.add_argument("--max-checkpoints", type=int_in(1, 10_000), default=12,
                   help="checkpoints per run, evenly spaced, newest included (and the one "
                   "nearest to each other run's end)")  # fmt: skip
    p.add_argument("--seed", type=int_in(0), default=0, help="the ladder's seed (every game's "
                   "seed derives from it, its pair and its number)")  # fmt: skip
    p.add_argument("--out", help="the ladder's directory (default: the first RUN/ladder)")
    p.add_argument("--jobs", type=int_in(1, 256), default=1,
                   help="games played at once, each in its own process on a core of its own; "
                   "1 plays them one at a time in this process")  # fmt: skip
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from azserve.arena.ladder.schedule import run_ladder_command

    return run_ladder_command(args)
