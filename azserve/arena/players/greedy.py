"""The one-ply material-greedy mover, a bottom anchor for the games that count material (chess
and shogi): between uniform random play and the weakest engine."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from actors.games import Game, State
from azserve.arena.players.base import Player
from azserve.errors import ConfigError

VALUES = {1: 1, 2: 3, 3: 3, 4: 5, 5: 9, 0: 0}  # piece code % 6 (1 P .. 5 Q, 0 K) -> pawns


def material(blob: bytes, side: int) -> int:
    """Chess: ``side``'s material minus the other's, in pawns (P 1, N 3, B 3, R 5, Q 9)."""
    total = 0
    for p in blob[:64]:
        if p:
            total += VALUES[p % 6] * (1 if (p - 1) // 6 == side else -1)
    return total


def counter(game: Game) -> Callable[[State, int], float]:
    """How ``game`` counts a side's material lead at a state: the game's own ``material(s,
    side)`` (shogi), chess's ``material`` of the board; ConfigError for a game without."""
    own: Any = getattr(game, "material", None)
    if callable(own):
        return own  # type: ignore[no-any-return]
    if game.rules == "chess":
        return lambda s, side: material(s.blob, side)
    raise ConfigError(f"--opponent: greedy plays chess and shogi (material), not {game.name}")


class GreedyPlayer(Player):
    """One ply of material: a move that wins at once (a mate, shogi's declaration) when there is
    one, else the move that leaves the most material (ties drawn at random, seeded)."""

    def __init__(self, seed: int) -> None:
        self.name = "greedy"
        self.rng = np.random.default_rng(seed)
        self.game: Game | None = None
        self._count: Callable[[State, int], float] = lambda s, side: 0.0

    def new_game(self, game: Game) -> None:
        self._count = counter(game)
        self.game = game

    def genmove(self, color: int, state: State) -> int:
        game = self.game
        assert game is not None
        best: list[int] = []
        top = -float("inf")
        for a in game.legal_actions(state):
            after = game.apply(state, a)
            if game.is_terminal(after) and game.terminal_value(after) == -1.0:
                return a  # the side to move there has lost
            score = self._count(after, color)
            if score > top:
                best, top = [a], score
            elif score == top:
                best.append(a)
        return int(best[self.rng.integers(len(best))])


__all__ = ["GreedyPlayer", "counter", "material"]
