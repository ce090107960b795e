"""CPU cost of a self-play move: PUCT against Gumbel, or one game's encodings against another.

    .venv/bin/python scripts/search_cost.py [--seconds 20] [--contenders puct:40,gumbel:16] [--json OUT]
    .venv/bin/python scripts/search_cost.py --contenders go9:gumbel:16,go9-features:gumbel:16

Each contender plays whole self-play games (tree reuse, root noise, the move choice of
self-play) with a zero-cost evaluator (uniform logits, value 0), one move at a time in turn, so
machine noise hits them alike. A contender is ``[GAME:]ALGORITHM:SIMS`` (the game
connect4 unless named: any built-in game spec; the compiled core where it plays the game). Prints JSON: simulations and moves per CPU-second of this
(single-threaded) process, and the CPU microseconds per simulation. The network's cost, the
real bottleneck on CPU, is left out: this is the actor side only.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path

import numpy as np

from actors.games import make_game
from actors.search import MCTSConfig
from actors.searches import make_search


class Contender:
    """Self-play games of one search algorithm, a move per ``step``."""

    def __init__(self, game: str, algorithm: str, simulations: int, seed: int) -> None:
        self.name = f"{game}:{algorithm}:{simulations}"
        self.game = make_game(game)
        self.config = MCTSConfig(algorithm=algorithm, num_simulations=simulations)
        self.rng = np.random.default_rng(seed)
        self.logits = np.zeros(self.game.num_actions, dtype=np.float32)
        self.cpu_s = 0.0
        self.simulations = self.moves = 0
        self._new_game()

    def _new_game(self) -> None:
        self.search = make_search(self.game, self.config, self.rng)
        self.state = self.game.initial_state()
        self.move = 0

    async def _evaluate(self, obs: np.ndarray) -> tuple[np.ndarray, float]:
        return self.logits, 0.0

    async def step(self) -> None:
        t0 = time.process_time()
        res = await self.search.search(self.state, self._evaluate, add_noise=True)
        _, action = self.search.choose(res, self.move)
        self.state = self.game.apply(self.state, action)
        self.search.advance(action)
        self.move += 1
        if self.game.is_terminal(self.state):
            self._new_game()
        self.cpu_s += time.process_time() - t0
        self.simulations += self.config.num_simulations
        self.moves += 1


async def run(seconds: float, specs: list[tuple[str, str, int]]) -> dict[str, dict[str, float]]:
    contenders = [Contender(g, algo, sims, seed) for seed, (g, algo, sims) in enumerate(specs)]
    while sum(c.cpu_s for c in contenders) < seconds:
        for c in contenders:
            await c.step()
    return {
        c.name: {
            "cpu_s": c.cpu_s,
            "moves": c.moves,
            "simulations_per_cpu_s": c.simulations / c.cpu_s,
            "moves_per_cpu_s": c.moves / c.cpu_s,
            "us_per_simulation": 1e6 * c.cpu_s / c.simulations,
        }
        for c in contenders
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seconds", type=float, default=20.0, help="CPU-seconds, all contenders")
    p.add_argument(
        "--contenders", default="puct:40,gumbel:40,gumbel:16", help="[game:]algorithm:sims,..."
    )
    p.add_argument("--json", help="write the result here too")
    args = p.parse_args()
    specs = []
    for item in args.contenders.split(","):
        *game, algorithm, sims = item.split(":")
        specs.append((game[0] if game else "connect4", algorithm, int(sims)))
    out = asyncio.run(run(args.seconds, specs))
    text = json.dumps(out, indent=1)
    print(text)
    if args.json:
        Path(args.json).write_text(text + "\n")


if __name__ == "__main__":
    main()
