"""Subcommands beyond ``serve``: each parses its flags and calls one main in its own module."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

Common = Callable[..., None]


def register(sub: Any, common: Common) -> None:
    from azserve.app.cli import float_in, int_in

    sims = int_in(0, 1 << 20)
    games = ("tictactoe", "connect4")
    p = sub.add_parser("actors", help="self-play actor process")
    common(p)
    p.add_argument("--id", help="actor id (default: host-pid)")
    p.set_defaults(run=_actors)

    p = sub.add_parser("learn", help="learner process")
    common(p)
    p.add_argument("--run-dir", required=True, help="checkpoints, metrics.jsonl and config go here")
    p.add_argument(
        "--resume", action="store_true", help="continue from the last checkpoint in RUN_DIR"
    )
    p.set_defaults(run=_learn)

    p = sub.add_parser("train", help="server, actors and learner on this machine")
    common(p)
    p.add_argument("--run-dir", required=True, help="output directory")
    p.add_argument("--resume", action="store_true", help="continue the run in RUN_DIR")
    p.add_argument(
        "--minutes", type=float_in(0), help="time budget (overrides train.minutes; 0 = none)"
    )
    p.add_argument(
        "--steps", type=int_in(0), help="learner step budget (overrides train.steps; 0 = none)"
    )
    p.add_argument(
        "--games", type=int_in(0), help="self-play game budget (overrides train.games; 0 = none)"
    )
    p.add_argument(
        "--no-progress", action="store_true", help="plain log lines instead of the live table"
    )
    p.set_defaults(run=_train)

    p = sub.add_parser("analyze", help="JSON-lines analysis engine (stdin -> stdout)")
    common(p, config_required=False)
    p.add_argument(
        "--checkpoint",
        required=True,
        help="weights or checkpoint (.safetensors), or a run directory (its newest checkpoint)",
    )
    p.add_argument(
        "--sims",
        type=sims,
        help="MCTS simulations per position (0 = raw policy; default eval.sims)",
    )
    p.add_argument("--game", choices=games, help="the game of plain weights (checkpoints know it)")
    p.add_argument("--input", default="-", help="input file (default stdin)")
    p.set_defaults(run=_analyze)

    p = sub.add_parser("play", help="play the agent in the terminal")
    common(p, config_required=False)
    p.add_argument(
        "--checkpoint",
        required=True,
        help="weights or checkpoint (.safetensors), or a run directory (its newest checkpoint)",
    )
    p.add_argument("--sims", type=sims, help="MCTS simulations per agent move (default eval.sims)")
    p.add_argument("--game", choices=games, help="the game of plain weights (checkpoints know it)")
    p.add_argument("--first", choices=["human", "agent"], default="human", help="who moves first")
    p.set_defaults(run=_play)

    from azserve.app.bench.cli import register as register_bench

    register_bench(sub, common)

    p = sub.add_parser("launch", help="run server, actors and learner across hosts (ssh)")
    common(p)
    p.add_argument("--hosts", required=True, help="hosts file (TOML) naming each host's role")
    p.add_argument(
        "--run-dir", help="the learner's run directory on its host (default runs/launch-GAME)"
    )
    p.add_argument(
        "--dry-run", action="store_true", help="print the commands instead of running them"
    )
    p.set_defaults(run=_launch)


# The mains below import their parts lazily, so that each process loads only what it runs:
# ``azserve actors`` never imports torch.


def _actors(args: argparse.Namespace) -> int:
    import uvloop

    from actors.main import run_actors
    from azserve.app.schema import actors_config, client_config, load_config

    cfg = load_config(args.config, args.overrides)
    # config -> client (server endpoint) + actors (learner endpoint) -> self-play
    uvloop.run(
        run_actors(cfg.game, actors_config(cfg), cfg.mcts, client_config(cfg), cfg.auth, args.id)
    )
    return 0


def _learn(args: argparse.Namespace) -> int:
    import uvloop

    from azserve.app.schema import learner_settings, load_config, save_config
    from azserve.lifecycle import stop_on_signals
    from learner.learn import Learner

    cfg = load_config(args.config, args.overrides)
    save_config(cfg, Path(args.run_dir) / "learner-config.toml")

    async def main() -> None:
        stop = stop_on_signals()
        learner = Learner(learner_settings(cfg), args.run_dir, resume=args.resume)
        await learner.run(stop)
        print(f"checkpoint: {learner.checkpoint_now()}", flush=True)

    try:
        uvloop.run(main())
    except OSError as exc:  # the stop checkpoint could not be written (disk full)
        print(f"azserve learn: final checkpoint not written: {exc}", file=sys.stderr)
        return 1
    return 0


def _train(args: argparse.Namespace) -> int:
    from azserve.app.schema import load_config
    from azserve.app.train import run_training

    overrides = list(args.overrides)
    for key in ("minutes", "steps", "games"):
        if getattr(args, key) is not None:
            overrides.append(f"train.{key}={getattr(args, key)}")
    cfg = load_config(args.config, overrides)
    return run_training(cfg, Path(args.run_dir), resume=args.resume, progress=not args.no_progress)


def _analyze(args: argparse.Namespace) -> int:
    from azserve.app.analyze import run_analyze

    return run_analyze(args)


def _play(args: argparse.Namespace) -> int:
    from azserve.app.play import run_play

    return run_play(args)


def _launch(args: argparse.Namespace) -> int:
    from azserve.app.launch import run_launch

    return run_launch(args)
