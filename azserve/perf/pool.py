"""The actor side alone: whole self-play games on an evaluator that costs nothing.

``python -m azserve.perf.pool`` plays ``--games`` concurrent games of ``play_game`` (move
choice, recording, resignation: everything an actor process does per move) in one process,
answered by an in-process evaluator that returns at once (a fixed random projection of each
position's bytes; no network, no sockets, no server). Variants take turns in rounds, so that
machine noise hits them alike:

- ``pool``: the compiled searches driven by ``actors.searchpool.SearchPool`` (one evaluation
  per lane round);
- ``leaf``: one coroutine per game awaiting each leaf (``actors.search_pool = false``);
- ``pool-pystore``: the pool with the evaluation cache kept in Python (``PyStore``, the store
  of a process without the compiled core) instead of the compiled one: with ``--cache-mb``,
  what answering hits inside the C loop saves.

``--cache-mb`` gives each variant's games a fresh evaluation cache of that size (the actors'
default is 64; 0, the default here, plays without one).

The rate is simulations per CPU-second of this process. Against ``azserve bench selfplay
--set backend.kind=synthetic`` (the same games through the client, ZeroMQ and a server) the
difference is what the client and the sockets cost (docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import time
from typing import Any

import numpy as np

from actors.evalcache import EvalCache
from actors.games import make_game
from actors.search import MCTSConfig
from actors.searchpool import SearchPool
from actors.selfplay import SelfPlayStats, play_game


class InstantClient:
    """``EvalClient``'s calls that ``play_game`` and the pool make, answered at once."""

    def __init__(self, obs_size: int, num_actions: int, seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        self.weights = rng.standard_normal((obs_size, num_actions + 1)).astype(np.float32)
        self.num_actions = num_actions
        self.latest_version = 1
        self.rows = 0
        self.calls = 0

    def pin_latest(self) -> Any:
        return contextlib.nullcontext(self.latest_version)

    def evaluate(self, obs: np.ndarray, version: int = -1) -> asyncio.Future[Any]:
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        one = obs.ndim == 3
        rows = obs.reshape(1 if one else len(obs), -1).astype(np.float32)
        self.rows += len(rows)
        self.calls += 1
        out = rows @ self.weights * 0.1
        logits, values = out[:, : self.num_actions].copy(), np.tanh(out[:, -1])
        fut.set_result((logits[0], float(values[0])) if one else (logits, values))
        return fut


VARIANTS = ("pool", "leaf", "pool-pystore")


async def play(
    game_name: str,
    cfg: MCTSConfig,
    games: int,
    total: int,
    variant: str,
    seed: int,
    cache_mb: float = 0.0,
):
    """Play ``total`` games, ``games`` at a time; (simulations, CPU seconds, games, rows per
    evaluation call, the cache's hit rate or None)."""
    game = make_game(game_name)
    client = InstantClient(int(np.prod(game.obs_shape)), game.num_actions, seed)
    stats = SelfPlayStats()
    store = "python" if variant == "pool-pystore" else "auto"
    cache = EvalCache(int(cache_mb * 2**20), store) if cache_mb > 0 else None
    pool = SearchPool(client.evaluate, 128, stats, cache) if variant != "leaf" else None
    started = [0]

    async def worker() -> None:
        while started[0] < total:
            started[0] += 1
            rng = np.random.default_rng([seed, started[0]])
            await play_game(game, cfg, client, rng, stats, 5.0, cache, pool)  # type: ignore[arg-type]

    t0 = time.process_time()
    try:
        await asyncio.gather(*(worker() for _ in range(games)))
    finally:
        if pool is not None:
            await pool.aclose()
    hit_rate = cache.stats.hit_rate if cache is not None else None
    cpu = time.process_time() - t0
    return stats.simulations, cpu, stats.games, client.rows / client.calls, hit_rate


def _rounded(x: float | None) -> float | None:
    return None if x is None else round(x, 4)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m azserve.perf.pool", description=__doc__.split("\n\n")[0]
    )
    ap.add_argument("--game", default="connect4")
    ap.add_argument("--games", type=int, default=256, help="concurrent games")
    ap.add_argument("--per-round", type=int, default=1000, help="games per variant per round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--simulations", type=int, default=16)
    ap.add_argument("--algorithm", choices=["gumbel", "puct"], default="gumbel")
    ap.add_argument(
        "--variants", default="pool,leaf", help=f"comma-separated: {', '.join(VARIANTS)}"
    )
    ap.add_argument(
        "--cache-mb", type=float, default=0.0, help="evaluation cache per variant (0 = none)"
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", help="also write the report here")
    args = ap.parse_args(argv)
    import uvloop

    cfg = MCTSConfig(
        algorithm=args.algorithm,
        num_simulations=args.simulations,
        num_sampled_actions=16,
        temperature=3.0 if args.algorithm == "gumbel" else 1.0,
        temperature_moves=10,
        resign_threshold=-2.0,
    )
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    for v in variants:
        if v not in VARIANTS:
            ap.error(f"--variants: unknown variant {v!r} ({', '.join(VARIANTS)})")
    if args.cache_mb < 0:
        ap.error(f"--cache-mb: must be >= 0, got {args.cache_mb}")
    sims = dict.fromkeys(variants, 0)
    cpu = dict.fromkeys(variants, 0.0)
    played = dict.fromkeys(variants, 0)
    batch = dict.fromkeys(variants, 0.0)
    hits: dict[str, float | None] = dict.fromkeys(variants)
    for r in range(args.rounds):
        for v in variants:
            s, c, g, b, h = uvloop.run(
                play(args.game, cfg, args.games, args.per_round, v, args.seed + r, args.cache_mb)
            )
            sims[v] += s
            cpu[v] += c
            played[v] += g
            batch[v] += b / args.rounds
            if h is not None:
                hits[v] = (hits[v] or 0.0) + h / args.rounds
            print(f"round {r + 1} {v}: {s / c:,.0f} simulations per CPU-second", file=sys.stderr)
    report = {
        "game": args.game,
        "algorithm": args.algorithm,
        "simulations_per_move": args.simulations,
        "concurrent_games": args.games,
        "cache_mb": args.cache_mb,
        **{
            v: {
                "simulations_per_cpu_s": round(sims[v] / cpu[v], 1),
                "simulations": sims[v],
                "cpu_s": round(cpu[v], 4),
                "games": played[v],
                "rows_per_evaluation": round(batch[v], 2),
                "cache_hit_rate": _rounded(hits[v]),
            }
            for v in variants
        },
    }
    print(json.dumps(report, indent=1))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
