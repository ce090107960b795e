"""What the compiled search trees of an actor process hold per game, move by move: G games of
a shipped config's search (its algorithm, simulations and tree reuse) played with random
logits and values (the trees' shape depends on the search, not on the net), and
``actors.compiled_mcts.live_trees()`` (the counter behind the actors' status line and
``azserve_actor_tree_bytes``) read every 5 moves.

Run: ``.venv/bin/python scripts/tree_memory.py --config connect4 --games 100 --moves 30``.
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

import numpy as np

from actors.games import make_game
from actors.games.compiled import live_trees
from actors.searches import make_search
from azserve.config.presets import resolve_config
from azserve.config.schema import load_config


async def measure(config: str, games: int, moves: int) -> None:
    cfg = load_config(resolve_config(config))
    game = make_game(cfg.game)
    rng = np.random.default_rng(0)

    async def evaluate(obs: np.ndarray) -> tuple[Any, Any]:
        if obs.ndim == 4:  # a batch of leaves
            n = obs.shape[0]
            logits = rng.standard_normal((n, game.num_actions)).astype(np.float32)
            return logits, rng.uniform(-1, 1, n).astype(np.float32)
        return rng.standard_normal(game.num_actions).astype(np.float32), float(rng.uniform(-1, 1))

    searches = [make_search(game, cfg.mcts, np.random.default_rng(i)) for i in range(games)]
    states = [game.initial_state() for _ in range(games)]
    base_nodes, base_bytes = live_trees()
    print(
        f"{cfg.game}: {cfg.mcts.algorithm}, {cfg.mcts.num_simulations} simulations, {games} games"
    )
    for move in range(1, moves + 1):
        for i, search in enumerate(searches):
            if game.is_terminal(states[i]):
                continue
            result = await search.search(states[i], evaluate, add_noise=True)
            action = int(np.argmax(result.visits))
            search.advance(action)
            states[i] = game.apply(states[i], action)
        if move % 5 == 0:
            nodes, size = live_trees()
            live = sum(not game.is_terminal(s) for s in states)
            print(
                f"move {move}: {(nodes - base_nodes) / games:.0f} nodes, "
                f"{(size - base_bytes) / games / 1e3:.1f} KB per game ({live} games not over)"
            )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", default="connect4")
    p.add_argument("--games", type=int, default=100)
    p.add_argument("--moves", type=int, default=30)
    args = p.parse_args()
    asyncio.run(measure(args.config, args.games, args.moves))


if __name__ == "__main__":
    main()
