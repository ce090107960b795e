"""A refereed chess game as PGN: SAN moves from the start position, the result and, for a
forfeit or a dispute, why."""

from __future__ import annotations

from typing import Any

from actors.games.chess.rules import Chess


def pgn_result(r: Any) -> str:
    """A refereed game's (``GameRecord``) result as PGN writes it: ``1-0``, ``0-1``, ``1/2-1/2``,
    or ``*`` for a disputed one."""
    return {0: "1-0", 1: "0-1"}.get(r.winner, "*" if r.reason == "disputed" else "1/2-1/2")


def pgn(game: Chess, r: Any, white: str, black: str, date: str = "", event: str = "") -> str:
    """A refereed game (``GameRecord``) as PGN from the start position: SAN moves, the result
    (``1-0``, ``0-1``, ``1/2-1/2``, ``*`` for a disputed one) and, for a forfeit or dispute, why
    in a comment."""
    result = pgn_result(r)
    tags = [
        ("Event", event or "azserve match"),
        ("Site", "?"),
        ("Date", date.replace("-", ".") or "????.??.??"),
        ("Round", "?"),
        ("White", white),
        ("Black", black),
        ("Result", result),
        ("Termination", r.reason),
    ]
    head = "".join(f'[{k} "{v.replace(chr(34), chr(39))}"]\n' for k, v in tags)
    s, words = game.initial_state(), []
    for i, a in enumerate(r.moves):
        if i % 2 == 0:
            words.append(f"{i // 2 + 1}.")
        if s.over or a not in game.legal_actions(s):
            words.append(f"{{illegal: action {a}}}")
            break
        words.append(game.san(s, a))
        s = game.apply(s, a)
    if r.why:
        words.append("{" + r.why.replace("}", ")") + "}")
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


__all__ = ["pgn", "pgn_result"]
