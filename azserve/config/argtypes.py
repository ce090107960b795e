"""argparse types and the package version: what every subcommand's parser uses, in a module
of its own so that the parsers (``cli``, ``commands``, ``bench.cli``) import it and not each
other."""

from __future__ import annotations

import argparse
from collections.abc import Callable

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


def int_in(lo: int, hi: int | None = None) -> Callable[[str], int]:
    """An argparse type: an integer in [lo, hi] (hi None: no upper bound)."""

    def parse(text: str) -> int:
        try:
            x = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if x < lo or (hi is not None and x > hi):
            raise argparse.ArgumentTypeError(f"{x} is out of range: allowed {_range(lo, hi)}")
        return x

    return parse


def float_in(lo: float, hi: float | None = None, above: bool = False) -> Callable[[str], float]:
    """An argparse type: a finite number in [lo, hi] (hi None: no upper bound; ``above``: lo
    itself excluded, as for a duration that must be positive)."""

    def parse(text: str) -> float:
        try:
            x = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        low_ok = x > lo if above else x >= lo
        if not (low_ok and (hi is None or x <= hi)) or x == float("inf"):
            allowed = _range(lo, hi, above)
            raise argparse.ArgumentTypeError(f"{text} is out of range: allowed {allowed}")
        return x

    return parse


def _range(lo: float, hi: float | None, above: bool = False) -> str:
    def num(x: float) -> str:
        return f"{x:,}" if isinstance(x, int) else f"{x:g}"

    if hi is not None:
        return f"> {num(lo)} and <= {num(hi)}" if above else f"{num(lo)} to {num(hi)}"
    return f"> {num(lo)}" if above else f">= {num(lo)}"


def log_level(text: str) -> str:
    """An argparse type: a logging level's name, any case."""
    level = text.upper()
    if level not in LOG_LEVELS:
        raise argparse.ArgumentTypeError(f"{text!r}: choose from {', '.join(LOG_LEVELS)}")
    return level


def package_version() -> str:
    """The installed distribution's version (the checkout's pyproject when run from one)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("azserve")
    except PackageNotFoundError:
        return "unknown"


__all__ = ["LOG_LEVELS", "float_in", "int_in", "log_level", "package_version"]
