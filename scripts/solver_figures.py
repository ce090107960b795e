"""What the MCTS-solver (``mcts.solver``) buys on chess mates, and what it costs.

    .venv/bin/python scripts/solver_figures.py [--sims 100,400] [--limit 0]
        [--evaluators uniform,random] [--seconds 10] [--algorithm puct] [--json OUT]

**Mates.** The positions are the ``mate`` set of the chess benchmark
(actors/games/chess/benchmark.jsonl.gz: the side to move mates in N = 1..3, every move labelled
by Stockfish). Each is searched once from a fresh tree, without root noise, by PUCT or Gumbel
(``--algorithm``), with and without the solver at each simulation count, by each evaluator: ``uniform`` (zero logits, value
0: no network, only the search finds the mate) and ``random`` (an untrained net's stand-in:
pseudo-random logits and values, fixed per position, so its priors mislead). Prints JSON per
evaluator, count and N: the positions, the share where the move played mates as fast as the
best (``found``), the share whose root the solver proved a win (``proven``), and the
simulations run per CPU-second (a proven root stops the search early: ``simulations_run``
counts those run).

**Cost.** Connect Four self-play at the largest count (tree reuse, root noise, the self-play
move choice, the zero evaluator), with and without the solver, a move each in turn for
``--seconds`` CPU-seconds each: simulations run and moves made per CPU-second, and the share of
the asked-for simulations that ran (a proven root ends its search early).
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import time
import zlib
from pathlib import Path
from typing import Any, Literal

import numpy as np

from actors.games import make_game
from actors.search import MCTSConfig
from actors.searches import make_search

Algorithm = Literal["puct", "gumbel"]

SET = Path(__file__).resolve().parents[1] / "actors/games/chess/benchmark.jsonl.gz"


def mate_positions(limit: int) -> list[tuple[str, int, set[str]]]:
    """(FEN, N, the moves that mate in N) of the set's positions where the side to move mates
    in N (its best move's score is ``#N``)."""
    out = []
    with gzip.open(SET, "rt") as f:
        for line in f:
            row = json.loads(line)
            if row.get("set") != "mate":
                continue
            mates = {m: int(s[1:]) for m, s in row["scores"].items() if str(s).startswith("#")}
            wins = {m: n for m, n in mates.items() if n > 0}
            if not wins:
                continue
            n = min(wins.values())
            out.append((row["fen"], n, {m for m, k in wins.items() if k == n}))
    return out[:limit] if limit else out


_LOGITS = np.zeros(4672, np.float32)
"""Chess's policy width, all zeros: uniform priors."""


async def _zero(obs: np.ndarray) -> Any:
    return _LOGITS, 0.0


async def _random(obs: np.ndarray) -> Any:
    """An untrained net's stand-in: logits (spread 2) and a value in [-1, 1], pseudo-random
    but fixed per position (seeded by its planes)."""
    g = np.random.default_rng(zlib.crc32(obs.tobytes()))
    return (g.standard_normal(len(_LOGITS)) * 2.0).astype(np.float32), float(g.uniform(-1, 1))


EVALUATORS = {"uniform": _zero, "random": _random}


async def measure(
    sims: int,
    solver: bool,
    positions: list[tuple[str, int, set[str]]],
    evaluator: str,
    algorithm: Algorithm = "puct",
) -> dict:
    game = make_game("chess")
    config = MCTSConfig(num_simulations=sims, solver=solver, temperature=0.0, algorithm=algorithm)
    per_n: dict[int, list[int]] = {}
    cpu = 0.0
    simulations = 0
    for fen, n, best in positions:
        search = make_search(game, config, np.random.default_rng(0))
        state = game.from_position(fen)
        t0 = time.process_time()
        result = await search.search(state, EVALUATORS[evaluator], add_noise=False)
        _, action = search.choose(result, 1 << 30)
        cpu += time.process_time() - t0
        simulations += search.report().root_visits - 1
        row = per_n.setdefault(n, [0, 0, 0])
        row[0] += 1
        row[1] += game.uci(state, action) in best
        row[2] += result.proof is not None and result.proof.value == 1.0
    return {
        "algorithm": algorithm,
        "solver": solver,
        "evaluator": evaluator,
        "simulations": sims,
        "by_mate_in": {
            str(n): {"positions": p, "found": f / p, "proven": s / p}
            for n, (p, f, s) in sorted(per_n.items())
        },
        "simulations_per_cpu_s": simulations / cpu if cpu else None,
        "simulations_run": simulations,
    }


class SelfPlay:
    """Connect Four self-play games of one search, a move per ``step``, timed."""

    def __init__(self, sims: int, solver: bool, algorithm: Algorithm = "puct") -> None:
        self.game = make_game("connect4")
        self.config = MCTSConfig(num_simulations=sims, solver=solver, algorithm=algorithm)
        self.rng = np.random.default_rng(0)
        self.logits = np.zeros(self.game.num_actions, np.float32)
        self.cpu = 0.0
        self.asked = self.ran = self.moves = 0
        self._new_game()

    def _new_game(self) -> None:
        self.search = make_search(self.game, self.config, self.rng)
        self.state, self.move = self.game.initial_state(), 0

    async def _evaluate(self, obs: np.ndarray) -> Any:
        return self.logits, 0.0

    def _root_visits(self) -> int:
        try:
            return self.search.report().root_visits
        except RuntimeError:  # no kept tree: the search starts a fresh root (its own visit)
            return 1

    async def step(self) -> None:
        before = self._root_visits()
        t0 = time.process_time()
        result = await self.search.search(self.state, self._evaluate, add_noise=True)
        _, action = self.search.choose(result, self.move)
        self.cpu += time.process_time() - t0
        self.ran += self.search.report().root_visits - before
        self.asked += self.config.num_simulations
        self.moves += 1
        self.state = self.game.apply(self.state, action)
        self.search.advance(action)
        self.move += 1
        if self.game.is_terminal(self.state):
            self._new_game()


async def cost(sims: int, seconds: float, algorithm: Algorithm = "puct") -> list[dict]:
    players = [SelfPlay(sims, False, algorithm), SelfPlay(sims, True, algorithm)]
    while min(p.cpu for p in players) < seconds:
        for p in players:
            await p.step()
    return [
        {
            "algorithm": algorithm,
            "solver": p.config.solver,
            "simulations": sims,
            "simulations_per_cpu_s": p.ran / p.cpu,
            "moves_per_cpu_s": p.moves / p.cpu,
            "share_run": p.ran / p.asked,
        }
        for p in players
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sims", default="100,400", help="simulation counts, comma-separated")
    parser.add_argument("--limit", type=int, default=0, help="first positions only (0: all)")
    parser.add_argument(
        "--evaluators", default="uniform,random", help="of " + ", ".join(EVALUATORS)
    )
    parser.add_argument("--seconds", type=float, default=10.0, help="CPU-s per cost contender")
    parser.add_argument("--algorithm", default="puct", choices=("puct", "gumbel"))
    parser.add_argument("--json", type=Path, help="also write the JSON here")
    args = parser.parse_args()
    positions = mate_positions(args.limit)
    counts = [int(s) for s in args.sims.split(",")]
    mates = [
        asyncio.run(measure(n, solver, positions, e, args.algorithm))
        for e in args.evaluators.split(",")
        for n in counts
        for solver in (False, True)
    ]
    costs = asyncio.run(cost(max(counts), args.seconds, args.algorithm))
    text = json.dumps({"mates": mates, "cost": costs}, indent=1)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")


if __name__ == "__main__":
    main()
