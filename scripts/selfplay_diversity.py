"""How varied a checkpoint's self-play is, under variants of the move-choice settings.

Plays ``--games`` self-play games per variant, all at once, with the network in-process
(``LocalEvaluator``: one batch per event-loop tick) and the run's own search settings
(``cfg.mcts``: noise, temperature, playout caps as in self-play), then reports:

- ``distinct``: distinct recorded positions / recorded positions (1 = no repeats);
- ``openings``: distinct move sequences of the first ``--ply`` moves / games;
- the first player's wins / draws / losses, and mean game length.

A run whose actors' evaluation cache answers most leaves is playing near-repeats; this says
which settings restore variety before a training run is spent on them. Usage::

    python scripts/selfplay_diversity.py runs/c4-2h/checkpoints/ckpt-000009154.safetensors \\
        --variant "today=" --variant "target=mcts.gumbel_opening=target" --games 256
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from dataclasses import asdict, dataclass

import numpy as np

from actors.searches import make_search
from azserve.arena.agent import agent_from_checkpoint
from azserve.config.load import apply_overrides, from_dict
from azserve.config.schema import Config


@dataclass
class Diversity:
    variant: str
    games: int
    positions: int
    distinct: float
    openings: float
    wins: int
    draws: int
    losses: int
    mean_moves: float
    seconds: float


async def play(agent, cfg: Config, seed: int) -> tuple[list[int], list[bytes], float]:
    """One self-play game: its moves, its recorded positions' bytes, the first player's result."""
    game, mcfg = agent.game, cfg.mcts
    rng = np.random.default_rng(seed)
    search = make_search(game, mcfg, rng)
    state, moves, recorded = game.initial_state(), [], []
    capped = mcfg.full_search_fraction < 1.0
    while not game.is_terminal(state):
        full = not capped or rng.random() < mcfg.full_search_fraction
        sims = mcfg.num_simulations if full else mcfg.fast_simulations
        noise = full or mcfg.algorithm == "gumbel"
        res = await search.search(state, agent.evaluator, noise, sims)
        _, action = search.choose(res, len(moves))
        if full:
            recorded.append(game.encode(state).tobytes())
        state = game.apply(state, action)
        search.advance(action)
        moves.append(action)
    tv = game.terminal_value(state)
    return moves, recorded, tv if game.to_play(state) == 0 else -tv


async def measure(agent, cfg: Config, name: str, games: int, ply: int, seed: int) -> Diversity:
    t0 = time.perf_counter()
    out = await asyncio.gather(*(play(agent, cfg, seed * 1_000_003 + i) for i in range(games)))
    seen = [p for _, rec, _ in out for p in rec]
    results = [r for _, _, r in out]
    return Diversity(
        variant=name,
        games=games,
        positions=len(seen),
        distinct=round(len(set(seen)) / max(1, len(seen)), 4),
        openings=round(len({tuple(m[:ply]) for m, _, _ in out}) / games, 4),
        wins=sum(r > 0 for r in results),
        draws=sum(r == 0 for r in results),
        losses=sum(r < 0 for r in results),
        mean_moves=round(float(np.mean([len(m) for m, _, _ in out])), 2),
        seconds=round(time.perf_counter() - t0, 1),
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("checkpoint", help="a learner checkpoint (it carries its run's config)")
    ap.add_argument(
        "--variant",
        action="append",
        default=[],
        help='"name=key=value key=value ..." overrides of the checkpoint\'s config; repeatable',
    )
    ap.add_argument("--games", type=int, default=256)
    ap.add_argument("--ply", type=int, default=10, help="opening length for 'openings'")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", help="also write the rows to this file")
    args = ap.parse_args(argv)
    base, agent = agent_from_checkpoint(args.checkpoint)
    rows = []
    for spec in args.variant or ["checkpoint="]:
        name, _, sets = spec.partition("=")
        cfg = from_dict(Config, apply_overrides(asdict(base), sets.split()), "")
        row = asyncio.run(measure(agent, cfg, name, args.games, args.ply, args.seed))
        rows.append(asdict(row))
        print(json.dumps(rows[-1]), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
