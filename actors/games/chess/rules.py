"""Chess: the game class over the compiled rules (actors/core/games/chess.c), FEN in and out,
UCI move text, and the map to OpenSpiel's action numbers.

Its reference is the compiled rules themselves, not a second implementation in Python: chess
move generation in pure Python would run at a few thousand positions per second (perft to
depth 5 would take hours), and the rules are checked instead against oracles nobody here
wrote: the published perft counts and OpenSpiel's chess, move by move over random games
(tests/test_chess_rules.py). Python keeps only what the core has no call for: reading and
writing FEN (and, for a FEN, whether the side to move is in check: the one attack test here).
Chess therefore needs the compiled core; there is no pure-Python fallback.

Actions: AlphaZero's 8x8x73 (4,672): ``from * 73 + type``, ``from`` the square (rank * 8 +
file) seen from the side to move (ranks mirrored for black); types 0..55 queen-like moves
(direction N NE E SE S SW W NW from the mover's view, times 7, plus distance - 1), 56..63
knight moves, 64..72 under-promotions (knight, bishop, rook) x (towards file a, straight,
towards file h). Queen promotions and castling (the king two squares) are queen-like moves.
OpenSpiel's chess numbers moves differently (4,674 actions: its own destination order, file-
major squares, castling as 4672/4673): ``openspiel_action`` maps ours to theirs.

Planes ``[14 * (history + 1) + 7, 8, 8]`` from the side to move's view (row 0 the rank
furthest from it): per position, the current one first and then ``history`` earlier ones, the
mover's pawns, knights, bishops, rooks, queen, king, the opponent's, and ones where that
position had stood twice, three times (all zero before the game's start); then ones when black
is to move, the plies played (the first ``64 * ply / max_plies`` cells set, in raster order:
the server takes 0/1 planes only), the mover's castling rights (king side, queen side), the
opponent's, and the halfmove clock (the first ``ceil(64 * clock / 100)`` cells set).
With ``features=1``, 16 more (``FEATURE_PLANES``, computed by the core; python-chess is their
oracle, tests/test_chess_features.py): the squares the mover attacks, the squares the opponent
attacks, the mover's pieces (kings aside) attacked and not defended, the opponent's, ones when
the mover is in check, the mover's pawns, knights, bishops, rooks and queens (8 cells a piece),
the opponent's, and the legal moves (one cell each, at most 64).

The game ends as OpenSpiel's does (insufficient material, threefold repetition, mate,
stalemate, the 50-move rule at a clock of 100, all automatic) and at ``max_plies`` plies,
adjudicated a draw. The blob's bytes are documented in chess.c.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from actors.games.benchmark import Benchmark
from actors.games.chess.benchmark import MoveQuality
from actors.games.chess.pgn import pgn_record
from actors.games.compiled import CompiledGame

START_FEN = "rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq - 0 1"
TYPES = 73
ACTIONS = 64 * TYPES
WINDOW = 100  # repetition keys the blob holds
HIST_AT = 72 + 8 * WINDOW
FEATURE_PLANES = 16
"""The feature planes ``features=1`` adds after the others (module docstring)."""
ITEM = 65
NO_EP = 64
_PIECES = "PNBRQKpnbrqk"  # blob codes 1..12
_FILES = "abcdefgh"
_DF = (0, 1, 1, 1, 0, -1, -1, -1)  # N NE E SE S SW W NW
_DR = (1, 1, 0, -1, -1, -1, 0, 1)
_KN = ((1, 2), (2, 1), (2, -1), (1, -2), (-1, -2), (-2, -1), (-2, 1), (-1, 2))
_PROMO = "nbr"  # under-promotions, in type order
# Material by blob code (empty, PNBRQK, pnbrqk), white's counted positive.
_MATERIAL = np.array([0, 1, 3, 3, 5, 9, 0, -1, -3, -3, -5, -9, 0], np.int32)
_CASTLE = "KQkq"  # blob bits 1, 2, 4, 8
_CORNERS = ((4, 7), (4, 0), (60, 63), (60, 56))  # (king, rook) of each right
# OpenSpiel's tables (open_spiel/games/chess/chess.h, chess_common.cc)
_OS_KNIGHT = ((-2, -1), (-2, 1), (-1, -2), (-1, 2), (2, -1), (2, 1), (1, -2), (1, 2))
_OS_PROMO = "rbn"
_OS_PROMO_DX = (0, 1, -1)
_OS_CASTLE_LEFT, _OS_CASTLE_RIGHT = 4672, 4673


class ChessState(NamedTuple):
    """A chess position: the compiled core's blob (chess.c) and whether the game is over."""

    blob: bytes
    """The core's bytes: board, side, castling, en passant, clocks, repetition keys, earlier
    boards (the layout in actors/core/games/chess.c)."""
    over: bool
    """The game has ended here."""
    value: float
    """When over: the result for the side to move (+1, 0, -1); else 0."""


