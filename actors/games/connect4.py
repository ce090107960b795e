"""Connect Four on bitboards: 7 columns x 6 rows, four in a row wins.

Layout (the classic one): bit ``col * 7 + row`` with row 0 at the bottom; the seventh bit of
each column stays empty as a sentinel so that shifted lines never wrap between columns.
Dropping a stone is ``mask + bottom[col]``; a win is a run of four along shift 1 (vertical),
7 (horizontal), 6 and 8 (diagonals).
"""

from __future__ import annotations

import struct
from typing import NamedTuple

import numpy as np

from actors.games.base import Game
from actors.games.benchmark import Benchmark
from actors.games.connect4_benchmark import MistakeRate

WIDTH = 7
HEIGHT = 6
_STRIDE = HEIGHT + 1
_BOTTOM = [1 << (c * _STRIDE) for c in range(WIDTH)]
_TOP = [1 << (c * _STRIDE + HEIGHT - 1) for c in range(WIDTH)]
_TOP_ALL = sum(_TOP)
# Legal moves depend only on which columns are full, i.e. on `mask & _TOP_ALL`: 128 lists.
_LEGAL = {
    sum(_TOP[c] for c in range(WIDTH) if full >> c & 1): [
        c for c in range(WIDTH) if not full >> c & 1
    ]
    for full in range(1 << WIDTH)
}
# encode: plane p, printed row r (0 = top), column c reads bit p*64 + c*7 + (5 - r) of the
# two boards' 64-bit little-endian bytes, unpacked.
_ENCODE_INDEX = np.array(
    [
        [[p * 64 + c * _STRIDE + (HEIGHT - 1 - r) for c in range(WIDTH)] for r in range(HEIGHT)]
        for p in range(2)
    ],
    dtype=np.intp,
)

# The compiled core's blob (actors/core/games/connect4.c): stones, mask, ply, last_won, little-endian.
_CORE = struct.Struct("<QQii")


class C4State(NamedTuple):
    """A Connect Four position."""

    stones: int
    """Bitboard of the side to move's stones."""
    mask: int
    """Bitboard of all stones."""
    ply: int
    """Stones on the board (0..42); even means the first player is to move."""
    last_won: bool
    """True when the previous move made four in a row (so the side to move has lost)."""


def _four(b: int) -> bool:
    """True if bitboard ``b`` holds four in a row."""
    m = b & (b >> 7)
    if m & (m >> 14):
        return True
    m = b & (b >> 1)
    if m & (m >> 2):
        return True
    m = b & (b >> 6)
    if m & (m >> 12):
        return True
    m = b & (b >> 8)
    return bool(m & (m >> 16))


class ConnectFour(Game):
    """Connect Four. Actions are columns 0..6, left to right; obs row 0 is the top row."""

    name = "connect4"
    core_name = "connect4"
    openspiel = "connect_four"
    num_actions = WIDTH
    obs_shape = (2, HEIGHT, WIDTH)

    def initial_state(self) -> C4State:
        return C4State(0, 0, 0, False)

    def legal_actions(self, s: C4State) -> list[int]:
        if s.last_won:
            return []
        return _LEGAL[s.mask & _TOP_ALL]

    def apply(self, s: C4State, a: int) -> C4State:
        stones, mask, ply, last_won = s
        if last_won or ply == WIDTH * HEIGHT:
            raise ValueError(f"connect4: move {a} played after the game ended")
        if not 0 <= a < WIDTH or mask & _TOP[a]:
            raise ValueError(f"connect4: move {a} is illegal (column out of range or full)")
        new_mask = mask | (mask + _BOTTOM[a])
        mine = stones | (new_mask ^ mask)
        return C4State(mine ^ new_mask, new_mask, ply + 1, _four(mine))

    def core_state(self, s: C4State) -> tuple[bytes, bytes]:
        return _CORE.pack(*s), b""

    def is_terminal(self, s: C4State) -> bool:
        return s.last_won or s.ply == WIDTH * HEIGHT

    def terminal_value(self, s: C4State) -> float:
        if s.last_won:
            return -1.0
        if s.ply == WIDTH * HEIGHT:
            return 0.0
        raise ValueError("connect4: terminal_value of a position that is not terminal")

    def to_play(self, s: C4State) -> int:
        return s.ply & 1

    def encode(self, s: C4State) -> np.ndarray:
        raw = s.stones.to_bytes(8, "little") + (s.stones ^ s.mask).to_bytes(8, "little")
        bits = np.unpackbits(np.frombuffer(raw, dtype=np.uint8), bitorder="little")
        return bits[_ENCODE_INDEX]

    def symmetries(
        self, obs: np.ndarray, policy: np.ndarray
    ) -> list[tuple[np.ndarray, np.ndarray]]:
        mirrored = (
            np.ascontiguousarray(obs[..., ::-1]),
            np.ascontiguousarray(policy[:, ::-1]),
        )
        return [(obs, policy), mirrored]

    def benchmarks(self) -> tuple[Benchmark, ...]:
        return (MistakeRate(),)

    def move_help(self) -> str:
        return f"columns 0-{WIDTH - 1}, left to right"

    def render(self, s: C4State) -> str:
        first = s.stones if s.ply % 2 == 0 else s.stones ^ s.mask
        rows = []
        for r in range(HEIGHT - 1, -1, -1):
            cells = []
            for c in range(WIDTH):
                bit = 1 << (c * _STRIDE + r)
                cells.append("." if not s.mask & bit else "X" if first & bit else "O")
            rows.append(" ".join(cells))
        rows.append(" ".join(str(c) for c in range(WIDTH)))
        return "\n".join(rows)
