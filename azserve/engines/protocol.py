"""What the line engines share: ``azserve uci`` (chess) and ``azserve usi`` (shogi) speak two
dialects of one protocol, and everything but the dialect is here.

A session (``LineEngine``) reads one command a line and answers through ``emit``: the
handshake (``uci``/``usi``: ``id``, the options, ``uciok``/``usiok`` at once, the net loading in
the background: ``azserve.engines.loading``), ``isready`` (``readyok`` once the net is loaded),
``setoption name N value V``, the new game (``ucinewgame``/``usinewgame``), ``position``, ``go``,
``stop``, ``ponderhit`` and ``quit``. A dialect (``azserve.engines.uci``, ``azserve.engines.usi``)
says how a position and a move are written, how ``go``'s clock reads (``parse_go``) and what
``bestmove`` says where there is no move to give.

``go`` searches in the caller's thread in slices (``azserve.engines.search``), reading its
input between them through ``poll``: ``isready`` is answered at once, ``stop`` ends the search,
``ponderhit`` turns a ``go ponder`` search into the normal one (its limits counted from then),
anything else waits for the search's end. About twice a second, and once at the end, an
``info depth D seldepth S nodes N nps X time MS score cp C pv M...`` line (``score mate N``
where the dialect reports mates). A ``go infinite`` or ``go ponder`` search whose tree is full
(``MAX_VISITS``) waits for ``stop`` before its ``bestmove``, as both protocols ask.

With the solver (``mcts.solver``) a proven root is scored from its proof (``proven_score``:
``score mate N`` in the dialect's unit, ``cp 0`` for a draw) and ends the search
(``azserve.engines.search.settled``): a ``go`` with limits answers at once with the proof's
move; a ``go infinite`` or ``go ponder`` shows its info line and idles until ``stop``.

Anything malformed (an unknown command, a bad position, an illegal move, a bad number or
option value) is answered ``info string error ...`` (``ProtocolError``), an unknown option
``info string unknown option ...``, and the engine keeps its last good position.
"""

from __future__ import annotations

import asyncio
import queue
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO, Any

from actors.search import SOLVED_WIN
from azserve.engines.commands import (
    Limits,
    Option,
    ProtocolError,
    centipawns,
)
from azserve.engines.search import EngineSearch, Progress

INFO_EVERY_S = 0.5
IDLE_POLL_S = 0.01
"""How often a search that has finished but must wait for ``stop`` reads its input."""


@dataclass
class Loaded:
    """What a session needs once the checkpoint is loaded."""

    game: Any
    """The checkpoint's game (``Chess`` for uci, ``Shogi`` for usi)."""
    search: EngineSearch
    default_nodes: int
    algorithm: str
    """The checkpoint's own ``mcts.algorithm``."""


