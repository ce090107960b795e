"""Chess's benchmark: the agent's move in a fixed set of positions judged by Stockfish's score
of every legal move there (``MoveQuality``; the set: benchmark.jsonl.gz beside this file, made
by scripts/chess_benchmark_set.py, whose docstring says how).

Each move's score is clipped to [-1000, 1000] centipawns for the side to move, a mate for it
counting 1000 and being mated -1000. A move's **loss** is the best move's clipped score less its
own (at most 1000). A move is a **blunder** when it loses 200 centipawns or more, throws away a
forced mate the best move keeps, or walks into a forced mate the best move avoids. A mate
**found** is a move of a ``mate`` position (the side to move mates in N, 1-3) that mates in N
too: the puzzle solved. Merely keeping a forced mate (a longer one) is not enough there: in
this set's positions a uniformly random move does so 51% of the time, but finds the mate in N
5% of the time. Keeping one is what the blunder rate on the ``mate`` set counts: a move there
is a blunder exactly when it keeps none, so the curves' ``mate`` row is the share of mates
thrown away.
"""

from __future__ import annotations

import functools
import gzip
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from actors.games.benchmark import OVERALL, Analyst, Benchmark, Series

SHIPPED = Path(__file__).with_name("benchmark.jsonl.gz")
FORMAT = "azserve-chess-benchmark/1"
SETS = ("opening", "middlegame", "endgame", "mate", "hanging")
"""The sets of positions, in the file's order (scripts/chess_benchmark_set.py)."""
CLIP = 1000
"""Centipawns at which a score, and a move's loss, is clipped; a mate counts as this."""
BLUNDER_CP = 200
"""The loss, in centipawns, from which a move is a blunder."""
MCTS_POSITIONS = 400
"""Positions the search is scored on: every k-th of the file (the sets in proportion), so that
the benchmark at chess's eval simulations takes well under a minute on 2 cores; the raw policy
is scored on all."""
ROOM = 64
"""Plies a position keeps before a game's cap: one further on is set back in the game (its
move number only), so that the search does not see a drawn cap a few moves ahead."""


@dataclass(frozen=True)
class Position:
    """One position of the set with every legal move's Stockfish score."""

    fen: str
    set: str
    """One of ``SETS``."""
    before_fen: str
    """The position up to 7 plies earlier in its game ..."""
    before_moves: tuple[str, ...]
    """... and the UCI moves from there to ``fen``: the earlier positions a net reads."""
    scores: dict[str, int | str]
    """Each legal move (UCI) -> its score for the side to move after a search: centipawns, or
    ``"#N"`` (it mates in N) / ``"#-N"`` (it is mated in N); best first."""

    def mate(self, uci: str) -> int:
        """N > 0 where ``uci`` mates in N, -N where it is mated in N, 0 for a centipawn
        score."""
        s = self.scores[uci]
        return int(s[1:]) if isinstance(s, str) else 0

    def value(self, uci: str) -> int:
        """The score of ``uci``, clipped to [-CLIP, CLIP] (a mate at its end)."""
        s = self.scores[uci]
        if isinstance(s, str):
            return CLIP if int(s[1:]) > 0 else -CLIP
        return max(-CLIP, min(CLIP, s))

    @functools.cached_property
    def best(self) -> str:
        """The move Stockfish scores best (the file's first)."""
        return next(iter(self.scores))

    def judge(self, uci: str) -> tuple[int, bool, bool]:
        """(loss in centipawns, blunder, mates as fast as the best move) of the move ``uci``."""
        if uci not in self.scores:
            raise ValueError(f"chess benchmark: {uci} is not a legal move in {self.fen}")
        loss = min(CLIP, self.value(self.best) - self.value(uci))
        n, shortest = self.mate(uci), self.mate(self.best)
        blunder = loss >= BLUNDER_CP or (shortest > 0 >= n) or (n < 0 <= shortest)
        return loss, blunder, 0 < n <= shortest


def read_set(path: str | Path = SHIPPED) -> tuple[dict[str, Any], list[Position]]:
    """(header, positions) of a set file; ValueError when it is not one. Read once per
    version of the file (every evaluation of a run scores the same set)."""
    stat = Path(path).stat()
    return _read(str(path), stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=4)
def _read(path: str, mtime_ns: int, size: int) -> tuple[dict[str, Any], list[Position]]:
    with gzip.open(path, "rt") as f:
        lines = [json.loads(line) for line in f if line.strip()]
    if not lines or lines[0].get("format") != FORMAT:
        raise ValueError(f"{path}: not a chess benchmark set (format {FORMAT})")
    positions = [
        Position(
            r["fen"],
            r["set"],
            r["before"]["fen"],
            tuple(r["before"]["moves"]),
            r["scores"],
        )
        for r in lines[1:]
    ]
    return lines[0], positions


