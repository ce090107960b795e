"""The referee of a game between two players: our rules check every move, end the game and
score it, and every player that can score a finished game is asked for its own verdict.

A move our rules refuse (occupied, suicide, superko, a pass while a disc can be placed) loses
the game for the side that made it (a forfeit); a player that refuses a legal move ends the
game as disputed (neither side's win). At the end our score (Go: Tromp-Taylor area of the
board as it stands, komi to white) is cross-checked with each player's own (GTP's
``final_score``, OpenSpiel's returns): a player that names another winner makes the game
disputed, with both scores kept, never a win. A player that agrees on the winner but not the
margin is kept as it said it (``scores``), and the game counts.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from actors.games import Game, State
from azserve.arena.players.base import RESIGN, Player, Refused


@dataclass
class GameRecord:
    """One refereed game, from neither side's view."""

    winner: int | None
    """0 black / first player, 1 white / second, None for a draw or a disputed game."""
    reason: str
    """``score``, ``resign``, ``forfeit`` (an illegal move by the loser) or ``disputed``."""
    result: str
    """SGF's RE: ``B+3.5``, ``W+R``, ``B+F``, ``0``, ``Void``."""
    moves: list[int] = field(default_factory=list)
    """Every move played, the opening's included (an illegal last move included)."""
    seconds: float = 0.0
    scores: dict[str, str] = field(default_factory=dict)
    """Each scorer's verdict on a game played to its end: ``referee`` (ours) and ``black`` /
    ``white`` for the players that scored it themselves."""
    why: str = ""
    """For a disputed game, what was disputed."""


def play_game(game: Game, black: Player, white: Player, opening: Sequence[int] = ()) -> GameRecord:
    """One game refereed by ``game``'s rules. ``opening``: moves played first on both players'
    behalf (told to both; each must be legal)."""
    t0 = time.monotonic()
    players = (black, white)
    for p in players:
        p.new_game(game)
    s = game.initial_state()
    moves: list[int] = []

    def done(winner: int | None, reason: str, result: str, why: str = "") -> GameRecord:
        return GameRecord(winner, reason, result, moves, time.monotonic() - t0, why=why)

    for a in opening:
        if game.is_terminal(s) or a not in game.legal_actions(s):
            raise ValueError(f"{game.name}: opening move {a} at ply {len(moves)} is not legal")
        color = game.to_play(s)
        moves.append(a)
        s = game.apply(s, a)
        for p in players:
            try:
                p.tell(color, a)
            except Refused as e:
                return done(None, "disputed", "Void", f"{p.name} refused opening move {a}: {e}")
    while not game.is_terminal(s):
        color = game.to_play(s)
        mover, other = players[color], players[1 - color]
        a = mover.genmove(color, s)
        if a == RESIGN:
            return done(1 - color, "resign", f"{'BW'[1 - color]}+R")
        if a not in game.legal_actions(s):
            moves.append(a)
            return done(1 - color, "forfeit", f"{'BW'[1 - color]}+F")
        moves.append(a)
        s = game.apply(s, a)
        try:
            other.tell(color, a)
        except Refused as e:
            return done(None, "disputed", "Void", f"{other.name} refused {a}: {e}")
    record = score_end(game, s, done)
    return cross_check(record, players)


def score_end(game: Game, s: State, done: Any) -> GameRecord:
    """Our result at a terminal state: the score where the game has one (Go), else the
    outcome (Othello: the disc count)."""
    tv = game.terminal_value(s)
    first = tv if game.to_play(s) == 0 else -tv
    winner = None if first == 0 else (0 if first > 0 else 1)
    if hasattr(game, "score"):
        record = done(winner, "score", game.format_score(s))  # type: ignore[attr-defined]
    elif hasattr(game, "discs"):
        black, white = game.discs(s)  # type: ignore[attr-defined]
        margin = abs(black - white)
        record = done(winner, "score", "0" if winner is None else f"{'BW'[winner]}+{margin}")
    else:
        record = done(winner, "score", "0" if winner is None else f"{'BW'[winner]}+")
    record.scores["referee"] = record.result
    return record


def cross_check(record: GameRecord, players: Sequence[Player]) -> GameRecord:
    """``record`` with every player's own verdict on the finished game: disputed when one
    names another winner."""
    for color, p in enumerate(players):
        verdict = p.final_score()
        if verdict is None:
            continue
        record.scores[("black", "white")[color]] = verdict.text
        if verdict.winner != record.winner and record.reason != "disputed":
            record.why = (
                f"{p.name} scores it {verdict.text}, the referee (Tromp-Taylor as the stones "
                f"stand) {record.result}"
            )
            record.winner, record.reason, record.result = None, "disputed", "Void"
    return record


__all__ = ["GameRecord", "cross_check", "play_game", "score_end"]
