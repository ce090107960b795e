"""Exact values of a small game by exhaustive memoised minimax, and the benchmark they give: the
share of every reachable position where the agent's move is optimal (tic-tac-toe's)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from actors.games.base import Game, State
from actors.games.benchmark import Analyst, Benchmark, Series


class ExhaustiveSolver:
    """Game-theoretic values of every position reachable in ``game`` (solved on construction:
    only for games small enough to enumerate, such as tic-tac-toe's 5,478 positions)."""

    def __init__(self, game: Game) -> None:
        self.game = game
        self._values: dict[State, int] = {}
        self._solve(game.initial_state())

    def _solve(self, s: State) -> int:
        v = self._values.get(s)
        if v is None:
            if self.game.is_terminal(s):
                v = int(self.game.terminal_value(s))
            else:
                # Negamax: the mover's best is the opponent's worst.
                v = max(-self._solve(self.game.apply(s, a)) for a in self.game.legal_actions(s))
            self._values[s] = v
        return v

    def value(self, s: State) -> int:
        """+1 / 0 / -1: the outcome with perfect play for the side to move at ``s``."""
        v = self._values.get(s)
        if v is None:
            raise ValueError(
                f"position is not reachable from the initial state:\n{self.game.render(s)}"
            )
        return v

    def action_values(self, s: State) -> dict[int, int]:
        """Value for the side to move of each legal action at non-terminal ``s``."""
        return {a: -self.value(self.game.apply(s, a)) for a in self.game.legal_actions(s)}

    def optimal_actions(self, s: State) -> set[int]:
        """The legal actions at non-terminal ``s`` that keep its value."""
        v = self.value(s)
        return {a for a, av in self.action_values(s).items() if av == v}

    def reachable_states(self) -> list[State]:
        """Every position reachable from the initial state, terminal ones included."""
        return list(self._values)

    def reachable_nonterminal_states(self) -> list[State]:
        """Every reachable position where the game is not over."""
        return [s for s in self._values if not self.game.is_terminal(s)]


class OptimalMoves(Benchmark):
    """The fraction of all reachable non-terminal positions where the agent's move is optimal
    (keeps the position's minimax value), raw policy and with search.

    Result: ``{"positions": N, "policy_optimal": f, "mcts_optimal": f}`` (the last only when
    ``sims`` > 0).
    """

    series = (
        Series("policy: optimal moves", ("policy_optimal",), "policy", lower_is_better=False),
        Series("MCTS: optimal moves", ("mcts_optimal",), "mcts", lower_is_better=False),
    )

    def __init__(self, name: str) -> None:
        self.name = name

    def run(
        self, agent: Analyst, sims: int, positions: Path | None = None, limit: int = 0
    ) -> dict[str, Any]:
        solver = ExhaustiveSolver(agent.game)
        states = solver.reachable_nonterminal_states()
        optimal = [solver.optimal_actions(s) for s in states]
        out: dict[str, float] = {"positions": float(len(states))}
        for key, n in (("policy_optimal", 0), ("mcts_optimal", sims)):
            if key == "policy_optimal" or sims > 0:
                moves = agent.analyze_sync(states, n)
                out[key] = float(np.mean([a.move in o for a, o in zip(moves, optimal)]))
        return out

    def summary(self, result: dict[str, Any]) -> str:
        parts = [f"optimal moves: raw policy {100 * result['policy_optimal']:.1f}%"]
        if "mcts_optimal" in result:
            parts.append(f"MCTS {100 * result['mcts_optimal']:.1f}%")
        return ", ".join(parts)
