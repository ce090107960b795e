"""``azserve uci``: a chess checkpoint as a UCI engine, so cutechess-cli, Arena, any chess GUI,
python-chess or ``azserve match`` can drive it.

Commands: ``uci``, ``isready``, ``ucinewgame``, ``setoption name N value V``, ``position
startpos|fen FEN [moves M...]``, ``go [nodes N] [movetime MS] [wtime MS btime MS winc MS binc MS
movestogo N] [depth N] [mate N] [infinite]``, ``stop``, ``quit`` (``debug``, ``register`` and
``ponderhit`` are read and ignored). ``uciok`` comes at once: the net loads in the background
(``azserve.engines.loading``) and ``isready`` answers ``readyok`` once it is ready. While it
searches, the engine prints ``info depth D seldepth S nodes N nps X time MS score cp C pv M...``
about twice a second and ``bestmove M`` at the end; ``stop`` ends the search early, ``isready``
is answered at once. Anything malformed (an unknown command, a bad FEN, an illegal move, a bad
number or option value) is answered ``info string error ...``, an unknown option ``info string
unknown option ...``, and the engine keeps its last good position.

The search is the one match and the ladder play and measured (``azserve.engines.search``:
``make_search`` with the checkpoint's ``mcts.*`` and ``PLAY_ALGORITHM``, PUCT, on the compiled
core, its leaves evaluated in batches; the ``Algorithm`` option picks Gumbel or the
checkpoint's own ``mcts.algorithm`` instead); ``nodes`` counts simulations. The options (``OPTIONS``): ``Nodes`` (a ``go`` without limits), ``Batch`` (PUCT's
leaves in flight), ``Algorithm`` and ``MoveOverhead``. A search has no depth to stop at and
proves no mate, so ``go depth N`` and ``go mate N`` become node budgets (``depth_nodes``) and
the engine says so in an ``info string``. The score is the best move's value for the side to
move mapped to centipawns as Leela Chess Zero maps it, ``111.7 * tan(1.562 * v)``.
"""

from __future__ import annotations

import asyncio
import math
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO, Any

from actors.games.chess.rules import Chess, ChessState
from actors.search import PLAY_ALGORITHM
from azserve.engines.search import LEAVES_IN_FLIGHT, EngineSearch, Progress

INFO_EVERY_S = 0.5
MARGIN_MS = 30
"""Kept back from every time budget for the reply's way to the GUI (``MoveOverhead``)."""
MAX_NODES = 1_000_000


class UciError(Exception):
    """A malformed or illegal command: its message follows ``info string error``."""


@dataclass
class Limits:
    """One ``go``'s limits: simulations, milliseconds, or neither (until ``stop``)."""

    nodes: int | None = None
    movetime_ms: float | None = None
    infinite: bool = False
    note: str = ""
    """What the engine made of a limit it has no such thing for (``depth``, ``mate``)."""


def depth_nodes(depth: int) -> int:
    """The node budget of ``go depth N``: a tree's depth grows with the log of its nodes, so
    each ply doubles the budget, from 16 at depth 1 up to 2**17 (about 131,000)."""
    return 2 ** min(max(depth, 1) + 3, 17)


@dataclass(frozen=True)
class Option:
    """An engine option as ``uci`` announces it."""

    name: str
    kind: str
    """``spin`` or ``combo``."""
    default: Any
    low: int = 0
    high: int = 0
    choices: tuple[str, ...] = ()
    help: str = ""

    def line(self) -> str:
        if self.kind == "spin":
            return f"option name {self.name} type spin default {self.default} min {self.low} max {self.high}"
        return f"option name {self.name} type combo default {self.default} " + " ".join(
            f"var {c}" for c in self.choices
        )

    def parse(self, text: str) -> Any:
        """The option's value from ``setoption``'s text; UciError when out of range."""
        if self.kind == "spin":
            try:
                v = int(text)
            except ValueError:
                raise UciError(f"setoption {self.name}: {text!r} is not a whole number") from None
            if not self.low <= v <= self.high:
                raise UciError(f"setoption {self.name}: {v} is not in {self.low}..{self.high}")
            return v
        if text.lower() not in self.choices:
            raise UciError(
                f"setoption {self.name}: {text!r}: expected one of {', '.join(self.choices)}"
            )
        return text.lower()


