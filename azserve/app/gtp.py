"""``azserve gtp``: a Go checkpoint as a Go Text Protocol engine (GTP version 2), so Sabaki,
GoGui, twogtp or ``azserve match`` can drive it.

Commands: protocol_version, name, version, known_command, list_commands, boardsize,
clear_board, komi, play, genmove, undo, final_score, showboard, quit. Anything else, and any
move our rules refuse (occupied, suicide, positional superko, out of turn, after the end), gets
GTP's ``? `` failure with the reason; the engine keeps running.

The rules are the game's (actors/games/go.py: Tromp-Taylor, positional superko, the game over
after two passes or the move cap); ``final_score`` is the Tromp-Taylor area score of the board
as it stands (``B+3.5``, ``W+0.5``). The board is the checkpoint's (9x9, 13x13 or 19x19):
``boardsize`` of that size is taken, any other gets ``? unacceptable size``. A komi other than
the net's 7.5 is taken (the compiled rules take any komi).
"""

from __future__ import annotations

import argparse
import asyncio
import re
import sys
from dataclasses import dataclass, field
from typing import IO

from actors.games.go import Go, GoState

COMMANDS = (
    "protocol_version",
    "name",
    "version",
    "known_command",
    "list_commands",
    "boardsize",
    "clear_board",
    "komi",
    "play",
    "genmove",
    "undo",
    "final_score",
    "showboard",
    "quit",
)
COLORS = {"b": 0, "black": 0, "w": 1, "white": 1}


class GtpError(Exception):
    """A command that fails: its message follows ``? `` in the reply."""


@dataclass
class Board:
    """The game as GTP sees it: the rules, the states played through (for undo)."""

    game: Go
    states: list[GoState] = field(default_factory=list)
    moves: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.states:
            self.states = [self.game.initial_state()]

    @property
    def state(self) -> GoState:
        return self.states[-1]

    def play(self, color: int, action: int) -> None:
        """Play ``action`` for ``color``; GtpError saying why the rules refuse it."""
        s = self.state
        if self.game.is_terminal(s):
            raise GtpError("illegal move: the game is over (two passes or the move cap)")
        if color != s.color:
            raise GtpError(f"illegal move: {'black' if s.color == 0 else 'white'} is to move")
        try:
            nxt = self.game.apply(s, action)
        except ValueError as e:
            raise GtpError(f"illegal move: {str(e).split(': ', 1)[-1]}") from None
        self.states.append(nxt)
        self.moves.append(action)

    def undo(self) -> None:
        if len(self.states) == 1:
            raise GtpError("cannot undo: no move played")
        self.states.pop()
        self.moves.pop()


def parse_color(text: str) -> int:
    color = COLORS.get(text.lower())
    if color is None:
        raise GtpError(f"invalid color {text!r}: expected b, w, black or white")
    return color


class MoveSource:
    """What chooses the engine's moves: ``choose(state) -> action`` for the side to move."""

    def choose(self, game: Go, state: GoState) -> int:  # pragma: no cover - interface
        raise NotImplementedError


class AgentMoves(MoveSource):
    """A checkpoint's network and search (``sims`` 0: the raw policy's best move)."""

    def __init__(self, agent, sims: int) -> None:  # type: ignore[no-untyped-def]
        self.agent = agent
        self.sims = sims

    def choose(self, game: Go, state: GoState) -> int:
        self.agent.game = game  # the komi the controller set
        return asyncio.run(self.agent.analyze([state], self.sims))[0].move


