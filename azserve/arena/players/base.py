"""What every player is: the interface the referee drives (``Player``), its errors and
verdicts, uniform random play, a checkpoint's agent, and the helpers for engines run as
processes (finding the command, reading its output by a deadline)."""

from __future__ import annotations

import os
import select
import shutil
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from actors.games import Game, State
from azserve.errors import AzserveError, ConfigError

RESIGN = -1
"""A player's move: it resigns."""


class PlayerError(AzserveError):
    """A player that failed (died, timed out, or answered what GTP does not allow)."""


class Refused(Exception):
    """A player that refused a move we told it (its message)."""


class Verdict(NamedTuple):
    """A player's own scoring of a finished game."""

    winner: int | None
    """0 the first player (Go's black), 1 the second, None for a draw (jigo)."""
    text: str
    """As the player said it: ``B+3.5``, ``W+0.5``, ``0``."""


class Player:
    """One side of a game: told every move, asked for its own."""

    name = "player"

    def new_game(self, game: Game) -> None:
        """A fresh game of ``game`` from its initial position."""

    def tell(self, color: int, action: int) -> None:
        """``color`` played ``action`` (Refused if the player will not take it)."""

    def genmove(self, color: int, state: State) -> int:
        """The player's move for ``color`` at ``state`` (RESIGN to resign)."""
        raise NotImplementedError

    async def genmove_async(self, color: int, state: State) -> int:
        """``genmove`` on an event loop (``referee.play_game_async``): the same move; a
        checkpoint's search waits there without blocking, so that games played at once share
        batches."""
        return self.genmove(color, state)

    def final_score(self) -> Verdict | None:
        """The player's own scoring of the game just finished, or None when it has none."""
        return None

    def close(self) -> None:
        pass


class RandomPlayer(Player):
    """Uniform random legal moves, seeded: the ladder's fixed 0 Elo."""

    def __init__(self, seed: int | Sequence[int]) -> None:
        self.name = "random"
        self.rng = np.random.default_rng(seed)
        self.game: Game | None = None

    def new_game(self, game: Game) -> None:
        self.game = game

    def genmove(self, color: int, state: State) -> int:
        assert self.game is not None
        legal = self.game.legal_actions(state)
        return int(legal[self.rng.integers(len(legal))])


class AgentPlayer(Player):
    """A checkpoint's network and search. Its first ``sample_moves`` moves of a game are drawn
    in proportion to the search's visits (the raw policy's probabilities with 0 simulations),
    as self-play's temperature does, so that deterministic sides still play varied games."""

    def __init__(
        self, agent: Any, sims: int, sample_moves: int, seed: int, name: str = "azserve"
    ) -> None:
        self.agent = agent
        self.sims = sims
        self.sample_moves = sample_moves
        self.rng = np.random.default_rng(seed)
        self.name = name
        self._mine = 0
        self._own: State | None = None
        self.last: Any = None
        """The analysis behind the last move (``azserve.arena.agent.Analysis``)."""

    def new_game(self, game: Game) -> None:
        self._mine = 0
        # A net of another encoding of the same rules (go9-features in a go9 game) follows the
        # game in its own states, move by move; one of the game's own encoding reads its states.
        own = self.agent.game
        if own.name != game.name and own.rules != game.rules:
            raise ValueError(f"{self.name} plays {own.name}, not {game.name}'s rules")
        self._own = own.initial_state() if own.name != game.name else None

    def tell(self, color: int, action: int) -> None:
        if self._own is not None:
            self._own = self.agent.game.apply(self._own, action)

    def genmove(self, color: int, state: State) -> int:
        a = self.agent.analyze_sync([state if self._own is None else self._own], self.sims)[0]
        return self._choose(color, a)

    async def genmove_async(self, color: int, state: State) -> int:
        a = (await self.agent.analyze([state if self._own is None else self._own], self.sims))[0]
        return self._choose(color, a)

    def _choose(self, color: int, a: Any) -> int:
        """The move of analysis ``a``: drawn by the visits among the first ``sample_moves``,
        then the search's own."""
        self.last = a
        self._mine += 1
        if self._mine > self.sample_moves:
            move = int(a.move)
        else:
            weights = a.visits if a.visits is not None and a.visits.sum() > 0 else a.policy
            p = np.asarray(weights, dtype=np.float64)
            move = int(self.rng.choice(len(p), p=p / p.sum()))
        if move != RESIGN:
            self.tell(color, move)
        return move


def find_command(argv: list[str]) -> list[str]:
    """``argv`` with its program resolved on PATH, or in /usr/games; ConfigError if neither."""
    exe = shutil.which(argv[0]) or shutil.which(argv[0], path="/usr/games")
    if exe is None:
        hint = " (Debian: apt-get install gnugo)" if Path(argv[0]).name == "gnugo" else ""
        raise ConfigError(f"--opponent: {argv[0]!r} not found on PATH or in /usr/games{hint}")
    return [exe, *argv[1:]]


GNUGO_RULES = ("--chinese-rules", "--capture-all-dead", "--positional-superko")
"""What GnuGo is run with: the rules our referee keeps, the game played out."""


def honest_argv(argv: list[str]) -> list[str]:
    """A GTP engine's command line with the rules our referee keeps added where we know the
    engine (GnuGo: GNUGO_RULES); ConfigError for a GnuGo told to play other rules."""
    if Path(argv[0]).name != "gnugo":
        return argv
    other = {"--japanese-rules", "--no-ko", "--simple-ko", "--situational-superko",
             "--allow-suicide", "--allow-all-suicide"}  # fmt: skip
    clash = [a for a in argv[1:] if a in other]
    if clash:
        raise ConfigError(
            f"--opponent: gnugo {' '.join(clash)}: our referee scores by area with positional "
            f"superko and no suicide; GnuGo is run with {' '.join(GNUGO_RULES)}"
        )
    return [*argv, *(flag for flag in GNUGO_RULES if flag not in argv)]


def read_output(player: Any, fd: int, deadline: float, waiting: str, during: str) -> bytes:
    """What an engine process (``player.proc``) has written to ``fd`` by ``deadline`` (b""
    when nothing yet): ``PlayerError`` when the deadline has passed (``no WAITING in N s``) or
    the engine exited (``exited (code C) DURING``)."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise PlayerError(f"{player.name}: no {waiting} in {player.timeout_s:g} s")
    ready, _, _ = select.select([fd], [], [], left)
    if not ready:
        return b""
    chunk = os.read(fd, 65536)
    if not chunk:
        raise PlayerError(f"{player.name}: exited (code {player.proc.wait()}) {during}")
    return chunk
