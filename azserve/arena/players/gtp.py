"""Any GTP engine as a player (GnuGo under the rules our referee keeps), and GTP's
``final_score`` read as a verdict."""

from __future__ import annotations

import shlex
import subprocess
import time
from pathlib import Path
from typing import cast

from actors.games import Game, State
from actors.games.go import Go
from azserve.arena.players.base import (
    RESIGN,
    Player,
    PlayerError,
    Refused,
    Verdict,
    find_command,
    honest_argv,
    read_output,
)
from azserve.errors import ConfigError


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
        if "gtp" not in game.protocols:
            raise ConfigError(f"--opponent: a GTP engine plays Go, not {game.name}")
        go = cast(Go, game)
        self.game = go
        for command in (f"boardsize {go.size}", "clear_board", f"komi {go.komi:g}"):
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
