"""``azserve uci``: a chess checkpoint as a UCI engine, so cutechess-cli, Arena, any chess GUI or
``azserve match`` can drive it.

Commands: ``uci``, ``isready``, ``ucinewgame``, ``position startpos|fen FEN [moves M...]``,
``go [nodes N] [movetime MS] [wtime MS btime MS winc MS binc MS movestogo N] [infinite]``,
``stop``, ``quit`` (``setoption``, ``debug`` and ``register`` are read and ignored). While it
searches, the engine prints ``info depth D nodes N nps X time MS score cp C pv M...`` about
twice a second and ``bestmove M`` at the end; ``stop`` ends the search early, ``isready`` is
answered at once. Anything malformed (an unknown command, a bad FEN, an illegal move, a bad
number) is answered ``info string error ...`` and the engine keeps its last good position.

The search is PUCT over the checkpoint's network (actors.mcts, whose tree gives the principal
variation), run in chunks of simulations between which the engine reads its input. ``nodes``
counts simulations. The score is the network's value for the side to move mapped to
centipawns as Leela Chess Zero maps it, ``111.7 * tan(1.562 * v)``.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import queue
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import IO, Any

import numpy as np

from actors.games.chess.rules import Chess, ChessState

CHUNK = 8
"""Simulations between two looks at the input."""
INFO_EVERY_S = 0.5
MARGIN_MS = 30
"""Kept back from every time budget for the reply's way to the GUI."""


class UciError(Exception):
    """A malformed or illegal command: its message follows ``info string error``."""


@dataclass
class Limits:
    """One ``go``'s limits: simulations, milliseconds, or neither (until ``stop``)."""

    nodes: int | None = None
    movetime_ms: float | None = None
    infinite: bool = False


class Searcher:
    """What searches for the engine: ``run(state, sims)`` adds ``sims`` simulations to the tree
    at ``state`` (kept while the root stays) and returns (value, principal variation)."""

    def new_game(self) -> None:  # pragma: no cover - interface
        raise NotImplementedError

    def run(self, state: ChessState, sims: int) -> tuple[float, list[int]]:
        raise NotImplementedError  # pragma: no cover - interface


class AgentSearcher(Searcher):
    """A checkpoint's network and PUCT search (in Python, whose tree gives the PV)."""

    def __init__(self, agent: Any) -> None:
        self.agent = agent
        self.config = replace(agent.mcts_cfg, algorithm="puct", core="python")
        self.new_game()

    def new_game(self) -> None:
        from actors.mcts import MCTS

        self.search = MCTS(self.agent.game, self.config, np.random.default_rng(0))

    def run(self, state: ChessState, sims: int) -> tuple[float, list[int]]:
        result = asyncio.run(self.search.search(state, self.agent.evaluator, False, sims))
        return float(result.root_value), self.search.principal_variation()


def centipawns(value: float) -> int:
    """Leela's map from a value in (-1, 1) to centipawns (clipped to +-12,800)."""
    v = max(-0.999, min(0.999, value))
    return int(round(max(-12800.0, min(12800.0, 111.714640912 * math.tan(1.5620688421 * v)))))


def parse_go(words: list[str], white: bool) -> Limits:
    """``go``'s arguments as limits for the side to move (white or not)."""
    nums: dict[str, int] = {}
    limits = Limits()
    i = 0
    keys = ("nodes", "movetime", "wtime", "btime", "winc", "binc", "movestogo", "depth", "mate")
    while i < len(words):
        w = words[i]
        if w == "infinite":
            limits.infinite = True
        elif w == "ponder":
            pass
        elif w in keys:
            if i + 1 >= len(words):
                raise UciError(f"go: {w} needs a number")
            try:
                nums[w] = int(words[i + 1])
            except ValueError:
                raise UciError(f"go: {w} {words[i + 1]!r} is not a whole number") from None
            if nums[w] < 0 and w not in ("wtime", "btime"):
                raise UciError(f"go: {w} {nums[w]} is negative")
            i += 1
        else:
            raise UciError(f"go: unknown limit {w!r}")
        i += 1
    if limits.infinite:
        return limits
    if "nodes" in nums:
        limits.nodes = max(1, nums["nodes"])
    if "movetime" in nums:
        limits.movetime_ms = max(1.0, nums["movetime"] - MARGIN_MS)
    left = nums.get("wtime" if white else "btime")
    if left is not None:
        inc = nums.get("winc" if white else "binc", 0)
        togo = nums.get("movestogo", 30)
        budget = max(left, 0) / max(togo, 1) + 0.75 * inc
        limits.movetime_ms = max(1.0, min(budget, max(left, 0) / 2) - MARGIN_MS)
    return limits


