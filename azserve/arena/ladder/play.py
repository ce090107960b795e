"""Playing the ladder's games: each game's players (``Roster``: checkpoints' agents on one shared
backend, engines kept running between games), one game played into its store record
(``play_record``) and written (``store_record``), and the ``--jobs`` worker that plays them in
another process (``LadderJob``). Which pair plays next is ``azserve.arena.ladder.schedule``'s."""

from __future__ import annotations

import datetime
import re
import time
from collections import OrderedDict
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from actors.games import Game
from actors.games.go.sgf import sgf
from azserve.arena.ladder.store import Store, game_seed
from azserve.arena.players import AgentPlayer, Player, PlayerError, make_player, parse_spec
from azserve.arena.referee import GameRecord, play_game
from azserve.config.schema import Config

if TYPE_CHECKING:
    from azserve.arena.ladder.store import Entrant


class Roster:
    """Builds each game's players: checkpoints' agents cached (a few at a time, each a version
    on one shared, compiled backend: ``azserve.arena.agent.ServedNet``), GTP engines kept
    running between games (restarted after a failure)."""

    def __init__(
        self,
        game: Game,
        sims: int,
        sample_moves: int,
        log_dir: Path,
        configs: dict[str, Config] | None = None,
    ) -> None:
        self.game = game
        self.configs = configs or {}
        """Checkpoint path -> its run's config, for checkpoints that carry none."""
        self.sims = sims
        self.sample_moves = sample_moves
        self.log_dir = log_dir
        self._agents: OrderedDict[str, Any] = OrderedDict()
        self._engines: dict[str, Player] = {}

    def agent(self, path: str) -> Any:
        from actors.games import make_game
        from azserve.arena.agent import Agent, agent_from_checkpoint, analysis_mcts
        from azserve.model.weights import load_weights_file

        if path not in self._agents:
            cfg = self.configs.get(path)
            if cfg is None:
                _, agent = agent_from_checkpoint(path, None, (), self.game.name)
            else:
                agent = Agent(make_game(cfg.game), cfg.net, load_weights_file(path),
                              analysis_mcts(cfg), backend=cfg.backend)  # fmt: skip
            self._agents[path] = agent
            while len(self._agents) > 6:
                self._agents.popitem(last=False)[1].close()  # its version off the backend
        self._agents.move_to_end(path)
        return self._agents[path]

    def player(self, e: Entrant, seed: int) -> Player:
        kind, arg = parse_spec(e.spec)
        if kind == "checkpoint":
            return AgentPlayer(self.agent(arg), self.sims, self.sample_moves, seed, name=e.name)
        if kind in ("gtp", "uci"):  # one engine process per anchor, kept between games
            if e.name not in self._engines:
                log = self.log_dir / (re.sub(r"[^A-Za-z0-9._-]+", "_", e.name)[:80] + ".log")
                self._engines[e.name] = make_player(e.spec, seed, log)
            return self._engines[e.name]
        return make_player(e.spec, seed)

    def drop(self, e: Entrant) -> None:
        """Forget a failed engine: the next game starts a fresh one."""
        engine = self._engines.pop(e.name, None)
        if engine is not None:
            engine.close()

    def close(self) -> None:
        for agent in self._agents.values():
            agent.close()
        self._agents.clear()
        for engine in self._engines.values():
            engine.close()
        self._engines.clear()


def play_record(
    roster: Roster, by_name: dict[str, Entrant], pair: tuple[str, str], k: int, seed: int
) -> tuple[dict[str, Any], str | None]:
    """Play game ``k`` of ``pair``: its store record, and its SGF for Go (else None)."""
    s = game_seed(seed, pair, k)
    black, white = (pair[0], pair[1]) if k % 2 == 0 else (pair[1], pair[0])
    b = roster.player(by_name[black], s)
    w = roster.player(by_name[white], s + 1)
    game = roster.game
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
        "sims": roster.sims,
        "time": time.time(),
        "players": {
            n: {k2: v for k2, v in asdict(by_name[n]).items() if k2 != "name"}
            for n in (black, white)
        },
    }
    text = None
    if hasattr(game, "size"):
        text = sgf(game, r, black, white, date=datetime.date.today().isoformat())
    return record, text


def store_record(store: Store, record: dict[str, Any], sgf_text: str | None) -> None:
    """Write a played game: its SGF under ``games/`` (Go), then its line in the store."""
    if sgf_text is not None:
        sgf_dir = store.path.parent / "games"
        sgf_dir.mkdir(exist_ok=True)
        name = f"{record['black']}_v_{record['white']}_{record['k']}"
        name = re.sub(r"[^A-Za-z0-9@._-]+", "_", name)[:150]
        (sgf_dir / f"{name}.sgf").write_text(sgf_text)
    store.append(record)


def play_pair(
    roster: Roster, store: Store, by_name: dict[str, Entrant], pair: tuple[str, str], seed: int
) -> dict[str, Any]:
    """Play and store the pair's next game; returns its record."""
    record, text = play_record(roster, by_name, pair, store.next_k(pair), seed)
    store_record(store, record, text)
    return record


@dataclass(frozen=True)
class JobSetup:
    """What each ``--jobs`` worker builds its ``Roster`` from."""

    game: str
    """The referee's game spec (``make_game``)."""
    sims: int
    sample_moves: int
    log_dir: str
    entrants: list[Entrant]
    configs: dict[str, Config]
    """Checkpoint path -> its run's config, as ``Roster`` takes them."""


class LadderJob:
    """A ``--jobs`` worker's games (``azserve.arena.pool``): task ``{pair, k, seed}``, answer
    ``{record, sgf}``, or ``{error}`` when a player failed (the game is not stored; the failed
    engine is restarted for its next game)."""

    def __init__(self, setup: JobSetup) -> None:
        from actors.games import make_game

        self.roster = Roster(make_game(setup.game), setup.sims, setup.sample_moves,
                             Path(setup.log_dir), setup.configs)  # fmt: skip
        self.by_name = {e.name: e for e in setup.entrants}

    def play(self, task: dict[str, Any]) -> dict[str, Any]:
        pair = (task["pair"][0], task["pair"][1])
        try:
            record, sgf_text = play_record(self.roster, self.by_name, pair, task["k"], task["seed"])
        except PlayerError as e:
            for n in pair:
                self.roster.drop(self.by_name[n])
            return {"error": str(e)}
        return {"record": record, "sgf": sgf_text}

    def close(self) -> None:
        self.roster.close()


__all__ = ["JobSetup", "LadderJob", "Roster", "play_pair", "play_record", "store_record"]
