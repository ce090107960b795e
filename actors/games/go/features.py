"""Go with input features (KataGo's, arXiv 1902.10565 section 4.1): the planes of ``Go`` plus
the liberties of each chain, the ko point and the last moves. The same rules as ``Go``; the
pure-Python reference of the compiled rules' ``features`` option (actors/core/games/go.c).

Planes (11): the side to move's stones, the opponent's, ones when black is to move, ones when
the last move was a pass (``Go``'s four); the stones whose chain has 1, 2, and 3 or more
liberties; the ko point (the one stone just taken, when the stone that took it stands alone
with that point as its only liberty: retaking at once would repeat the board, which positional
superko forbids); the points of the last ``LAST`` moves, newest first (a pass marks nothing).

The compiled core's blob is ``Go``'s with, after the ply, the ko point u16 and the last
``LAST`` moves u16 each, newest first (``NONE`` where there is none; the pass is ``N * N``).
"""

from __future__ import annotations

import struct
from typing import NamedTuple

import numpy as np

from actors.games.go.rules import Go

LAST = 3
"""Moves shown by the last-move planes."""
NONE = 0xFFFF
"""No ko point, no move (in the compiled core's blob)."""
PLANES = 4 + 3 + 1 + LAST


class GoFeatureState(NamedTuple):
    """A Go position (``GoState``'s fields) and what the features need of its past."""

    board: bytes
    color: int
    passes: int
    ply: int
    history: frozenset[bytes]
    ko: int
    """The point ko forbids the side to move, or -1."""
    last: tuple[int, ...]
    """The last moves (at most ``LAST``), newest first; the pass is ``N * N``."""


class GoFeatures(Go):
    """Go on an N x N board with the feature planes (the built-in ``go9-features``)."""

    def __init__(self, size: int = 9, komi: float = 7.5) -> None:
        super().__init__(size, komi)
        self.name = f"go{size}-features"
        self.obs_shape = (PLANES, size, size)
        self.core_params = (size, komi, 1.0)
        self._start = GoFeatureState(bytes(self.cells), 0, 0, 0, frozenset(), -1, ())  # type: ignore[assignment]

    @property
    def rules(self) -> str:
        return f"go{self.size}"

    def apply(self, s: GoFeatureState, a: int) -> GoFeatureState:  # type: ignore[override]
        after = super().apply(s, a)  # type: ignore[arg-type]
        ko = -1
        if a != self.pass_action:
            taken = [p for p in range(self.cells) if s.board[p] and not after.board[p]]
            me = after.board[a]
            near = self._neighbours[a]
            alone = all(after.board[q] != me for q in near)
            libs = [q for q in near if not after.board[q]]
            if len(taken) == 1 and alone and libs == taken:
                ko = taken[0]
        last = (a, *s.last[: LAST - 1])
        return GoFeatureState(*after, ko, last)  # type: ignore[arg-type]

    def core_state(self, s: GoFeatureState) -> tuple[bytes, bytes]:  # type: ignore[override]
        blob, history = super().core_state(s)  # type: ignore[arg-type]
        moves = [*s.last, *[NONE] * (LAST - len(s.last))]
        return blob + struct.pack(f"<{1 + LAST}H", NONE if s.ko < 0 else s.ko, *moves), history

    def encode(self, s: GoFeatureState) -> np.ndarray:  # type: ignore[override]
        n, cells = self.size, self.cells
        out = np.zeros((PLANES, cells), dtype=np.uint8)
        out[:4] = super().encode(s).reshape(4, cells)  # type: ignore[arg-type]
        group, _, libs = self._chains(s.board)
        # Plane position o shows board cell _to_planes[o].
        for o, cell in enumerate(self._to_planes):
            if s.board[cell]:
                out[4 + min(libs[group[cell]], 3) - 1, o] = 1
        at = np.empty(cells, dtype=np.intp)
        at[self._to_planes] = np.arange(cells)  # board cell -> plane position
        if s.ko >= 0:
            out[7, at[s.ko]] = 1
        for k, m in enumerate(s.last):
            if m < cells:
                out[8 + k, at[m]] = 1
        return out.reshape(PLANES, n, n)


class GoFeatures13(GoFeatures):
    """Go 13x13 with the feature planes (the built-in ``go13-features``)."""

    def __init__(self, komi: float = 7.5) -> None:
        super().__init__(13, komi)


class GoFeatures19(GoFeatures):
    """Go 19x19 with the feature planes (the built-in ``go19-features``)."""

    def __init__(self, komi: float = 7.5) -> None:
        super().__init__(19, komi)


__all__ = ["LAST", "PLANES", "GoFeatureState", "GoFeatures", "GoFeatures13", "GoFeatures19"]
