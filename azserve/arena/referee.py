"""The referee of a game between two players, the one loop every judged game is played in
(``azserve match``, the ladder, ``azserve eval``'s matches, ``azserve play``): our rules check
every move, end the game and score it, and every player that can score a finished game is
asked for its own verdict.

A move our rules refuse (occupied, suicide, superko, a pass while a disc can be placed) loses
the game for the side that made it (a forfeit); a player that refuses a legal move ends the
game as disputed (neither side's win). At the end our score (``Game.score_text``; Go: Tromp-Taylor
area of the board as it stands, komi to white) is cross-checked with each player's own (GTP's
``final_score``, OpenSpiel's returns): a player that names another winner makes the game
disputed, with both scores kept, never a win. A player that agrees on the winner but not the
margin is kept as it said it (``scores``), and the game counts.
"""

from __future__ import annotations

import time
from collections.abc import Generator, Sequence
from dataclasses import dataclass, field

from actors.games import Game, State
from azserve.arena.players.base import RESIGN, Player, Refused


@dataclass
class GameRecord:
    """One refereed game, from neither side's view."""

    winner: int | None
    """0 the first player (Go's black, chess's white), 1 the second, None for a draw or a
    disputed game."""
    reason: str
    """``score``, ``resign``, ``forfeit`` (an illegal move by the loser) or ``disputed``."""
    result: str
    """As the game's records write it (``Game.result_text``, ``Game.score_text``): Go
    ``B+3.5``, ``W+R``, ``B+F``, ``0``, ``Void``; chess ``1-0``, ``1/2-1/2``, ``*``;
    otherwise ``first wins``, ``draw``, ``void``."""
    moves: list[int] = field(default_factory=list)
    """Every move played, the opening's included (an illegal last move included)."""
    seconds: float = 0.0
    scores: dict[str, str] = field(default_factory=dict)
    """Each scorer's verdict on a game played to its end: ``referee`` (ours) and, by the
    game's side names (``Game.sides``: ``black``, ``white``), the players that scored it
    themselves."""
    why: str = ""
    """For a disputed game, what was disputed."""


Turn = tuple[int, State]
"""What the referee asks for: the move of side ``color`` at ``state``."""


def refereed(
    game: Game, players: Sequence[Player], opening: Sequence[int] = ()
) -> Generator[Turn, int, GameRecord]:
    """The game loop, as a generator: it yields each turn whose move it needs, is sent the
    move, and returns the record. ``play_game`` and ``play_game_async`` drive it (a player's
    move asked for in or out of an event loop); everything else (telling, checking, ending,
    scoring) happens here."""
    t0 = time.monotonic()
    for p in players:
        p.new_game(game)
    s = game.initial_state()
    moves: list[int] = []

    def done(winner: int | None, reason: str, result: str, why: str = "") -> GameRecord:
        return GameRecord(winner, reason, result, moves, time.monotonic() - t0, why=why)

    def void(why: str) -> GameRecord:
        return done(None, "disputed", game.result_text(None, "disputed"), why)

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
                return void(f"{p.name} refused opening move {a}: {e}")
    while not game.is_terminal(s):
        color = game.to_play(s)
        other = players[1 - color]
        a = yield color, s
        if a == RESIGN:
            return done(1 - color, "resign", game.result_text(1 - color, "resign"))
        if a not in game.legal_actions(s):
            moves.append(a)
            return done(1 - color, "forfeit", game.result_text(1 - color, "forfeit"))
        moves.append(a)
        s = game.apply(s, a)
        try:
            other.tell(color, a)
        except Refused as e:
            return void(f"{other.name} refused {a}: {e}")
    record = done(game.winner(s), "score", game.score_text(s))
    record.scores["referee"] = record.result
    return cross_check(game, record, players)


def play_game(game: Game, black: Player, white: Player, opening: Sequence[int] = ()) -> GameRecord:
    """One game refereed by ``game``'s rules, ``black`` the first player. ``opening``: moves
    played first on both players' behalf (told to both; each must be legal)."""
    players = (black, white)
    steps = refereed(game, players, opening)
    try:
        color, s = next(steps)
        while True:
            color, s = steps.send(players[color].genmove(color, s))
    except StopIteration as end:
        return end.value  # type: ignore[no-any-return]


async def play_game_async(
    game: Game, black: Player, white: Player, opening: Sequence[int] = ()
) -> GameRecord:
    """``play_game`` on an event loop: each move asked with ``genmove_async``, so the searches
    of many games played at once share batches (``azserve eval``'s matches)."""
    players = (black, white)
    steps = refereed(game, players, opening)
    try:
        color, s = next(steps)
        while True:
            color, s = steps.send(await players[color].genmove_async(color, s))
    except StopIteration as end:
        return end.value  # type: ignore[no-any-return]


def cross_check(game: Game, record: GameRecord, players: Sequence[Player]) -> GameRecord:
    """``record`` with every player's own verdict on the finished game: disputed when one
    names another winner."""
    for color, p in enumerate(players):
        verdict = p.final_score()
        if verdict is None:
            continue
        record.scores[game.sides[color]] = verdict.text
        if verdict.winner != record.winner and record.reason != "disputed":
            record.why = (
                f"{p.name} scores it {verdict.text}, the referee (our rules, the board as it "
                f"stands) {record.result}"
            )
            record.winner, record.reason = None, "disputed"
            record.result = game.result_text(None, "disputed")
    return record


def record_text(
    game: Game, r: GameRecord, players: tuple[str, str], date: str = "", event: str = ""
) -> str:
    """A refereed game as the game's own record (``Game.record``: SGF, PGN, text), its
    comment why it was disputed and each scorer's verdict where they differ."""
    scores = ", ".join(f"{k} {v}" for k, v in r.scores.items()) if len(r.scores) > 1 else ""
    comment = "; ".join(x for x in (r.why, scores) if x)
    return game.record(r.moves, players, r.result, r.reason, comment, date, event)


__all__ = [
    "GameRecord",
    "Turn",
    "cross_check",
    "play_game",
    "play_game_async",
    "record_text",
    "refereed",
]