class LineEngine:
    """One session of a line protocol: ``command(line)`` for each line read; output through
    ``emit``; ``done`` after ``quit``. ``load()`` gives the checkpoint's game and search
    (called, and waited for, by the first command that needs them). ``go`` searches in the
    caller's thread, taking its input through ``poll`` (a line, or None) between slices.

    A dialect sets ``protocol`` (the handshake's word: ``uci``, ``usi``) and ``options``, and
    gives ``position``, ``parse_go``, ``move_text`` and ``no_move`` (and may change
    ``bestmove``, ``score`` and ``other``)."""

    protocol = ""
    options: tuple[Option, ...] = ()
    quiet_options: tuple[str, ...] = ()
    """Options GUIs send to every engine, taken and ignored (USI's ``USI_Hash``)."""

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
        self.settings: dict[str, Any] = {o.name.lower(): o.default for o in self.options}
        self.state: Any = None
        self.done = False
        self._after: list[str] = []  # commands that arrived during a search
        self._shown: Progress | None = None  # the last progress an info line showed
        self._limits = Limits()  # the running search's
        self._clock = 0.0  # when its limits began to count (ponderhit moves it)
        self._base = 0  # its simulations when they began to count
        self._sims = 0  # its simulations so far
        self._scan = 0  # how many lines of _after it has read
        self._past_go = False  # whether those hold a later go: what follows is that one's
        self._quit = False  # a quit has been read: every search still to run ends at once

    # --- what a dialect gives ------------------------------------------------------------

    position_word = ""
    """What names a set-up position in ``position``: ``fen`` (UCI), ``sfen`` (USI)."""

    def position(self, args: list[str]) -> Any:
        """The state ``position startpos|WORD TEXT... [moves M...]`` describes; ProtocolError
        (the old state kept) if bad."""
        word = self.position_word
        if not args:
            raise ProtocolError(f"position: expected startpos or {word}")
        rest = args[1:]
        if args[0] == "startpos":
            s = self.loaded.game.initial_state()
        elif args[0] == word:
            text = rest[: rest.index("moves")] if "moves" in rest else rest
            rest = rest[len(text) :]
            try:
                s = self.from_text(text)
            except ValueError as e:
                raise ProtocolError(str(e)) from None
        else:
            raise ProtocolError(f"position: {args[0]!r} is not startpos or {word}")
        if rest and rest[0] != "moves":
            raise ProtocolError(f"position: unexpected {rest[0]!r} (moves expected)")
        for m in rest[1:]:
            s = self.playable_quietly(s)
            if s.over:
                raise ProtocolError(
                    f"position: move {m} comes after the game's end{self.why_over(s)}"
                )
            try:
                s = self.apply_move(s, m)
            except ValueError as e:
                raise ProtocolError(f"position: {e}") from None
        return s

    def from_text(self, words: list[str]) -> Any:
        """The state the position text ``words`` (after ``position WORD``) sets up;
        ValueError if bad."""
        raise NotImplementedError

    def apply_move(self, s: Any, text: str) -> Any:
        """``s`` after the move ``text``; ValueError if it is not legal there."""
        raise NotImplementedError

    def why_over(self, s: Any) -> str:
        """Why the game is over at ``s``, as `` (reason)``, or nothing."""
        return ""

    def playable_quietly(self, s: Any) -> Any:
        """``playable`` without a word to the GUI (a move list played on past our end)."""
        return s

    def parse_go(self, args: list[str], state: Any) -> Limits:
        """``go ARGS``' limits for the side to move at ``state``."""
        raise NotImplementedError

    def move_text(self, s: Any, a: int) -> str:
        """Legal action ``a`` at ``s`` as the protocol writes moves."""
        raise NotImplementedError

    def no_move(self, s: Any) -> str:
        """``bestmove``'s word for a position whose game is over (after an ``info string``)."""
        raise NotImplementedError

    def playable(self, s: Any) -> Any:
        """The state to search for ``go`` at ``s`` (a dialect whose GUI referees the game may
        play on where our rules ended it); ``s`` itself by default."""
        return s

    def bestmove(self, s: Any, progress: Progress) -> str:
        """What ``bestmove`` says after a search."""
        return self.move_text(s, progress.best)

    def score(self, s: Any, line: list[int], value: float) -> str:
        """The ``score`` of an info line whose principal variation is ``line`` (actions) and
        whose best move's value is ``value``: ``cp N`` by default."""
        return f"cp {centipawns(value)}"

    mate_unit = "plies"
    """How ``score mate N`` counts (``proven_score``): ``plies`` (USI) or ``moves`` (UCI:
    full moves, the mating one included)."""

    def proven_score(self, value: float, plies: int) -> str:
        """The ``score`` of a root the solver proved (``value`` for the side to move, ``plies``
        to the game's end): ``mate N`` for a win, ``mate -N`` for a loss (in ``mate_unit``),
        else ``cp`` of the exact value (a draw: ``cp 0``)."""
        if abs(value) < SOLVED_WIN:
            return f"cp {centipawns(value)}"
        n = (plies + 1) // 2 if self.mate_unit == "moves" else plies
        return f"mate {n if value > 0 else -n}"

    def other(self, cmd: str, args: list[str]) -> bool:
        """A command the dialect knows beyond the shared ones (True when it was)."""
        return False

    # --- the session ---------------------------------------------------------------------

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
        algorithm = self.settings["algorithm"]
        want = {
            "leaves_in_flight": self.settings["batch"],
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
            except ProtocolError as e:
                self.emit(f"info string error {e}")

    def _run(self, cmd: str, args: list[str]) -> None:
        if cmd == self.protocol:
            self.emit(f"id name {self.name}")
            self.emit("id author the azserve authors")
            for option in self.options:
                self.emit(option.line())
            self.emit(f"{self.protocol}ok")
        elif cmd == "isready":
            _ = self.loaded  # ready once the net is
            self.emit("readyok")
        elif cmd == f"{self.protocol}newgame":
            self.state = self.loaded.game.initial_state()
            self.loaded.search.new_game()
        elif cmd == "setoption":
            self._setoption(args)
        elif cmd == "position":
            self.state = self.position(args)
        elif cmd == "go":
            state = self.state if self.state is not None else self.loaded.game.initial_state()
            self._go(state, self.parse_go(args, state))
        elif cmd in ("stop", "ponderhit"):
            pass  # no search running
        elif cmd == "quit":
            self.done = True
        elif not self.other(cmd, args):
            raise ProtocolError(f"unknown command {cmd!r}")

    def _setoption(self, args: list[str]) -> None:
        """``setoption name NAME [value VALUE]`` (NAME may have spaces)."""
        if not args or args[0] != "name":
            raise ProtocolError("setoption: expected setoption name NAME value VALUE")
        rest = args[1:]
        at = rest.index("value") if "value" in rest else len(rest)
        name, value = " ".join(rest[:at]), " ".join(rest[at + 1 :])
        option = next((o for o in self.options if o.name.lower() == name.lower()), None)
        if option is None:
            if name.lower() in self.quiet_options:
                return
            known = ", ".join(o.name for o in self.options)
            self.emit(f"info string unknown option {name!r} (known: {known})")
            return
        self.settings[option.name.lower()] = option.parse(value)
        self._apply_options()

    def _go(self, s: Any, limits: Limits) -> None:
        s = self.playable(s)
        if s.over:
            self.emit(f"bestmove {self.no_move(s)}")
            return
        if limits.note:
            self.emit(f"info string {limits.note}")
        if limits.nodes is None and limits.movetime_ms is None and not limits.infinite:
            limits.nodes = self.settings["nodes"] or self.loaded.default_nodes
        progress = asyncio.run(self._search(s, limits))
        if progress is not self._shown:
            self._info(s, progress)
        self.emit(f"bestmove {self.bestmove(s, progress)}")

    async def _search(self, s: Any, limits: Limits) -> Progress:
        start = time.monotonic()
        self._limits, self._clock, self._base, self._sims = limits, start, 0, 0
        self._scan = 0  # the lines of _after this search has read (_stopped)
        self._past_go = False  # whether those lines hold a later go (_stopped)
        open_ended = limits.infinite or limits.ponder
        deadline = None
        if limits.movetime_ms is not None and not open_ended:
            deadline = start + limits.movetime_ms / 1000
        last = [start]

        def on_slice(progress: Progress) -> None:
            self._sims = progress.simulations
            now = time.monotonic()
            if now - last[0] >= INFO_EVERY_S:
                last[0] = now
                self._info(s, progress)
                self._shown = progress

        sims = None if open_ended else limits.nodes
        search = self.loaded.search
        progress = await search.run(self.loaded.game, s, sims, deadline, on_slice, self._stopped)
        waits = self._limits.infinite or self._limits.ponder
        if waits and progress.report.proof is not None and progress is not self._shown:
            # The solver settled the root: the GUI sees its score now, not after the stop.
            self._info(s, progress)
            self._shown = progress
        # A full tree (or a settled proof) ends an open-ended search: the protocols want
        # bestmove after stop only; until then the input is read, a core left idle.
        while self._limits.infinite or self._limits.ponder:
            if self._stopped():
                break
            await asyncio.sleep(IDLE_POLL_S)
        return progress

    def _stopped(self) -> bool:
        """Read the input that came after the running ``go``, in order: first the lines
        already waiting (``_after``: read during an earlier search), then what comes in.
        ``isready`` is answered at once; ``stop`` ends the search and ``ponderhit`` starts its
        limits' count, unless a later ``go`` came before them (they are that one's); ``quit``,
        wherever it came, ends this search and every one before it; anything else waits for
        the search's end. After a ponderhit, whether the limits are spent. Each line is read
        once per search, so a long backlog costs its length, not its square. (A ``quit``
        waiting behind a ``go infinite`` in the backlog once went unseen: it searched for
        ever.)"""
        stop, i = self._quit, self._scan
        while not stop:
            if i == len(self._after):
                line = self.poll()
                if line is None:
                    break
                if line.split()[:1] == ["isready"]:
                    self.emit("readyok")
                    continue
                self._after.append(line)
                if line.split()[:1] == ["quit"]:
                    self._quit = stop = True
                    break
            if self._past_go:  # what comes after a later go is for it, but isready and quit
                i = len(self._after)
                continue
            word = self._after[i].split()[0] if self._after[i].split() else ""
            if word == "isready":
                self.emit("readyok")
            elif word == "stop":
                stop = True
            elif word == "quit":
                self._quit = stop = True
                break  # kept: the session ends after the searches before it
            elif word == "ponderhit":
                if self._limits.ponder:
                    self._limits.ponder = False
                    self._clock, self._base = time.monotonic(), self._sims
            else:
                self._past_go = word == "go"  # (it was False to come here)
                i += 1  # kept, for after the search
                continue
            del self._after[i]
        if stop:
            self._limits.infinite = self._limits.ponder = False
        self._scan = i
        if stop or self._limits.ponder or self._limits.infinite:
            return stop
        limits, ms = self._limits, (time.monotonic() - self._clock) * 1000
        if limits.nodes is not None and self._sims - self._base >= limits.nodes:
            return True
        return limits.movetime_ms is not None and ms >= limits.movetime_ms

    def _info(self, s: Any, progress: Progress) -> None:
        game, r = self.loaded.game, progress.report
        i = int((r.actions == progress.best).argmax())
        line, words, t = [], [], s
        for a in r.pvs[i]:
            if t.over or a not in game.legal_actions(t):
                break
            line.append(int(a))
            words.append(self.move_text(t, a))
            t = game.apply(t, a)
        value = float(r.values[i]) if r.visits[i] else r.root_value
        if r.proof is not None and r.proof.value is not None:  # the solver's: exact
            score = self.proven_score(r.proof.value, r.proof.plies)
        else:
            score = self.score(s, line, value)
        ms = progress.seconds * 1000
        depth = max(1, len(line))
        self.emit(
            f"info depth {depth} seldepth {depth} nodes {progress.simulations} nps "
            f"{progress.nps} time {int(ms)} score {score} "
            f"pv {' '.join(words)}".rstrip()
        )


def serve(engine: LineEngine, stdin: IO[str]) -> bool:
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

    threading.Thread(target=read, name=f"{engine.protocol}-stdin", daemon=True).start()
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


def run_stdio(args: Any, engine: type[LineEngine], plays: str) -> int:
    """An engine's main (``azserve uci``, ``azserve usi``): the checkpoint loads in the
    background (the handshake is answered at once), its search behind ``engine``, the protocol
    on stdin/stdout. ``plays``: the game the engine plays, for the error when the checkpoint
    plays another."""
    from actors.search import PLAY_ALGORITHM
    from azserve.config.argtypes import package_version
    from azserve.engines.loading import Loading
    from azserve.engines.search import EngineSearch, engine_mcts

    name = engine.protocol
    # the checkpoint: read and compiled on a thread while the handshake is answered
    loading = Loading(args.checkpoint, args.config, args.overrides, name, plays)

    def load() -> Loaded:
        cfg, agent = loading.get()
        sims = cfg.eval.sims if args.sims is None else args.sims
        print(f"azserve {name}: {cfg.game}, {PLAY_ALGORITHM} search (Algorithm option; "
              f"self-play's: {cfg.mcts.algorithm}), {sims} simulations per go without limits; "
              f"{name.upper()} on stdin/stdout", file=sys.stderr, flush=True)  # fmt: skip
        search = EngineSearch(agent.evaluator, engine_mcts(agent.mcts_cfg))
        return Loaded(agent.game, search, sims, cfg.mcts.algorithm)

    out_lock = threading.Lock()

    def emit(text: str) -> None:
        with out_lock:
            sys.stdout.write(text + "\n")
            sys.stdout.flush()

    # stdin -> the engine -> stdout
    session = engine(load, emit, name=f"azserve {package_version()}")
    if not serve(session, sys.stdin):
        loading.get()  # the input ended: a failed load still says why (exit status 2)
    return 0


__all__ = ["LineEngine", "Loaded", "run_stdio", "serve"]
