"""``azserve usi``: a shogi checkpoint as a USI engine."""

from __future__ import annotations

import argparse
import sys
import threading
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
    """The ``azserve usi`` main: the checkpoint loads in the background (``usiok`` at once),
    its search behind the engine, USI on stdin/stdout."""
    from actors.search import PLAY_ALGORITHM
    from azserve.config.argtypes import package_version
    from azserve.engines.loading import Loading
    from azserve.engines.search import EngineSearch, engine_mcts
    from azserve.engines.usi import Loaded, UsiEngine, serve

    # the checkpoint: read and compiled on a thread while the handshake is answered
    loading = Loading(args.checkpoint, args.config, args.overrides, "usi", "shogi")

    def load() -> Loaded:
        cfg, agent = loading.get()
        sims = cfg.eval.sims if args.sims is None else args.sims
        print(f"azserve usi: {cfg.game}, {PLAY_ALGORITHM} search (Algorithm option; self-play's: "
              f"{cfg.mcts.algorithm}), {sims} simulations per go "
              "without limits; USI on stdin/stdout", file=sys.stderr, flush=True)  # fmt: skip
        search = EngineSearch(agent.evaluator, engine_mcts(agent.mcts_cfg))
        return Loaded(agent.game, search, sims, cfg.mcts.algorithm)

    out_lock = threading.Lock()

    def emit(text: str) -> None:
        with out_lock:
            sys.stdout.write(text + "\n")
            sys.stdout.flush()

    # stdin -> the engine -> stdout
    engine = UsiEngine(load, emit, name=f"azserve {package_version()}")
    if not serve(engine, sys.stdin):
        loading.get()  # the input ended: a failed load still says why (exit status 2)
    return 0
