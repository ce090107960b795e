"""``azserve gtp``: a Go checkpoint as a GTP engine."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from azserve.cli.args import checkpoint_arg, common, sims_arg
from azserve.config.argtypes import float_in, int_in


def register(sub: Any) -> None:
    p = sub.add_parser(
        "gtp",
        help="a Go checkpoint as a GTP engine on stdin/stdout (Sabaki, GoGui, twogtp)",
        description="Speak the Go Text Protocol (version 2) on stdin/stdout: GTP's core "
        "commands, final_score and final_status_list (dead stones from playouts), handicap, "
        "loadsgf/printsgf, time controls, and lz-analyze, kata-analyze and genmove_analyze "
        "for Sabaki and Lizzie (docs/go.md).",
    )
    common(p, config_required=False)
    checkpoint_arg(p, "a Go checkpoint")
    sims_arg(p, "per move, at most (default eval.sims; a clock can make it fewer)")
    p.add_argument(
        "--resign",
        type=float_in(0, 1),
        default=0.0,
        metavar="WINRATE",
        help="resign when the search's win rate for the engine's colour is below this, e.g. "
        "0.05 (default 0: never resign)",
    )
    p.add_argument(
        "--playouts",
        type=int_in(1, 100_000),
        default=200,
        help="random playouts behind final_score and final_status_list (default %(default)s)",
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """The ``azserve gtp`` main: the checkpoint loads in the background (the handshake is
    answered at once), its search behind the engine, GTP on stdin/stdout."""
    from azserve.arena.agent import identity
    from azserve.engines.gtp.engine import AgentMoves, Engine
    from azserve.engines.gtp.serve import Starting, serve
    from azserve.engines.loading import Loading
    from azserve.engines.search import EngineSearch, engine_mcts

    # the checkpoint: read and compiled on a thread while the handshake is answered
    loading = Loading(args.checkpoint, args.config, args.overrides, "gtp", "Go")

    def build() -> Engine:
        cfg, agent = loading.get()
        sims = cfg.eval.sims if args.sims is None else args.sims
        search = EngineSearch(agent.evaluator, engine_mcts(agent.mcts_cfg))
        engine = Engine(
            AgentMoves(search, log), version=identity(args.checkpoint, cfg.game),
            game=agent.game, sims=sims, resign=args.resign, playouts=args.playouts,
        )  # fmt: skip
        log(f"{cfg.game} ({engine.version}), {search.mcts.algorithm} search (match's; self-play's: "
            f"{cfg.mcts.algorithm}), {sims} simulations "
            "per move; GTP on stdin/stdout")  # fmt: skip
        return engine

    try:
        stdin = sys.stdin.fileno()
    except (OSError, ValueError):  # no file behind stdin (run in-process): say a failed load
        loading.get()
        raise
    # stdin -> the engine (built once loaded) -> stdout
    front = Starting(build)
    serve(front, stdin, sys.stdout)
    if not front.done:
        loading.get()  # the input ended: a failed load still says why (exit status 2)
    return 0


def log(text: str) -> None:
    print(f"azserve gtp: {text}", file=sys.stderr, flush=True)
