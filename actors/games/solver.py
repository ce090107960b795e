"""Exact tic-tac-toe values by exhaustive memoised minimax, to check that an agent is perfect."""

from __future__ import annotations

from actors.games.tictactoe import TicTacToe, TTTState


class TicTacToeSolver:
    """Game-theoretic values of every reachable tic-tac-toe position (solved on construction)."""

    def __init__(self) -> None:
        self.game = TicTacToe()
        self._values: dict[TTTState, int] = {}
        self._solve(self.game.initial_state())

    def _solve(self, s: TTTState) -> int:
        v = self._values.get(s)
        if v is None:
            if self.game.is_terminal(s):
                v = int(self.game.terminal_value(s))
            else:
                # Negamax: the mover's best is the opponent's worst.
                v = max(-self._solve(self.game.apply(s, a)) for a in self.game.legal_actions(s))
            self._values[s] = v
        return v

    def value(self, s: TTTState) -> int:
        """+1 / 0 / -1: the outcome with perfect play for the side to move at ``s``."""
        v = self._values.get(s)
        if v is None:
            raise ValueError(
                f"position is not reachable from the initial state:\n{self.game.render(s)}"
            )
        return v

    def action_values(self, s: TTTState) -> dict[int, int]:
        """Value for the side to move of each legal action at non-terminal ``s``."""
        return {a: -self.value(self.game.apply(s, a)) for a in self.game.legal_actions(s)}

    def optimal_actions(self, s: TTTState) -> set[int]:
        """The legal actions at non-terminal ``s`` that keep its value."""
        v = self.value(s)
        return {a for a, av in self.action_values(s).items() if av == v}

    def reachable_states(self) -> list[TTTState]:
        """All 5478 positions reachable from the initial state, terminal ones included."""
        return list(self._values)

    def reachable_nonterminal_states(self) -> list[TTTState]:
        """All 4520 reachable positions where the game is not over."""
        return [s for s in self._values if not self.game.is_terminal(s)]
