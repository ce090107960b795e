"""``azserve actors``: one self-play process: game coroutines, one EvalClient, one trajectory sink."""

from __future__ import annotations

import argparse
from typing import Any

from azserve.cli.args import common


def register(sub: Any) -> None:
    p = sub.add_parser("actors", help="self-play actor process")
    common(p)
    p.add_argument("--id", help="actor id (default: host-pid)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    import uvloop

    from actors.main import run_actors
    from azserve.config.schema import actors_config, client_config, load_config

    cfg = load_config(args.config, args.overrides)
    # config -> client (server endpoint) + actors (learner endpoint) -> self-play
    uvloop.run(
        run_actors(cfg.game, actors_config(cfg), cfg.mcts, client_config(cfg), cfg.auth, args.id)
    )
    return 0
