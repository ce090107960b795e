"""Chess's and shogi's material targets (``azserve.targets.MATERIAL``): KataGo's score target
carried over to games whose score is material, and its short-horizon cousin.

A game with material (``Game.material_balance``) records the first player's balance before
every move it plays and which of those positions it recorded (``MaterialTrack``); at its end
``material_targets`` turns them into each recorded position's targets, for its side to move:
``score`` the final balance, ``material_ahead`` the balance ``ahead`` plies after the position
(the final one where the game ends sooner). Every ply counts, the fast searches' too (with
playout cap randomization only some positions are recorded): the horizon is in plies of the
game, not in recorded positions. Reading a balance is a sum over the state's board bytes, a few
microseconds a ply beside a search of milliseconds.
"""

from __future__ import annotations

import numpy as np

from actors.games.base import Game, State


def has_material(game: Game) -> bool:
    """Whether ``game`` gives material targets (it defines ``material_balance``)."""
    return type(game).material_balance is not Game.material_balance


def material_targets(
    balances: np.ndarray, plies: np.ndarray, movers: np.ndarray, ahead: int
) -> dict[str, np.ndarray]:
    """``score`` and ``material_ahead``, float32 ``[T]`` each, from each recorded position's
    side to move's view. ``balances`` ``[P + 1]``: the first player's balance after 0..P
    plies (P the plies played, the last the final position's); ``plies`` ``[T]`` int: the ply
    of each recorded position; ``movers`` ``[T]``: its side to move (0 the first player)."""
    sign = np.where(movers == 0, 1.0, -1.0)
    last = len(balances) - 1
    later = balances[np.minimum(plies + ahead, last)]
    return {
        "score": (balances[last] * sign).astype(np.float32),
        "material_ahead": (later * sign).astype(np.float32),
    }


class MaterialTrack:
    """One game's material as it is played: ``play`` before each move, ``targets`` at the
    end. ``ahead``: the horizon of ``material_ahead`` in plies (>= 1)."""

    def __init__(self, game: Game, ahead: int) -> None:
        self.game = game
        self.ahead = ahead
        self._balances: list[float] = []
        self._plies: list[int] = []

    def play(self, s: State, recorded: bool) -> None:
        """``s`` is about to be moved from; ``recorded``: it is one of the game's positions."""
        if recorded:
            self._plies.append(len(self._balances))
        balance = self.game.material_balance(s)
        assert balance is not None, f"{self.game.name} has no material"
        self._balances.append(balance)

    def targets(self, final: State, movers: np.ndarray) -> dict[str, np.ndarray]:
        """The recorded positions' targets (``material_targets``), the game ended at
        ``final``; ``movers`` ``[T]``: each recorded position's side to move."""
        balances = np.array([*self._balances, self.game.material_balance(final)], np.float64)
        return material_targets(balances, np.array(self._plies, np.int64), movers, self.ahead)


__all__ = ["MaterialTrack", "has_material", "material_targets"]
