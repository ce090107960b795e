"""Flags that several commands share: the config and its overrides, a checkpoint, simulations
and a run's budgets."""

from __future__ import annotations

import argparse

from azserve.config.argtypes import LOG_LEVELS, float_in, int_in, log_level


def common(p: argparse.ArgumentParser, config_required: bool = True) -> None:
    """``--config`` (required unless told), ``--set`` (repeatable) and ``--log-level``."""
    p.add_argument(
        "--config",
        required=config_required,
        help="TOML config: a path, or a shipped config's name (tictactoe, connect4, go9, ...)",
    )
    overrides_arg(p)
    p.add_argument(
        "--log-level", type=log_level, default="INFO", help=f"one of {', '.join(LOG_LEVELS)}"
    )


def overrides_arg(p: argparse.ArgumentParser, where: str = "") -> None:
    """``--set SECTION.KEY=VALUE``, repeatable, into ``args.overrides``; ``where`` says what
    it applies to when that is not the one config (``in every trial``)."""
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="SECTION.KEY=VALUE",
        help=f"override one config value{' ' + where if where else ''} (repeatable)",
    )


def checkpoint_arg(p: argparse.ArgumentParser, what: str = "weights or checkpoint") -> None:
    """``--checkpoint``, required: a file or a run directory."""
    p.add_argument(
        "--checkpoint",
        required=True,
        help=f"{what} (.safetensors), or a run directory (its newest checkpoint)",
    )


def sims_arg(p: argparse.ArgumentParser, per: str) -> None:
    """``--sims``: MCTS simulations ``per`` what the command searches."""
    p.add_argument("--sims", type=int_in(0, 1 << 20), help=f"MCTS simulations {per}")


def budget_args(p: argparse.ArgumentParser) -> None:
    """``--minutes``, ``--steps``, ``--games``: a run's budgets (``train`` and ``launch``)."""
    p.add_argument(
        "--minutes", type=float_in(0), help="time budget (overrides train.minutes; 0 = none)"
    )
    p.add_argument(
        "--steps", type=int_in(0), help="learner step budget (overrides train.steps; 0 = none)"
    )
    p.add_argument(
        "--games", type=int_in(0), help="self-play game budget (overrides train.games; 0 = none)"
    )


def budget_overrides(args: argparse.Namespace) -> list[str]:
    """``--set`` overrides plus ``--minutes/--steps/--games`` as ``train.*`` keys."""
    overrides = list(args.overrides)
    for key in ("minutes", "steps", "games"):
        if getattr(args, key) is not None:
            overrides.append(f"train.{key}={getattr(args, key)}")
    return overrides
