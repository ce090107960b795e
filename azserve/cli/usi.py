"""``azserve usi``: a shogi checkpoint as a USI engine."""

from __future__ import annotations

import argparse
from typing import Any

from azserve.cli.args import checkpoint_arg, common, sims_arg


def register(sub: Any) -> None:
    p = sub.add_parser(
        "usi",
        help="a shogi checkpoint as a USI engine on stdin/stdout (shogi GUIs, tournaments)",
        description="Speak the Universal Shogi Interface on stdin/stdout: usi, isready, "
        "usinewgame, setoption (Nodes, Batch, Algorithm, MoveOverhead, ResignValue), position "
        "startpos|sfen ... moves ..., go btime/wtime/byoyomi/binc/winc|nodes|movetime|depth|"
        "infinite|ponder, stop, ponderhit, gameover, quit; info lines with nodes, nps, score "
        "(cp or mate) and pv; bestmove (resign, win). usiok comes at once, readyok once the "
        "net is loaded; the search is the checkpoint's (mcts.*) on the compiled core.",
    )
    common(p, config_required=False)
    checkpoint_arg(p, "a shogi checkpoint")
    sims_arg(p, "per go without limits (default eval.sims)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """The ``azserve usi`` main (``engines.protocol.run_stdio``)."""
    from azserve.engines.protocol import run_stdio
    from azserve.engines.usi import UsiEngine

    return run_stdio(args, UsiEngine, "shogi")
