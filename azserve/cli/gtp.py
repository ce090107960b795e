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
    """The ``azserve gtp`` main: the checkpoint's agent behind the engine, GTP on stdin/stdout."""
    import torch

    from actors.games.go import Go
    from azserve.arena.agent import agent_from_checkpoint, identity
    from azserve.engines.gtp.engine import AgentMoves, Engine
    from azserve.engines.gtp.serve import serve
    from azserve.errors import ConfigError

    # One position at a time: a second thread only adds overhead, and with another engine
    # (or a second match) on the cores, torch's spinning threads slowed a Go game 40-fold
    # (205 s against 5 s, measured).
    torch.set_num_threads(1)
    cfg, agent = agent_from_checkpoint(args.checkpoint, args.config, args.overrides, None)
    if not isinstance(agent.game, Go):
        raise ConfigError(f"--checkpoint: azserve gtp plays Go; this checkpoint plays {cfg.game}")
    sims = cfg.eval.sims if args.sims is None else args.sims
    engine = Engine(
        AgentMoves(agent), version=identity(args.checkpoint, cfg.game), game=agent.game,
        sims=sims, resign=args.resign, playouts=args.playouts,
    )  # fmt: skip
    print(f"azserve gtp: {cfg.game} ({engine.version}), {sims} simulations per move; GTP on "
          "stdin/stdout", file=sys.stderr, flush=True)  # fmt: skip
    serve(engine, sys.stdin.fileno(), sys.stdout)
    return 0
