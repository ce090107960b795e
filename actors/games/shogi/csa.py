"""CSA records of shogi games (the CSA standard file format, version 2.2): the players, the
even start (``PI``), one line per move (``+7776FU``: side, from, to, the piece after the move;
``00`` as the origin of a drop), and the end (``%TORYO``, ``%TSUMI``, ``%KACHI``...).
cshogi's CSA parser reads them back (tests/test_shogi_rules.py)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol


class Notation(Protocol):
    """What the writer needs of the game (``Shogi``): its moves and how a game ended."""

    def initial_state(self) -> Any: ...

    def apply(self, s: Any, a: int) -> Any: ...

    def to_play(self, s: Any) -> int: ...

    def move_of(self, s: Any, a: int) -> Any: ...

    def end_reason(self, s: Any) -> str: ...


# CSA's names of the piece types 1..14 (P L N S B R G K +P +L +N +S +B +R).
_CSA = ("FU", "KY", "KE", "GI", "KA", "HI", "KI", "OU", "TO", "NY", "NK", "NG", "UM", "RY")
_HAND = "PLNSBRG"


def _square(sq: int) -> str:
    return f"{9 - sq % 9}{sq // 9 + 1}"


def csa_move(game: Notation, s: Any, a: int) -> str:
    """CSA's line for legal action ``a`` at ``s`` (``+7776FU``, ``-0055KA``)."""
    m = game.move_of(s, a)
    sign = "-" if game.to_play(s) else "+"
    if m.drop:
        return f"{sign}00{_square(m.to)}{_CSA[_HAND.index(m.drop)]}"
    kind = (s.blob[m.frm] & 15) + (8 if m.promote else 0)
    return f"{sign}{_square(m.frm)}{_square(m.to)}{_CSA[kind - 1]}"


def _ending(game: Notation, end: Any, reason: str) -> str:
    """CSA's special move for how the game ended: ``%TORYO`` (resigned), ``%ILLEGAL_MOVE``
    (forfeited), ``%CHUDAN`` (disputed or stopped), or the rules' end: ``%TSUMI``, ``%KACHI``
    (an entering king declared), ``%SENNICHITE``, ``%HIKIWAKE`` (our ply cap)."""
    if reason == "resign":
        return "%TORYO"
    if reason == "forfeit":
        return "%ILLEGAL_MOVE"
    ending = game.end_reason(end)
    if not ending:
        return "%CHUDAN"
    return {"mate": "%TSUMI", "declaration": "%KACHI", "ply cap": "%HIKIWAKE"}.get(
        ending, "%SENNICHITE"
    )


def csa_record(
    game: Notation,
    moves: Sequence[int],
    players: tuple[str, str],
    result: str,
    reason: str,
    comment: str,
    date: str,
    event: str,
) -> str:
    """The game of ``moves`` (from the initial state; a last illegal one, kept for a forfeit,
    as a comment) as CSA text: ``%`` ending only when ``result`` is given."""
    lines = ["V2.2", f"N+{players[0]}", f"N-{players[1]}"]
    if event:
        lines.append(f"$EVENT:{event}")
    if date:
        lines.append(f"$START_TIME:{date.replace('-', '/')}")
    if comment:
        lines.append("'" + " ".join(comment.split()))
    lines += ["PI", "+"]
    s = game.initial_state()
    for i, a in enumerate(moves):
        try:
            line = csa_move(game, s, a)
            s = game.apply(s, a)
        except ValueError:
            lines.append(f"'illegal move #{i}: action {a}")
            break
        lines.append(line)
    if result:
        lines.append(_ending(game, s, reason))
        lines.append(f"'result: {result}" + (f" ({reason})" if reason else ""))
    return "\n".join(lines) + "\n"
