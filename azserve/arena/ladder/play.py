"""Playing the ladder's games: each game's players (``azserve.arena.lineup``: checkpoints'
agents on one shared backend, engines kept running between games), one game played into its
store record and its game's own record text (``play_record``: SGF for Go, PGN for chess, text
otherwise) and written (``store_record``), and the ``--jobs`` worker that plays them in another
process (``LadderJob``). Which pair plays next is ``azserve.arena.ladder.schedule``'s."""

from __future__ import annotations

import datetime
import re
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from azserve.arena.ladder.store import Store, colours, game_seed
from azserve.arena.lineup import Lineup
from azserve.arena.players import PlayerError
from azserve.arena.referee import GameRecord, play_game, record_text
from azserve.config.schema import Config

if TYPE_CHECKING:
    from azserve.arena.ladder.store import Entrant


def play_record(
    lineup: Lineup, by_name: dict[str, Entrant], pair: tuple[str, str], k: int, seed: int
) -> tuple[dict[str, Any], str]:
    """Play game ``k`` of ``pair``: its store record, and its game's record text
    (``Game.record``)."""
    s = game_seed(seed, pair, k)
    black, white = colours(seed, pair, k)
    b = lineup.player(by_name[black].spec, s, black)
    w = lineup.player(by_name[white].spec, s + 1, white)
    game = lineup.game
    r: GameRecord = play_game(game, b, w)
    record = {
        "pair": list(pair),
        "k": k,
        "seed": s,
        "game": game.name,
        "black": black,
        "white": white,
        "winner": r.winner,
        "reason": r.reason,
        "result": r.result,
        "moves": [game.format_move(a) for a in r.moves],
        "scores": r.scores,
        "why": r.why,
        "seconds": round(r.seconds, 3),
        "sims": lineup.sims,
        "time": time.time(),
        "players": {
            n: {k2: v for k2, v in asdict(by_name[n]).items() if k2 != "name"}
            for n in (black, white)
        },
    }
    today = datetime.date.today().isoformat()
    return record, record_text(game, r, (black, white), date=today, event="azserve ladder")


def store_record(store: Store, record: dict[str, Any], text: str, suffix: str) -> None:
    """Write a played game: its record text under ``games/`` (``NAME{suffix}``: the game's
    ``record_suffix``), then its line in the store."""
    records = store.path.parent / "games"
    records.mkdir(exist_ok=True)
    name = f"{record['black']}_v_{record['white']}_{record['k']}"
    name = re.sub(r"[^A-Za-z0-9@._-]+", "_", name)[:150]
    (records / f"{name}{suffix}").write_text(text)
    store.append(record)


def play_pair(
    lineup: Lineup, store: Store, by_name: dict[str, Entrant], pair: tuple[str, str], seed: int
) -> dict[str, Any]:
    """Play and store the pair's next game; returns its record."""
    record, text = play_record(lineup, by_name, pair, store.next_k(pair), seed)
    store_record(store, record, text, lineup.game.record_suffix)
    return record


@dataclass(frozen=True)
class JobSetup:
    """What each ``--jobs`` worker builds its ``Lineup`` from."""

    game: str
    """The referee's game spec (``make_game``)."""
    sims: int
    sample_moves: int
    log_dir: str
    entrants: list[Entrant]
    configs: dict[str, Config]
    """Checkpoint path -> its run's config, as ``Lineup`` takes them."""


class LadderJob:
    """A ``--jobs`` worker's games (``azserve.arena.pool``): task ``{pair, k, seed}``, answer
    ``{record, text}``, or ``{error}`` when a player failed (the game is not stored; the failed
    engine is restarted for its next game)."""

    def __init__(self, setup: JobSetup) -> None:
        from actors.games import make_game

        self.lineup = Lineup(make_game(setup.game), Path(setup.log_dir), setup.sims,
                             setup.sample_moves, setup.configs)  # fmt: skip
        self.by_name = {e.name: e for e in setup.entrants}

    def play(self, task: dict[str, Any]) -> dict[str, Any]:
        pair = (task["pair"][0], task["pair"][1])
        try:
            record, text = play_record(self.lineup, self.by_name, pair, task["k"], task["seed"])
        except PlayerError as e:
            for n in pair:
                self.lineup.drop(n)
            return {"error": str(e)}
        return {"record": record, "text": text}

    def close(self) -> None:
        self.lineup.close()


__all__ = ["JobSetup", "LadderJob", "play_pair", "play_record", "store_record"]
