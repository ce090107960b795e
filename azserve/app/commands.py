"""Subcommands beyond ``serve``: each parses its flags and calls one main in its own module."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

Common = Callable[..., None]


def checkpoint_arg(p: argparse.ArgumentParser, what: str = "weights or checkpoint") -> None:
    """``--checkpoint``, required: a file or a run directory."""
    p.add_argument(
        "--checkpoint",
        required=True,
        help=f"{what} (.safetensors), or a run directory (its newest checkpoint)",
    )


def sims_arg(p: argparse.ArgumentParser, per: str) -> None:
    """``--sims``: MCTS simulations ``per`` what the command searches."""
    from azserve.app.argtypes import int_in

    p.add_argument("--sims", type=int_in(0, 1 << 20), help=f"MCTS simulations {per}")


def budget_args(p: argparse.ArgumentParser) -> None:
    """``--minutes``, ``--steps``, ``--games``: a run's budgets (``train`` and ``launch``)."""
    from azserve.app.argtypes import float_in, int_in

    p.add_argument(
        "--minutes", type=float_in(0), help="time budget (overrides train.minutes; 0 = none)"
    )
    p.add_argument(
        "--steps", type=int_in(0), help="learner step budget (overrides train.steps; 0 = none)"
    )
    p.add_argument(
        "--games", type=int_in(0), help="self-play game budget (overrides train.games; 0 = none)"
    )


