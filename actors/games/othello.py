"""Othello (Reversi) on an 8x8 board: the pure-Python reference of the compiled rules
(actors/core/games/othello.c), and the fallback where the core is not built.

Rules: black moves first from the standard four-disc start; a move places a disc that brackets
at least one straight line of the opponent's discs, which all flip; a side with no such move
passes (action 64, legal only then); the game ends when neither side can move, and the side
with more discs wins (equal counts draw).

Layout: bit ``row * 8 + col`` of each side's 64-bit board, row 0 at the top (row "1"), column
0 at the left ("a"), as in OpenSpiel, whose action numbering this shares (``d3`` = 19). The
compiled core's blob: black u64, white u64, colour u8 (0 black to move), 0 u8, ply u16, all
little-endian.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

import numpy as np

from actors.games.base import Game
from actors.games.symmetry import square_symmetries

SIZE = 8
CELLS = SIZE * SIZE
PASS = CELLS
_FULL = (1 << CELLS) - 1
_FILE_A = 0x0101010101010101
_FILE_H = 0x8080808080808080
_CORE = struct.Struct("<QQBBH")
_COLS = "abcdefgh"


def _shift(b: int, d: int) -> int:
    """One step of the cells ``b`` in direction ``d`` (0..7), dropping what wraps off."""
    if d == 0:
        return b >> 8  # up
    if d == 1:
        return (b << 8) & _FULL  # down
    if d == 2:
        return (b << 1) & _FULL & ~_FILE_A  # right
    if d == 3:
        return (b >> 1) & ~_FILE_H  # left
    if d == 4:
        return (b >> 7) & ~_FILE_A  # up-right
    if d == 5:
        return (b >> 9) & ~_FILE_H  # up-left
    if d == 6:
        return (b << 9) & _FULL & ~_FILE_A  # down-right
    return (b << 7) & _FULL & ~_FILE_H  # down-left


def moves_of(own: int, opp: int) -> int:
    """The cells where the side owning ``own`` may place a disc, as a bitboard."""
    empty = ~(own | opp) & _FULL
    moves = 0
    for d in range(8):
        x = _shift(own, d) & opp
        for _ in range(5):
            x |= _shift(x, d) & opp
        moves |= _shift(x, d) & empty
    return moves


def flips_of(own: int, opp: int, move: int) -> int:
    """The opponent's discs that placing ``move`` (a one-bit board) flips."""
    flips = 0
    for d in range(8):
        line, f = 0, _shift(move, d)
        while f & opp:
            line |= f
            f = _shift(f, d)
        if f & own:
            flips |= line
    return flips


class OthelloState(NamedTuple):
    """An Othello position."""

    black: int
    """Bitboard of black's discs."""
    white: int
    """Bitboard of white's discs."""
    color: int
    """The side to move: 0 black, 1 white."""
    ply: int
    """Moves played so far, passes included."""


_START = OthelloState(
    black=(1 << (3 * 8 + 4)) | (1 << (4 * 8 + 3)),  # e4, d5
    white=(1 << (3 * 8 + 3)) | (1 << (4 * 8 + 4)),  # d4, e5
    color=0,
    ply=0,
)


