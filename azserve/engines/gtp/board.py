"""The game as a GTP engine sees it: a Go position that GTP's controllers may change in any
order (moves of either colour, setup and handicap stones, undo, a komi change).

GTP 2 lets a controller play either colour at any time (``play b D5`` right after ``play b
E5``): the move is played for that colour and the other colour is to move next. Setup and
handicap stones go on the board without being moves (no ply, no capture), before the first
move. The rules stay the game's (actors/games/go/rules.py: positional superko, no suicide); a move
after two passes resumes the game (the passes start over), as GUIs do when a player plays on.
The board holds the network's own game: a ``go9-features`` net's states carry its ko point and
last moves, as a ``go9`` net's carry its four planes' needs.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from actors.games.go.rules import BLACK, EMPTY, Go, GoState


class GtpError(Exception):
    """A command that fails: its message follows ``? `` in the reply."""


COLORS = {"b": 0, "black": 0, "w": 1, "white": 1}


def parse_color(text: str) -> int:
    """0 black, 1 white; GtpError for anything else."""
    color = COLORS.get(text.lower())
    if color is None:
        raise GtpError(f"invalid color {text!r}: expected b, w, black or white")
    return color


@dataclass
class Board:
    """The position and what undo needs: the states played through and the moves (colour,
    action) that led to each. ``setup``: the stones placed before the first move, as
    (colour, point)."""

    game: Go
    states: list[GoState] = field(default_factory=list)
    moves: list[tuple[int, int]] = field(default_factory=list)
    setup: list[tuple[int, int]] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.states:
            self.states = [self.game.initial_state()]

    @property
    def state(self) -> GoState:
        return self.states[-1]

    @property
    def empty(self) -> bool:
        """No stone on the board and no move played."""
        return not self.moves and not any(self.state.board)

    def for_color(self, color: int) -> GoState:
        """The position with ``color`` to move (GTP: either colour may move at any time)."""
        s = self.state
        return s if s.color == color else s._replace(color=color)

    def play(self, color: int, action: int) -> None:
        """Play ``action`` for ``color``; GtpError saying why the rules refuse it."""
        s = self.for_color(color)
        game = self.game
        if s.ply >= game.max_moves:
            raise GtpError(f"illegal move: the game reached its move cap ({game.max_moves})")
        if s.passes >= 2:
            if action == game.pass_action:  # a pass after the end keeps it ended
                nxt = game.apply(s._replace(passes=0), action)  # the game's own pass
                self._push(color, action, nxt._replace(passes=s.passes + 1))
                return
            s = s._replace(passes=0)  # play resumes after two passes
        try:
            nxt = game.apply(s, action)
        except ValueError as e:
            raise GtpError(f"illegal move: {str(e).split(': ', 1)[-1]}") from None
        self._push(color, action, nxt)

    def _push(self, color: int, action: int, state: GoState) -> None:
        self.states.append(state)
        self.moves.append((color, action))

    def place(self, stones: list[tuple[int, int]], to_move: int | None = None) -> None:
        """Setup stones, (colour, point) each, on an empty board (handicap: black's); then
        ``to_move`` moves (default: white after black-only stones, else black). GtpError for a
        board that is not empty, a point given twice or the pass."""
        if not self.empty:
            raise GtpError("board not empty")
        points = [p for _, p in stones]
        if len(set(points)) != len(points):
            raise GtpError("bad vertex list: a point is given twice")
        if any(not 0 <= p < self.game.cells for p in points):
            raise GtpError("bad vertex list: pass is not a stone")
        board = bytearray(self.state.board)
        for color, p in stones:
            board[p] = BLACK + color
        if to_move is None:
            to_move = 1 if stones and all(c == 0 for c, _ in stones) else 0
        self.states = [self.game.setup_state(bytes(board), to_move)]
        self.setup = list(stones)

    def undo(self) -> None:
        if not self.moves:
            raise GtpError("cannot undo: no move played")
        self.states.pop()
        self.moves.pop()

    def with_komi(self, komi: float) -> Board:
        """The same position under another komi (the states do not depend on it)."""
        return Board(self.game.with_komi(komi), list(self.states), list(self.moves),
                     list(self.setup))  # fmt: skip

    def stones(self, color: int) -> list[int]:
        """The points holding ``color``'s stones."""
        return [p for p, v in enumerate(self.state.board) if v == BLACK + color]

    def empties(self) -> list[int]:
        return [p for p, v in enumerate(self.state.board) if v == EMPTY]


def handicap_points(size: int, stones: int) -> list[int]:
    """GTP's fixed handicap placement (its section 4.1.1) for ``size`` x ``size``: 2..9 stones on
    odd boards from 9 up, 2..4 on 7x7 and even boards from 8 up; GtpError otherwise."""
    if size < 7:
        raise GtpError(f"invalid number of stones: no fixed handicap on {size}x{size}")
    most = 9 if size % 2 == 1 and size >= 9 else 4
    if not 2 <= stones <= most:
        raise GtpError(f"invalid number of stones: {size}x{size} takes 2..{most}")
    edge = 2 if size < 13 else 3  # the star points' distance from the edge
    lo, hi, mid = edge, size - 1 - edge, size // 2
    # (col, row), row 0 at the bottom, in the spec's order: D4 Q16 D16 Q4, D10 Q10, K4 K16.
    corners = [(lo, lo), (hi, hi), (lo, hi), (hi, lo)]
    sides = [(lo, mid), (hi, mid)]
    tops = [(mid, lo), (mid, hi)]
    if stones <= 4:
        chosen = corners[:stones]
    elif stones == 5:
        chosen = [*corners, (mid, mid)]
    elif stones == 6:
        chosen = [*corners, *sides]
    elif stones == 7:
        chosen = [*corners, *sides, (mid, mid)]
    elif stones == 8:
        chosen = [*corners, *sides, *tops]
    else:
        chosen = [*corners, *sides, *tops, (mid, mid)]
    return [row * size + col for col, row in chosen]


def free_handicap_points(size: int, stones: int) -> list[int]:
    """``place_free_handicap``'s choice: the fixed points where the board has them, then each
    time the point with the most room (farthest from the stones so far, up to 3, and from the
    edge, up to 2; ties to the lower point), so that the stones spread out."""
    if not 2 <= stones <= size * size - 1:
        raise GtpError(f"invalid number of stones: 2..{size * size - 1}")
    try:
        points = handicap_points(size, min(stones, 9))[:stones]
    except GtpError:
        points = []
    while len(points) < stones:
        taken = set(points)

        def room(p: int) -> tuple[int, int]:
            r, c = divmod(p, size)
            edge = min(r, c, size - 1 - r, size - 1 - c)
            near = min((abs(r - q // size) + abs(c - q % size) for q in points), default=size)
            return (min(near, 3) + min(edge, 2), -p)

        points.append(max((p for p in range(size * size) if p not in taken), key=room))
    return points


__all__ = [
    "COLORS",
    "Board",
    "GtpError",
    "free_handicap_points",
    "handicap_points",
    "parse_color",
]
