"""The ``azserve`` command: one subcommand per use, each taking ``--config`` and ``--set``."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable

from azserve.errors import AzserveError, ConfigError

log = logging.getLogger("azserve")


def _common(p: argparse.ArgumentParser, config_required: bool = True) -> None:
    p.add_argument("--config", required=config_required, help="TOML config (see configs/)")
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="SECTION.KEY=VALUE",
        help="override one config value (repeatable)",
    )
    p.add_argument("--log-level", default="INFO", help="logging level (default INFO)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="azserve", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("serve", help="standalone model-serving endpoint")
    _common(p)
    p.add_argument("--checkpoint", help="safetensors weights or learner checkpoint to serve")
    p.add_argument("--version", type=int, default=0, help="version number of those weights")
    p.add_argument(
        "--checkpoint-dir",
        help="serve the newest readable learner checkpoint here, as its version (none: version 0)",
    )
    p.set_defaults(run=_run_serve)

    from azserve.app import commands

    commands.register(sub, _common)
    return parser


def _run_serve(args: argparse.Namespace) -> int:
    import uvloop

    from azserve.app.schema import load_config
    from azserve.app.serve import serve

    cfg = load_config(args.config, args.overrides)
    uvloop.run(serve(cfg, args.checkpoint, args.version, args.checkpoint_dir))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=getattr(args, "log_level", "INFO").upper(),
        format="%(asctime)s %(levelname).1s %(name)s: %(message)s",
        datefmt="%H:%M:%S",
    )
    run: Callable[[argparse.Namespace], int] = args.run
    try:
        return run(args)
    except ConfigError as exc:
        print(f"azserve {args.command}: config error: {exc}", file=sys.stderr)
        return 2
    except AzserveError as exc:
        print(f"azserve {args.command}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