def register(sub: Any, common: Common) -> None:
    from actors.games import BUILTIN_GAMES
    from azserve.app.argtypes import float_in, int_in, log_level

    games = tuple(BUILTIN_GAMES)
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
    p.add_argument(
        "--rank",
        type=int_in(1, 255),
        help="run as this rank (> 0) of a data-parallel learner, started by its rank 0",
    )
    p.add_argument("--rendezvous", help="where the ranks meet (tcp://host:port), with --rank")
    p.set_defaults(run=_learn)

    p = sub.add_parser("train", help="server, actors and learner on this machine")
    common(p)
    p.add_argument("--run-dir", required=True, help="output directory")
    p.add_argument("--resume", action="store_true", help="continue the run in RUN_DIR")
    budget_args(p)
    p.add_argument(
        "--no-progress", action="store_true", help="plain log lines instead of the live table"
    )
    p.set_defaults(run=_train)

    p = sub.add_parser(
        "compare", help="train candidate configs for equal minutes in turn; curves in one image"
    )
    p.add_argument(
        "--config",
        action="append",
        required=True,
        help="a candidate's TOML config, a path or a shipped config's name (repeat)",
    )
    p.add_argument("--label", action="append", help="a candidate's name (default: file stem)")
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="SECTION.KEY=VALUE",
        help="override one config value in every candidate (repeatable)",
    )
    p.add_argument(
        "--set-in",
        nargs=2,
        action="append",
        metavar=("LABEL", "SECTION.KEY=VALUE"),
        help="override one config value in the candidate LABEL only, after --set (repeatable): "
        "one config, several arms",
    )
    p.add_argument("--log-level", type=log_level, default="INFO", help="DEBUG, INFO, ...")
    p.add_argument("--run-dir", required=True, help="one run directory per candidate goes here")
    p.add_argument(
        "--minutes",
        type=float_in(0, above=True),
        required=True,
        help="training time per candidate",
    )
    p.add_argument(
        "--keep-every",
        type=int_in(1),
        help="keep a checkpoint every N steps for the MCTS curve (checkpoint.keep_every)",
    )
    p.add_argument(
        "--no-progress", action="store_true", help="plain log lines instead of the live table"
    )
    p.add_argument(
        "--no-score",
        action="store_true",
        help="do not score kept checkpoints with MCTS: draw only the runs' own evaluations "
        "(e.g. finished runs linked into RUN_DIR under their labels)",
    )
    p.add_argument(
        "--ladder-games",
        type=int_in(0, 1_000_000),
        default=60,
        help="games on the candidates' shared rating ladder (RUN_DIR/ladder, random at 0 Elo): "
        "Elo against time in ladder.png, for every game; a rerun adds as many (0: none)",
    )
    p.add_argument(
        "--ladder-anchor",
        dest="ladder_anchors",
        action="append",
        help="a fixed opponent on that ladder, as azserve ladder's --anchor (repeatable; "
        "default: random)",
    )
    p.add_argument("--ladder-jobs", type=int_in(1, 256), default=1,
                   help="ladder games played at once, one process each")  # fmt: skip
    p.set_defaults(run=_compare)

    p = sub.add_parser("analyze", help="JSON-lines analysis engine (stdin -> stdout)")
    common(p, config_required=False)
    checkpoint_arg(p)
    sims_arg(p, "per position (0 = raw policy; default eval.sims)")
    p.add_argument("--game", choices=games, help="the game of plain weights (checkpoints know it)")
    p.add_argument("--input", default="-", help="input file ('-': stdin)")
    p.set_defaults(run=_analyze)

    p = sub.add_parser("play", help="play the agent in the terminal")
    common(p, config_required=False)
    checkpoint_arg(p)
    sims_arg(p, "per agent move (default eval.sims)")
    p.add_argument("--game", choices=games, help="the game of plain weights (checkpoints know it)")
    p.add_argument("--first", choices=["human", "agent"], default="human", help="who moves first")
    p.set_defaults(run=_play)

    p = sub.add_parser(
        "eval",
        help="score a checkpoint: mistake rates, optimality or matches (JSON out)",
        description="Score a checkpoint as training does at its end: Connect Four, the "
        "mistake rate per benchmark set (a move that changes the game-theoretic outcome); "
        "tic-tac-toe, the share of optimal moves over every reachable position; other games, "
        "a match against uniform random play. Raw policy always, MCTS with --sims > 0.",
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
    p.add_argument("--game", choices=games, help="the game of plain weights (checkpoints know it)")
    p.add_argument("--json", help="write the result here too")
    p.set_defaults(run=_eval)

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
    p.set_defaults(run=_gtp)

    p = sub.add_parser(
        "uci",
        help="a chess checkpoint as a UCI engine on stdin/stdout (cutechess-cli, chess GUIs)",
        description="Speak the Universal Chess Interface on stdin/stdout: uci, isready, "
        "ucinewgame, position startpos|fen ... moves ..., go nodes|movetime|wtime/btime/"
        "winc/binc|infinite, stop, quit; info lines with nodes, score and pv; bestmove.",
    )
    common(p, config_required=False)
    checkpoint_arg(p, "a chess checkpoint")
    sims_arg(p, "per go without limits (default eval.sims)")
    p.set_defaults(run=_uci)

    p = sub.add_parser(
        "match",
        help="a checkpoint against a GTP engine or OpenSpiel's MCTS: win rate with a 95%% CI",
        description="Play GAMES games against another engine, colours alternating, refereed "
        "by our rules; SGF files (Go), PGN files (chess) and match.json go to --out. The "
        "opponent: a GTP command line (looked for on PATH, then /usr/games), openspiel-mcts:SIMS, "
        "or for chess uci:CMD[;OPTION=VALUE...] or greedy.",
    )
    common(p, config_required=False)
    checkpoint_arg(p)
    p.add_argument(
        "--opponent",
        required=True,
        help='a GTP engine\'s command line ("gnugo --mode gtp --level 1"), openspiel-mcts:SIMS, '
        'random, checkpoint:PATH; chess: "uci:stockfish;Skill Level=0;movetime=50" or greedy',
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
    p.set_defaults(run=_match)

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
        "(default: random)",
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
    p.set_defaults(run=_ladder)

    from azserve.app.bench.cli import register as register_bench

    register_bench(sub, common)

    p = sub.add_parser("keys", help="write CURVE key pairs (one per role, on its own host)")
    p.add_argument("--dir", required=True, help="directory of the key files")
    p.add_argument(
        "--name",
        dest="pairs",
        action="append",
        default=[],
        metavar="NAME",
        help="write just this role's pair, e.g. server, learner, actors-cpu0 (repeatable)",
    )
    p.add_argument(
        "names",
        nargs="*",
        help="without --name: the whole set in DIR (server, learner, one pair per NAME, "
        "default actors; their public keys in DIR/authorized), for one trusted machine",
    )
    p.add_argument("--force", action="store_true", help="replace existing key files")
    p.set_defaults(run=_keys)

    p = sub.add_parser(
        "launch", help="servers, actors and learner across hosts (Ray, Slurm or ssh)"
    )
    common(p)
    p.add_argument("--cluster", required=True, help="cluster file (TOML, docs/cluster.md)")
    p.add_argument(
        "--run-dir", required=True, help="output directory, on this machine (as for train)"
    )
    p.add_argument("--resume", action="store_true", help="continue the run in RUN_DIR")
    budget_args(p)
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="print the resolved plan and start nothing (works anywhere: a Slurm file outside "
        "an allocation shows placeholder nodes)",
    )
    p.add_argument(
        "--no-progress", action="store_true", help="plain status lines instead of a live table"
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
    import signal

    import uvloop

    from azserve.app.schema import learner_settings, load_config, save_config
    from azserve.errors import ConfigError
    from azserve.lifecycle import stop_on_signals
    from learner.learn import Learner

    cfg = load_config(args.config, args.overrides)
    settings = learner_settings(cfg)
    if args.rank is not None:  # a rank > 0 of a data-parallel learner
        from learner.learn import run_rank

        if not args.rendezvous:
            raise ConfigError("--rank needs --rendezvous (rank 0 passes both)")
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # rank 0 stops the group
        return run_rank(settings, args.rank, args.rendezvous)
    saved = save_config(cfg, Path(args.run_dir) / "learner-config.toml")
    world = cfg.learner.processes
    ranks: list[Any] = []

    async def main() -> None:
        stop = stop_on_signals()
        group = None
        if world > 1:
            from azserve.app.ranks import loopback_rendezvous, start_ranks
            from azserve.model.device import resolve_device
            from learner.distributed import RankGroup

            rendezvous = cfg.learner.rendezvous or loopback_rendezvous()
            if cfg.learner.start_ranks:
                ranks.extend(start_ranks(saved, args.run_dir, world, rendezvous, args.log_level))
            device = resolve_device(cfg.trainer.device, "trainer.device")
            group = RankGroup(0, world, rendezvous, device, cfg.learner.rank_timeout_s)
        learner = Learner(settings, args.run_dir, resume=args.resume, group=group)
        await learner.run(stop)
        print(f"checkpoint: {learner.checkpoint_now()}", flush=True)

    try:
        uvloop.run(main())
    except OSError as exc:  # the stop checkpoint could not be written (disk full)
        print(f"azserve learn: final checkpoint not written: {exc}", file=sys.stderr)
        return 1
    finally:
        if ranks:
            from azserve.app.ranks import stop_ranks

            stop_ranks(ranks)
    return 0


def _train(args: argparse.Namespace) -> int:
    from azserve.app.schema import load_config
    from azserve.app.train import run_training

    cfg = load_config(args.config, _budget_overrides(args))
    return run_training(cfg, Path(args.run_dir), resume=args.resume, progress=not args.no_progress)


def _budget_overrides(args: argparse.Namespace) -> list[str]:
    """``--set`` overrides plus ``--minutes/--steps/--games`` as ``train.*`` keys."""
    overrides = list(args.overrides)
    for key in ("minutes", "steps", "games"):
        if getattr(args, key) is not None:
            overrides.append(f"train.{key}={getattr(args, key)}")
    return overrides


def _compare(args: argparse.Namespace) -> int:
    from azserve.app.compare import run_compare

    return run_compare(args)


def _analyze(args: argparse.Namespace) -> int:
    from azserve.app.analyze import run_analyze

    return run_analyze(args)


def _eval(args: argparse.Namespace) -> int:
    from azserve.app.evaluate import run_eval

    return run_eval(args)


def _gtp(args: argparse.Namespace) -> int:
    from azserve.app.gtp import run_gtp

    return run_gtp(args)


def _uci(args: argparse.Namespace) -> int:
    from azserve.app.uci import run_uci

    return run_uci(args)


def _ladder(args: argparse.Namespace) -> int:
    from azserve.app.ladder import run_ladder_command

    return run_ladder_command(args)


def _match(args: argparse.Namespace) -> int:
    from azserve.app.match import run_match

    return run_match(args)


def _play(args: argparse.Namespace) -> int:
    from azserve.app.play import run_play

    return run_play(args)


def _launch(args: argparse.Namespace) -> int:
    from azserve.app.cluster.run import ClusterRun, dry_run
    from azserve.app.cluster.spec import load_cluster
    from azserve.app.schema import load_config

    spec = load_cluster(args.cluster)
    cfg = load_config(args.config, _budget_overrides(args))
    if args.dry_run:
        print(dry_run(cfg, spec, Path(args.run_dir)))
        return 0
    run = ClusterRun(cfg, spec, Path(args.run_dir), args.resume, progress=not args.no_progress)
    return run.run()


def _keys(args: argparse.Namespace) -> int:
    from azserve.errors import ConfigError
    from azserve.keys import create_keys, create_pair

    d = Path(args.dir)
    if args.pairs and args.names:
        raise ConfigError("keys: give --name NAME (one role's pair) or NAMES (a set), not both")
    if args.pairs:
        for name in args.pairs:
            public = create_pair(d, name, args.force)
            print(f"{d / (name + '.key_secret')}  secret: stays on this host")
            print(f"{public}  public: copy to the hosts that talk to {name}")
        return 0
    for path in create_keys(d, args.names or ["actors"], args.force):
        print(path)
    print(
        f"server: auth.server_secret_key={d / 'server.key_secret'} "
        f"auth.client_keys_dir={d / 'authorized'} auth.learner_public_key={d / 'learner.key'}"
    )
    print(
        f"learner: auth.learner_secret_key={d / 'learner.key_secret'} "
        f"auth.client_keys_dir={d / 'authorized'} auth.server_public_key={d / 'server.key'}"
    )
    print(
        f"actors: auth.client_secret_key={d / '<name>.key_secret'} "
        f"auth.server_public_key={d / 'server.key'} auth.learner_public_key={d / 'learner.key'}"
    )
    return 0
