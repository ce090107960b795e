"""What chess's feature planes (``chess(features=1)``, actors/core/games/chess.c) cost the
actors: positions encoded per second by the compiled core with and without them, and the
compiled search's simulations per CPU-second (a zero-cost evaluator, so that the planes' share
shows; each simulation encodes its leaf).

The positions are those of random games (every position, the start to the end); the two
encodings take turns, ``--repeats`` times, and the best of each is kept, so that a busy machine
hits both alike. The search plays self-play moves (Gumbel at ``--sims``, configs/chess.toml's
16) from the same random positions, the two encodings again in turns. Prints JSON.

    python scripts/chess_features_cost.py [--games 20] [--repeats 5] [--sims 16]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import time

import numpy as np

from actors.games.chess.rules import Chess, ChessState
from actors.search import MCTSConfig
from actors.searches import make_search

SPECS = {"plain": {}, "features": {"features": 1}}
"""The contenders: configs/chess.toml's game, without and with the feature planes."""


def random_positions(game: Chess, games: int, seed: int) -> list[ChessState]:
    """Every position of ``games`` random games."""
    rng = random.Random(seed)
    out = []
    for _ in range(games):
        s = game.initial_state()
        while not s.over:
            out.append(s)
            s = game.apply(s, rng.choice(game.legal_actions(s)))
    return out


def encode_rate(game: Chess, blobs: list[bytes]) -> float:
    """Positions per second of the core's ``encode`` over ``blobs`` (one call each, as a
    tree encodes a leaf, plus Python's call)."""
    encode = game._rules.encode
    start = time.perf_counter()
    for b in blobs:
        encode(b)
    return len(blobs) / (time.perf_counter() - start)


async def search_rate(game: Chess, roots: list[ChessState], sims: int) -> float:
    """Simulations per CPU-second of the compiled Gumbel search, one move from each root."""
    config = MCTSConfig(num_simulations=sims, algorithm="gumbel", core="compiled")
    logits = np.zeros(game.num_actions, np.float32)

    async def evaluate(obs: np.ndarray) -> tuple[np.ndarray, float]:
        return logits, 0.0

    rng = np.random.default_rng(0)
    start = time.process_time()
    for s in roots:
        await make_search(game, config, rng).search(s, evaluate, add_noise=True)
    return len(roots) * sims / (time.process_time() - start)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--games", type=int, default=20, help="random games whose positions count")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--sims", type=int, default=16, help="simulations per searched move")
    ap.add_argument("--roots", type=int, default=300, help="positions searched per repeat")
    args = ap.parse_args(argv)

    games = {k: Chess(max_plies=256, history=1, **v) for k, v in SPECS.items()}
    positions = random_positions(games["plain"], args.games, seed=0)
    blobs = [s.blob for s in positions]
    roots = random.Random(1).sample(positions, min(args.roots, len(positions)))
    encode: dict[str, float] = {k: 0.0 for k in games}
    search: dict[str, float] = {k: 0.0 for k in games}
    for _ in range(args.repeats):
        for k, game in games.items():
            encode[k] = max(encode[k], encode_rate(game, blobs))
            search[k] = max(search[k], asyncio.run(search_rate(game, roots, args.sims)))
    report = {
        "positions": len(blobs),
        "planes": {k: g.obs_shape[0] for k, g in games.items()},
        "encode_per_s": {k: round(v) for k, v in encode.items()},
        "encode_us": {k: round(1e6 / v, 2) for k, v in encode.items()},
        "search_sims_per_cpu_s": {k: round(v) for k, v in search.items()},
        "search_ratio": round(search["features"] / search["plain"], 3),
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