class Engine:
    """One UCI session over a searcher: ``command(line)`` for each line read; output through
    ``emit``; ``done`` after ``quit``. ``go`` searches in the caller's thread, taking its
    input through ``poll`` (a line, or None) between chunks."""

    def __init__(
        self,
        game: Chess,
        searcher: Searcher,
        emit: Callable[[str], None],
        poll: Callable[[], str | None] = lambda: None,
        name: str = "azserve",
        default_nodes: int = 64,
    ) -> None:
        self.game = game
        self.searcher = searcher
        self.emit = emit
        self.poll = poll
        self.name = name
        self.default_nodes = default_nodes
        self.state = game.initial_state()
        self.done = False
        self._after: list[str] = []  # commands that arrived during a search

    def command(self, line: str) -> None:
        """Act on one input line; errors become ``info string error ...``."""
        self._after.append(line)
        while self._after and not self.done:
            words = self._after.pop(0).split()
            if not words:
                continue
            try:
                self._run(words[0], words[1:])
            except UciError as e:
                self.emit(f"info string error {e}")

    def _run(self, cmd: str, args: list[str]) -> None:
        if cmd == "uci":
            self.emit(f"id name {self.name}")
            self.emit("id author the azserve authors")
            self.emit("uciok")
        elif cmd == "isready":
            self.emit("readyok")
        elif cmd == "ucinewgame":
            self.state = self.game.initial_state()
            self.searcher.new_game()
        elif cmd == "position":
            self.state = self._position(args)
        elif cmd == "go":
            self._go(parse_go(args, self.game.to_play(self.state) == 0))
        elif cmd == "stop":
            pass  # no search running
        elif cmd == "quit":
            self.done = True
        elif cmd in ("setoption", "debug", "register", "ponderhit"):
            pass
        else:
            raise UciError(f"unknown command {cmd!r}")

    def _position(self, args: list[str]) -> ChessState:
        """The position ``position`` describes; UciError (the old position kept) if bad."""
        if not args:
            raise UciError("position: expected startpos or fen")
        rest = args[1:]
        if args[0] == "startpos":
            s = self.game.initial_state()
        elif args[0] == "fen":
            fen = rest[: rest.index("moves")] if "moves" in rest else rest
            rest = rest[len(fen) :]
            try:
                s = self.game.from_fen(" ".join(fen))
            except ValueError as e:
                raise UciError(str(e)) from None
        else:
            raise UciError(f"position: {args[0]!r} is not startpos or fen")
        if rest and rest[0] != "moves":
            raise UciError(f"position: unexpected {rest[0]!r} (moves expected)")
        for m in rest[1:]:
            if s.over:
                raise UciError(f"position: move {m} comes after the game's end")
            try:
                s = self.game.apply(s, self.game.parse_uci(s, m))
            except ValueError as e:
                raise UciError(f"position: {e}") from None
        return s

    def _go(self, limits: Limits) -> None:
        s = self.state
        if s.over:
            self.emit("info string error the game is over in this position")
            self.emit("bestmove 0000")
            return
        moves = self.game.legal_actions(s)
        if limits.nodes is None and limits.movetime_ms is None and not limits.infinite:
            limits.nodes = self.default_nodes
        start = time.monotonic()
        last_info = start
        nodes, value, pv = 0, 0.0, [moves[0]]
        stop = False
        while not stop:
            sims = CHUNK if limits.nodes is None else min(CHUNK, limits.nodes - nodes)
            if sims > 0:
                value, pv = self.searcher.run(s, sims)
                nodes += sims
            now = time.monotonic()
            elapsed_ms = (now - start) * 1000
            if limits.nodes is not None and nodes >= limits.nodes:
                stop = True
            if limits.movetime_ms is not None and elapsed_ms >= limits.movetime_ms:
                stop = True
            if now - last_info >= INFO_EVERY_S:
                self._info(s, nodes, value, pv, elapsed_ms)
                last_info = now
            while (line := self.poll()) is not None:
                word = line.split()[0] if line.split() else ""
                if word == "isready":
                    self.emit("readyok")
                elif word in ("stop", "quit"):
                    stop = True
                    if word == "quit":
                        self._after.append(line)
                elif word:
                    self._after.append(line)
        self._info(s, nodes, value, pv, (time.monotonic() - start) * 1000)
        best = pv[0] if pv else moves[0]
        self.emit(f"bestmove {self.game.uci(s, best)}")

    def _info(self, s: ChessState, nodes: int, value: float, pv: list[int], ms: float) -> None:
        line, t = [], s
        for a in pv:
            if t.over or a not in self.game.legal_actions(t):
                break
            line.append(self.game.uci(t, a))
            t = self.game.apply(t, a)
        nps = int(nodes * 1000 / ms) if ms > 0 else 0
        self.emit(
            f"info depth {max(1, len(line))} nodes {nodes} nps {nps} time {int(ms)} "
            f"score cp {centipawns(value)} pv {' '.join(line)}".rstrip()
        )


