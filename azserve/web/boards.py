"""A game's positions as the pages draw them: a grid of stones or discs (Go, Othello, Connect
Four, tic-tac-toe), a chess position for chessground (FEN, moves as UCI squares), or, for any
other game (a custom Python game, an OpenSpiel one), the game's own text rendering.

Everything comes from the game's public interface: the grid from ``encode``'s planes 0 and 1
(the side to move's stones and the opponent's, top row first, as the contract says) and
``to_play``; chess from its ``to_fen`` and ``uci``; text from ``render``. What differs between
the grid games is only how the board looks and where an action lands, in ``GRIDS`` below.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from actors.games import Game, State

Cell = tuple[int, int]
"""(row, column) on the drawn board, row 0 at the top."""


@dataclass(frozen=True)
class Grid:
    """How one family of grid games is drawn."""

    style: str
    """What the page draws: ``go`` (stones on intersections), ``othello`` (discs on green),
    ``connect4`` (discs in a frame), ``tictactoe`` (X and O)."""
    cell_of: Callable[[int, int, int], Cell | int | None]
    """(action, rows, columns) -> the cell the action plays, or for Connect Four the column
    (an int), or None (a pass)."""
    col_labels: Callable[[int], list[str]]
    row_labels: Callable[[int], list[str]]
    """Labels along the top and the left side, rows from the top."""


_GTP_COLUMNS = "ABCDEFGHJKLMNOPQRSTUVWXYZ"


def _go_cell(a: int, rows: int, cols: int) -> Cell | None:
    # Go's actions are row * N + column with row 0 at the bottom (OpenSpiel's numbering).
    return None if a >= rows * cols else (rows - 1 - a // cols, a % cols)


def _row_major(a: int, rows: int, cols: int) -> Cell | None:
    return None if a >= rows * cols else (a // cols, a % cols)


GRIDS: dict[str, Grid] = {
    "go": Grid(
        "go",
        _go_cell,
        lambda n: list(_GTP_COLUMNS[:n]),
        lambda n: [str(n - r) for r in range(n)],
    ),
    "othello": Grid(
        "othello",
        _row_major,
        lambda n: list("abcdefgh"[:n]),
        lambda n: [str(r + 1) for r in range(n)],
    ),
    "connect4": Grid(
        "connect4",
        lambda a, rows, cols: a,
        lambda n: [str(c) for c in range(n)],
        lambda n: [],
    ),
    "tictactoe": Grid("tictactoe", _row_major, lambda n: [], lambda n: []),
}
"""The built-in grid games by the rules they play (``Game.rules``; every Go size is ``go``)."""


def grid_of(game: Game) -> Grid | None:
    rules = game.rules
    if rules.startswith("go") and rules[2:].isdigit():
        return GRIDS["go"]
    return GRIDS.get(rules)


def is_chess(game: Game) -> bool:
    """A game UCI speaks is chess's (its ``to_fen`` and ``uci`` are what the engines use)."""
    return "uci" in game.protocols


def board_of(game: Game) -> dict[str, Any]:
    """What does not change during a game: ``{"kind": "grid", "style", "rows", "cols",
    "colLabels", "rowLabels"}``, ``{"kind": "chess"}`` or ``{"kind": "text"}``; with the game's
    name and its sides' names."""
    head = {"game": game.name, "sides": list(game.sides)}
    grid = grid_of(game)
    if grid is not None:
        _, rows, cols = game.obs_shape
        return {
            **head,
            "kind": "grid",
            "style": grid.style,
            "rows": rows,
            "cols": cols,
            "colLabels": grid.col_labels(cols),
            "rowLabels": grid.row_labels(rows),
        }
    if is_chess(game):
        return {**head, "kind": "chess"}
    return {**head, "kind": "text"}


def cells(game: Game, s: State) -> str:
    """The grid top row first as one string: ``X`` the first player's, ``O`` the second's,
    ``.`` empty."""
    planes = game.encode(s)
    mine, theirs = planes[0].astype(bool), planes[1].astype(bool)
    first, second = (mine, theirs) if game.to_play(s) == 0 else (theirs, mine)
    out = np.full(mine.shape, ".", dtype="<U1")
    out[first] = "X"
    out[second] = "O"
    return "".join(out.ravel())


def position(game: Game, s: State) -> dict[str, Any]:
    """One position: ``{"cells"}`` (grid), ``{"fen"}`` (chess) or ``{"text"}``, with the side
    to move (``toPlay``, None at the end)."""
    over = game.is_terminal(s)
    out: dict[str, Any] = {"toPlay": None if over else game.to_play(s)}
    if grid_of(game) is not None:
        out["cells"] = cells(game, s)
    elif is_chess(game):
        out["fen"] = game.to_fen(s)  # type: ignore[attr-defined]
    else:
        out["text"] = game.render(s)
    return out


def move(game: Game, s: State, a: int) -> dict[str, Any]:
    """Action ``a`` played at ``s``: its text as the game writes it there (SAN for chess), and
    where the board shows it (``target``: a grid cell or a Connect Four column; ``uci`` for
    chess)."""
    out: dict[str, Any] = {"action": a, "text": _text(game, s, a), "by": game.to_play(s)}
    out.update(where(game, s, a))
    return out


def where(game: Game, s: State, a: int) -> dict[str, Any]:
    """Where action ``a`` at ``s`` lands on the drawn board: ``{"target": [r, c] | column}``,
    ``{"uci": "e2e4"}``, or nothing (a pass, a text board)."""
    grid = grid_of(game)
    if grid is not None:
        _, rows, cols = game.obs_shape
        target = grid.cell_of(a, rows, cols)
        return {} if target is None else {"target": target}
    if is_chess(game):
        try:
            return {"uci": game.uci(s, a)}  # type: ignore[attr-defined]
        except ValueError:
            return {}
    return {}


def _text(game: Game, s: State, a: int) -> str:
    try:
        return game.format_move_at(s, a)
    except ValueError:  # an illegal last move (a forfeit) has no notation at s
        return str(a)


def policy(game: Game, s: State, p: dict[int, float], top: int = 12) -> list[dict[str, Any]]:
    """The search's policy at ``s`` (action -> probability) as its ``top`` moves, each
    ``{"action", "p", "text"}`` and where it lands (``where``), most probable first."""
    best = sorted(p.items(), key=lambda kv: -kv[1])[:top]
    return [
        {"action": a, "p": round(float(w), 4), "text": _text(game, s, a), **where(game, s, a)}
        for a, w in best
        if w > 0
    ]


__all__ = [
    "GRIDS",
    "Grid",
    "board_of",
    "cells",
    "grid_of",
    "is_chess",
    "move",
    "policy",
    "position",
]