OPTIONS = (
    Option("Nodes", "spin", 0, 0, MAX_NODES,
           help="simulations of a go without limits (0: the checkpoint's eval.sims or --sims)"),
    Option("Batch", "spin", LEAVES_IN_FLIGHT, 1, 256,
           help="PUCT: leaves evaluated together per round (Gumbel takes one at a time)"),
    Option("Algorithm", "combo", PLAY_ALGORITHM, choices=("puct", "gumbel", "checkpoint"),
           help="the search: PUCT (match's and the ladder's), Gumbel, or the checkpoint's "
           "mcts.algorithm (what self-play used)"),
    Option("MoveOverhead", "spin", MARGIN_MS, 0, 10_000,
           help="milliseconds kept back from every time budget"),
)  # fmt: skip
"""The options ``uci`` announces (``setoption`` takes their names in any case)."""


def centipawns(value: float) -> int:
    """Leela's map from a value in (-1, 1) to centipawns (clipped to +-12,800)."""
    v = max(-0.999, min(0.999, value))
    return int(round(max(-12800.0, min(12800.0, 111.714640912 * math.tan(1.5620688421 * v)))))


def parse_go(words: list[str], white: bool, margin_ms: float = MARGIN_MS) -> Limits:
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
    for key, plies in (("depth", nums.get("depth")), ("mate", 2 * nums.get("mate", 0) - 1)):
        if plies is None or key not in nums:
            continue
        budget = depth_nodes(plies)
        limits.nodes = budget if limits.nodes is None else min(limits.nodes, budget)
        limits.note = (
            f"go {key} {nums[key]}: searching {budget} nodes (a tree search has no depth "
            f"limit{' and proves no mate' if key == 'mate' else ''}; 2**(plies+3) nodes)"
        )
    if "movetime" in nums:
        limits.movetime_ms = max(1.0, nums["movetime"] - margin_ms)
    left = nums.get("wtime" if white else "btime")
    if left is not None:
        inc = nums.get("winc" if white else "binc", 0)
        togo = nums.get("movestogo", 30)
        share = max(left, 0) / max(togo, 1) + 0.75 * inc
        limits.movetime_ms = max(1.0, min(share, max(left, 0) / 2) - margin_ms)
    return limits


@dataclass
class Loaded:
    """What a session needs once the checkpoint is loaded."""

    game: Chess
    search: EngineSearch
    default_nodes: int
    algorithm: str
    """The checkpoint's own ``mcts.algorithm``."""


