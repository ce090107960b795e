"""The players of matches and ladders: a checkpoint's net and search, uniform random play, any
GTP engine, and OpenSpiel's MCTS. Every player is told every move and asked for its own; the
referee (``azserve.app.referee``) alone decides what is legal and who won, and asks each player
that can score a finished game for its own verdict (``final_score``).

A player spec (``--opponent``, the ladder's ``--anchor``):

- ``random``: uniform random legal moves (the ladder's 0 Elo);
- ``greedy``: chess only, the one-ply material-greedy mover (``azserve.app.chess_players``);
- ``uci:CMD[;NAME=VALUE...]``: chess only, a UCI engine with its options and ``go`` limits
  (``uci:stockfish;Skill Level=0;movetime=50``; ``azserve.app.chess_players``);
- ``gtp:CMD`` or a bare command line: a GTP engine (``gnugo --mode gtp --level 1``); a command
  not found on PATH is looked for in /usr/games (where Debian puts GnuGo);
- ``openspiel-mcts:SIMS``: OpenSpiel's MCTS bot (random rollouts, UCT c = 2), for the games
  that name their OpenSpiel equivalent (``Game.openspiel``);
- ``checkpoint:PATH``: another checkpoint (a file or a run directory's newest).

GnuGo is run under the rules our referee keeps: ``--chinese-rules`` (area scoring),
``--capture-all-dead`` (it removes dead stones from its territory before it passes, so that
the game is played out and the board as it stands is the score) and ``--positional-superko``;
GnuGo under Japanese rules cannot be refereed by area and is refused.
"""

from __future__ import annotations

import os
import select
import shlex
import shutil
import subprocess
import time
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
    """0 black / first player, 1 white / second, None for a draw (jigo)."""
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

    def final_score(self) -> Verdict | None:
        """The player's own scoring of the game just finished, or None when it has none."""
        return None

    def close(self) -> None:
        pass


class RandomPlayer(Player):
    """Uniform random legal moves, seeded: the ladder's fixed 0 Elo."""

    def __init__(self, seed: int) -> None:
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


def parse_gtp_score(text: str) -> Verdict:
    """GTP's ``final_score`` (``B+3.5``, ``W+R``, ``0``) as a Verdict; ValueError otherwise."""
    t = text.strip().upper()
    if t in ("0", "DRAW", "JIGO"):
        return Verdict(None, text.strip())
    if len(t) >= 3 and t[0] in "BW" and t[1] == "+":
        margin = t[2:]
        if margin not in ("R", "RESIGN", "T", "TIME", "F", "FORFEIT"):
            float(margin)  # ValueError for anything that is not a score
        return Verdict("BW".index(t[0]), text.strip())
    raise ValueError(f"not a GTP score: {text!r}")


