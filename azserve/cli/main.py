"""The azserve command: one subcommand per use; those that read a run config take --config and
--set. Every bad invocation ends in one line on stderr and a non-zero exit."""

from __future__ import annotations

import argparse
import difflib
import importlib
import logging
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

import zmq

from azserve.config.argtypes import package_version
from azserve.errors import AzserveError, ConfigError

log = logging.getLogger("azserve")

DESCRIPTION = """\
AlphaZero-style self-play at high throughput: coroutine actors, a dynamic-batching inference
server and a learner that hot-swaps weights. The subcommands that read a run config take
--config (a TOML file, or the name of a shipped config: tictactoe, connect4, go9, ...) and any
number of --set SECTION.KEY=VALUE; a checkpoint carries its config, so --checkpoint alone is
enough for serve, analyze, play, eval, gtp, uci, usi and match; status and keys take no config.
Extra overrides may also come from the environment: AZSERVE_SET="train.steps=20 eval.sims=8"
(space-separated, applied after the command line's)."""

EXAMPLES = {
    "serve": "azserve serve --checkpoint runs/tictactoe",
    "status": "azserve status tcp://10.0.0.2:5555 --server-key keys/server.key "
    "--client-key keys/me.key_secret",
    "keys": "azserve keys --dir keys alice bob",
    "actors": "azserve actors --config connect4 --set client.server=tcp://10.0.0.2:5555",
    "learn": "azserve learn --config connect4 --run-dir runs/c4 --resume",
    "train": "azserve train --config tictactoe --run-dir runs/ttt --minutes 8",
    "compare": "azserve compare --config connect4 --config connect4-puct --minutes 45 "
    "--run-dir runs/ab",
    "tune": "azserve tune --config connect4 --search mcts.num_simulations=16,32,64 "
    "--search actors.games=64,128 --hours 2 --run-dir runs/tune-c4",
    "analyze": 'echo \'{"id": 1, "moves": [0, 4]}\' | azserve analyze --checkpoint runs/ttt',
    "play": "azserve play --checkpoint runs/ttt --first agent",
    "eval": "azserve eval --checkpoint runs/c4 --sims 16 --json runs/c4/scores.json",
    "gtp": "azserve gtp --checkpoint runs/go9 --sims 64",
    "uci": "azserve uci --checkpoint runs/chess --sims 64",
    "usi": "azserve usi --checkpoint runs/shogi --sims 64",
    "match": 'azserve match --config go9 --checkpoint runs/go9 --opponent "gnugo --mode gtp '
    '--level 1" --games 40',
    "ladder": 'azserve ladder runs/go9 --anchor random --anchor "gtp:gnugo --mode gtp --level 1" '
    "--games 100",
    "web": "azserve web runs/c4 runs/c4-puct --port 8080",
    "bench": "azserve bench serve --config connect4 --duration 10 --peers ''",
    "bench serve": "azserve bench serve --config connect4 --duration 10 --peers ''",
    "bench selfplay": "azserve bench selfplay --config connect4 --duration 30 --sweep sims=8,16",
    "bench swap": "azserve bench swap --config connect4 --duration 10 --swaps 10",
    "bench soak": "azserve bench soak --config tictactoe --minutes 5 --games 500",
    "bench chaos": "azserve bench chaos --config tictactoe --minutes 60 --seed 7 --json chaos.json",
    "launch": "azserve launch --config connect4 --cluster configs/cluster/ssh.toml "
    "--run-dir runs/c4 --dry-run",
}
"""One example per subcommand (``bench serve``: a subcommand of ``bench``), shown at the end of
its --help; tests/test_first_hour_cli.py parses every one."""


COMMANDS = (
    "serve",
    "status",
    "actors",
    "learn",
    "train",
    "compare",
    "tune",
    "analyze",
    "play",
    "eval",
    "gtp",
    "uci",
    "usi",
    "match",
    "ladder",
    "web",
    "bench",
    "keys",
    "launch",
)
"""The subcommands in --help's order: each is ``azserve.cli.<name>``, with ``register(sub)`` (its
flags) and ``run(args)`` (its main)."""


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Descriptions and examples as written; each option's default shown when it has one."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if (
            "%(default)" not in text
            and action.option_strings
            and default not in (None, False, [], argparse.SUPPRESS)
        ):
            text += " (default: %(default)s)"
        return text


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line (not the usage block) and whose help shows
    defaults; subcommand parsers are of this class too."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {did_you_mean(message)} (see {self.prog} --help)\n")