class Engine:
    """One UCI session: ``command(line)`` for each line read; output through ``emit``; ``done``
    after ``quit``. ``load()`` gives the checkpoint's game and search (called, and waited for,
    by the first command that needs them). ``go`` searches in the caller's thread, taking its
    input through ``poll`` (a line, or None) between slices."""

    def __init__(
        self,
        load: Callable[[], Loaded],
        emit: Callable[[str], None],
        poll: Callable[[], str | None] = lambda: None,
        name: str = "azserve",
    ) -> None:
        self._load = load
        self._loaded: Loaded | None = None
        self.emit = emit
        self.poll = poll
        self.name = name
        self.options: dict[str, Any] = {o.name.lower(): o.default for o in OPTIONS}
        self.state: ChessState | None = None
        self.done = False
        self._after: list[str] = []  # commands that arrived during a search
        self._shown: Progress | None = None  # the last progress an info line showed

    @property
    def loaded(self) -> Loaded:
        if self._loaded is None:
            self._loaded = self._load()
            self._apply_options()
        return self._loaded

    def _apply_options(self) -> None:
        """The search settings the options name, where they changed (a fresh tree then)."""
        if self._loaded is None:
            return
        search = self._loaded.search
        algorithm = self.options["algorithm"]
        want = {
            "leaves_in_flight": self.options["batch"],
            "algorithm": self._loaded.algorithm if algorithm == "checkpoint" else algorithm,
        }
        changed = {k: v for k, v in want.items() if getattr(search.mcts, k) != v}
        if changed:
            search.configure(**changed)

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
            for option in OPTIONS:
                self.emit(option.line())
            self.emit("uciok")
        elif cmd == "isready":
            _ = self.loaded  # ready once the net is
            self.emit("readyok")
        elif cmd == "ucinewgame":
            self.state = self.loaded.game.initial_state()
            self.loaded.search.new_game()
        elif cmd == "setoption":
            self._setoption(args)
        elif cmd == "position":
            self.state = self._position(args)
        elif cmd == "go":
            state = self.state or self.loaded.game.initial_state()
            white = self.loaded.game.to_play(state) == 0
            self._go(state, parse_go(args, white, self.options["moveoverhead"]))
        elif cmd == "stop":
            pass  # no search running
        elif cmd == "quit":
            self.done = True
        elif cmd in ("debug", "register", "ponderhit"):
            pass
        else:
            raise UciError(f"unknown command {cmd!r}")

    def _setoption(self, args: list[str]) -> None:
        """``setoption name NAME [value VALUE]`` (NAME may have spaces)."""
        if not args or args[0] != "name":
            raise UciError("setoption: expected setoption name NAME value VALUE")
        rest = args[1:]
        at = rest.index("value") if "value" in rest else len(rest)
        name, value = " ".join(rest[:at]), " ".join(rest[at + 1 :])
        option = next((o for o in OPTIONS if o.name.lower() == name.lower()), None)
        if option is None:
            known = ", ".join(o.name for o in OPTIONS)
            self.emit(f"info string unknown option {name!r} (known: {known})")
            return
        self.options[option.name.lower()] = option.parse(value)
        self._apply_options()

    def _position(self, args: list[str]) -> ChessState:
        """The position ``position`` describes; UciError (the old position kept) if bad."""
        if not args:
            raise UciError("position: expected startpos or fen")
        game = self.loaded.game
        rest = args[1:]
        if args[0] == "startpos":
            s = game.initial_state()
        elif args[0] == "fen":
            fen = rest[: rest.index("moves")] if "moves" in rest else rest
            rest = rest[len(fen) :]
            try:
                s = game.from_fen(" ".join(fen))
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
                s = game.apply(s, game.parse_uci(s, m))
            except ValueError as e:
                raise UciError(f"position: {e}") from None
        return s

    def _go(self, s: ChessState, limits: Limits) -> None:
        game = self.loaded.game
        if s.over:
            self.emit("info string error the game is over in this position")
            self.emit("bestmove 0000")
            return
        if limits.note:
            self.emit(f"info string {limits.note}")
        if limits.nodes is None and limits.movetime_ms is None and not limits.infinite:
            limits.nodes = self.options["nodes"] or self.loaded.default_nodes
        progress = asyncio.run(self._search(s, limits))
        if progress is not self._shown:
            self._info(s, progress)
        self.emit(f"bestmove {game.uci(s, progress.best)}")

    async def _search(self, s: ChessState, limits: Limits) -> Progress:
        start = time.monotonic()
        deadline = None if limits.movetime_ms is None else start + limits.movetime_ms / 1000
        last = [start]

        def on_slice(progress: Progress) -> None:
            now = time.monotonic()
            if now - last[0] >= INFO_EVERY_S:
                last[0] = now
                self._info(s, progress)
                self._shown = progress

        return await self.loaded.search.run(
            self.loaded.game, s, limits.nodes, deadline, on_slice, self._stopped
        )

    def _stopped(self) -> bool:
        """Read the input that came during a search: ``isready`` answered, ``stop`` (or
        ``quit``) ends it, anything else waits for the search's end."""
        stop = False
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
        return stop

    def _info(self, s: ChessState, progress: Progress) -> None:
        game, r = self.loaded.game, progress.report
        i = int((r.actions == progress.best).argmax())
        line, t = [], s
        for a in r.pvs[i]:
            if t.over or a not in game.legal_actions(t):
                break
            line.append(game.uci(t, a))
            t = game.apply(t, a)
        value = float(r.values[i]) if r.visits[i] else r.root_value
        ms = progress.seconds * 1000
        self.emit(
            f"info depth {max(1, len(line))} seldepth {max(1, len(line))} nodes "
            f"{progress.simulations} nps {progress.nps} time {int(ms)} "
            f"score cp {centipawns(value)} pv {' '.join(line)}".rstrip()
        )


def serve(engine: Engine, stdin: IO[str]) -> bool:
    """Read lines on a thread (so ``stop`` reaches a running search) until ``quit`` or the end
    of input; whether it was ``quit``."""
    lines: queue.Queue[str | None] = queue.Queue()

    def read() -> None:
        try:
            for line in stdin:
                lines.put(line.strip())
        except (OSError, ValueError):  # input that cannot be read ends like the end of input
            pass
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
    return engine.done and not ended


__all__ = [
    "OPTIONS",
    "Engine",
    "Limits",
    "Loaded",
    "Option",
    "UciError",
    "centipawns",
    "depth_nodes",
    "parse_go",
]
