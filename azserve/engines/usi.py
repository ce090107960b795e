"""``azserve usi``: a shogi checkpoint as a USI engine, so shogi GUIs (Shogidokoro, ShogiGUI,
Electron Shogi), tournament managers, python-shogi or ``azserve match`` can drive it.

Commands: ``usi``, ``isready``, ``usinewgame``, ``setoption name N value V``, ``position
startpos|sfen SFEN [moves M...]``, ``go [btime MS wtime MS] [byoyomi MS | binc MS winc MS]
[nodes N] [movetime MS] [depth N] [infinite] [ponder]``, ``go mate ...`` (answered
``checkmate notimplemented``), ``stop``, ``ponderhit``, ``gameover win|lose|draw`` and
``quit``. ``usiok`` comes at once: the net loads in the background and ``isready`` answers
``readyok`` once it is ready. The session is ``azserve.engines.protocol``'s, shared with
``azserve uci``: info lines about twice a second (``info depth D seldepth S nodes N nps X time
MS score cp C pv 7g7f 3c3d ...``), ``stop`` and ``isready`` read during a search, ``go ponder``
searching until ``ponderhit`` (its limits counted from then) or ``stop``, anything malformed
answered ``info string error ...`` with the last good position kept.

Moves are USI text through the game's own hooks (``Shogi.parse_move_at``/``format_move_at``:
``7g7f``, ``8h2b+``, ``P*5e``), positions SFEN (``Shogi.from_position``). The clock: the side
to move's time (sente's ``btime``) over 30 moves plus three quarters of its increment, never
more than half of it, plus the whole ``byoyomi``, less ``MoveOverhead``. The score is Leela's
map of the best move's value (``centipawns``), or ``score mate N`` (plies; negative when the
engine is the one mated) when the principal variation ends in a mate or a declaration and the
search's value agrees (|v| >= 0.9): without the solver a tree search proves nothing, so
this is what the tree believes, not a proof. With the checkpoint's ``mcts.solver`` on (or
``--set mcts.solver=true``) a root the solver proved is scored from the proof instead (``score
mate N`` in plies, ``cp 0`` for a draw), the move played is the proof's, a ``go`` with limits
returns as soon as the root is proven, and a proven loss resigns under ``ResignValue``.

``bestmove`` is the search's move, ``resign`` where its score is at or below ``-ResignValue``
centipawns (99999: never, the default) or the side to move is mated, and ``win`` where it may
declare an entering king (CSA's 27-point rule; our rules declare as soon as it may). In USI the
GUI referees: where our rules end a game that the GUI plays on (our ply cap, a sennichite the
GUI judges otherwise) the engine goes on from the position as an SFEN, its history dropped,
and says so in an ``info string``.
"""

from __future__ import annotations

from typing import cast

from actors.games.shogi.rules import Shogi, ShogiState
from actors.search import PLAY_ALGORITHM
from azserve.engines.commands import (
    MARGIN_MS,
    MAX_NODES,
    Limits,
    Option,
    ProtocolError,
    centipawns,
    clock_ms,
    depth_nodes,
    read_go,
)
from azserve.engines.protocol import LineEngine, Loaded, serve
from azserve.engines.search import LEAVES_IN_FLIGHT, Progress

NEVER_RESIGN = 99_999
MATE_VALUE = 0.9
"""The value beyond which a principal variation that ends in a mate is reported as one."""

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
    Option("ResignValue", "spin", NEVER_RESIGN, 0, NEVER_RESIGN,
           help="bestmove resign when the score is at or below minus this many centipawns "
           f"({NEVER_RESIGN}: never)"),
)  # fmt: skip
"""The options ``usi`` announces (``setoption`` takes their names in any case)."""

QUIET_OPTIONS = ("usi_hash", "usi_ponder")
"""Options every USI GUI sends (a hash table's size, whether it will ponder): taken quietly."""

GO_KEYS = ("btime", "wtime", "byoyomi", "binc", "winc", "nodes", "movetime", "depth")
PLAYS_ON = ("ply cap", "sennichite", "perpetual check")
"""Our rules' ends that a USI GUI (the referee there) may play past."""


