"""Chess games as PGN: SAN moves from the start position, the result and, for a forfeit or a
dispute, why. ``Chess.record`` writes a game's record with ``pgn_record``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol


class Notation(Protocol):
    """What the writer needs of the game (``Chess``): its moves in SAN."""

    def initial_state(self) -> Any: ...

    def legal_actions(self, s: Any) -> list[int]: ...

    def is_terminal(self, s: Any) -> bool: ...

    def apply(self, s: Any, a: int) -> Any: ...

    def san(self, s: Any, a: int) -> str: ...


def pgn_result(r: Any) -> str:
    """A refereed game's (``GameRecord``) result as PGN writes it: ``1-0``, ``0-1``, ``1/2-1/2``,
    or ``*`` for a disputed one."""
    return {0: "1-0", 1: "0-1"}.get(r.winner, "*" if r.reason == "disputed" else "1/2-1/2")


def pgn_record(
    game: Notation,
    moves: Sequence[int],
    white: str,
    black: str,
    result: str = "*",
    termination: str = "",
    comment: str = "",
    date: str = "",
    event: str = "",
) -> str:
    """A game from the start position as PGN: the seven tag roster, ``Termination`` (how it
    ended) where given, SAN moves (an illegal one, a forfeit's, as a comment where it was
    played), ``comment`` in braces before the result (``*`` while the game goes on)."""
    tags = [
        ("Event", event or "azserve match"),
        ("Site", "?"),
        ("Date", date.replace("-", ".") or "????.??.??"),
        ("Round", "?"),
        ("White", white),
        ("Black", black),
        ("Result", result),
    ]
    if termination:
        tags.append(("Termination", termination))
    head = "".join(f'[{k} "{v.replace(chr(34), chr(39))}"]\n' for k, v in tags)
    s, words = game.initial_state(), []
    for i, a in enumerate(moves):
        if i % 2 == 0:
            words.append(f"{i // 2 + 1}.")
        if game.is_terminal(s) or a not in game.legal_actions(s):
            words.append(f"{{illegal: action {a}}}")
            break
        words.append(game.san(s, a))
        s = game.apply(s, a)
    if comment:
        words.append("{" + comment.replace("}", ")") + "}")
    words.append(result)
    lines, line = [], ""
    for w in words:
        if line and len(line) + 1 + len(w) > 79:
            lines.append(line)
            line = w
        else:
            line = f"{line} {w}" if line else w
    lines.append(line)
    return head + "\n" + "\n".join(lines) + "\n"


def pgn(game: Notation, r: Any, white: str, black: str, date: str = "", event: str = "") -> str:
    """A refereed game (``GameRecord``) as PGN: its moves, its result (``pgn_result``), how it
    ended, and for a forfeit or dispute why."""
    return pgn_record(game, r.moves, white, black, pgn_result(r), r.reason, r.why, date, event)


__all__ = ["Notation", "pgn", "pgn_record", "pgn_result"]
