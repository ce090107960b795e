"""Chess players for matches and ladders: any UCI engine (Stockfish at its weakest settings is
the ladder's chess anchor); the one-ply material-greedy mover (below Stockfish's weakest, above
random) is ``azserve.arena.players.greedy``'s, for chess and shogi, and kept importable here.

A UCI player spec (``--opponent``, the ladder's ``--anchor``): ``uci:CMD[;NAME=VALUE...]``.
``CMD`` is the engine's command line (looked for on PATH, then in /usr/games, where Debian puts
Stockfish); each ``NAME=VALUE`` after a ``;`` is a UCI option sent with ``setoption``, except
``movetime``, ``nodes`` and ``depth``, which limit each ``go`` (``movetime=100`` when none is
given). Stockfish's weakest settings, for example::

    uci:stockfish;Skill Level=0;movetime=50
    uci:stockfish;UCI_LimitStrength=true;UCI_Elo=1320;movetime=100

``UciPlayer`` is also USI's player (``azserve.arena.players.usi``): the same conversation with
another handshake word, another move text and another ``go``.
"""

from __future__ import annotations

import shlex
import subprocess
import time
from pathlib import Path
from typing import Any

from actors.games import Game, State
from actors.games.chess.rules import Move
from azserve.arena.players.base import Player, PlayerError, Refused, find_command, read_output
from azserve.arena.players.greedy import GreedyPlayer, material
from azserve.config.player_spec import parse_uci_spec
from azserve.errors import ConfigError


class UciPlayer(Player):
    """An external engine speaking UCI on its stdin/stdout; told the game as ``position
    startpos moves ...`` before each ``go``. A dialect sets ``protocol`` (the handshake's word)
    and ``plays``, and gives ``parse_spec``, ``move_text``, ``go_line`` and ``read_move``."""

    protocol = "uci"
    plays = "chess"

    def __init__(self, spec: str, timeout_s: float = 120.0, log: Path | None = None) -> None:
        command, self.options, self.limits = self.parse_spec(spec)
        argv = find_command(shlex.split(command))
        self.command = " ".join([Path(argv[0]).name, *argv[1:]])
        self.name = f"{self.protocol}:" + spec.strip()
        self.timeout_s = timeout_s
        err = open(log, "ab") if log else subprocess.DEVNULL  # noqa: SIM115 - closed in close()
        self._err = err
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, bufsize=0
        )
        self._buf = b""
        self._ready = False
        self.game: Any = None
        self.state: State = None
        self.moves: list[str] = []

    @staticmethod
    def parse_spec(spec: str) -> tuple[str, dict[str, str], dict[str, int]]:
        """(command, options, ``go`` limits) of the spec after ``uci:``."""
        return parse_uci_spec(spec)

    def move_text(self, s: State, a: int) -> str:
        """Legal action ``a`` at ``s`` as the protocol writes it (``e2e4``)."""
        return str(self.game.uci(s, a))

    def go_line(self) -> str:
        return "go " + " ".join(f"{k} {v}" for k, v in self.limits.items())

    def read_move(self, state: State, text: str) -> int:
        """The action ``bestmove``'s word names at ``state``, legal or not (the referee
        forfeits an illegal one); ValueError when it names no move at all."""
        m = Move(_square(text[:2]), _square(text[2:4]), text[4:5])
        return int(self.game.action_of(state, m))

    def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(line.encode() + b"\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            raise PlayerError(f"{self.name}: exited (code {self.proc.poll()})") from None

    def until(self, prefix: str, after: str) -> str:
        """Lines read until one starting with ``prefix`` (returned); PlayerError on a timeout or
        the engine's exit."""
        deadline = time.monotonic() + self.timeout_s
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        while True:
            while b"\n" in self._buf:
                raw, _, self._buf = self._buf.partition(b"\n")
                line = raw.decode(errors="replace").strip()
                if line.startswith(prefix):
                    return line
            self._buf += read_output(
                self, fd, deadline, f"{prefix!r} after {after!r}", f"after {after!r}"
            )

    def new_game(self, game: Game) -> None:
        if self.protocol not in game.protocols:
            raise ConfigError(f"--opponent: {self.name} plays {self.plays}, not {game.name}")
        self.game = game
        if not self._ready:
            self.send(self.protocol)
            self.until(f"{self.protocol}ok", self.protocol)
            for name, value in self.options.items():
                self.send(f"setoption name {name} value {value}")
            self._ready = True
        self.send(f"{self.protocol}newgame")
        self.send("isready")
        self.until("readyok", "isready")
        self.state, self.moves = game.initial_state(), []

    def _played(self, action: int) -> None:
        assert self.game is not None and self.state is not None
        self.moves.append(self.move_text(self.state, action))
        self.state = self.game.apply(self.state, action)

    def tell(self, color: int, action: int) -> None:
        try:
            self._played(action)
        except ValueError as e:
            raise Refused(str(e)) from None

    def genmove(self, color: int, state: State) -> int:
        assert self.game is not None and self.state is not None
        if state != self.state:
            raise PlayerError(f"{self.name}: asked to move in a position it was not told")
        moves = " moves " + " ".join(self.moves) if self.moves else ""
        self.send(f"position startpos{moves}")
        go = self.go_line()
        self.send(go)
        words = self.until("bestmove", go).split()
        text = words[1] if len(words) > 1 else ""
        try:
            action = self.read_move(state, text)
        except ValueError:
            raise PlayerError(f"{self.name}: {go!r} answered {' '.join(words)!r}") from None
        if action in self.game.legal_actions(state):
            self._played(action)
        return action  # the referee forfeits an illegal one (a resignation ends the game)

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.send("quit")
                self.proc.wait(timeout=5)
            except (PlayerError, subprocess.TimeoutExpired, OSError):
                self.proc.kill()
                self.proc.wait()
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                pipe.close()
        if self._err is not subprocess.DEVNULL:
            self._err.close()  # type: ignore[union-attr]


def _square(text: str) -> int:
    if len(text) != 2 or text[0] not in "abcdefgh" or text[1] not in "12345678":
        raise ValueError(f"not a square: {text!r}")
    return (int(text[1]) - 1) * 8 + "abcdefgh".index(text[0])


__all__ = ["GreedyPlayer", "UciPlayer", "material", "parse_uci_spec"]
