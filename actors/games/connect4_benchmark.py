"""Connect Four's benchmark: the mistake rate on positions with exact scores, per set, as in
AlphaZero.jl's benchmark (data/connect4/: ``move_scores.tsv`` and where it comes from).

A move is a mistake when it is outside the position's ``sign_optimal_columns``: it changes the
game-theoretic outcome (a win thrown to a draw or loss, a draw to a loss).
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import numpy as np

from actors.games.benchmark import OVERALL, Analyst, Benchmark, Series

SET_NAMES = {
    "Test_L3_R1": "End-Easy",
    "Test_L2_R1": "Middle-Easy",
    "Test_L2_R2": "Middle-Medium",
    "Test_L1_R1": "Beginning-Easy",
    "Test_L1_R2": "Beginning-Medium",
    "Test_L1_R3": "Beginning-Hard",
}
"""The file's ``test_set`` column -> the set's name in results (AlphaZero.jl's)."""


def load_positions(path: str | Path, limit: int = 0) -> list[dict[str, Any]]:
    """Rows of a ``move_scores.tsv`` with zero-based ``moves``, the ``sign_optimal`` column set
    and the ``set``; the first ``limit`` rows only when ``limit`` > 0."""
    rows = []
    with Path(path).open() as f:
        for row in csv.DictReader(f, delimiter="\t"):
            rows.append(
                {
                    "moves": [int(c) - 1 for c in row["moves"]],
                    "sign_optimal": {int(c) - 1 for c in row["sign_optimal_columns"].split(",")},
                    "set": row["test_set"],
                }
            )
            if limit and len(rows) >= limit:
                break
    return rows


class MistakeRate(Benchmark):
    """Mistake rate per benchmark set and ``overall`` (position-weighted), raw policy and with
    search.

    Result: ``{"positions": N, "policy": {"overall": f, "End-Easy": f, ...}, "mcts": {...}}``
    (``mcts`` only when ``sims`` > 0).
    """

    name = "connect4"
    takes_positions = True
    series = (
        Series("policy: mistakes", ("policy",), "policy", lower_is_better=True),
        Series("MCTS: mistakes", ("mcts",), "mcts", lower_is_better=True),
    )

    def run(
        self, agent: Analyst, sims: int, positions: Path | None = None, limit: int = 0
    ) -> dict[str, Any]:
        if positions is None:
            raise ValueError(f"{self.name}: the benchmark needs its positions file")
        rows = load_positions(positions, limit)
        states = [agent.game.from_moves(r["moves"]) for r in rows]
        sets = np.array([r["set"] for r in rows])
        out: dict[str, Any] = {"positions": len(rows)}
        for label, n in (("policy", 0), ("mcts", sims)):
            if label == "mcts" and sims <= 0:
                continue
            moves = [a.move for a in agent.analyze_sync(states, n)]
            wrong = np.array([m not in r["sign_optimal"] for m, r in zip(moves, rows)])
            per_set = {
                SET_NAMES.get(s, s): float(wrong[sets == s].mean()) for s in sorted(set(sets))
            }
            out[label] = {OVERALL: float(wrong.mean()), **per_set}
        return out

    def summary(self, result: dict[str, Any]) -> str:
        parts = [f"mistakes: raw policy {100 * result['policy'][OVERALL]:.1f}%"]
        if "mcts" in result:
            parts.append(f"MCTS {100 * result['mcts'][OVERALL]:.1f}%")
        parts.append(f"on {result['positions']} positions")
        return ", ".join(parts)
