"""Simulations per second per core: our MCTS against OpenSpiel's, on Connect Four, Othello, Go
or chess.

    python -m azserve.perf.mcts [--game connect4|othello|go9|go13|go19|chess] [--seconds 40]
        [--simulations 800] [--json OUT]

Contenders, each playing whole self-play games move by move:

- ``azserve``: the search the actors run (``actors.searches.make_search``: the compiled tree where it was built)
  with a zero-cost evaluator (uniform logits, value 0), tree reuse and root noise as in
  self-play; each simulation still encodes its leaf, as the actors must;
- ``azserve_in_flight``: the same with ``--in-flight`` leaves per round (virtual loss,
  ``asyncio.gather``), the actors' batching mode;
- ``azserve_python``: the pure-Python search (``actors.mcts``, the compiled one's oracle);
- ``azserve_gumbel`` and ``azserve_gumbel_python``: the Gumbel search (``mcts.algorithm =
  "gumbel"``, Connect Four's default), compiled and pure Python, same simulations per move;
- ``azserve_openspiel_adapter``: the pure-Python search on the same game's OpenSpiel rules
  through ``game = "openspiel:NAME"`` (actors.games.openspiel), what a game without rules of
  its own here runs;
- ``openspiel_python``: ``open_spiel.python.algorithms.mcts.MCTSBot``, one random rollout
  per leaf;
- ``openspiel_cpp``: ``pyspiel.MCTSBot`` with ``pyspiel.RandomRolloutEvaluator(1)``.

The contenders take turns one move at a time, so machine noise hits them alike. Rates are
simulations per CPU-second of this process (it is single-threaded), i.e. per core. OpenSpiel's
simulations include a rollout, so they bound rather than match a network-guided search (in
chess a random rollout is a whole random game, a few hundred plies, so OpenSpiel's rate there
says more about rollouts than about its tree).

Chess's Python rules are the compiled ones (actors/games/chess/rules.py), so ``azserve_python`` there
is the pure-Python search over compiled move generation.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import numpy as np

from actors.games import make_game
from actors.search import MCTSConfig
from actors.searches import make_search

Step = Callable[[], Awaitable[int]]
"""Plays one move of a contender's current game (starting a new game after the last move)
and returns the simulations that move took."""


class _Ours:
    """Self-play with our MCTS and a zero-cost evaluator, one move per ``step``."""

    def __init__(
        self,
        game: str,
        simulations: int,
        in_flight: int,
        seed: int,
        core: str = "auto",
        algorithm: str = "puct",
    ) -> None:
        self.game = make_game(game)
        self.config = MCTSConfig(
            num_simulations=simulations,
            leaves_in_flight=in_flight,
            core=core,  # type: ignore[arg-type]
            algorithm=algorithm,  # type: ignore[arg-type]
        )
        self.rng = np.random.default_rng(seed)
        self.logits = np.zeros(self.game.num_actions, dtype=np.float32)
        self.evaluations = 0
        self._new_game()

    def _new_game(self) -> None:
        self.mcts = make_search(self.game, self.config, self.rng)
        self.state = self.game.initial_state()
        self.move = 0

    async def _evaluate(self, obs: np.ndarray) -> tuple[np.ndarray, float]:
        return self.logits, 0.0

    async def step(self) -> int:
        result = await self.mcts.search(self.state, self._evaluate, add_noise=True)
        self.evaluations += result.num_evaluations
        _, a = self.mcts.choose(result, self.move)
        self.state = self.game.apply(self.state, a)
        self.mcts.advance(a)
        self.move += 1
        if self.game.is_terminal(self.state):
            self._new_game()
        return self.config.num_simulations


class _OpenSpiel:
    """Self-play with one of OpenSpiel's MCTS bots, one move per ``step``."""

    def __init__(self, game, bot, simulations: int) -> None:
        self.game = game
        self.bot = bot
        self.simulations = simulations
        self.state = game.new_initial_state()

    async def step(self) -> int:
        self.state.apply_action(self.bot.step(self.state))
        if self.state.is_terminal():
            self.state = self.game.new_initial_state()
            self.bot.restart()
        return self.simulations


BUILTIN = ("chess", "connect4", "go9", "go13", "go19", "othello")
"""The built-in games with compiled rules; each names its OpenSpiel equivalent
(``Game.openspiel``)."""