def parse_go(words: list[str], sente: bool, margin_ms: float = MARGIN_MS) -> Limits:
    """``go``'s arguments as limits for the side to move (sente or not)."""
    nums, flags = read_go(words, GO_KEYS, ("infinite", "ponder"), ("btime", "wtime"))
    limits = Limits(infinite="infinite" in flags, ponder="ponder" in flags)
    if limits.infinite:
        return limits
    if "nodes" in nums:
        limits.nodes = max(1, nums["nodes"])
    if "depth" in nums:
        budget = depth_nodes(nums["depth"])
        limits.nodes = budget if limits.nodes is None else min(limits.nodes, budget)
        limits.note = (
            f"go depth {nums['depth']}: searching {budget} nodes (a tree search has no depth "
            "limit; 2**(plies+3) nodes)"
        )
    if "movetime" in nums:
        limits.movetime_ms = max(1.0, nums["movetime"] - margin_ms)
    left = nums.get("btime" if sente else "wtime")
    byoyomi = nums.get("byoyomi", 0)
    if left is not None or byoyomi:
        inc = nums.get("binc" if sente else "winc", 0)
        limits.movetime_ms = clock_ms(left or 0, inc, 30, margin_ms, byoyomi)
    return limits


class UsiEngine(LineEngine):
    """One USI session (``LineEngine``): positions as SFEN, moves as USI text."""

    protocol = "usi"
    options = OPTIONS
    position_word = "sfen"
    quiet_options = QUIET_OPTIONS

    @property
    def game(self) -> Shogi:
        return cast(Shogi, self.loaded.game)

    def from_text(self, words: list[str]) -> ShogiState:
        if len(words) == 4 and words[3].isdigit() and int(words[3]) > self.game.max_plies:
            words = [*words[:3], "1"]  # past our ply cap: counted afresh, as playable_quietly
        return self.game.from_position(" ".join(words))

    def apply_move(self, s: ShogiState, text: str) -> ShogiState:
        return self.game.apply(s, self.game.parse_move_at(s, text))

    def why_over(self, s: ShogiState) -> str:
        return f" ({self.game.end_reason(s)})"

    def playable_quietly(self, s: ShogiState) -> ShogiState:
        """``s``, or where our rules ended the game but a GUI may play on, the same position
        read afresh from its SFEN (move 1: our ply cap counts again, the repetitions start
        over)."""
        if not s.over or self.game.end_reason(s) not in PLAYS_ON:
            return s
        board, side, hand, _ = self.game.to_sfen(s).split()
        return self.game.from_sfen(f"{board} {side} {hand} 1")

    def playable(self, s: ShogiState) -> ShogiState:
        again = self.playable_quietly(s)
        if again is not s:
            self.emit(
                f"info string our rules end the game here ({self.game.end_reason(s)}); "
                "playing on from the position"
            )
        return again

    def parse_go(self, args: list[str], state: ShogiState) -> Limits:
        return parse_go(args, self.game.to_play(state) == 0, self.settings["moveoverhead"])

    def move_text(self, s: ShogiState, a: int) -> str:
        return self.game.format_move_at(s, a)

    def no_move(self, s: ShogiState) -> str:
        if s.value > 0:
            self.emit("info string an entering king may be declared here (27-point rule)")
            return "win"
        self.emit(f"info string the game is over in this position ({self.game.end_reason(s)})")
        return "resign"

    def bestmove(self, s: ShogiState, progress: Progress) -> str:
        r = progress.report
        i = int((r.actions == progress.best).argmax())
        value = float(r.values[i]) if r.visits[i] else r.root_value
        if r.proof is not None and r.proof.value is not None:  # the solver's: exact
            value = r.proof.value
        threshold = self.settings["resignvalue"]
        if threshold < NEVER_RESIGN and centipawns(value) <= -threshold:
            return "resign"
        return self.move_text(s, progress.best)

    def score(self, s: ShogiState, line: list[int], value: float) -> str:
        """``mate N`` (plies) when ``line`` ends in a mate or a declaration that the value
        agrees with, else ``cp N``."""
        t = s
        for a in line:
            t = self.game.apply(t, a)
        if line and t.over and t.value != 0 and self.game.end_reason(t) in ("mate", "declaration"):
            # the result for the side to move at the root: the end's for its own mover
            ours = t.value if len(line) % 2 == 0 else -t.value
            if ours * value >= MATE_VALUE:
                return f"mate {len(line) if ours > 0 else -len(line)}"
        return f"cp {centipawns(value)}"

    def other(self, cmd: str, args: list[str]) -> bool:
        if cmd == "gameover":
            if len(args) != 1 or args[0] not in ("win", "lose", "draw"):
                raise ProtocolError("gameover: expected win, lose or draw")
            self.loaded.search.new_game()
            return True
        return False

    def _run(self, cmd: str, args: list[str]) -> None:
        if cmd == "go" and args[:1] == ["mate"]:
            # USI's tsume search (a mate proof): a search of this kind proves none.
            self.emit("info string go mate: a tree search proves no mate")
            self.emit("checkmate notimplemented")
            return
        super()._run(cmd, args)


__all__ = [
    "OPTIONS",
    "Limits",
    "Loaded",
    "Option",
    "UsiEngine",
    "parse_go",
    "serve",
]
