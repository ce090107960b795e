"""``azserve gtp``: a Go checkpoint as a Go Text Protocol engine (GTP version 2) for Sabaki,
Lizzie, GoGui's twogtp or ``azserve match`` (docs/go.md shows each one's command line).

Commands (``list_commands``): GTP 2's core set (protocol_version, name, version,
known_command, list_commands, boardsize, clear_board, komi, play, genmove, undo, showboard,
quit), scoring (final_score, final_status_list), handicap (fixed_handicap,
place_free_handicap, set_free_handicap), loadsgf and printsgf, time (time_settings,
kgs-time_settings, time_left), and analysis as Leela Zero and KataGo print it (lz-analyze,
kata-analyze, genmove_analyze, lz-genmove_analyze, kata-genmove_analyze).

- Either colour may ``play`` or ``genmove`` at any time (GTP 2): the other colour moves next.
- ``final_score`` and ``final_status_list`` take dead stones off first; the net has no
  ownership head, so the dead stones come from Monte Carlo playouts of the final position
  (``actors.games.go.status`` explains the method).
- ``genmove`` answers ``resign`` when the search's win rate for its colour is below
  ``--resign`` (0 by default: never), and spends at most its share of the clock
  (``azserve.engines.gtp.clock``) or ``--sims`` simulations, whichever is less.
- ``name`` is ``azserve``; ``version`` tells two checkpoints apart: the package version, the
  game, the checkpoint's training step and a hash of its weights
  (``0.1.0-go9-step40-w1a2b3c4d``).
- Bad input gets GTP's ``? `` failure with the reason and the engine keeps answering: unknown
  commands, a line over ``MAX_LINE`` characters (``? line too long``, never echoed), a komi that
  is not a finite number within the board's points, vertices off the board, moves the rules
  refuse (occupied, suicide, positional superko).

The board is the checkpoint's (9x9, 13x13 or 19x19): ``boardsize`` of another size gets ``?
unacceptable size``. Any komi in range is taken (the net was trained at 7.5).
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import math
import re
import time
from collections.abc import Callable

from actors.games.go import status as go_status
from actors.games.go.rules import Go, GoState
from azserve.engines.gtp.board import (
    Board,
    GtpError,
    free_handicap_points,
    handicap_points,
    parse_color,
)
from azserve.engines.gtp.clock import Clock
from azserve.engines.gtp.report import AnalyzeArgs, Report, from_progress, parse_analyze_args
from azserve.engines.search import EngineSearch

COMMANDS = (
    "protocol_version", "name", "version", "known_command", "list_commands", "boardsize",
    "clear_board", "komi", "play", "genmove", "undo", "final_score", "final_status_list",
    "showboard", "fixed_handicap", "place_free_handicap", "set_free_handicap", "loadsgf",
    "printsgf", "time_settings", "kgs-time_settings", "time_left", "lz-analyze",
    "kata-analyze", "genmove_analyze", "lz-genmove_analyze", "kata-genmove_analyze", "quit",
)  # fmt: skip
MAX_LINE = 8192
"""The longest command line read (characters); a longer one gets ``? line too long``."""
log = logging.getLogger("azserve.engines.gtp.engine")
_VERTEX = re.compile(r"^[A-Za-z][0-9]{1,2}$")


class MoveSource:
    """What searches for the engine: ``search`` -> Report (``visits`` 0: the raw net)."""

    async def search(
        self,
        game: Go,
        state: GoState,
        visits: int | None,
        deadline: float | None = None,
        on_slice: Callable[[Report], None] | None = None,
    ) -> Report:  # pragma: no cover - interface
        raise NotImplementedError


class AgentMoves(MoveSource):
    """A checkpoint's search (``azserve.engines.search.EngineSearch``: its algorithm on the
    compiled core); each search's speed goes to ``log`` (stderr), as Leela Zero prints it."""

    def __init__(self, search: EngineSearch, log: Callable[[str], None] | None = None) -> None:
        self.engine = search
        self.log = log or (lambda text: None)

    async def search(
        self,
        game: Go,
        state: GoState,
        visits: int | None,
        deadline: float | None = None,
        on_slice: Callable[[Report], None] | None = None,
    ) -> Report:
        if visits == 0:
            return from_progress(await self.engine.raw(game, state))
        hear = None if on_slice is None else (lambda p: on_slice(from_progress(p)))
        progress = await self.engine.run(game, state, visits, deadline, hear)
        self.log(
            f"{progress.simulations} simulations, {progress.report.nodes} nodes, "
            f"{progress.nps} n/s, {progress.seconds:.2f} s"
        )
        return from_progress(progress)


