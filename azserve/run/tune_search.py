"""``azserve tune --search KEY=V1,V2,...``: the search's values parsed and checked with the
config's own validation, and the trials' points drawn from them, all before anything starts.
A bad flag is refused in one line naming the key, the value and the reason."""

from __future__ import annotations

import itertools
import random
from typing import Any

from azserve.config.load import parse_override
from azserve.config.schema import load_config
from azserve.errors import ConfigError

REFUSED = {
    "game": "every trial must play the same game: the ladder rates them against each other",
    "train": "the tune sets each trial's budget (train.minutes = its share of --hours)",
    "ladder": "the tune's own ladder rates the trials (--ladder-games, --ladder-anchor)",
    "eval": "trials do not evaluate themselves: the tune's ladder judges them",
}
"""Sections (or keys) that ``--search`` may not name, and why."""


def split_values(text: str) -> list[str]:
    """``"8,16"`` -> ``["8", "16"]``; commas inside brackets or quotes do not split
    (``'["a","b"],[]'`` is two TOML lists)."""
    items, depth, quote, start = [], 0, "", 0
    for i, ch in enumerate(text):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "\"'":
            quote = ch
        elif ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
        elif ch == "," and depth == 0:
            items.append(text[start:i].strip())
            start = i + 1
    items.append(text[start:].strip())
    return items


def parse_search(texts: list[str]) -> dict[str, list[str]]:
    """``--search`` flags -> key -> its values as written, in the order given; ConfigError
    naming the flag, the key, the value and what is wrong (no values, an empty one, one twice,
    a key given twice or one the tune sets itself)."""
    space: dict[str, list[str]] = {}
    for text in texts:
        key, sep, rest = text.partition("=")
        key = key.strip()
        if not sep or not key or not all(key.split(".")):
            raise ConfigError(
                f"--search {text!r}: expected KEY=V1,V2,... (mcts.num_simulations=8,16)"
            )
        if key in space:
            raise ConfigError(f"--search {key}: given twice (give all its values in one flag)")
        refused = REFUSED.get(key) or REFUSED.get(key.split(".")[0])
        if refused:
            raise ConfigError(f"--search {text}: {key} cannot be searched: {refused}")
        if not rest.strip():
            raise ConfigError(f"--search {key}=: no values (give one or more, comma-separated)")
        values = split_values(rest)
        for v in values:
            if not v:
                raise ConfigError(f"--search {key}={rest}: an empty value in the list")
        seen: set[Any] = set()
        for v in values:
            parsed = repr(parse_override(f"{key}={v}")[1])
            if parsed in seen:
                raise ConfigError(f"--search {key}={v}: the value is given twice")
            seen.add(parsed)
        space[key] = values
    if not space:
        raise ConfigError("give at least one --search KEY=V1,V2,...")
    return space


def check_search(config: str, overrides: list[str], space: dict[str, list[str]]) -> None:
    """Every value of the search loads with the base config (the config's own checks: the
    key exists and names a value, the value's type and range); ConfigError naming the key and
    the value otherwise."""
    for key, values in space.items():
        for v in values:
            try:
                load_config(config, [*overrides, f"{key}={v}"])
            except ConfigError as e:
                raise ConfigError(f"--search {key}={v}: {e}") from None


def grid_points(space: dict[str, list[str]], trials: int | None, seed: int) -> list[dict[str, str]]:
    """Every combination of the search's values (the first key varying slowest), or
    ``trials`` of them drawn with ``seed``, kept in that order."""
    keys = list(space)
    grid = [dict(zip(keys, combo)) for combo in itertools.product(*space.values())]
    if trials is None or trials == len(grid):
        return grid
    if trials > len(grid):
        raise ConfigError(
            f"--trials {trials}: the search has {len(grid)} point(s) (every combination once); "
            f"give --trials {len(grid)} or fewer, or more values"
        )
    picked = sorted(random.Random(seed).sample(range(len(grid)), trials))
    return [grid[i] for i in picked]


def check_points(config: str, overrides: list[str], points: list[dict[str, str]]) -> None:
    """Each trial's whole config loads (the checks across keys: ``autopilot.max_games`` within
    ``actors.games``, ...); ConfigError naming the trial and its values otherwise."""
    for i, point in enumerate(points):
        sets = [f"{k}={v}" for k, v in point.items()]
        try:
            load_config(config, [*overrides, *sets])
        except ConfigError as e:
            raise ConfigError(f"--search: trial {trial_label(i)} ({' '.join(sets)}): {e}") from None


def trial_label(index: int) -> str:
    """A trial's name: ``t0``, ``t1``, ... (its run directories: ``t0``, then ``t0.2``...)."""
    return f"t{index}"


__all__ = [
    "REFUSED",
    "check_points",
    "check_search",
    "grid_points",
    "parse_search",
    "split_values",
    "trial_label",
]
