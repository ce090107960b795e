"""``azserve eval``: score a checkpoint as training scores its last one."""

from __future__ import annotations

import argparse
from typing import Any

from actors.games import BUILTIN_GAMES
from azserve.cli.args import checkpoint_arg, common, sims_arg
from azserve.config.argtypes import int_in


def register(sub: Any) -> None:
    p = sub.add_parser(
        "eval",
        help="score a checkpoint: mistake rates, optimality, blunders or matches (JSON out)",
        description="Score a checkpoint as training does at its end: Connect Four, the "
        "mistake rate per benchmark set (a move that changes the game-theoretic outcome); "
        "tic-tac-toe, the share of optimal moves over every reachable position; chess, the "
        "blunder rate, centipawn loss and mates found against Stockfish's score of every legal "
        "move in a shipped set of positions; other games, a match against uniform random play. "
        "Raw policy always, MCTS with --sims > 0.",
    )
    common(p, config_required=False)
    checkpoint_arg(p)
    sims_arg(p, "per move (0 = raw policy only; default eval.sims)")
    p.add_argument(
        "--positions",
        help="Connect Four benchmark positions, a move_scores.tsv (default eval.c4_positions)",
    )
    p.add_argument(
        "--limit",
        type=int_in(0),
        help="score only the first N benchmark positions (0 = all; default eval.c4_limit)",
    )
    p.add_argument(
        "--games",
        type=int_in(0, 100_000),
        help="games against uniform random play (default: eval.match_games for games "
        "without a benchmark, else none)",
    )
    p.add_argument(
        "--game",
        choices=tuple(BUILTIN_GAMES),
        help="the game of plain weights (checkpoints know it)",
    )
    p.add_argument("--json", help="write the result here too")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from azserve.arena.evaluate import run_eval

    return run_eval(args)