def serve(engine: Engine, stdin: IO[str]) -> None:
    """Read lines on a thread (so ``stop`` reaches a running search) until ``quit`` or the end
    of input."""
    lines: queue.Queue[str | None] = queue.Queue()

    def read() -> None:
        for line in stdin:
            lines.put(line.strip())
        lines.put(None)

    threading.Thread(target=read, name="uci-stdin", daemon=True).start()
    ended = False

    def poll() -> str | None:
        nonlocal ended
        try:
            line = lines.get_nowait()
        except queue.Empty:
            return None
        if line is None:
            ended = True
            return "quit"
        return line

    engine.poll = poll
    while not engine.done and not ended:
        line = lines.get()
        if line is None:
            break
        engine.command(line)


def run_uci(args: argparse.Namespace) -> int:
    """The ``azserve uci`` main."""
    import torch

    from azserve.arena.agent import agent_from_checkpoint
    from azserve.config.argtypes import package_version
    from azserve.errors import ConfigError

    torch.set_num_threads(1)  # one position at a time (see azserve gtp)
    cfg, agent = agent_from_checkpoint(args.checkpoint, args.config, args.overrides, None)
    if not isinstance(agent.game, Chess):
        raise ConfigError(
            f"--checkpoint: azserve uci plays chess; this checkpoint plays {cfg.game}"
        )
    sims = cfg.eval.sims if args.sims is None else args.sims
    out_lock = threading.Lock()

    def emit(text: str) -> None:
        with out_lock:
            sys.stdout.write(text + "\n")
            sys.stdout.flush()

    engine = Engine(
        agent.game,
        AgentSearcher(agent),
        emit,
        name=f"azserve {package_version()}",
        default_nodes=sims,
    )
    print(f"azserve uci: {cfg.game}, {sims} simulations per go without limits; UCI on stdin/stdout",
          file=sys.stderr, flush=True)  # fmt: skip
    serve(engine, sys.stdin)
    return 0


__all__ = ["AgentSearcher", "Engine", "Limits", "Searcher", "UciError", "parse_go", "run_uci"]