_INVALID_CHOICE = re.compile(r"invalid choice: '([^']*)' \(choose from (.*)\)$")


def did_you_mean(message: str) -> str:
    """argparse's "invalid choice" message with the closest choice suggested, if one is close:
    ``invalid choice: 'trian'; did you mean 'train'? (choose from ...)``."""
    m = _INVALID_CHOICE.search(message)
    if m is None:
        return message
    choices = [c.strip().strip("'") for c in m.group(2).split(",")]
    close = difflib.get_close_matches(m.group(1), choices, n=1)
    if not close:
        return message
    return message.replace(f"'{m.group(1)}' (", f"'{m.group(1)}'; did you mean '{close[0]}'? (", 1)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="azserve",
        description=DESCRIPTION,
        epilog="examples:\n  azserve train --config tictactoe --run-dir runs/ttt\n"
        "  azserve analyze --checkpoint runs/ttt < positions.jsonl\n"
        "  azserve COMMAND --help    (each command's flags, defaults and an example)",
    )
    parser.add_argument("--version", action="version", version=f"azserve {package_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    for name in COMMANDS:
        importlib.import_module(f"azserve.cli.{name}").register(sub)
    for name, example in EXAMPLES.items():
        subparser = subcommand(parser, name)
        if subparser is not None:
            subparser.epilog = f"example:\n  {example}"
    return parser


def subcommand(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser | None:
    """The parser of subcommand ``name`` (``"bench serve"``: a subcommand's subcommand), or
    None when there is none of that name."""
    for word in name.split():
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs or word not in subs[0].choices:
            return None
        parser = subs[0].choices[word]
    return parser


def _resolve_paths(args: argparse.Namespace) -> None:
    """Shipped config names and checkpoint directories become the files they stand for."""
    from azserve.config.presets import newest_checkpoint_in, resolve_config

    config = getattr(args, "config", None)
    if isinstance(config, list):  # compare: one per candidate
        args.config = [resolve_config(c) for c in config]
    elif config:
        args.config = resolve_config(config)
    if getattr(args, "checkpoint", None):
        args.checkpoint = newest_checkpoint_in(args.checkpoint)
    for flag in ("run_dir", "keep_dir"):
        if getattr(args, flag, None):
            check_directory(getattr(args, flag), "--" + flag.replace("_", "-"))
    # Popped: the processes a command starts get their config resolved, not these again.
    args.overrides = [*getattr(args, "overrides", []), *os.environ.pop("AZSERVE_SET", "").split()]


def check_directory(arg: str, flag: str = "--run-dir") -> None:
    """A directory argument that exists as a file (or lies under one) stops here, in one clear
    line, before anything starts; one that does not exist yet is made later."""
    p = Path(arg)
    for q in (p, *p.parents):
        if q.exists():
            if not q.is_dir():
                what = "is a file" if q == p else f"is under {q}, a file"
                raise AzserveError(f"{flag} {arg}: {what}, not a directory")
            return


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=getattr(args, "log_level", "INFO"),
        format="%(asctime)s %(levelname).1s %(name)s: %(message)s",
        datefmt="%H:%M:%S",
    )
    run: Callable[[argparse.Namespace], int] = args.run
    where = f"azserve {args.command}"
    try:
        _resolve_paths(args)
        return run(args)
    except ConfigError as exc:
        print(f"{where}: config error: {exc}", file=sys.stderr)
        return 2
    except AzserveError as exc:
        print(f"{where}: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        # The reader went away (``azserve analyze ... | head -1``): stop quietly. Python would
        # complain again when flushing stdout at exit, so stdout becomes /dev/null first.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except zmq.ZMQError as exc:  # e.g. an endpoint in use or malformed
        print(f"{where}: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:  # a path that cannot be read or written: one line naming it
        print(f"{where}: {exc.strerror or exc}: {exc.filename or ''}".rstrip(": "), file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
