"""``azserve uci``: a chess checkpoint as a UCI engine, so cutechess-cli, Arena, any chess GUI,
python-chess or ``azserve match`` can drive it.

Commands: ``uci``, ``isready``, ``ucinewgame``, ``setoption name N value V``, ``position
startpos|fen FEN [moves M...]``, ``go [nodes N] [movetime MS] [wtime MS btime MS winc MS binc MS
movestogo N] [depth N] [mate N] [infinite] [ponder]``, ``stop``, ``ponderhit``, ``quit``
(``debug`` and ``register`` are read and ignored). ``uciok`` comes at once: the net loads in the background
(``azserve.engines.loading``) and ``isready`` answers ``readyok`` once it is ready. While it
searches, the engine prints ``info depth D seldepth S nodes N nps X time MS score cp C pv M...``
about twice a second and ``bestmove M`` at the end; ``stop`` ends the search early, ``isready``
is answered at once, ``ponderhit`` turns a ``go ponder`` search into the normal one. Anything
malformed (an unknown command, a bad FEN, an illegal move, a bad number or option value) is
answered ``info string error ...``, an unknown option ``info string unknown option ...``, and
the engine keeps its last good position. The session, the search's slices and the info lines
are ``azserve.engines.protocol``'s, shared with ``azserve usi``; this module is UCI's dialect.

The search is the one match and the ladder play and measured (``azserve.engines.search``:
``make_search`` with the checkpoint's ``mcts.*`` and ``PLAY_ALGORITHM``, PUCT, on the compiled
core, its leaves evaluated in batches; the ``Algorithm`` option picks Gumbel or the
checkpoint's own ``mcts.algorithm`` instead); ``nodes`` counts simulations. The options
(``OPTIONS``): ``Nodes`` (a ``go`` without limits), ``Batch`` (PUCT's leaves in flight),
``Algorithm`` and ``MoveOverhead``. A search has no depth to stop at and
proves no mate, so ``go depth N`` and ``go mate N`` become node budgets (``depth_nodes``) and
the engine says so in an ``info string``. The score is the best move's value for the side to
move mapped to centipawns as Leela Chess Zero maps it, ``111.7 * tan(1.562 * v)``.

With the checkpoint's ``mcts.solver`` on (or ``--set mcts.solver=true``), a root the solver
proved is scored ``score mate N`` (full moves, the mating one included: a win in 3 plies is
``mate 2``; negative when the engine is the one mated) or ``score cp 0`` (a proven draw), the
move played is the proof's, and a ``go`` with limits returns as soon as the root is proven
(``go mate N``'s node budget included: its note says so).
"""

from __future__ import annotations

from typing import cast

from actors.games.chess.rules import Chess, ChessState
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
from azserve.engines.search import LEAVES_IN_FLIGHT

UciError = ProtocolError
"""A malformed or illegal command: its message follows ``info string error``."""

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

GO_KEYS = ("nodes", "movetime", "wtime", "btime", "winc", "binc", "movestogo", "depth", "mate")


def parse_go(
    words: list[str], white: bool, margin_ms: float = MARGIN_MS, solver: bool = False
) -> Limits:
    """``go``'s arguments as limits for the side to move (white or not); ``solver``: the
    search proves the mates it reaches (``mcts.solver``), said in ``go mate``'s note."""
    nums, flags = read_go(words, GO_KEYS, ("infinite", "ponder"), ("wtime", "btime"))
    limits = Limits(infinite="infinite" in flags, ponder="ponder" in flags)
    if limits.infinite:
        return limits
    if "nodes" in nums:
        limits.nodes = max(1, nums["nodes"])
    for key, plies in (("depth", nums.get("depth")), ("mate", 2 * nums.get("mate", 0) - 1)):
        if plies is None or key not in nums:
            continue
        budget = depth_nodes(plies)
        limits.nodes = budget if limits.nodes is None else min(limits.nodes, budget)
        unproven = " and proves no mate" if key == "mate" and not solver else ""
        proven = "; a proven mate ends it" if key == "mate" and solver else ""
        limits.note = (
            f"go {key} {nums[key]}: searching {budget} nodes (a tree search has no depth "
            f"limit{unproven}; 2**(plies+3) nodes{proven})"
        )
    if "movetime" in nums:
        limits.movetime_ms = max(1.0, nums["movetime"] - margin_ms)
    left = nums.get("wtime" if white else "btime")
    if left is not None:
        inc = nums.get("winc" if white else "binc", 0)
        limits.movetime_ms = clock_ms(left, inc, nums.get("movestogo", 30), margin_ms)
    return limits


class Engine(LineEngine):
    """One UCI session (``LineEngine``): positions as FEN and UCI moves (``e2e4``)."""

    protocol = "uci"
    options = OPTIONS
    position_word = "fen"
    mate_unit = "moves"

    @property
    def game(self) -> Chess:
        return cast(Chess, self.loaded.game)

    def from_text(self, words: list[str]) -> ChessState:
        return self.game.from_fen(" ".join(words))

    def apply_move(self, s: ChessState, text: str) -> ChessState:
        return self.game.apply(s, self.game.parse_uci(s, text))

    def parse_go(self, args: list[str], state: ChessState) -> Limits:
        white = self.game.to_play(state) == 0
        solver = self.loaded.search.mcts.solver
        return parse_go(args, white, self.settings["moveoverhead"], solver)

    def move_text(self, s: ChessState, a: int) -> str:
        return self.game.uci(s, a)

    def no_move(self, s: ChessState) -> str:
        self.emit("info string error the game is over in this position")
        return "0000"

    def other(self, cmd: str, args: list[str]) -> bool:
        return cmd in ("debug", "register")


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
    "serve",
]
