"""OpenSpiel's MCTS bot as a player, for the games that name their OpenSpiel equivalent."""

from __future__ import annotations

from typing import Any

import numpy as np

from actors.games import Game, State
from azserve.arena.players.base import Player, Refused, Verdict
from azserve.errors import ConfigError


class OpenSpielMctsPlayer(Player):
    """OpenSpiel's MCTS bot with random rollouts, on OpenSpiel's own state of the game; its
    verdict on a finished game is OpenSpiel's returns."""

    def __init__(self, sims: int, seed: int) -> None:
        try:
            import pyspiel  # noqa: F401
        except ImportError:
            raise ConfigError(
                "--opponent openspiel-mcts: needs the open_spiel package (pip install open-spiel)"
            ) from None
        self.sims = sims
        self.seed = seed
        self.name = f"openspiel-mcts:{sims}"
        self.bot: Any = None
        self.state: Any = None
        self.game: Game | None = None

    def new_game(self, game: Game) -> None:
        import pyspiel
        from open_spiel.python.algorithms import mcts

        if game.openspiel is None:
            raise ConfigError(f"--opponent openspiel-mcts: OpenSpiel has no {game.name}")
        self.game = game
        spiel = pyspiel.load_game(game.openspiel)
        self.seed += 1
        # The ladder's game seeds are 63-bit; the bot's legacy generator takes 32.
        rng = np.random.RandomState(np.random.SeedSequence(self.seed).generate_state(1)[0])
        evaluator = mcts.RandomRolloutEvaluator(n_rollouts=1, random_state=rng)
        self.bot = mcts.MCTSBot(
            spiel, 2.0, self.sims, evaluator, random_state=rng, solve=True, verbose=False
        )
        self.state = spiel.new_initial_state()

    def tell(self, color: int, action: int) -> None:
        if action not in self.state.legal_actions():
            raise Refused(f"OpenSpiel does not allow action {action} here")
        self.state.apply_action(action)

    def genmove(self, color: int, state: State) -> int:
        action = int(self.bot.step(self.state))
        self.state.apply_action(action)
        return action

    def final_score(self) -> Verdict | None:
        if self.game is None or self.state is None or not self.state.is_terminal():
            return None
        first = self.state.returns()[0]
        winner = None if first == 0 else (0 if first > 0 else 1)
        return Verdict(winner, self.game.result_text(winner))
