"""The registry of searches: ``make_search`` picks the implementation ``mcts.algorithm`` and
``mcts.core`` name. Each algorithm has a pure-Python reference and a compiled form (the tree in
C, ``actors.compiled_mcts``); a new algorithm is one line in ``SEARCHES``.

This module imports the implementations, which import only the interface (``actors.search``):
no import circle (tests/test_layers.py checks the package for any).
"""

from __future__ import annotations

import numpy as np

from actors import compiled_mcts
from actors.games.base import Game
from actors.gumbel import GumbelSearch
from actors.mcts import MCTS
from actors.search import MCTSConfig, Search

SEARCHES: dict[str, tuple[type, type]] = {
    "puct": (MCTS, compiled_mcts.CompiledMCTS),
    "gumbel": (GumbelSearch, compiled_mcts.CompiledGumbel),
}
"""``mcts.algorithm`` -> (the Python reference, the compiled form)."""


def make_search(game: Game, config: MCTSConfig, rng: np.random.Generator) -> Search:
    """The search ``config.algorithm`` names, compiled where ``config.core`` allows it
    (``compiled``: an error when the compiled core cannot play ``game``)."""
    try:
        reference, compiled = SEARCHES[config.algorithm]
    except KeyError:
        raise ValueError(
            f"mcts.algorithm: unknown search {config.algorithm!r}; known: {', '.join(SEARCHES)}"
        ) from None
    cls = compiled if compiled_mcts.use_compiled(game, config) else reference
    search: Search = cls(game, config, rng)
    return search


__all__ = ["SEARCHES", "make_search"]
