"""Shogi: the game class over the compiled rules (actors/core/games/shogi.c), SFEN in and out,
USI move text, and CSA records (``csa``).

As for chess, the reference is the compiled rules themselves, checked against oracles nobody
here wrote: the published perft counts and cshogi, move by move over random games
(tests/test_shogi_rules.py). Python keeps what the core has no call for: reading and writing
SFEN and USI. Shogi needs the compiled core; there is no pure-Python fallback.

Squares: ``row * 9 + col`` as an SFEN reads the board, row 0 rank ``a`` (gote's back rank), col
0 file 9, so USI's ``7g`` is row 6, col 2. Sente (black in SFEN, ``b``) moves first, towards
row 0.

Actions: AlphaZero's 9x9x139 (11,259): ``sq * 139 + type``, ``sq`` the square seen from the
side to move (gote's turned 180 degrees; a drop's is the square dropped on); types 0..63 moves
by direction (N NE E SE S SW W NW from the mover's view, N forwards, E towards the higher
column) times 8 plus distance - 1, 64..65 knight moves (towards the lower, the higher column),
66..131 the same moves promoting, 132..138 drops of P L N S B R G.

Planes ``[45 * (history + 1) + 2, 9, 9]`` from the side to move's view (row 0 its far row): per
position, the current one first and then ``history`` earlier ones, the mover's pieces by type
(P L N S B R G K +P +L +N +S +B +R), the opponent's, the mover's pieces in hand by type (P L N
S B R G; a count n as the first n cells set, in raster order: the server takes 0/1 planes
only), the opponent's, and ones where that position had stood twice, three, four times (all
zero before the game's start); then ones when gote is to move, and the plies played (the first
``81 * ply / max_plies`` cells set).

The game ends by sennichite (the fourth occurrence of a position: a draw, or a loss for a side
that gave check with every one of its moves since the first), by an entering-king declaration
(CSA's 27-point rule, made for the side to move as soon as it may: it wins), by mate (a side
with no legal move loses) and at ``max_plies`` plies, adjudicated a draw. The blob's bytes and
the rules' details are documented in shogi.c; docs/shogi.md says how they are checked.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from actors.games.compiled import CompiledGame
from actors.games.shogi.csa import csa_record

START_SFEN = "lnsgkgsnl/1r5b1/ppppppppp/9/9/9/PPPPPPPPP/1B5R1/LNSGKGSNL b - 1"
TYPES = 139
ACTIONS = 81 * TYPES
WINDOW = 128  # repetition keys the blob holds
HIST_AT = 100 + 8 * WINDOW
ITEM = 96
GOTE = 16
# Piece types 1..14 as SFEN writes sente's (gote's in lower case); hands in the order P L N S B R G.
_NAMES = ("P", "L", "N", "S", "B", "R", "G", "K", "+P", "+L", "+N", "+S", "+B", "+R")
_HAND = "PLNSBRG"
_SFEN_HAND_ORDER = "RBGSNLP"  # as SFEN writers (and cshogi) list a hand
_HAND_MAX = {"P": 18, "L": 4, "N": 4, "S": 4, "B": 2, "R": 2, "G": 4}
_RANKS = "abcdefghi"
_DR = (-1, -1, 0, 1, 1, 1, 0, -1)  # N NE E SE S SW W NW
_DC = (0, 1, 1, 1, 0, -1, -1, -1)
_USI_MOVE = re.compile(r"([1-9][a-i][1-9][a-i]\+?)|([PLNSBRG]\*[1-9][a-i])")


# Material by piece type 0..14 (none, P L N S B R G K, +P +L +N +S +B +R): cap_score's units.
_WORTH = np.array([0, 1, 3, 4, 5, 8, 10, 6, 0, 6, 6, 6, 6, 10, 12, 0], np.int64)


class ShogiState(NamedTuple):
    """A shogi position: the compiled core's blob (shogi.c) and whether the game is over."""

    blob: bytes
    """The core's bytes: board, side, hands, ply, repetition keys, earlier positions (the
    layout in actors/core/games/shogi.c)."""
    over: bool
    """The game has ended here."""
    value: float
    """When over: the result for the side to move (+1, 0, -1); else 0."""