def state_of(game: Any, p: Position) -> Any:
    """``p`` as a state of ``game`` (a ``Chess``): its earlier position and the moves from
    there, so that the planes hold its history; set back in the game when it stands fewer than
    ``ROOM`` plies before the cap. ValueError when the moves do not lead to ``p.fen``."""
    fields = p.before_fen.split()
    ply = 2 * (int(fields[5]) - 1) + (fields[1] == "b") + len(p.before_moves)
    back = max(0, ply - max(0, game.max_plies - ROOM))
    fields[5] = str(max(1, int(fields[5]) - (back + 1) // 2))
    s = game.from_fen(" ".join(fields))
    for uci in p.before_moves:
        s = game.apply(s, game.parse_uci(s, uci))
    if game.to_fen(s).split()[:4] != p.fen.split()[:4] or game.is_terminal(s):
        raise ValueError(f"chess benchmark: the moves before {p.fen} reach {game.to_fen(s)}")
    return s


def mcts_subset(n: int, limit: int = MCTS_POSITIONS) -> list[int]:
    """Indices of the positions the search is scored on: every k-th of ``n``, at most
    ``limit`` of them (the file is grouped by set: each set keeps its share)."""
    k = max(1, -(-n // limit))
    return list(range(0, n, k))


def score_moves(positions: Sequence[Position], moves: Sequence[str]) -> dict[str, Any]:
    """The scores of ``moves`` (UCI, one per position): blunder rate per set and ``overall``,
    mean centipawn loss, share of mates found (mates in N played in N, over the ``mate`` set;
    None without one)."""
    judged = [p.judge(m) for p, m in zip(positions, moves, strict=True)]
    loss = np.array([j[0] for j in judged], float)
    blunder = np.array([j[1] for j in judged], bool)
    found = np.array([j[2] for j in judged], bool)
    sets = np.array([p.set for p in positions])
    per_set = {s: float(blunder[sets == s].mean()) for s in SETS if (sets == s).any()}
    on_mate = sets == "mate"
    return {
        "blunder": {OVERALL: float(blunder.mean()), **per_set},
        "cp_loss": float(loss.mean()),
        "mates_found": float(found[on_mate].mean()) if on_mate.any() else None,
    }


class MoveQuality(Benchmark):
    """Blunder rate (per set and ``overall``), mean centipawn loss and the share of mates
    found: the raw policy on every position, the search of ``sims`` simulations on
    ``mcts_subset``.

    Result: ``{"positions": N, "mcts_positions": M, "policy": {"blunder": {"overall": f,
    "opening": f, ...}, "cp_loss": f, "mates_found": f}, "mcts": {...}}`` (``mcts`` and
    ``mcts_positions`` only when ``sims`` > 0).
    """

    name = "chess"
    series = (
        Series("policy: blunders", ("policy", "blunder"), "policy", lower_is_better=True),
        Series("MCTS: blunders", ("mcts", "blunder"), "mcts", lower_is_better=True),
    )

    def __init__(self, path: str | Path = SHIPPED, mcts_positions: int = MCTS_POSITIONS) -> None:
        self.path = Path(path)
        self.mcts_positions = mcts_positions

    def run(
        self, agent: Analyst, sims: int, positions: Path | None = None, limit: int = 0
    ) -> dict[str, Any]:
        _, rows = read_set(self.path)
        game = agent.game
        states = [state_of(game, p) for p in rows]
        out: dict[str, Any] = {"positions": len(rows)}
        for label, n in (("policy", 0), ("mcts", sims)):
            if label == "mcts":
                if sims <= 0:
                    continue
                picked = mcts_subset(len(rows), self.mcts_positions)
                rows, states = [rows[i] for i in picked], [states[i] for i in picked]
                out["mcts_positions"] = len(rows)
            moves = [game.uci(s, a.move) for s, a in zip(states, agent.analyze_sync(states, n))]
            out[label] = score_moves(rows, moves)
        return out

    def summary(self, result: dict[str, Any]) -> str:
        def words(r: dict[str, Any]) -> str:
            mates = (
                "" if r["mates_found"] is None else f", mates found {100 * r['mates_found']:.1f}%"
            )
            return f"{100 * r['blunder'][OVERALL]:.1f}% (loss {r['cp_loss']:.0f} cp{mates})"

        parts = [f"blunders: raw policy {words(result['policy'])}"]
        if "mcts" in result:
            parts.append(f"MCTS {words(result['mcts'])} on {result['mcts_positions']}")
        return ", ".join(parts) + f" of {result['positions']} positions"


__all__ = ["MoveQuality", "Position", "read_set", "score_moves", "state_of"]