class GtpPlayer(Player):
    """An external engine speaking GTP on its stdin/stdout."""

    def __init__(self, command: str, timeout_s: float = 120.0, log: Path | None = None) -> None:
        argv = honest_argv(find_command(shlex.split(command)))
        self.command = " ".join([Path(argv[0]).name, *argv[1:]])
        """The command line as run (GnuGo with the referee's rules added)."""
        self.name = " ".join(shlex.split(command))
        self.timeout_s = timeout_s
        err = open(log, "ab") if log else subprocess.DEVNULL  # noqa: SIM115 - closed in close()
        self._err = err
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, bufsize=0
        )
        self._buf = b""
        self.game: Game | None = None

    def send(self, command: str) -> str:
        """One command's reply (the text after ``=``); Refused for a ``?`` reply."""
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(command.encode() + b"\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            raise PlayerError(f"{self.name}: exited (code {self.proc.poll()})") from None
        text = self._read_reply(command)
        if text.startswith("?"):
            raise Refused(text[1:].strip())
        if not text.startswith("="):
            raise PlayerError(f"{self.name}: {command!r} got {text!r}, not a GTP reply")
        return text[1:].strip()

    def _read_reply(self, command: str) -> str:
        deadline = time.monotonic() + self.timeout_s
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        while b"\n\n" not in self._buf.replace(b"\r", b""):
            self._buf += read_output(
                self, fd, deadline, f"reply to {command!r}", f"during {command!r}"
            )
        data = self._buf.replace(b"\r", b"")
        reply, _, rest = data.partition(b"\n\n")
        self._buf = rest
        return reply.decode(errors="replace").strip()

    def new_game(self, game: Game) -> None:
        size = getattr(game, "size", None)
        if size is None:
            raise ConfigError(f"--opponent: a GTP engine plays Go, not {game.name}")
        self.game = game
        for command in (f"boardsize {size}", "clear_board", f"komi {game.komi:g}"):  # type: ignore[attr-defined]
            try:
                self.send(command)
            except Refused as e:
                raise PlayerError(f"{self.name}: refused {command!r}: {e}") from None

    def tell(self, color: int, action: int) -> None:
        assert self.game is not None
        self.send(f"play {'BW'[color]} {self.game.format_move(action)}")

    def genmove(self, color: int, state: State) -> int:
        assert self.game is not None
        try:
            move = self.send(f"genmove {'BW'[color]}")
        except Refused as e:
            raise PlayerError(f"{self.name}: refused genmove: {e}") from None
        if move.lower() == "resign":
            return RESIGN
        try:
            return self.game.parse_move(move)
        except ValueError:
            raise PlayerError(f"{self.name}: genmove answered {move!r}, not a vertex") from None

    def final_score(self) -> Verdict | None:
        """The engine's ``final_score`` (GnuGo removes the stones it judges dead); None when
        the engine does not know the command."""
        try:
            text = self.send("final_score")
        except Refused:
            return None
        try:
            return parse_gtp_score(text)
        except ValueError:
            raise PlayerError(f"{self.name}: final_score answered {text!r}") from None

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.send("quit")
                self.proc.wait(timeout=5)
            except (PlayerError, Refused, subprocess.TimeoutExpired, OSError):
                self.proc.kill()
                self.proc.wait()
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                pipe.close()
        if self._err is not subprocess.DEVNULL:
            self._err.close()  # type: ignore[union-attr]


class OpenSpielMctsPlayer(Player):
    """OpenSpiel's MCTS bot with random rollouts, on OpenSpiel's own state of the game; its
    verdict on a finished game is OpenSpiel's returns."""

    def __init__(self, sims: int, seed: int) -> None:
        try:
            import pyspiel  # noqa: F401
        except ImportError:
            raise ConfigError(
                "--opponent openspiel-mcts: needs the open_spiel package (pip install open-spiel)"
            ) from None
        self.sims = sims
        self.seed = seed
        self.name = f"openspiel-mcts:{sims}"
        self.bot: Any = None
        self.state: Any = None

    def new_game(self, game: Game) -> None:
        import pyspiel
        from open_spiel.python.algorithms import mcts

        if game.openspiel is None:
            raise ConfigError(f"--opponent openspiel-mcts: OpenSpiel has no {game.name}")
        spiel = pyspiel.load_game(game.openspiel)
        self.seed += 1
        # The ladder's game seeds are 63-bit; the bot's legacy generator takes 32.
        rng = np.random.RandomState(np.random.SeedSequence(self.seed).generate_state(1)[0])
        evaluator = mcts.RandomRolloutEvaluator(n_rollouts=1, random_state=rng)
        self.bot = mcts.MCTSBot(
            spiel, 2.0, self.sims, evaluator, random_state=rng, solve=True, verbose=False
        )
        self.state = spiel.new_initial_state()

    def tell(self, color: int, action: int) -> None:
        if action not in self.state.legal_actions():
            raise Refused(f"OpenSpiel does not allow action {action} here")
        self.state.apply_action(action)

    def genmove(self, color: int, state: State) -> int:
        action = int(self.bot.step(self.state))
        self.state.apply_action(action)
        return action

    def final_score(self) -> Verdict | None:
        if self.state is None or not self.state.is_terminal():
            return None
        first = self.state.returns()[0]
        winner = None if first == 0 else (0 if first > 0 else 1)
        return Verdict(winner, "0" if winner is None else f"{'BW'[winner]}+")


def parse_spec(spec: str) -> tuple[str, str]:
    """A player spec as (kind, argument): ``random``, ``greedy``, ``uci``, ``gtp``,
    ``openspiel-mcts`` or ``checkpoint``; ConfigError for an empty or malformed one."""
    s = spec.strip()
    if not s:
        raise ConfigError("player spec: empty; give random, gtp:CMD, openspiel-mcts:SIMS or "
                          "checkpoint:PATH")  # fmt: skip
    if s in ("random", "greedy"):
        return s, ""
    kind, sep, arg = s.partition(":")
    if sep and kind == "uci":
        from azserve.app.chess_players import parse_uci_spec

        parse_uci_spec(arg)  # ConfigError for a malformed one
        return kind, arg.strip()
    if sep and kind in ("gtp", "openspiel-mcts", "checkpoint"):
        if kind == "openspiel-mcts":
            try:
                n = int(arg or "1000")
            except ValueError:
                raise ConfigError(f"player {spec!r}: expected openspiel-mcts:SIMS") from None
            if n < 1:
                raise ConfigError(f"player {spec!r}: SIMS must be at least 1")
            return kind, str(n)
        if not arg.strip():
            raise ConfigError(
                f"player {spec!r}: {kind}: needs a {'command' if kind == 'gtp' else 'path'}"
            )
        return kind, arg.strip()
    if s == "openspiel-mcts":
        return "openspiel-mcts", "1000"
    return "gtp", s  # a bare command line, as ``azserve match`` has always taken


def make_player(spec: str, seed: int, log: Path | None = None, agent_player: Any = None) -> Player:
    """The player a spec names. ``agent_player(path, seed)`` builds a checkpoint's player (the
    caller's, which knows the simulations and the config)."""
    kind, arg = parse_spec(spec)
    if kind == "random":
        return RandomPlayer(seed)
    if kind in ("greedy", "uci"):
        from azserve.app.chess_players import GreedyPlayer, UciPlayer

        return GreedyPlayer(seed) if kind == "greedy" else UciPlayer(arg, log=log)
    if kind == "openspiel-mcts":
        return OpenSpielMctsPlayer(int(arg), seed)
    if kind == "checkpoint":
        if agent_player is None:
            raise ConfigError(f"player {spec!r}: a checkpoint cannot play here")
        return agent_player(arg, seed)
    return GtpPlayer(arg, log=log)


__all__ = [
    "GNUGO_RULES",
    "RESIGN",
    "AgentPlayer",
    "GtpPlayer",
    "OpenSpielMctsPlayer",
    "Player",
    "PlayerError",
    "RandomPlayer",
    "Refused",
    "Verdict",
    "find_command",
    "honest_argv",
    "make_player",
    "parse_gtp_score",
    "parse_spec",
]


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
