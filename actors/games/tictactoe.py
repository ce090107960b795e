"""Tic-tac-toe on 9-bit bitboards; cell ``row * 3 + col`` is bit ``row * 3 + col``."""

from __future__ import annotations

import struct
from typing import NamedTuple

import numpy as np

from actors.games.base import Game
from actors.games.benchmark import Benchmark
from actors.games.minimax import OptimalMoves

_LINES = [
    0b000000111,
    0b000111000,
    0b111000000,
    0b001001001,
    0b010010010,
    0b100100100,
    0b100010001,
    0b001010100,
]
# Only lines through the cell just played can have been completed by it.
_LINES_THROUGH = [[line for line in _LINES if line >> cell & 1] for cell in range(9)]
_BIT = [1 << c for c in range(9)]
_LEGAL = [[c for c in range(9) if not m >> c & 1] for m in range(512)]
# _PLANES[b] is bitboard b as a uint8 [3, 3] plane.
_PLANES = np.array(
    [[[b >> (r * 3 + c) & 1 for c in range(3)] for r in range(3)] for b in range(512)],
    dtype=np.uint8,
)

# The compiled core's blob (actors/core/games/tictactoe.c): stones, mask, ply, last_won, little-endian.
_CORE = struct.Struct("<QQii")


class TTTState(NamedTuple):
    """A tic-tac-toe position."""

    stones: int
    """Bitboard of the side to move's stones."""
    mask: int
    """Bitboard of all stones."""
    ply: int
    """Stones on the board (0..9); even means X (the first player) is to move."""
    last_won: bool
    """True when the previous move made three in a row (so the side to move has lost)."""


class TicTacToe(Game):
    """Tic-tac-toe. Actions are cells 0..8, row-major from the top left."""

    name = "tictactoe"
    core_name = "tictactoe"
    openspiel = "tic_tac_toe"
    num_actions = 9
    obs_shape = (2, 3, 3)

    def initial_state(self) -> TTTState:
        return TTTState(0, 0, 0, False)

    def legal_actions(self, s: TTTState) -> list[int]:
        if s.last_won:
            return []
        return _LEGAL[s.mask]

    def apply(self, s: TTTState, a: int) -> TTTState:
        stones, mask, ply, last_won = s
        if last_won or ply == 9:
            raise ValueError(f"tictactoe: move {a} played after the game ended")
        if not 0 <= a < 9 or mask & _BIT[a]:
            raise ValueError(f"tictactoe: move {a} is illegal (cell out of range or taken)")
        bit = _BIT[a]
        mine = stones | bit
        won = any(mine & line == line for line in _LINES_THROUGH[a])
        return TTTState(stones ^ mask, mask | bit, ply + 1, won)

    def core_state(self, s: TTTState) -> tuple[bytes, bytes]:
        return _CORE.pack(*s), b""

    def is_terminal(self, s: TTTState) -> bool:
        return s.last_won or s.ply == 9

    def terminal_value(self, s: TTTState) -> float:
        if s.last_won:
            return -1.0
        if s.ply == 9:
            return 0.0
        raise ValueError("tictactoe: terminal_value of a position that is not terminal")

    def to_play(self, s: TTTState) -> int:
        return s.ply & 1

    def encode(self, s: TTTState) -> np.ndarray:
        return _PLANES[[s.stones, s.stones ^ s.mask]]

    def symmetries(
        self, obs: np.ndarray, policy: np.ndarray
    ) -> list[tuple[np.ndarray, np.ndarray]]:
        n = policy.shape[0]
        grid = policy.reshape(n, 3, 3)
        out = []
        for k in range(4):
            o = np.rot90(obs, k, axes=(2, 3))
            p = np.rot90(grid, k, axes=(1, 2))
            for flip in (False, True):
                if flip:
                    o, p = o[..., ::-1], p[..., ::-1]
                out.append((np.ascontiguousarray(o), np.ascontiguousarray(p).reshape(n, 9)))
        return out

    def benchmarks(self) -> tuple[Benchmark, ...]:
        # Small enough to solve whole: every reachable position, scored against minimax.
        return (OptimalMoves(self.name),)

    def move_help(self) -> str:
        return "cells 0-8, row-major from the top left"

    def render(self, s: TTTState) -> str:
        first = s.stones if s.ply % 2 == 0 else s.stones ^ s.mask
        rows = []
        for r in range(3):
            cells = []
            for c in range(3):
                bit = 1 << (r * 3 + c)
                cells.append("." if not s.mask & bit else "X" if first & bit else "O")
            rows.append(" ".join(cells))
        return "\n".join(rows)
