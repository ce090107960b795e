"""``azserve uci``: a chess checkpoint as a UCI engine."""

from __future__ import annotations

import argparse
from typing import Any

from azserve.cli.args import checkpoint_arg, common, sims_arg


def register(sub: Any) -> None:
    p = sub.add_parser(
        "uci",
        help="a chess checkpoint as a UCI engine on stdin/stdout (cutechess-cli, chess GUIs)",
        description="Speak the Universal Chess Interface on stdin/stdout: uci, isready, "
        "ucinewgame, setoption (Nodes, Batch, Algorithm, MoveOverhead), position startpos|fen "
        "... moves ..., go nodes|movetime|wtime/btime/winc/binc|depth|mate|infinite, stop, quit; "
        "info lines with nodes, nps, score and pv; bestmove. uciok comes at once, readyok once "
        "the net is loaded; the search is the checkpoint's (mcts.*) on the compiled core.",
    )
    common(p, config_required=False)
    checkpoint_arg(p, "a chess checkpoint")
    sims_arg(p, "per go without limits (default eval.sims)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """The ``azserve uci`` main (``engines.protocol.run_stdio``)."""
    from azserve.engines.protocol import run_stdio
    from azserve.engines.uci import Engine

    return run_stdio(args, Engine, "chess")
