"""Who plays a judged game: the players of ``azserve match`` and the ladder, built from their
specs (``azserve.arena.players``) by one lineup.

A checkpoint's agent is loaded once and kept (a few at a time, each a version on one shared,
compiled backend: ``azserve.arena.agent.ServedNet``); an engine process (GTP, UCI) is started
once and kept from game to game, started afresh after a failure (``drop``); every other
player, a checkpoint's included, is built anew for each game from the game's seed, so a game is
the same whoever plays it and whenever (an engine's own randomness is its own).
"""

from __future__ import annotations

import re
from collections import OrderedDict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from actors.games import Game
from azserve.arena.players import AgentPlayer, Player, make_player, parse_spec

if TYPE_CHECKING:
    from azserve.config.schema import Config

KEEP_AGENTS = 6
"""Checkpoints' agents kept loaded at once (the least recently used one goes first)."""


class Lineup:
    """Each game's players of ``game``, by spec.

    Args:
        game: the game the referee plays (a checkpoint's net may encode its rules otherwise).
        log_dir: where each engine's stderr goes (``NAME.log``) unless a player names its own.
        sims: simulations per move of every checkpoint; None for each one's ``eval.sims``.
        sample_moves: a checkpoint's first moves of a game drawn by the search's visits.
        configs: checkpoint path -> its run's config, for checkpoints that carry none.
    """

    def __init__(
        self,
        game: Game,
        log_dir: Path,
        sims: int | None,
        sample_moves: int,
        configs: dict[str, Config] | None = None,
    ) -> None:
        self.game = game
        self.log_dir = log_dir
        self.sims = sims
        self.sample_moves = sample_moves
        self.configs = configs or {}
        self._agents: OrderedDict[str, tuple[Any, int]] = OrderedDict()
        self._pinned: set[str] = set()
        self._engines: dict[str, Player] = {}

    def add(self, path: str, agent: Any, sims: int) -> None:
        """A checkpoint's agent the caller loaded (``azserve match``'s own, with its config and
        overrides), kept until ``close``."""
        self._agents[path] = (agent, sims)
        self._pinned.add(path)

    def agent(self, path: str) -> tuple[Any, int]:
        """(the agent, its simulations per move) of checkpoint ``path``, loaded once."""
        if path not in self._agents:
            self._agents[path] = self._load(path)
            unpinned = [p for p in self._agents if p not in self._pinned]
            while len(unpinned) > KEEP_AGENTS:
                self._agents.pop(unpinned.pop(0))[0].close()  # its version off the backend
        self._agents.move_to_end(path)
        return self._agents[path]

    def _load(self, path: str) -> tuple[Any, int]:
        from actors.games import make_game
        from azserve.arena.agent import Agent, agent_from_checkpoint, analysis_mcts
        from azserve.model.weights import load_weights_file

        cfg = self.configs.get(path)
        if cfg is None:
            cfg, agent = agent_from_checkpoint(path, None, (), self.game.name)
        else:
            agent = Agent(make_game(cfg.game), cfg.net, load_weights_file(path),
                          analysis_mcts(cfg), backend=cfg.backend)  # fmt: skip
        return agent, cfg.eval.sims if self.sims is None else self.sims

    def player(
        self, spec: str, seed: int, name: str | None = None, log: Path | None = None
    ) -> Player:
        """The player ``spec`` names for one game seeded ``seed``. ``name``: a checkpoint's name
        on the records, and the key its engine is kept under (default the spec); ``log``: an
        engine's stderr (default ``log_dir/NAME.log``)."""
        name = name or spec
        kind, arg = parse_spec(spec)
        if kind == "checkpoint":
            agent, sims = self.agent(arg)
            return AgentPlayer(agent, sims, self.sample_moves, seed, name=name)
        if kind in ("gtp", "uci", "usi"):  # one engine process per player, kept between games
            if name not in self._engines:
                log = log or self.log_dir / (re.sub(r"[^A-Za-z0-9._-]+", "_", name)[:80] + ".log")
                self._engines[name] = make_player(spec, seed, log)
            return self._engines[name]
        return make_player(spec, seed)

    def drop(self, name: str) -> None:
        """Forget a failed engine (by its ``player`` name): the next game starts a fresh one."""
        engine = self._engines.pop(name, None)
        if engine is not None:
            engine.close()

    def close(self) -> None:
        for agent, _ in self._agents.values():
            agent.close()
        self._agents.clear()
        self._pinned.clear()
        for engine in self._engines.values():
            engine.close()
        self._engines.clear()


__all__ = ["KEEP_AGENTS", "Lineup"]