def _sufficient_material(board: np.ndarray) -> bool:
    """Whether mate can still happen (chess.c's rule, OpenSpiel's): a pawn, rook or queen; two
    knights on a side; a knight with any other minor piece; bishops on both colours."""
    codes = board[board > 0]
    if np.isin(codes, (1, 4, 5, 7, 10, 11)).any():
        return True
    squares = np.flatnonzero(board)
    knights = [int((codes == k).sum()) for k in (2, 8)]
    bishops = [squares[board[squares] == k] for k in (3, 9)]
    if max(knights) > 1:
        return True
    for side in (0, 1):
        if knights[side] == 1:
            return len(bishops[side]) + knights[1 - side] + len(bishops[1 - side]) > 0
    dark = [(sq % 8 + sq // 8) % 2 == 0 for sq in (*bishops[0], *bishops[1])]  # a1 is dark
    return any(dark) and not all(dark)


class Move(NamedTuple):
    """A move on the board: squares ``rank * 8 + file`` (a1 = 0) and the promotion piece."""

    frm: int
    to: int
    promo: str  # "", or one of "qrbn"

    def uci(self) -> str:
        return _sq(self.frm) + _sq(self.to) + self.promo


_UCI_MOVE = re.compile(r"[a-h][1-8][a-h][1-8][qrbn]?")


def _san_key(text: str) -> str:
    """SAN as compared when read: no check marks, annotations, ``x`` or ``=``; castling
    with letter O."""
    return re.sub(r"[+#!?x=]", "", text.strip()).replace("0", "O")


def _sq(i: int) -> str:
    return _FILES[i % 8] + str(i // 8 + 1)


def _parse_sq(text: str) -> int:
    if len(text) != 2 or text[0] not in _FILES or text[1] not in "12345678":
        raise ValueError(f"chess: {text!r} is not a square (a1..h8)")
    return (int(text[1]) - 1) * 8 + _FILES.index(text[0])


class Chess(CompiledGame):
    """Chess with AlphaZero's 4,672 actions (module docstring). ``max_plies``: the ply cap,
    adjudicated a draw; ``history``: earlier positions in the planes (0..15); ``features``: 1
    adds the feature planes (attacks, hanging pieces, check, material, legal moves)."""

    name = "chess"
    sides = ("white", "black")
    protocols = ("uci",)
    record_suffix = ".pgn"
    position_field = "fen"
    core_name = "chess"
    openspiel = "chess"
    num_actions = ACTIONS

    state_type = ChessState
    side_at = 64
    score_scale = 10.0  # a material balance in pawns: a queen and a pawn ahead is 1

    def __init__(self, max_plies: int = 512, history: int = 7, features: int = 0) -> None:
        # Off, the rules' parameters stay (max_plies, history): today's Rules, shared.
        super().__init__(max_plies, history, *((features,) if features else ()))
        self.features = int(features)
        planes = 14 * (self.history + 1) + 7 + FEATURE_PLANES * self.features
        self.obs_shape = (planes, 8, 8)
        self._blob_size = HIST_AT + ITEM * self.history
        self._start = self.from_fen(START_FEN)

    def position_text(self, s: ChessState) -> str:
        return self.to_fen(s)

    def cap_score(self, s: ChessState, repetitions: bool = False) -> float | None:
        """The side to move's material lead (P1 N3 B3 R5 Q9) where the game was drawn at
        ``max_plies`` or, with ``repetitions``, by threefold repetition or the 50-move rule;
        None for any other end: a mate, a stalemate, a dead position (insufficient material)
        keep their result."""
        if not s.over or s.value != 0.0:
            return None
        b = s.blob
        if (b[68] | b[69] << 8) < self.max_plies:
            if not repetitions:
                return None
            threefold = bool(self.encode(s)[13].any())  # "stood three times": this position
            if not threefold and b[67] < 100:
                return None
        board = np.frombuffer(b, np.uint8, 64)
        if not _sufficient_material(board) or not self._rules.legal(b, b""):
            return None
        lead = int(_MATERIAL[board].sum())  # white's
        return float(lead if b[64] == 0 else -lead)

    def material_balance(self, s: ChessState) -> float:
        """White's material lead (P1 N3 B3 R5 Q9), read from the blob's board."""
        return float(_MATERIAL[np.frombuffer(s.blob, np.uint8, 64)].sum())

    def benchmarks(self) -> tuple[Benchmark, ...]:
        # Every legal move of a fixed set of positions scored by Stockfish (benchmark.py).
        return (MoveQuality(),)

    def symmetries(
        self, obs: np.ndarray, policy: np.ndarray
    ) -> list[tuple[np.ndarray, np.ndarray]]:
        return [(obs, policy)]  # castling and pawns' direction leave chess no symmetry

    def render(self, s: ChessState) -> str:
        rows = []
        for rank in range(7, -1, -1):
            cells = [_PIECES[p - 1] if p else "." for p in s.blob[rank * 8 : rank * 8 + 8]]
            rows.append(f"{rank + 1} " + " ".join(cells))
        rows.append("  " + " ".join(_FILES))
        rows.append(self.to_fen(s))
        return "\n".join(rows)

    # --- moves --------------------------------------------------------------------------

    def move_of(self, s: ChessState, a: int) -> Move:
        """The board move of action ``a`` at ``s`` (whether legal or not)."""
        if not 0 <= a < ACTIONS:
            raise ValueError(f"chess: action {a} is out of range 0..{ACTIONS - 1}")
        flip = 56 if s.blob[64] else 0
        frm, kind = divmod(a, TYPES)
        promo = ""
        if kind < 56:
            df, dr = _DF[kind // 7] * (kind % 7 + 1), _DR[kind // 7] * (kind % 7 + 1)
        elif kind < 64:
            df, dr = _KN[kind - 56]
        else:
            df, dr, promo = (kind - 64) % 3 - 1, 1, _PROMO[(kind - 64) // 3]
        f, r = frm % 8 + df, frm // 8 + dr
        if not (0 <= f < 8 and 0 <= r < 8):
            raise ValueError(f"chess: action {a} leaves the board")
        to = (r * 8 + f) ^ flip
        frm ^= flip
        piece = s.blob[frm]
        if not promo and piece in (1, 7) and to // 8 in (0, 7):
            promo = "q"
        return Move(frm, to, promo)

    def action_of(self, s: ChessState, m: Move) -> int:
        """The action of board move ``m`` for the side to move at ``s`` (ValueError for a
        shape no piece moves in)."""
        flip = 56 if s.blob[64] else 0
        frm, to = m.frm ^ flip, m.to ^ flip
        df, dr = to % 8 - frm % 8, to // 8 - frm // 8
        if m.promo and m.promo != "q":
            if dr != 1 or abs(df) > 1 or m.promo not in _PROMO:
                raise ValueError(f"chess: {m.uci()} is not a promotion")
            return frm * TYPES + 64 + _PROMO.index(m.promo) * 3 + df + 1
        if (df, dr) in _KN:
            return frm * TYPES + 56 + _KN.index((df, dr))
        dist = max(abs(df), abs(dr))
        if dist == 0 or (df and dr and abs(df) != abs(dr)):
            raise ValueError(f"chess: {m.uci()} is not a move any piece makes")
        d = list(zip(_DF, _DR)).index(((df > 0) - (df < 0), (dr > 0) - (dr < 0)))
        return frm * TYPES + d * 7 + dist - 1

    def parse_uci(self, s: ChessState, text: str) -> int:
        """The action of UCI move ``text`` (``e2e4``, ``e7e8q``) at ``s``; ValueError when it
        is not a legal move there."""
        t = text.strip()
        if len(t) not in (4, 5) or (len(t) == 5 and t[4] not in "qrbn"):
            raise ValueError(f"chess: {text!r} is not a UCI move (e2e4, e7e8q)")
        a = self.action_of(s, Move(_parse_sq(t[:2]), _parse_sq(t[2:4]), t[4:]))
        if a not in self.legal_actions(s):
            raise ValueError(f"chess: {t} is illegal in {self.to_fen(s)}")
        return a

    def uci(self, s: ChessState, a: int) -> str:
        """UCI text of action ``a`` at ``s``."""
        return self.move_of(s, a).uci()

    def san(self, s: ChessState, a: int) -> str:
        """Standard algebraic notation of legal action ``a`` at ``s`` (``Nbd2``, ``exd5``,
        ``e8=Q+``, ``O-O#``), as PGN writes moves."""
        m, b = self.move_of(s, a), s.blob
        piece = _PIECES[b[m.frm] - 1].upper()
        if piece == "K" and abs(m.to - m.frm) == 2:
            text = "O-O" if m.to > m.frm else "O-O-O"
        else:
            capture = b[m.to] != 0 or (piece == "P" and m.to == b[66])
            if piece == "P":
                text = (_FILES[m.frm % 8] + "x" if capture else "") + _sq(m.to)
                text += f"={m.promo.upper()}" if m.promo else ""
            else:
                rivals = [
                    r.frm
                    for r in (self.move_of(s, x) for x in self.legal_actions(s) if x != a)
                    if r.to == m.to and b[r.frm] == b[m.frm]
                ]
                where = ""
                if rivals:
                    if all(r % 8 != m.frm % 8 for r in rivals):
                        where = _FILES[m.frm % 8]
                    elif all(r // 8 != m.frm // 8 for r in rivals):
                        where = str(m.frm // 8 + 1)
                    else:
                        where = _sq(m.frm)
                text = piece + where + ("x" if capture else "") + _sq(m.to)
        after = self.apply(s, a)
        if self._in_check(after.blob[:64], after.blob[64]):
            text += "#" if after.over and after.value == -1.0 else "+"
        return text

    def parse_move_at(self, s: ChessState, text: str) -> int:
        """A move typed at ``s``: UCI (``e2e4``, ``e7e8q``), SAN (``e4``, ``Nf3``, ``exd5``,
        ``e8=Q``, ``O-O``; check marks and ``x`` optional, ``0-0`` taken) or the action's
        number. ValueError when it names no legal move there."""
        t = text.strip()
        if t.isdigit():
            return self.parse_move(t)
        if _UCI_MOVE.fullmatch(t):
            return self.parse_uci(s, t)
        want = _san_key(t)
        found = [a for a in self.legal_actions(s) if _san_key(self.san(s, a)) == want]
        if len(found) == 1:
            return found[0]
        raise ValueError(
            f"chess: {text!r} is not a legal move here (UCI e2e4, SAN e4 or Nf3); "
            f"legal: {' '.join(self.san(s, a) for a in self.legal_actions(s))}"
        )

    def format_move_at(self, s: ChessState, a: int) -> str:
        """SAN (``Nf3``), as PGN writes it."""
        return self.san(s, a)

    def move_help(self) -> str:
        return "SAN (e4, Nf3, O-O) or UCI (e2e4, e7e8q)"

    # --- results and records ------------------------------------------------------------

    def result_text(self, winner: int | None, reason: str = "score") -> str:
        """PGN's result: ``1-0``, ``0-1``, ``1/2-1/2``, ``*`` for a disputed game."""
        if winner is None:
            return "*" if reason == "disputed" else "1/2-1/2"
        return ("1-0", "0-1")[winner]

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
        """The game as PGN (``actors.games.chess.pgn``): SAN moves, ``Termination`` the
        ``reason``, ``*`` while it goes on."""
        white, black = players
        return pgn_record(self, moves, white, black, result or "*", reason, comment, date, event)

    def openspiel_action(self, s: ChessState, a: int) -> int:
        """OpenSpiel's number for our action ``a`` at ``s`` (a legal action)."""
        black = s.blob[64]
        if a in _KING_TWO and s.blob[4 ^ (56 if black else 0)] == (12 if black else 6):
            return _OS_CASTLE_RIGHT if a == _KING_TWO[0] else _OS_CASTLE_LEFT
        return _OS_TABLE[a]

    # --- FEN ----------------------------------------------------------------------------

    def from_position(self, text: str) -> ChessState:
        """A FEN (``position_field``): ``from_fen``."""
        return self.from_fen(text)

    def from_fen(self, fen: str) -> ChessState:
        """The position of a FEN (six fields; the clocks may be left out); ValueError saying
        what is wrong."""
        parts = fen.split()
        if len(parts) == 4:
            parts += ["0", "1"]
        if len(parts) != 6:
            raise ValueError(f"chess: FEN {fen!r} needs 6 fields (or 4), got {len(parts)}")
        rows = parts[0].split("/")
        if len(rows) != 8:
            raise ValueError(f"chess: FEN {fen!r}: the board needs 8 ranks")
        board = bytearray(64)
        for i, row in enumerate(rows):
            rank, f = 7 - i, 0
            for ch in row:
                if ch.isdigit() and ch != "0":
                    f += int(ch)
                elif ch in _PIECES and f < 8:
                    board[rank * 8 + f] = _PIECES.index(ch) + 1
                    f += 1
                else:
                    raise ValueError(f"chess: FEN {fen!r}: bad rank {row!r}")
            if f != 8:
                raise ValueError(f"chess: FEN {fen!r}: rank {row!r} is not 8 squares")
        if parts[1] not in ("w", "b"):
            raise ValueError(f"chess: FEN {fen!r}: side to move {parts[1]!r} is not w or b")
        side = parts[1] == "b"
        rights = 0
        if parts[2] != "-":
            for ch in parts[2]:
                if ch not in _CASTLE or rights >> _CASTLE.index(ch) & 1:
                    raise ValueError(f"chess: FEN {fen!r}: bad castling field {parts[2]!r}")
                rights |= 1 << _CASTLE.index(ch)
        for b, (k, r) in enumerate(_CORNERS):
            if rights >> b & 1 and (
                board[k] != (6 if b < 2 else 12) or board[r] != (4 if b < 2 else 10)
            ):
                raise ValueError(
                    f"chess: FEN {fen!r}: castling {_CASTLE[b]} without its king and rook"
                )
        ep = NO_EP
        if parts[3] != "-":
            sq = _parse_sq(parts[3])
            if sq // 8 != (5 if not side else 2):
                raise ValueError(
                    f"chess: FEN {fen!r}: en-passant square {parts[3]} on the wrong rank"
                )
            # kept only when a pawn of the side to move can take there (OpenSpiel's rule)
            pawn = 1 if not side else 7
            below = sq - 8 if not side else sq + 8
            if any(
                0 <= below + d < 64
                and abs((below + d) % 8 - sq % 8) == 1
                and board[below + d] == pawn
                for d in (-1, 1)
            ):
                ep = sq
        try:
            clock, move = int(parts[4]), int(parts[5])
        except ValueError:
            raise ValueError(f"chess: FEN {fen!r}: the clocks must be whole numbers") from None
        if not 0 <= clock <= 100 or move < 1:
            raise ValueError(f"chess: FEN {fen!r}: halfmove clock 0..100 and move >= 1")
        ply = 2 * (move - 1) + side
        if ply > self.max_plies:
            raise ValueError(f"chess: FEN {fen!r}: ply {ply} is past the cap {self.max_plies}")
        head = bytes(board) + struct.pack("<BBBBHBB", side, rights, ep, clock, ply, 0, 0)
        blob = head + bytes(self._blob_size - len(head))
        try:
            moves = self._rules.legal(blob, b"")
        except ValueError as e:
            raise ValueError(f"chess: FEN {fen!r}: {str(e).removeprefix('chess: ')}") from None
        if self._in_check(board, 1 - side):
            raise ValueError(f"chess: FEN {fen!r}: the side not to move is in check")
        over, value = True, 0.0
        if not moves:
            value = -1.0 if self._in_check(board, side) else 0.0
        elif _sufficient(board) and clock < 100 and ply < self.max_plies:
            over = False
        return ChessState(blob, over, value)

    def to_fen(self, s: ChessState) -> str:
        b = s.blob
        ranks = []
        for rank in range(7, -1, -1):
            text, empty = "", 0
            for f in range(8):
                p = b[rank * 8 + f]
                if not p:
                    empty += 1
                    continue
                text += (str(empty) if empty else "") + _PIECES[p - 1]
                empty = 0
            ranks.append(text + (str(empty) if empty else ""))
        rights = "".join(c for i, c in enumerate(_CASTLE) if b[65] >> i & 1) or "-"
        ep = _sq(b[66]) if b[66] != NO_EP else "-"
        ply = b[68] | b[69] << 8
        return f"{'/'.join(ranks)} {'wb'[b[64]]} {rights} {ep} {b[67]} {ply // 2 + 1}"

    @staticmethod
    def _in_check(board: bytes | bytearray, side: int) -> bool:
        """Whether ``side``'s king is attacked on ``board`` (FEN positions only: the core
        answers this for every position it reaches)."""
        king = board.index(6 if side == 0 else 12)
        them = 7 if side == 0 else 1  # the opponent's pawn code; + type for the others
        kf, kr = king % 8, king // 8

        def at(f: int, r: int) -> int:
            return board[r * 8 + f] if 0 <= f < 8 and 0 <= r < 8 else -1

        step = 1 if side == 0 else -1  # an enemy pawn attacks from the rank ahead of the king
        if them in (at(kf - 1, kr + step), at(kf + 1, kr + step)):
            return True
        if any(at(kf + df, kr + dr) == them + 1 for df, dr in _KN):
            return True
        for d in range(8):
            if at(kf + _DF[d], kr + _DR[d]) == them + 5:
                return True
            diagonal = _DF[d] != 0 and _DR[d] != 0
            for k in range(1, 8):
                p = at(kf + k * _DF[d], kr + k * _DR[d])
                if p == 0:
                    continue
                if p in (them + 4, them + (2 if diagonal else 3)):
                    return True
                break
        return False


def _openspiel_index(a: int) -> int:
    """OpenSpiel's number for our action ``a`` (-1 where it leaves the board);
    castling aside. Its square is ``file * 8 + rank`` (ranks mirrored for black), then 9
    under-promotions (rook, bishop, knight) x (straight, towards h, towards a), then queen-like
    and knight moves in chess_common.cc's order."""
    frm, kind = divmod(a, TYPES)
    if kind < 56:
        dx, dy = _DF[kind // 7] * (kind % 7 + 1), _DR[kind // 7] * (kind % 7 + 1)
    elif kind < 64:
        dx, dy = _KN[kind - 56]
    else:
        dx, dy = (kind - 64) % 3 - 1, 1
    fx, fy = frm % 8, frm // 8  # ranks already from the mover's view, as OpenSpiel's
    if not (0 <= fx + dx < 8 and 0 <= fy + dy < 8):
        return -1
    start = (fx * 8 + fy) * TYPES
    if kind >= 64:
        return start + 3 * _OS_PROMO.index(_PROMO[(kind - 64) // 3]) + _OS_PROMO_DX.index(dx)

    def index(diff: int) -> int:
        return diff + 7 - (diff > 0)

    if dx == 0:
        dest = index(dy)
    elif dy == 0:
        dest = 14 + index(dx)
    elif dx == dy:
        dest = 28 + index(dx)
    elif dx == -dy:
        dest = 42 + index(dx)
    else:
        dest = 56 + _OS_KNIGHT.index((dx, dy))
    return start + 9 + dest


_OS_TABLE = [_openspiel_index(a) for a in range(ACTIONS)]
_KING_TWO = (4 * TYPES + 2 * 7 + 1, 4 * TYPES + 6 * 7 + 1)  # e1 two squares east, west


def _sufficient(board: bytes | bytearray) -> bool:
    """OpenSpiel's HasSufficientMaterial (as chess.c's), for FEN positions."""
    kinds = [p for p in board if p and p not in (6, 12)]
    if any(p in (1, 4, 5, 7, 10, 11) for p in kinds):
        return True
    knights = [kinds.count(2), kinds.count(8)]
    dark = [0, 0]
    light = [0, 0]
    for sq, p in enumerate(board):
        if p in (3, 9):
            side = p == 9
            if (sq % 8 + sq // 8) % 2 == 0:
                dark[side] += 1
            else:
                light[side] += 1
    if knights[0] > 1 or knights[1] > 1:
        return True
    for c in (0, 1):
        if knights[c] == 1:
            return dark[c] + light[c] > 0 or knights[1 - c] + dark[1 - c] + light[1 - c] > 0
    return sum(dark) > 0 and sum(light) > 0


__all__ = ["FEATURE_PLANES", "START_FEN", "Chess", "ChessState", "Move"]