class Othello(Game):
    """Othello 8x8. Actions 0..63 are cells (``row * 8 + col``, row 0 at the top), 64 the pass;
    planes: the side to move's discs, the opponent's."""

    name = "othello"
    core_name = "othello"
    openspiel = "othello"
    num_actions = CELLS + 1
    pass_action = PASS
    obs_shape = (2, SIZE, SIZE)
    sides = ("black", "white")

    def initial_state(self) -> OthelloState:
        return _START

    @staticmethod
    def _sides(s: OthelloState) -> tuple[int, int]:
        return (s.white, s.black) if s.color else (s.black, s.white)

    def legal_actions(self, s: OthelloState) -> list[int]:
        own, opp = self._sides(s)
        moves = moves_of(own, opp)
        if moves:
            return [c for c in range(CELLS) if moves >> c & 1]
        return [] if not moves_of(opp, own) else [PASS]

    def apply(self, s: OthelloState, a: int) -> OthelloState:
        own, opp = self._sides(s)
        moves = moves_of(own, opp)
        if a == PASS:
            if moves or not moves_of(opp, own):
                raise ValueError("othello: pass is legal only when no disc can be placed")
        else:
            if not (0 <= a < CELLS and moves >> a & 1):
                raise ValueError(f"othello: move {self._name(a)} is illegal here")
            m = 1 << a
            f = flips_of(own, opp, m)
            own |= m | f
            opp &= ~f
        color = s.color ^ 1
        black, white = (opp, own) if s.color else (own, opp)
        return OthelloState(black, white, color, s.ply + 1)

    def _name(self, a: int) -> str:
        return self.format_move(a) if 0 <= a < self.num_actions else str(a)

    def core_state(self, s: OthelloState) -> tuple[bytes, bytes]:
        return _CORE.pack(s.black, s.white, s.color, 0, s.ply), b""

    def is_terminal(self, s: OthelloState) -> bool:
        own, opp = self._sides(s)
        return not moves_of(own, opp) and not moves_of(opp, own)

    def discs(self, s: OthelloState) -> tuple[int, int]:
        """(black's discs, white's discs)."""
        return s.black.bit_count(), s.white.bit_count()

    def score_text(self, s: OthelloState) -> str:
        """The discs of the final position: ``black wins 40-24``, ``draw 32-32``."""
        black, white = self.discs(s)
        return f"{self.result_text(self.winner(s))} {black}-{white}"

    def terminal_value(self, s: OthelloState) -> float:
        if not self.is_terminal(s):
            raise ValueError("othello: terminal_value of a position that is not terminal")
        black, white = self.discs(s)
        mine, theirs = (white, black) if s.color else (black, white)
        return 1.0 if mine > theirs else -1.0 if mine < theirs else 0.0

    def final_targets(self, s: OthelloState) -> tuple[np.ndarray, float]:
        """(each square's disc, int8 [8, 8]: +1 black, -1 white, 0 empty; black's discs
        minus white's), black's view."""
        raw = s.black.to_bytes(8, "little") + s.white.to_bytes(8, "little")
        bits = np.unpackbits(np.frombuffer(raw, dtype=np.uint8), bitorder="little").astype(np.int8)
        owner = bits[:CELLS] - bits[CELLS:]
        black, white = self.discs(s)
        return owner.reshape(SIZE, SIZE), float(black - white)

    def to_play(self, s: OthelloState) -> int:
        return s.color

    def encode(self, s: OthelloState) -> np.ndarray:
        own, opp = self._sides(s)
        raw = own.to_bytes(8, "little") + opp.to_bytes(8, "little")
        bits = np.unpackbits(np.frombuffer(raw, dtype=np.uint8), bitorder="little")
        return bits.reshape(self.obs_shape)

    def symmetries(
        self, obs: np.ndarray, policy: np.ndarray
    ) -> list[tuple[np.ndarray, np.ndarray]]:
        return square_symmetries(obs, policy, SIZE)

    def render(self, s: OthelloState) -> str:
        rows = ["  " + " ".join(_COLS)]
        for r in range(SIZE):
            cells = []
            for c in range(SIZE):
                bit = 1 << (r * SIZE + c)
                cells.append("X" if s.black & bit else "O" if s.white & bit else ".")
            rows.append(f"{r + 1} " + " ".join(cells))
        black, white = self.discs(s)
        rows.append(f"X {black}, O {white}; {'XO'[s.color]} to move")
        return "\n".join(rows)

    def parse_move(self, text: str) -> int:
        """``d3`` (column a-h, row 1-8 from the top), ``pass``, or the action's number."""
        t = text.strip().lower()
        if t == "pass":
            return PASS
        if len(t) == 2 and t[0] in _COLS and t[1] in "12345678":
            return (int(t[1]) - 1) * SIZE + _COLS.index(t[0])
        try:
            return super().parse_move(t)
        except ValueError:
            raise ValueError(f"othello: move {text!r}: expected a1..h8, pass or 0..64") from None

    def move_help(self) -> str:
        return "a1-h8 (column a-h, row 1 at the top), or pass"

    def format_move(self, a: int) -> str:
        if a == PASS:
            return "pass"
        if not 0 <= a < CELLS:
            raise ValueError(f"othello: move {a} is out of range 0..{CELLS}")
        return f"{_COLS[a % SIZE]}{a // SIZE + 1}"


__all__ = ["Othello", "OthelloState", "flips_of", "moves_of"]
