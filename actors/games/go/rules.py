"""Go under Tromp-Taylor rules: the pure-Python reference of the compiled rules
(actors/core/games/go.c, any size and komi), and the fallback where the core is not built.

Rules: black moves first on an empty board; a stone's chain with no liberty left is taken;
suicide (a move that leaves its own chain without liberty and takes nothing) is illegal;
positional superko: a move may not recreate any board that stood before in the game; the pass
is always legal. The game ends after two passes in a row, or when it reaches the move cap
(2 x the board's cells, passes counted, as OpenSpiel's ``max_game_length``). Area scoring:
each side's stones plus the empty regions that touch only its stones; white gets ``komi``
(7.5: no draws).

Layout: cell ``row * N + col``, row 0 at the bottom ("1"), column 0 at the left ("A"), as
OpenSpiel numbers Go's actions (0 = a1), ``N * N`` the pass. The planes show the top row first.
The compiled core's blob: board[N * N] (0 empty, 1 black, 2 white), colour u8 (0 black to
move), consecutive passes u8, ply u16 little-endian; its history: the boards that stood before,
N * N bytes each.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from actors.games.base import Game
from actors.games.go.sgf import sgf_record
from actors.games.symmetry import square_symmetries

EMPTY, BLACK, WHITE = 0, 1, 2
_GTP_COLS = "ABCDEFGHJKLMNOPQRSTUVWXYZ"  # GTP skips I; 25 columns at most


class GoState(NamedTuple):
    """A Go position and what the rules need of its past."""

    board: bytes
    """N*N cells: 0 empty, 1 black, 2 white; cell ``row * N + col``, row 0 at the bottom."""
    color: int
    """The side to move: 0 black, 1 white."""
    passes: int
    """Consecutive passes just played (2 ends the game)."""
    ply: int
    """Moves played so far, passes included."""
    history: frozenset[bytes]
    """Every board that stood before this one in the game (positional superko)."""


class Go(Game):
    """Go on an N x N board (9 by default). Actions ``row * N + col`` and ``N * N`` = pass.

    Planes: the side to move's stones, the opponent's, ones when black is to move, ones when
    the previous move was a pass.
    """

    pass_action: int
    sides = ("black", "white")
    protocols = ("gtp",)
    record_suffix = ".sgf"

    def __init__(self, size: int = 9, komi: float = 7.5) -> None:
        if not 2 <= size <= len(_GTP_COLS):
            raise ValueError(f"go: board size {size} outside 2..{len(_GTP_COLS)}")
        self.size = size
        self.komi = komi
        self.cells = size * size
        self.name = f"go{size}"
        self.num_actions = self.cells + 1
        self.pass_action = self.cells
        self.obs_shape = (4, size, size)
        self.max_moves = 2 * self.cells
        self.openspiel = f"go(board_size={size},komi={komi:g})"
        self.core_name = "go"
        self.core_params = (size, komi)
        n = size
        self._neighbours = [
            tuple(
                r2 * n + c2
                for r2, c2 in ((r - 1, c), (r + 1, c), (r, c - 1), (r, c + 1))
                if 0 <= r2 < n and 0 <= c2 < n
            )
            for r in range(n)
            for c in range(n)
        ]
        # Planes' row r shows board row N-1-r.
        self._to_planes = np.array(
            [(n - 1 - r) * n + c for r in range(n) for c in range(n)], dtype=np.intp
        )
        self._start = GoState(bytes(self.cells), 0, 0, 0, frozenset())

    # --- rules --------------------------------------------------------------------------

    def initial_state(self) -> GoState:
        return self._start

    def with_komi(self, komi: float) -> Go:
        """This game, its encoding included (``go9-features`` stays that), under ``komi``."""
        other = copy.copy(self)
        other.komi = komi
        other.openspiel = f"go(board_size={self.size},komi={komi:g})"
        other.core_params = (self.size, komi, *self.core_params[2:])
        return other

    def setup_state(self, board: bytes, to_move: int) -> GoState:
        """A position of stones placed, not played (setup and handicap stones): no ply, no
        past; ``to_move`` 0 black, 1 white."""
        return self._start._replace(board=board, color=to_move)

    def _chains(self, board: bytes) -> tuple[list[int], list[list[int]], list[int]]:
        """(group of each cell, -1 where empty; each group's cells; each group's liberties)."""
        group = [-1] * self.cells
        cells_of: list[list[int]] = []
        libs: list[int] = []
        for i in range(self.cells):
            color = board[i]
            if not color or group[i] >= 0:
                continue
            g = len(cells_of)
            group[i] = g
            stack, members, liberties = [i], [], set()
            while stack:
                p = stack.pop()
                members.append(p)
                for q in self._neighbours[p]:
                    v = board[q]
                    if not v:
                        liberties.add(q)
                    elif v == color and group[q] < 0:
                        group[q] = g
                        stack.append(q)
            cells_of.append(members)
            libs.append(len(liberties))
        return group, cells_of, libs

    def _place(
        self, board: bytes, chains: tuple[list[int], list[list[int]], list[int]], p: int, me: int
    ) -> bytes | None:
        """The board after ``me`` plays at empty ``p``, or None when that is suicide."""
        group, cells_of, libs = chains
        ok = False
        taken: set[int] = set()
        for q in self._neighbours[p]:
            v = board[q]
            if not v:
                ok = True
            elif v == me:
                ok = ok or libs[group[q]] > 1
            elif libs[group[q]] == 1:
                taken.add(group[q])
        if not ok and not taken:
            return None
        out = bytearray(board)
        out[p] = me
        for g in taken:
            for c in cells_of[g]:
                out[c] = EMPTY
        return bytes(out)

    def _successors(self, s: GoState) -> dict[int, bytes]:
        """Legal placements of the side to move -> the board after each (pass not included)."""
        chains = self._chains(s.board)
        me = s.color + 1
        out = {}
        for p in range(self.cells):
            if s.board[p]:
                continue
            after = self._place(s.board, chains, p, me)
            if after is not None and after not in s.history:
                out[p] = after
        return out

    def is_terminal(self, s: GoState) -> bool:
        return s.passes >= 2 or s.ply >= self.max_moves

    def legal_actions(self, s: GoState) -> list[int]:
        if self.is_terminal(s):
            return []
        return [*self._successors(s), self.pass_action]

    def apply(self, s: GoState, a: int) -> GoState:
        if self.is_terminal(s):
            raise ValueError(f"{self.name}: move {self._name(a)} played after the game ended")
        history = s.history | {s.board}
        if a == self.pass_action:
            return GoState(s.board, s.color ^ 1, s.passes + 1, s.ply + 1, history)
        if not 0 <= a < self.cells:
            raise ValueError(f"{self.name}: move {a} is out of range 0..{self.cells}")
        if s.board[a]:
            raise ValueError(f"{self.name}: {self._name(a)} is occupied")
        after = self._place(s.board, self._chains(s.board), a, s.color + 1)
        if after is None:
            raise ValueError(f"{self.name}: {self._name(a)} is suicide")
        if after in history:
            raise ValueError(f"{self.name}: {self._name(a)} repeats an earlier board (superko)")
        return GoState(after, s.color ^ 1, 0, s.ply + 1, history)

    def core_state(self, s: GoState) -> tuple[bytes, bytes]:
        blob = s.board + bytes([s.color, s.passes]) + s.ply.to_bytes(2, "little")
        return blob, b"".join(sorted(s.history))

    # --- scoring ------------------------------------------------------------------------

    def areas(self, board: bytes) -> tuple[int, int]:
        """Tromp-Taylor area (black, white): stones plus empty regions touching one colour."""
        owner = self._owners(board)
        return int((owner == 1).sum()), int((owner == -1).sum())

    def score(self, s: GoState) -> float:
        """Black's area minus white's, minus komi: > 0 black leads."""
        black, white = self.areas(s.board)
        return black - white - self.komi

    def ownership(self, board: bytes) -> np.ndarray:
        """Tromp-Taylor owner of each point, int8 [N, N] in the planes' layout (top row first):
        +1 black (a stone, or an empty region touching only black), -1 white, 0 neither."""
        return self._owners(board)[self._to_planes].reshape(self.size, self.size)

    def _owners(self, board: bytes) -> np.ndarray:
        """Tromp-Taylor owner of each point in the board's own order (int8: +1, -1, 0)."""
        owner = np.zeros(self.cells, dtype=np.int8)
        seen = bytearray(self.cells)
        sign = (0, 1, -1)
        for i in range(self.cells):
            if board[i]:
                owner[i] = sign[board[i]]
                continue
            if seen[i]:
                continue
            seen[i] = 1
            stack, region, borders = [i], [], 0
            while stack:
                p = stack.pop()
                region.append(p)
                for q in self._neighbours[p]:
                    if board[q]:
                        borders |= board[q]
                    elif not seen[q]:
                        seen[q] = 1
                        stack.append(q)
            if borders in (BLACK, WHITE):
                owner[region] = sign[borders]
        return owner

    def final_targets(self, s: GoState) -> tuple[np.ndarray, float]:
        """(Tromp-Taylor ownership, black's area minus white's minus komi), black's view."""
        return self.ownership(s.board), self.score(s)

    def format_score(self, s: GoState) -> str:
        """The GTP ``final_score`` form: ``B+3.5``, ``W+0.5`` or ``0``."""
        x = self.score(s)
        return "0" if x == 0 else f"{'B' if x > 0 else 'W'}+{abs(x):g}"

    def result_text(self, winner: int | None, reason: str = "score") -> str:
        """SGF's ``RE``: ``B+R`` (resign), ``W+F`` (forfeit), ``0``, ``Void`` (disputed), and
        ``B+`` for a score whose margin is not known (``score_text`` gives it)."""
        if reason == "disputed":
            return "Void"
        if winner is None:
            return "0"
        return f"{'BW'[winner]}+" + {"resign": "R", "forfeit": "F"}.get(reason, "")

    def score_text(self, s: GoState) -> str:
        """Tromp-Taylor area of the board as it stands, komi to white: ``B+3.5``, ``0``."""
        return self.format_score(s)

    def record(
        self,
        moves: Sequence[int],
        players: tuple[str, str] = ("?", "?"),
        result: str = "",
        reason: str = "",
        comment: str = "",
        date: str = "",
        event: str = "",
    ) -> str:
        """The game as SGF (FF[4], ``actors.games.go.sgf``); ``reason`` is in ``result``."""
        return sgf_record(self, moves, players[0], players[1], date, result, comment, event=event)

    def terminal_value(self, s: GoState) -> float:
        if not self.is_terminal(s):
            raise ValueError(f"{self.name}: terminal_value of a position that is not terminal")
        x = self.score(s) * (1 if s.color == 0 else -1)
        return 1.0 if x > 0 else -1.0 if x < 0 else 0.0

    def to_play(self, s: GoState) -> int:
        return s.color

    # --- planes, symmetries, text -------------------------------------------------------

    def encode(self, s: GoState) -> np.ndarray:
        board = np.frombuffer(s.board, dtype=np.uint8)[self._to_planes]
        me = s.color + 1
        out = np.empty((4, self.cells), dtype=np.uint8)
        out[0] = board == me
        out[1] = (board != 0) & (board != me)
        out[2] = s.color == 0
        out[3] = s.passes > 0
        return out.reshape(4, self.size, self.size)  # (go_features adds planes behind these)

    def symmetries(
        self, obs: np.ndarray, policy: np.ndarray
    ) -> list[tuple[np.ndarray, np.ndarray]]:
        return square_symmetries(obs, policy, self.size, bottom_up=True)

    def render(self, s: GoState) -> str:
        n = self.size
        cols = "   " + " ".join(_GTP_COLS[:n])
        rows = [cols]
        for r in range(n - 1, -1, -1):
            cells = ".XO"
            line = " ".join(cells[s.board[r * n + c]] for c in range(n))
            rows.append(f"{r + 1:2d} {line} {r + 1}")
        rows.append(cols)
        who = "black (X)" if s.color == 0 else "white (O)"
        rows.append(f"{who} to move, move {s.ply + 1}, score {self.format_score(s)}")
        return "\n".join(rows)

    def parse_move(self, text: str) -> int:
        """A GTP vertex (``D4``, ``pass``; columns skip I) or the action's number."""
        t = text.strip().upper()
        if t == "PASS":
            return self.pass_action
        if len(t) >= 2 and t[0].isalpha() and t[1:].isdigit():
            col, row = _GTP_COLS.find(t[0]), int(t[1:]) - 1
            if 0 <= col < self.size and 0 <= row < self.size:
                return row * self.size + col
            raise ValueError(
                f"{self.name}: vertex {text!r} is off the {self.size}x{self.size} board"
            )
        try:
            return super().parse_move(t)
        except ValueError:
            raise ValueError(
                f"{self.name}: move {text!r}: expected a vertex such as D4, pass, or "
                f"0..{self.cells}"
            ) from None

    def move_help(self) -> str:
        return f"vertices A1-{_GTP_COLS[self.size - 1]}{self.size} (no I), or pass"

    def format_move(self, a: int) -> str:
        """The GTP vertex of action ``a`` (``pass`` for the pass)."""
        if a == self.pass_action:
            return "pass"
        if not 0 <= a < self.cells:
            raise ValueError(f"{self.name}: move {a} is out of range 0..{self.cells}")
        return f"{_GTP_COLS[a % self.size]}{a // self.size + 1}"

    def _name(self, a: int) -> str:
        return self.format_move(a) if 0 <= a <= self.cells else str(a)


class Go13(Go):
    """Go 13x13, komi 7.5 (the built-in ``go13``)."""

    def __init__(self) -> None:
        super().__init__(13)


class Go19(Go):
    """Go 19x19, komi 7.5 (the built-in ``go19``)."""

    def __init__(self) -> None:
        super().__init__(19)


__all__ = ["BLACK", "EMPTY", "WHITE", "Go", "Go13", "Go19", "GoState"]