class Move(NamedTuple):
    """A move on the board (``frm`` and ``to`` squares, ``promote``) or a drop (``drop`` the
    piece letter, ``frm`` -1)."""

    frm: int
    to: int
    promote: bool
    drop: str

    def usi(self) -> str:
        if self.drop:
            return f"{self.drop}*{_sq(self.to)}"
        return _sq(self.frm) + _sq(self.to) + ("+" if self.promote else "")


def _sq(i: int) -> str:
    """USI's name of square ``i``: file digit, rank letter (``7g``)."""
    return f"{9 - i % 9}{_RANKS[i // 9]}"


def _parse_sq(text: str) -> int:
    if len(text) != 2 or text[0] not in "123456789" or text[1] not in _RANKS:
        raise ValueError(f"shogi: {text!r} is not a square (1a..9i)")
    return _RANKS.index(text[1]) * 9 + 9 - int(text[0])


class Shogi(CompiledGame):
    """Shogi with AlphaZero's 11,259 actions (module docstring). ``max_plies``: the ply cap,
    adjudicated a draw; ``history``: earlier positions in the planes (0..15)."""

    name = "shogi"
    sides = ("sente", "gote")
    protocols = ("usi",)
    record_suffix = ".csa"
    position_field = "sfen"
    core_name = "shogi"
    num_actions = ACTIONS

    state_type = ShogiState
    side_at = 81
    score_scale = 20.0  # a material balance: a rook taken (10 off the board, 10 in hand) is 1

    def __init__(self, max_plies: int = 512, history: int = 7) -> None:
        super().__init__(max_plies, history)
        self.obs_shape = (45 * (self.history + 1) + 2, 9, 9)
        self._blob_size = HIST_AT + ITEM * self.history
        self._start = self.from_sfen(START_SFEN)

    def position_text(self, s: ShogiState) -> str:
        return self.to_sfen(s)

    def cap_score(self, s: ShogiState, repetitions: bool = False) -> float | None:
        """The side to move's material lead (P1 L3 N4 S5 G6 B8 R10; +P +L +N +S 6, +B 10, +R
        12; pieces in hand at their unpromoted worth) where the game was drawn at
        ``max_plies`` or, with ``repetitions``, by sennichite; None for any other end (a mate
        or a perpetual check keeps its result)."""
        if not s.over or s.value != 0.0:
            return None
        reason = self.end_reason(s)
        if reason != "ply cap" and not (repetitions and reason == "sennichite"):
            return None
        return float(self.material(s, s.blob[81]))

    def material(self, s: ShogiState, side: int) -> int:
        """``side``'s material lead over the other's, board and hand, in ``cap_score``'s units
        (P1 L3 N4 S5 G6 B8 R10; promoted minor pieces 6, +B 10, +R 12; in hand unpromoted): what
        the greedy player counts."""
        b = s.blob
        board = np.frombuffer(b, np.uint8, 81)
        worth = _WORTH[board & 15] * np.where(board & GOTE, -1, 1)
        hands = np.frombuffer(b, np.uint8, 14, 82).astype(np.int64)
        lead = int(worth.sum() + (hands[:7] - hands[7:]) @ _WORTH[1:8])  # sente's
        return lead if side == 0 else -lead

    def material_balance(self, s: ShogiState) -> float:
        """Sente's material lead, board and hand (``material``)."""
        return float(self.material(s, 0))

    def symmetries(
        self, obs: np.ndarray, policy: np.ndarray
    ) -> list[tuple[np.ndarray, np.ndarray]]:
        return [(obs, policy)]  # the set-up (rook and bishop) leaves no symmetry, as chess

    def render(self, s: ShogiState) -> str:
        b = s.blob
        rows = ["  " + " ".join(f"{9 - c:>2}" for c in range(9))]
        for r in range(9):
            cells = []
            for c in range(9):
                p = b[r * 9 + c]
                name = _NAMES[(p & 15) - 1] if p else "."
                cells.append(f"{name.lower() if p & GOTE else name:>2}")
            rows.append(f"{_RANKS[r]} " + " ".join(cells))
        rows.append(self.to_sfen(s))
        return "\n".join(rows)

    def ply(self, s: ShogiState) -> int:
        """Plies played since the start (an SFEN's move number less one)."""
        return s.blob[96] | s.blob[97] << 8

    def end_reason(self, s: ShogiState) -> str:
        """How the game ended at ``s``: ``mate`` (no legal move: the side to move lost),
        ``declaration`` (the side to move declared an entering king: it won), ``sennichite``
        (the fourth occurrence, a draw), ``perpetual check`` (the fourth occurrence, lost by
        the side that checked throughout), ``ply cap`` (a draw); "" while it goes on."""
        if not s.over:
            return ""
        if self.encode(s)[44].any():  # "stood four times": this position
            return "perpetual check" if s.value else "sennichite"
        return {1.0: "declaration", -1.0: "mate"}.get(s.value, "ply cap")

    # --- moves --------------------------------------------------------------------------

    def move_of(self, s: ShogiState, a: int) -> Move:
        """The move of action ``a`` for the side to move at ``s`` (whether legal or not);
        ValueError where it leaves the board."""
        if not 0 <= a < ACTIONS:
            raise ValueError(f"shogi: action {a} is out of range 0..{ACTIONS - 1}")
        gote = s.blob[81]
        vsq, kind = divmod(a, TYPES)
        if kind >= 132:
            return Move(-1, 80 - vsq if gote else vsq, False, _HAND[kind - 132])
        k = kind % 66
        if k < 64:
            dr, dc = _DR[k // 8] * (k % 8 + 1), _DC[k // 8] * (k % 8 + 1)
        else:
            dr, dc = -2, 1 if k == 65 else -1
        r, c = vsq // 9 + dr, vsq % 9 + dc
        if not (0 <= r < 9 and 0 <= c < 9):
            raise ValueError(f"shogi: action {a} leaves the board")
        vt = r * 9 + c
        frm, to = (80 - vsq, 80 - vt) if gote else (vsq, vt)
        return Move(frm, to, kind >= 66, "")

    def action_of(self, s: ShogiState, m: Move) -> int:
        """The action of move ``m`` for the side to move at ``s`` (ValueError for a shape no
        piece moves in)."""
        gote = s.blob[81]
        vt = 80 - m.to if gote else m.to
        if m.drop:
            return vt * TYPES + 132 + _HAND.index(m.drop)
        vf = 80 - m.frm if gote else m.frm
        dr, dc = vt // 9 - vf // 9, vt % 9 - vf % 9
        if dr == -2 and abs(dc) == 1:
            kind = 64 + (dc > 0)
        else:
            dist = max(abs(dr), abs(dc))
            if dist == 0 or (dr and dc and abs(dr) != abs(dc)):
                raise ValueError(f"shogi: {m.usi()} is not a move any piece makes")
            d = list(zip(_DR, _DC)).index(((dr > 0) - (dr < 0), (dc > 0) - (dc < 0)))
            kind = d * 8 + dist - 1
        return vf * TYPES + kind + (66 if m.promote else 0)

    @staticmethod
    def usi_move(text: str) -> Move:
        """The move USI text names (``7g7f``, ``8h2b+``, ``P*5e``), legal or not; ValueError
        when it is not USI move text."""
        t = text.strip()
        if not _USI_MOVE.fullmatch(t):
            raise ValueError(f"shogi: {text!r} is not a USI move (7g7f, 8h2b+, P*5e)")
        if t[1] == "*":
            return Move(-1, _parse_sq(t[2:4]), False, t[0])
        return Move(_parse_sq(t[:2]), _parse_sq(t[2:4]), t.endswith("+"), "")

    def parse_usi(self, s: ShogiState, text: str) -> int:
        """The action of USI move ``text`` (``7g7f``, ``8h2b+``, ``P*5e``) at ``s``;
        ValueError when it is not a legal move there."""
        a = self.action_of(s, self.usi_move(text))
        if a not in self.legal_actions(s):
            raise ValueError(f"shogi: {text.strip()} is illegal in {self.to_sfen(s)}")
        return a

    def usi(self, s: ShogiState, a: int) -> str:
        """USI text of action ``a`` at ``s``."""
        return self.move_of(s, a).usi()

    def parse_move_at(self, s: ShogiState, text: str) -> int:
        """A move typed at ``s``: USI (``7g7f``, ``8h2b+``, ``P*5e``) or the action's number.
        ValueError when it names no legal move there."""
        t = text.strip()
        if t.isdigit():
            return self.parse_move(t)
        return self.parse_usi(s, t)

    def format_move_at(self, s: ShogiState, a: int) -> str:
        """USI (``7g7f``)."""
        return self.usi(s, a)

    def move_help(self) -> str:
        return "USI (7g7f, 8h2b+ promoting, P*5e dropping)"

    # --- records ------------------------------------------------------------------------

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
        """The game as CSA text (``actors.games.shogi.csa``): the players, the start, every
        move, and how it ended."""
        return csa_record(self, moves, players, result, reason, comment, date, event)

    def usi_position(self, moves: Sequence[int]) -> str:
        """The game from the initial state as USI's ``position`` command takes it:
        ``startpos moves 7g7f 3c3d ...``."""
        s, words = self.initial_state(), []
        for a in moves:
            words.append(self.usi(s, a))
            s = self.apply(s, a)
        return "startpos" + (" moves " + " ".join(words) if words else "")

    # --- SFEN ---------------------------------------------------------------------------

    def from_position(self, text: str) -> ShogiState:
        """An SFEN (``position_field``): ``from_sfen``."""
        return self.from_sfen(text)

    def from_sfen(self, sfen: str) -> ShogiState:
        """The position of an SFEN (board, side, hands, and the move number, 1 if left out);
        ValueError saying what is wrong."""
        parts = sfen.split()
        if len(parts) == 3:
            parts.append("1")
        if len(parts) != 4:
            raise ValueError(f"shogi: SFEN {sfen!r} needs 4 fields (or 3), got {len(parts)}")
        rows = parts[0].split("/")
        if len(rows) != 9:
            raise ValueError(f"shogi: SFEN {sfen!r}: the board needs 9 rows")
        board = bytearray(81)
        for r, row in enumerate(rows):
            c, promoted = 0, False
            for ch in row:
                if ch.isdigit() and ch != "0" and not promoted:
                    c += int(ch)
                elif ch == "+" and not promoted:
                    promoted = True
                elif ch.upper() in "PLNSBRGK" and c < 9:
                    name = ("+" if promoted else "") + ch.upper()
                    if name not in _NAMES:
                        raise ValueError(f"shogi: SFEN {sfen!r}: {ch} cannot be promoted")
                    board[r * 9 + c] = _NAMES.index(name) + 1 + (GOTE if ch.islower() else 0)
                    c, promoted = c + 1, False
                else:
                    raise ValueError(f"shogi: SFEN {sfen!r}: bad row {row!r}")
            if c != 9 or promoted:
                raise ValueError(f"shogi: SFEN {sfen!r}: row {row!r} is not 9 squares")
        if parts[1] not in ("b", "w"):
            raise ValueError(f"shogi: SFEN {sfen!r}: side to move {parts[1]!r} is not b or w")
        side = parts[1] == "w"
        hands = bytearray(14)
        if parts[2] != "-":
            for count, ch in re.findall(r"(\d*)(.)", parts[2]):
                if ch.upper() not in _HAND or (count and not 0 < int(count) <= 18):
                    raise ValueError(f"shogi: SFEN {sfen!r}: bad hand {parts[2]!r}")
                hands[_HAND.index(ch.upper()) + (7 if ch.islower() else 0)] += int(count or 1)
        if max(hands) > 18:
            raise ValueError(f"shogi: SFEN {sfen!r}: bad hand {parts[2]!r}")
        try:
            move = int(parts[3])
        except ValueError:
            raise ValueError(f"shogi: SFEN {sfen!r}: the move number is not a number") from None
        if move < 1 or move - 1 > self.max_plies:
            raise ValueError(
                f"shogi: SFEN {sfen!r}: move number {move} is not in 1..{self.max_plies + 1}"
            )
        head = bytes(board) + bytes([side]) + bytes(hands) + struct.pack("<HBB", move - 1, 0, 0)
        blob = head + bytes(self._blob_size - len(head))
        try:
            moves = self._rules.legal(blob, b"")
        except ValueError as e:
            raise ValueError(f"shogi: SFEN {sfen!r}: {str(e).removeprefix('shogi: ')}") from None
        if _can_declare(blob):
            return ShogiState(blob, True, 1.0)
        if not moves:
            return ShogiState(blob, True, -1.0)
        return ShogiState(blob, move - 1 >= self.max_plies, 0.0)

    def to_sfen(self, s: ShogiState) -> str:
        b = s.blob
        rows = []
        for r in range(9):
            text, empty = "", 0
            for c in range(9):
                p = b[r * 9 + c]
                if not p:
                    empty += 1
                    continue
                name = _NAMES[(p & 15) - 1]
                text += (str(empty) if empty else "") + (name.lower() if p & GOTE else name)
                empty = 0
            rows.append(text + (str(empty) if empty else ""))
        hand = ""
        for side in (0, 1):
            for ch in _SFEN_HAND_ORDER:
                n = b[82 + 7 * side + _HAND.index(ch)]
                if n:
                    hand += (str(n) if n > 1 else "") + (ch.lower() if side else ch)
        return f"{'/'.join(rows)} {'bw'[b[81]]} {hand or '-'} {self.ply(s) + 1}"

    def in_check(self, s: ShogiState) -> bool:
        """Whether the side to move at ``s`` is in check (a scan in Python, for notation and
        tests; the core keeps its own flag for the rules)."""
        return _in_check(s.blob)


# Each piece's steps and slides as (row, col) from its owner's view (row -1 forwards).
_GOLD = ((-1, 0), (-1, -1), (-1, 1), (0, -1), (0, 1), (1, 0))
_ORTH = ((-1, 0), (1, 0), (0, -1), (0, 1))
_DIAG = ((-1, -1), (-1, 1), (1, -1), (1, 1))
_STEPS: dict[str, tuple[tuple[int, int], ...]] = {
    "P": ((-1, 0),),
    "N": ((-2, -1), (-2, 1)),
    "S": ((-1, 0), *_DIAG),
    "G": _GOLD,
    "K": _ORTH + _DIAG,
    "+B": _ORTH,
    "+R": _DIAG,
    **dict.fromkeys(("+P", "+L", "+N", "+S"), _GOLD),
}
_SLIDES: dict[str, tuple[tuple[int, int], ...]] = {
    "L": ((-1, 0),),
    "B": _DIAG,
    "R": _ORTH,
    "+B": _DIAG,
    "+R": _ORTH,
}


def _in_check(blob: bytes) -> bool:
    """Whether the side to move on ``blob``'s board has its king attacked: every opposing
    piece's steps and slides, scanned."""
    board, side = blob[:81], blob[81]
    king = board.index(8 + side * GOTE)
    for sq, p in enumerate(board):
        if not p or (p & GOTE) == side * GOTE:
            continue
        name, flip = _NAMES[(p & 15) - 1], -1 if p & GOTE else 1
        r, c = divmod(sq, 9)
        for dr, dc in _STEPS.get(name, ()):
            if (r + dr * flip) * 9 + c + dc * flip == king and 0 <= c + dc * flip < 9:
                return True
        for dr, dc in _SLIDES.get(name, ()):
            rr, cc = r + dr * flip, c + dc * flip
            while 0 <= rr < 9 and 0 <= cc < 9:
                if rr * 9 + cc == king:
                    return True
                if board[rr * 9 + cc]:
                    break
                rr, cc = rr + dr * flip, cc + dc * flip
    return False


def _can_declare(blob: bytes) -> bool:
    """shogi.c's ``can_declare``, for SFEN positions: the side to move may declare an entering
    king (CSA's 27-point rule) and wins."""
    side = blob[81]
    zone = range(54, 81) if side else range(27)
    if blob[:81].index(8 + side * GOTE) not in zone or _in_check(blob):
        return False
    mine = [blob[sq] & 15 for sq in zone if blob[sq] and (blob[sq] & GOTE) == side * GOTE]
    mine.remove(8)  # the king
    big = (5, 6, 13, 14)  # B R +B +R
    hand = blob[82 + 7 * side : 89 + 7 * side]
    points = sum(5 if t in big else 1 for t in mine) + sum(hand) + 4 * (hand[4] + hand[5])
    return len(mine) >= 10 and points >= (27 if side else 28)


__all__ = ["START_SFEN", "Move", "Shogi", "ShogiState"]
