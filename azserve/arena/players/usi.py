"""Shogi engines as players: any USI engine (Fairy-Stockfish, YaneuraOu, or ``azserve usi``
itself), driven as shogi tournament managers drive them.

A USI player spec (``--opponent``, the ladder's ``--anchor``): ``usi:CMD[;NAME=VALUE...]``.
``CMD`` is the engine's command line (looked for on PATH, then in /usr/games, where Debian puts
Fairy-Stockfish); each ``NAME=VALUE`` is a USI option sent with ``setoption``, except
``byoyomi``, ``movetime``, ``nodes`` and ``depth``, which limit each ``go`` (``byoyomi=100``
when none is given: ``go btime 0 wtime 0 byoyomi 100``). Fairy-Stockfish speaks USI when the
first command is ``usi``, and plays shogi by default then (its ``UCI_Variant``); its weakest::

    usi:fairy-stockfish;Skill Level=-20;byoyomi=50

The engine is told the game as ``position startpos moves 7g7f ...`` before each ``go``.
``bestmove resign`` resigns; ``bestmove win`` (an entering-king declaration) that our rules do
not allow there loses the game as a false declaration does under CSA's rules (a forfeit: our
rules declare for a side as soon as it may, so a true one never gets that far).

GNU Shogi (``/usr/games/gnushogi``, 1.4.2 in Debian) is no player here: it speaks neither USI
nor CECP (``xboard`` and ``protover`` are answered ``Illegal move``) but the old xshogi dialect
of GNU Chess 4, whose replies (``1. ... 8b5b``) carry no protocol framing to read them by.
"""

from __future__ import annotations

from typing import Any

from actors.games import State
from azserve.arena.players.base import RESIGN
from azserve.arena.players.uci import UciPlayer
from azserve.config.player_spec import parse_usi_spec


class UsiPlayer(UciPlayer):
    """An external engine speaking USI on its stdin/stdout (``UciPlayer``'s conversation)."""

    protocol = "usi"
    plays = "shogi"

    @staticmethod
    def parse_spec(spec: str) -> tuple[str, dict[str, str], dict[str, int]]:
        return parse_usi_spec(spec)

    def move_text(self, s: State, a: int) -> str:
        return str(self.game.format_move_at(s, a))

    def go_line(self) -> str:
        limits: dict[str, Any] = dict(self.limits)
        if "byoyomi" in limits:  # a clock with only byoyomi left, as USI writes it
            limits = {"btime": 0, "wtime": 0, **limits}
        return "go " + " ".join(f"{k} {v}" for k, v in limits.items())

    def read_move(self, state: State, text: str) -> int:
        if text == "resign":
            return RESIGN
        if text == "win":
            return int(self.game.num_actions)  # never legal: a false declaration, forfeited
        return int(self.game.action_of(state, self.game.usi_move(text)))


__all__ = ["UsiPlayer"]
