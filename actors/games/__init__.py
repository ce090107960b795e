"""Board games behind one interface (see ``base.Game``), found by name in one table.

``make_game(spec)`` takes:

- a built-in name: ``tictactoe``, ``connect4``, ``othello``, ``go9``, ``go13``, ``go19``,
  ``go9-features``, ``go13-features``, ``go19-features`` (Go with the liberty, ko and
  last-move planes), ``chess``, ``shogi``;
- a built-in name with its class's parameters, ``NAME(key=value,...)``: numbers only, e.g.
  ``chess(max_plies=256,history=1)``;
- ``openspiel:NAME[(params)]``: any two-player, perfect-information OpenSpiel game through the
  pure-Python search (``actors.games.openspiel``; needs the ``open_spiel`` package);
- ``module.path:Class`` or ``path/to/file.py:Class``: a game of your own, one file holding a
  ``Game`` subclass (docs/games.md). A relative path is read from the working directory.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path

from actors.games.base import Game, State
from actors.games.benchmark import Benchmark
from actors.games.connect4 import ConnectFour
from actors.games.tictactoe import TicTacToe

__all__ = [
    "BUILTIN_GAMES",
    "Benchmark",
    "ConnectFour",
    "Game",
    "State",
    "TicTacToe",
    "benchmarks_by_name",
    "make_game",
]

BUILTIN_GAMES: dict[str, str] = {
    "tictactoe": "actors.games.tictactoe:TicTacToe",
    "connect4": "actors.games.connect4:ConnectFour",
    "othello": "actors.games.othello:Othello",
    "go9": "actors.games.go.rules:Go",
    "go13": "actors.games.go.rules:Go13",
    "go19": "actors.games.go.rules:Go19",
    "go9-features": "actors.games.go.features:GoFeatures",
    "go13-features": "actors.games.go.features:GoFeatures13",
    "go19-features": "actors.games.go.features:GoFeatures19",
    "chess": "actors.games.chess.rules:Chess",
    "shogi": "actors.games.shogi.rules:Shogi",
}
"""Built-in game names -> ``module:Class`` (imported when first asked for)."""

OPENSPIEL_PREFIX = "openspiel:"


def make_game(spec: str) -> Game:
    """The game ``spec`` names (see the module docstring); ValueError saying what is known
    otherwise."""
    if spec in BUILTIN_GAMES:
        return _load_class(BUILTIN_GAMES[spec], spec)()
    name, paren, rest = spec.partition("(")
    if paren and name in BUILTIN_GAMES:
        cls, params = _load_class(BUILTIN_GAMES[name], spec), _params(spec, rest)
        try:
            return cls(**params)
        except TypeError:
            raise ValueError(
                f"game {spec!r}: {name} takes {', '.join(_keywords(cls)) or 'no parameters'}"
            ) from None
    if spec.startswith(OPENSPIEL_PREFIX):
        from actors.games.openspiel import OpenSpielGame

        return OpenSpielGame(spec.removeprefix(OPENSPIEL_PREFIX))
    if ":" in spec:
        return _load_class(spec, spec)()
    raise ValueError(
        f"unknown game {spec!r}; known games: {', '.join(sorted(BUILTIN_GAMES))}, "
        f"'{OPENSPIEL_PREFIX}NAME', or 'module:Class' / 'file.py:Class' for your own"
    )


def _params(spec: str, rest: str) -> dict[str, int | float]:
    """``key=value,...)`` of a built-in game's spec as keyword arguments (numbers only)."""
    if not rest.endswith(")"):
        raise ValueError(f"game {spec!r}: expected NAME(key=value,...)")
    out: dict[str, int | float] = {}
    for item in filter(None, (p.strip() for p in rest[:-1].split(","))):
        key, eq, text = (t.strip() for t in item.partition("="))
        if not eq or not key.isidentifier():
            raise ValueError(f"game {spec!r}: parameter {item!r} is not key=value")
        try:
            out[key] = int(text)
        except ValueError:
            try:
                out[key] = float(text)
            except ValueError:
                raise ValueError(f"game {spec!r}: {key}={text!r} is not a number") from None
    return out


def _keywords(cls: type) -> list[str]:
    import inspect

    named = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    params = inspect.signature(cls).parameters.values()
    return [p.name for p in params if p.name != "self" and p.kind in named]


def _load_class(target: str, spec: str) -> type[Game]:
    """The ``Game`` subclass ``module:Class`` or ``file.py:Class`` names."""
    where, _, cls_name = target.rpartition(":")
    if not where or not cls_name:
        raise ValueError(f"game {spec!r}: expected 'module:Class' or 'file.py:Class'")
    if where.endswith(".py"):
        path = Path(where).expanduser().resolve()
        if not path.is_file():
            raise ValueError(f"game {spec!r}: no such file {path}")
        module_name = f"azserve_game_{path.stem}_{abs(hash(str(path))):x}"
        module = sys.modules.get(module_name)
        if module is None:
            loader = importlib.util.spec_from_file_location(module_name, path)
            if loader is None or loader.loader is None:
                raise ValueError(f"game {spec!r}: cannot load {path}")
            module = importlib.util.module_from_spec(loader)
            sys.modules[module_name] = module  # before it runs, as importlib's recipe does
            try:
                loader.loader.exec_module(module)
            except Exception as e:
                del sys.modules[module_name]
                raise ValueError(f"game {spec!r}: {path} failed: {type(e).__name__}: {e}") from e
    else:
        try:
            module = importlib.import_module(where)
        except ImportError as e:
            raise ValueError(f"game {spec!r}: cannot import {where}: {e}") from None
    cls = getattr(module, cls_name, None)
    if not (isinstance(cls, type) and issubclass(cls, Game)):
        raise ValueError(f"game {spec!r}: {where} has no Game subclass named {cls_name}")
    return cls


def benchmarks_by_name(spec: str | None = None) -> dict[str, Benchmark]:
    """The benchmarks of the game ``spec`` names, by name (their keys in ``eval.jsonl``): how
    a run's evaluations are read back. Without a game, or when ``spec`` no longer loads (a
    game file moved away), those of every built-in game."""
    if spec is not None:
        try:
            return {b.name: b for b in make_game(spec).benchmarks()}
        except ValueError:
            pass
    return {b.name: b for name in BUILTIN_GAMES for b in make_game(name).benchmarks()}