class Engine:
    """One GTP session: ``reply(line)`` for each line read; ``done`` after ``quit``."""

    def __init__(
        self, moves: MoveSource, name: str = "azserve", version: str = "", size: int = 9
    ) -> None:
        self.moves = moves
        self.name = name
        self.version = version
        self.size = size  # the network's board: the only size boardsize takes
        self.board = Board(Go(size, 7.5))
        self.done = False

    def reply(self, line: str) -> str | None:
        """The reply to one input line ("=..."/"?..." and the blank line), or None for a line
        GTP says to ignore (empty, or a comment)."""
        line = re.sub(r"[\x00-\x08\x0b-\x1f\x7f]", "", line.split("#", 1)[0]).strip()
        if not line:
            return None
        words = line.split()
        ident = ""
        if words[0].isdigit():
            ident, words = words[0], words[1:]
            if not words:
                return f"?{ident} missing command\n\n"
        command, args = words[0].lower(), words[1:]
        try:
            out = self._run(command, args)
        except GtpError as e:
            return f"?{ident} {e}\n\n"
        return f"={ident} {out}".rstrip(" ") + "\n\n" if out else f"={ident}\n\n"

    def _run(self, command: str, args: list[str]) -> str:
        if command not in COMMANDS:
            raise GtpError(f"unknown command {command!r}")
        handler = getattr(self, f"_cmd_{command}")
        return str(handler(args))

    def _need(self, args: list[str], n: int, usage: str) -> None:
        if len(args) < n:
            raise GtpError(f"syntax error: expected {usage}")

    def _cmd_protocol_version(self, args: list[str]) -> str:
        return "2"

    def _cmd_name(self, args: list[str]) -> str:
        return self.name

    def _cmd_version(self, args: list[str]) -> str:
        return self.version

    def _cmd_known_command(self, args: list[str]) -> str:
        self._need(args, 1, "known_command COMMAND")
        return "true" if args[0].lower() in COMMANDS else "false"

    def _cmd_list_commands(self, args: list[str]) -> str:
        return "\n".join(COMMANDS)

    def _cmd_boardsize(self, args: list[str]) -> str:
        self._need(args, 1, "boardsize N")
        if args[0] != str(self.size):
            raise GtpError(f"unacceptable size: this network plays {self.size}x{self.size}")
        self.board = Board(self.board.game)
        return ""

    def _cmd_clear_board(self, args: list[str]) -> str:
        self.board = Board(self.board.game)
        return ""

    def _cmd_komi(self, args: list[str]) -> str:
        self._need(args, 1, "komi FLOAT")
        try:
            komi = float(args[0])
        except ValueError:
            raise GtpError(f"syntax error: komi {args[0]!r} is not a number") from None
        if komi != self.board.game.komi:
            # The rules take the new komi; the moves played so far stand.
            moves = list(self.board.moves)
            self.board = Board(Go(self.size, komi))
            for a in moves:
                self.board.play(self.board.state.color, a)
        return ""

    def _vertex(self, text: str) -> int:
        try:
            return self.board.game.parse_move(text)
        except ValueError as e:
            raise GtpError(f"invalid vertex {text!r}: {str(e).split(': ', 1)[-1]}") from None

    def _cmd_play(self, args: list[str]) -> str:
        self._need(args, 2, "play COLOR VERTEX")
        self.board.play(parse_color(args[0]), self._vertex(args[1]))
        return ""

    def _cmd_genmove(self, args: list[str]) -> str:
        self._need(args, 1, "genmove COLOR")
        color = parse_color(args[0])
        s = self.board.state
        if self.board.game.is_terminal(s):
            raise GtpError("the game is over (two passes or the move cap)")
        if color != s.color:
            raise GtpError(f"{'black' if s.color == 0 else 'white'} is to move")
        action = self.moves.choose(self.board.game, s)
        self.board.play(color, action)
        return self.board.game.format_move(action)

    def _cmd_undo(self, args: list[str]) -> str:
        self.board.undo()
        return ""

    def _cmd_final_score(self, args: list[str]) -> str:
        return self.board.game.format_score(self.board.state)

    def _cmd_showboard(self, args: list[str]) -> str:
        return "\n" + self.board.game.render(self.board.state)

    def _cmd_quit(self, args: list[str]) -> str:
        self.done = True
        return ""


def serve(engine: Engine, stdin: IO[str], stdout: IO[str]) -> None:
    """Read commands until ``quit`` or the end of input; reply to each."""
    for line in stdin:
        out = engine.reply(line)
        if out is not None:
            stdout.write(out)
            stdout.flush()
        if engine.done:
            return


def run_gtp(args: argparse.Namespace) -> int:
    """The ``azserve gtp`` main."""
    import torch

    from azserve.app.agent import agent_from_checkpoint
    from azserve.app.argtypes import package_version
    from azserve.errors import ConfigError

    # One position at a time: a second thread only adds overhead, and with another engine
    # (or a second match) on the cores, torch's spinning threads slowed a Go game 40-fold
    # (205 s against 5 s, measured).
    torch.set_num_threads(1)
    cfg, agent = agent_from_checkpoint(args.checkpoint, args.config, args.overrides, None)
    if not isinstance(agent.game, Go):
        raise ConfigError(f"--checkpoint: azserve gtp plays Go; this checkpoint plays {cfg.game}")
    sims = cfg.eval.sims if args.sims is None else args.sims
    engine = Engine(AgentMoves(agent, sims), version=package_version(), size=agent.game.size)
    print(f"azserve gtp: {cfg.game}, {sims} simulations per move; GTP on stdin/stdout",
          file=sys.stderr, flush=True)  # fmt: skip
    serve(engine, sys.stdin, sys.stdout)
    return 0


__all__ = ["AgentMoves", "Board", "Engine", "GtpError", "MoveSource", "run_gtp", "serve"]