class Engine:
    """One GTP session. ``await areply(line)`` for each line read (``reply`` from synchronous
    code); ``done`` after ``quit``. Streams (analysis) go to ``out``."""

    def __init__(
        self,
        moves: MoveSource,
        name: str = "azserve",
        version: str = "",
        size: int = 9,
        sims: int = 64,
        resign: float = 0.0,
        playouts: int = go_status.PLAYOUTS,
        out: Callable[[str], None] | None = None,
        game: Go | None = None,
    ) -> None:
        self.moves = moves
        self.name = name
        self.version = version
        # The network's game (its encoding: go9-features keeps the ko point and last moves in
        # its states); plain Go of ``size`` without one. Its board is the only size taken.
        start = Go(size, 7.5) if game is None else game.with_komi(7.5)
        self.size = start.size
        self.sims = sims
        self.resign = resign
        self.playouts = playouts
        self.out = out or (lambda text: None)
        self.board = Board(start)
        self.clock = Clock()
        self.notes: dict[int, str] = {}  # move index -> the search's comment (printsgf)
        self.done = False
        self._stream: asyncio.Task[None] | None = None
        self._status: tuple[bytes, list[go_status.ChainStatus]] | None = None

    # --- lines ----------------------------------------------------------------------------

    def reply(self, line: str) -> str | None:
        """``areply`` from synchronous code (tests, scripts without analysis streams)."""
        from azserve.arena.agent import run_sync

        return run_sync(self.areply(line))

    async def areply(self, line: str) -> str | None:
        """The reply to one input line ("=..."/"?..." and the blank line), or None for a line
        GTP says to ignore (empty, or a comment) and for commands that wrote their own reply
        (analysis streams)."""
        if len(line) > MAX_LINE:
            return "? line too long\n\n"
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
            out = await self._run(command, args, ident)
        except GtpError as e:
            return f"?{ident} {e}\n\n"
        if out is None:
            return None
        return f"={ident} {out}".rstrip(" ") + "\n\n" if out else f"={ident}\n\n"

    async def _run(self, command: str, args: list[str], ident: str) -> str | None:
        if command not in COMMANDS:
            shown = command if len(command) <= 40 else command[:40] + "..."
            raise GtpError(f"unknown command {shown!r}")
        handler = getattr(self, "_cmd_" + command.replace("-", "_"))
        if asyncio.iscoroutinefunction(handler):
            return await handler(args, ident)  # type: ignore[no-any-return]
        result = handler(args)
        return None if result is None else str(result)

    async def stop(self) -> None:
        """End a running analysis stream (its reply's blank line is written)."""
        task, self._stream = self._stream, None
        if task is not None:
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass
            except Exception as exc:  # the stream ended early; the session goes on
                log.error("the analysis stream failed: %s", exc)
            self.out("\n")

    # --- helpers ---------------------------------------------------------------------------

    def _need(self, args: list[str], n: int, usage: str) -> None:
        if len(args) < n:
            raise GtpError(f"syntax error: expected {usage}")

    def _vertex(self, text: str) -> int:
        """A GTP vertex (``D4``, ``pass``) on this board; GtpError otherwise."""
        if text.lower() != "pass" and not _VERTEX.match(text):
            shown = text if len(text) <= 20 else text[:20] + "..."
            raise GtpError(f"invalid vertex {shown!r}: expected a vertex such as D4, or pass")
        try:
            return self.board.game.parse_move(text)
        except ValueError as e:
            raise GtpError(f"invalid vertex {text!r}: {str(e).split(': ', 1)[-1]}") from None

    def _new_board(self) -> None:
        self.board = Board(self.board.game)
        self.notes = {}

    # --- GTP core --------------------------------------------------------------------------

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
        self._new_board()
        return ""

    def _cmd_clear_board(self, args: list[str]) -> str:
        self._new_board()
        return ""

    def _cmd_komi(self, args: list[str]) -> str:
        self._need(args, 1, "komi FLOAT")
        self.board = self.board.with_komi(self._komi(args[0]))
        return ""

    def _komi(self, text: str) -> float:
        try:
            komi = float(text)
        except ValueError:
            shown = text if len(text) <= 20 else text[:20] + "..."
            raise GtpError(f"syntax error: komi {shown!r} is not a number") from None
        cells = self.board.game.cells
        if not math.isfinite(komi) or abs(komi) > cells:
            raise GtpError(
                f"syntax error: komi {text!r} must be a finite number in -{cells}..{cells}"
            )
        return komi

    def _cmd_play(self, args: list[str]) -> str:
        self._need(args, 2, "play COLOR VERTEX")
        self.board.play(parse_color(args[0]), self._vertex(args[1]))
        return ""

    async def _cmd_genmove(self, args: list[str], ident: str) -> str:
        self._need(args, 1, "genmove COLOR")
        return await self._genmove(parse_color(args[0]))

    async def _genmove(self, color: int, on_slice: Callable[[Report], None] | None = None) -> str:
        """Search, play and name the move for ``color`` (``resign`` below ``--resign``)."""
        board = self.board
        state = board.for_color(color)
        game = board.game
        if game.is_terminal(state):  # after two passes (or the move cap): pass again
            board.play(color, game.pass_action)
            return "pass"
        t0 = time.monotonic()
        allowance = self.clock.allowance(color, len(board.empties()))
        deadline = None if allowance is None else t0 + allowance
        r = await self.moves.search(game, state, self.sims, deadline, on_slice)
        self.clock.spent(color, time.monotonic() - t0)
        if self.resign > 0 and r.winrate < self.resign and r.infos[0].winrate < self.resign:
            return "resign"
        board.play(color, r.best)
        self.notes[len(board.moves) - 1] = _note(game, r)
        return game.format_move(r.best)

    def _cmd_undo(self, args: list[str]) -> str:
        self.board.undo()
        self.notes.pop(len(self.board.moves), None)
        return ""

    def _cmd_showboard(self, args: list[str]) -> str:
        return "\n" + self.board.game.render(self.board.state)

    def _cmd_quit(self, args: list[str]) -> str:
        self.done = True
        return ""

    # --- scoring ---------------------------------------------------------------------------

    def statuses(self) -> list[go_status.ChainStatus]:
        """The chains of the board as it stands, with their status (cached per board)."""
        board = self.board.state.board
        if self._status is None or self._status[0] != board:
            owned = go_status.ownership(self.size, board, self.playouts)
            self._status = (board, go_status.chain_statuses(self.size, board, owned))
        return self._status[1]

    def _cmd_final_score(self, args: list[str]) -> str:
        game = self.board.game
        return go_status.format_score(
            go_status.dead_aware_score(game, self.board.state.board, self.statuses())
        )

    def _cmd_final_status_list(self, args: list[str]) -> str:
        self._need(args, 1, "final_status_list alive|dead|seki")
        status = args[0].lower()
        if status not in ("alive", "dead", "seki"):
            raise GtpError(f"syntax error: status {args[0]!r}: expected alive, dead or seki")
        fmt = self.board.game.format_move
        return "\n".join(
            " ".join(fmt(p) for p in c.cells) for c in self.statuses() if c.status == status
        )

    # --- handicap and records ----------------------------------------------------------------

    def _cmd_fixed_handicap(self, args: list[str]) -> str:
        self._need(args, 1, "fixed_handicap N")
        points = handicap_points(self.size, _count(args[0]))
        self.board.place([(0, p) for p in points])
        return " ".join(self.board.game.format_move(p) for p in points)

    def _cmd_place_free_handicap(self, args: list[str]) -> str:
        self._need(args, 1, "place_free_handicap N")
        points = free_handicap_points(self.size, _count(args[0]))
        self.board.place([(0, p) for p in points])
        return " ".join(self.board.game.format_move(p) for p in points)

    def _cmd_set_free_handicap(self, args: list[str]) -> str:
        self._need(args, 2, "set_free_handicap VERTEX VERTEX ...")
        points = [self._vertex(v) for v in args]
        if self.board.game.pass_action in points:
            raise GtpError("bad vertex list: pass is not a stone")
        self.board.place([(0, p) for p in points])
        return ""

    def _cmd_loadsgf(self, args: list[str]) -> str:
        from actors.games.go.sgf import SgfError, read

        self._need(args, 1, "loadsgf FILE [MOVE_NUMBER]")
        try:
            with open(args[0], encoding="utf-8", errors="replace") as f:
                text = f.read(16 * 1024 * 1024)
            rec = read(text)
        except OSError as e:
            raise GtpError(f"cannot load file {args[0]!r}: {e.strerror or e}") from None
        except SgfError as e:
            raise GtpError(f"cannot load file {args[0]!r}: {e}") from None
        if rec.size != self.size:
            raise GtpError(f"unacceptable size: {rec.size}x{rec.size}; this network plays "
                           f"{self.size}x{self.size}")  # fmt: skip
        stop = len(rec.moves) if len(args) < 2 else _count(args[1], low=1) - 1
        board = Board(self.board.game.with_komi(self.board.game.komi if rec.komi is None
                                                else rec.komi))  # fmt: skip
        if rec.komi is not None:
            self._komi(str(rec.komi))  # the same range as ``komi``
        board.place(rec.setup, rec.to_play)
        pass_action = board.game.pass_action
        for color, point in rec.moves[:stop]:
            board.play(color, pass_action if point is None else point)
        self.board, self.notes = board, {}
        return ""

    def _cmd_printsgf(self, args: list[str]) -> str:
        from actors.games.go.sgf import sgf_record

        text = sgf_record(
            self.board.game, [a for _, a in self.board.moves], self.name_of(0),
            self.name_of(1), date=datetime.date.today().isoformat(),
            result=self._cmd_final_score([]) if self.board.game.is_terminal(self.board.state)
            else "", comments=[self.notes.get(i, "") for i in range(len(self.board.moves))],
            colors=[c for c, _ in self.board.moves], setup=self.board.setup,
        )  # fmt: skip
        if args:
            try:
                with open(args[0], "w", encoding="utf-8") as f:
                    f.write(text)
            except OSError as e:
                raise GtpError(f"cannot write {args[0]!r}: {e.strerror or e}") from None
            return ""
        return "\n" + text.rstrip("\n")

    def name_of(self, color: int) -> str:
        """The player name for SGF: this engine's identity for the colour it generated moves
        for, else ``?``."""
        ours = {self.board.moves[i][0] for i in self.notes}
        return f"{self.name} {self.version}".strip() if color in ours else "?"

    # --- time -------------------------------------------------------------------------------

    def _cmd_time_settings(self, args: list[str]) -> str:
        self.clock.time_settings(args)
        return ""

    def _cmd_kgs_time_settings(self, args: list[str]) -> str:
        self.clock.kgs_time_settings(args)
        return ""

    def _cmd_time_left(self, args: list[str]) -> str:
        self._need(args, 3, "time_left COLOR TIME STONES")
        self.clock.time_left(parse_color(args[0]), args[1:])
        return ""

    # --- analysis ---------------------------------------------------------------------------

    def _analysis(self, args: list[str]) -> tuple[int, AnalyzeArgs]:
        color = self.board.state.color
        if args and args[0].lower() in ("b", "w", "black", "white"):
            color, args = parse_color(args[0]), args[1:]
        return color, parse_analyze_args(args)

    async def _cmd_lz_analyze(self, args: list[str], ident: str) -> None:
        await self._analyze(args, ident, kata=False)

    async def _cmd_kata_analyze(self, args: list[str], ident: str) -> None:
        await self._analyze(args, ident, kata=True)

    async def _analyze(self, args: list[str], ident: str, kata: bool) -> None:
        """Start a stream: ``=`` now, an ``info`` line every interval, the blank line when the
        next line arrives (``stop``)."""
        color, opts = self._analysis(args)
        state = self.board.for_color(color)
        game = self.board.game
        if game.is_terminal(state):
            raise GtpError("the game is over (two passes or the move cap)")
        self.out(f"={ident}\n")
        self._stream = asyncio.create_task(self._stream_search(game, state, opts, kata),
                                           name="gtp-analysis")  # fmt: skip
        await asyncio.sleep(0)  # let it start

    async def _stream_search(self, game: Go, state: GoState, opts: AnalyzeArgs, kata: bool) -> None:
        last = [time.monotonic()]

        def emit(r: Report) -> None:
            now = time.monotonic()
            if now - last[0] >= opts.interval:
                last[0] = now
                self.out(opts.line(game, r, kata) + "\n")

        r = await self.moves.search(game, state, None, None, emit if opts.interval_cs else None)
        while opts.interval_cs:  # searched out: the same lines until the next command
            await asyncio.sleep(opts.interval)
            self.out(opts.line(game, r, kata) + "\n")
        await asyncio.Event().wait()

    async def _cmd_genmove_analyze(self, args: list[str], ident: str) -> None:
        await self._genmove_analyze(args, ident, kata=False)

    async def _cmd_lz_genmove_analyze(self, args: list[str], ident: str) -> None:
        await self._genmove_analyze(args, ident, kata=False)

    async def _cmd_kata_genmove_analyze(self, args: list[str], ident: str) -> None:
        await self._genmove_analyze(args, ident, kata=True)

    async def _genmove_analyze(self, args: list[str], ident: str, kata: bool) -> None:
        """``genmove`` with ``info`` lines while it searches, then ``play VERTEX``."""
        if not args or args[0].lower() not in ("b", "w", "black", "white"):
            raise GtpError("syntax error: expected genmove_analyze COLOR [INTERVAL]")
        color, opts = self._analysis(args)
        game = self.board.game
        self.out(f"={ident}\n")
        last = [time.monotonic()]

        def emit(r: Report) -> None:
            now = time.monotonic()
            if opts.interval_cs and now - last[0] >= opts.interval:
                last[0] = now
                self.out(opts.line(game, r, kata) + "\n")

        move = await self._genmove(color, emit)
        self.out(f"play {move}\n\n")


def _count(text: str, low: int = 2) -> int:
    if not text.isdigit() or int(text) < low:
        shown = text if len(text) <= 20 else text[:20] + "..."
        raise GtpError(f"invalid number of stones {shown!r}" if low == 2 else
                       f"syntax error: {shown!r} is not a number >= {low}")  # fmt: skip
    return int(text)


def _note(game: Go, r: Report) -> str:
    """The SGF comment of a searched move: the win rate, the visits and the main line."""
    best = r.infos[0]
    pv = " ".join(game.format_move(a) for a in best.pv[:8])
    others = ", ".join(f"{game.format_move(m.move)} {m.winrate:.1%} ({m.visits})"
                       for m in r.infos[1:4])  # fmt: skip
    text = f"win rate {best.winrate:.1%}, {r.visits} visits; pv {pv}"
    return text + (f"; also {others}" if others else "")


__all__ = ["COMMANDS", "MAX_LINE", "AgentMoves", "Engine", "MoveSource"]