def _openspiel_contenders(
    game_name: str, simulations: int, seed: int
) -> dict[str, _OpenSpiel | str]:
    """OpenSpiel's two bots, or the reason each is skipped."""
    try:
        import pyspiel
        from open_spiel.python.algorithms import mcts as py_mcts
    except ImportError as e:
        reason = f"open_spiel is not importable: {e}"
        return {"openspiel_python": reason, "openspiel_cpp": reason}
    game = pyspiel.load_game(make_game(game_name).openspiel)
    rng = np.random.RandomState(seed)
    # uct_c = 2 and solve=False: OpenSpiel's own defaults for examples, no solver shortcut.
    py_bot = py_mcts.MCTSBot(
        game,
        uct_c=2.0,
        max_simulations=simulations,
        evaluator=py_mcts.RandomRolloutEvaluator(n_rollouts=1, random_state=rng),
        solve=False,
        random_state=rng,
    )
    cpp_bot = pyspiel.MCTSBot(
        game, pyspiel.RandomRolloutEvaluator(1, seed), 2.0, simulations, 1000, False, seed, False
    )
    return {
        "openspiel_python": _OpenSpiel(game, py_bot, simulations),
        "openspiel_cpp": _OpenSpiel(game, cpp_bot, simulations),
    }


async def run(
    seconds: float, simulations: int, in_flight: int, seed: int, game: str = "connect4"
) -> dict[str, object]:
    """Run the contenders in turn for about ``seconds`` of CPU time in all; return the report."""
    ours = _Ours(game, simulations, 1, seed)
    ours_in_flight = _Ours(game, simulations, in_flight, seed)
    ours_python = _Ours(game, simulations, 1, seed, core="python")
    gumbel = _Ours(game, simulations, 1, seed, algorithm="gumbel")
    gumbel_python = _Ours(game, simulations, 1, seed, core="python", algorithm="gumbel")
    # The same game's OpenSpiel rules through actors.games.openspiel and the Python search.
    adapter = _Ours(f"openspiel:{make_game(game).openspiel}", simulations, 1, seed, core="python")
    ours_all = {
        "azserve": ours,
        "azserve_in_flight": ours_in_flight,
        "azserve_python": ours_python,
        "azserve_gumbel": gumbel,
        "azserve_gumbel_python": gumbel_python,
        "azserve_openspiel_adapter": adapter,
    }
    steps: dict[str, Step] = {name: o.step for name, o in ours_all.items()}
    report: dict[str, Any] = {
        "game": game,
        "core": type(ours.mcts).__name__,
        "gumbel_core": type(gumbel.mcts).__name__,
        "simulations_per_move": simulations,
        "in_flight": in_flight,
        "python": sys.version.split()[0],
    }
    for name, contender in _openspiel_contenders(game, simulations, seed).items():
        if isinstance(contender, str):
            report[name] = {"skipped": contender}
        else:
            steps[name] = contender.step
    budget = seconds / len(steps)
    totals: dict[str, list[float]] = {name: [0, 0.0, 0] for name in steps}  # sims, CPU s, moves
    while pending := [name for name in steps if totals[name][1] < budget]:
        for name in pending:
            t0 = time.process_time()
            sims = await steps[name]()
            totals[name][0] += sims
            totals[name][1] += time.process_time() - t0
            totals[name][2] += 1
    for name, (total, cpu, moves) in totals.items():
        report[name] = {
            "simulations": int(total),
            "moves": int(moves),
            "cpu_seconds": round(cpu, 3),
            "simulations_per_s": round(total / cpu),
        }
    for name, o in ours_all.items():
        report[name]["evaluations"] = o.evaluations
    rate = report["azserve"]["simulations_per_s"]
    for name in ("azserve_python", "openspiel_python", "openspiel_cpp"):
        if "simulations_per_s" in report[name]:
            report[f"azserve_over_{name}"] = round(rate / report[name]["simulations_per_s"], 2)
    report["azserve_python_over_openspiel_adapter"] = round(
        report["azserve_python"]["simulations_per_s"]
        / report["azserve_openspiel_adapter"]["simulations_per_s"],
        2,
    )
    report["azserve_gumbel_over_python"] = round(
        report["azserve_gumbel"]["simulations_per_s"]
        / report["azserve_gumbel_python"]["simulations_per_s"],
        2,
    )
    return report


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m azserve.perf.mcts", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--game", choices=sorted(BUILTIN), default="connect4")
    parser.add_argument("--seconds", type=float, default=40.0, help="CPU seconds in all")
    parser.add_argument("--simulations", type=int, default=800, help="simulations per move")
    parser.add_argument("--in-flight", type=int, default=8, help="leaves per round")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, help="also write the report to this file")
    args = parser.parse_args(argv)
    report = asyncio.run(run(args.seconds, args.simulations, args.in_flight, args.seed, args.game))
    text = json.dumps(report, indent=2)
    print(text)
    if args.json is not None:
        args.json.write_text(text + "\n")


if __name__ == "__main__":
    main()
