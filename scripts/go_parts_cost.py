"""What each of issue 36's parts costs on Go 9x9, per evaluation and per learner step.

Builds the plain AlphaZero net (configs/go9-alphazero.toml) and the net with each part added
alone (the input features, global pooling, the target heads with their losses) and all together
(configs/go9.toml, the default), then times, in one process with the variants taking turns (A B
C D E, repeated), a forward pass of ``--rows`` positions (eager, ``backend.threads`` of the
config: the server compiles, this measures the network's arithmetic) and a learner step of
``trainer.batch_size`` on random positions with every target present. Prints a table of
milliseconds and ratios to go9-alphazero ("x plain"); the ratios, not the times, are the result
on a shared machine.

``--served`` adds the forward as the inference server runs it: the config's torch backend
(compiled, bf16 where the CPU has it natively, padded to its batch buckets), uint8 planes in,
so what an evaluation costs the server, beside what the arithmetic costs eager in fp32.

    python scripts/go_parts_cost.py --repeats 5 [--served]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import torch

from actors.games import make_game
from azserve.arena.agent import ServedNet, run_sync
from azserve.config.schema import load_config
from azserve.model.network import build_net
from learner.replay import Batch
from learner.trainer import Trainer

CONFIGS = Path(__file__).resolve().parents[1] / "configs"

OFF = ["net.global_pool_every=0", "net.heads=[]", "trainer.ownership_weight=0",
       "trainer.score_weight=0", "trainer.reply_weight=0"]  # fmt: skip
"""go9.toml's parts switched off, one by one below."""

VARIANTS: dict[str, tuple[str, list[str]]] = {
    "go9-alphazero": ("go9-alphazero", []),
    "+ features": ("go9", OFF),
    "+ global pooling": ("go9", ["game=go9", *OFF[1:], "net.global_pool_every=3"]),
    "+ targets": ("go9", ["game=go9", "net.global_pool_every=0"]),
    "all three (go9)": ("go9", []),
}


def batch_for(cfg, rng: np.random.Generator) -> Batch:
    """Random positions with every target the config trains (a row's reply: one-hot)."""
    game = make_game(cfg.game)
    b, (c, h, w), a = cfg.trainer.batch_size, game.obs_shape, game.num_actions
    policy = rng.dirichlet(np.ones(a), b).astype(np.float32)
    targets, masks = {}, {}
    if cfg.trainer.ownership_weight:
        targets["ownership"] = rng.choice(np.array([-1, 1], np.int8), (b, h, w))
    if cfg.trainer.score_weight:
        targets["score"] = rng.normal(0, 10, b).astype(np.float32)
    if cfg.trainer.reply_weight:
        targets["reply"] = np.eye(a, dtype=np.float32)[rng.integers(a, size=b)]
    for name in targets:
        masks[name] = np.ones(b, bool)
    return Batch(
        obs=rng.integers(0, 2, (b, c, h, w), dtype=np.uint8),
        policy=policy,
        outcome=rng.choice(np.array([-1.0, 1.0], np.float32), b),
        version=np.zeros(b, np.int64),
        targets=targets,
        target_mask=masks,
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=5, help="rounds of every variant (default 5)")
    ap.add_argument("--rows", type=int, default=128, help="positions per forward (default 128)")
    ap.add_argument(
        "--served", action="store_true", help="also time the forward on the server's backend"
    )
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    setups = {}
    for label, (name, sets) in VARIANTS.items():
        cfg = load_config(CONFIGS / f"{name}.toml", [*sets, "trainer.device=cpu"])
        torch.set_num_threads(cfg.backend.threads)
        net = build_net(cfg.net).eval()
        obs = torch.from_numpy(rng.integers(0, 2, (args.rows, *make_game(cfg.game).obs_shape))
                               .astype(np.float32))  # fmt: skip
        trainer = Trainer(cfg.net, cfg.trainer)
        batch = batch_for(cfg, rng)
        trainer.step(batch)  # warm up
        served = None
        if args.served:  # the server's backend: compiles its buckets when the weights load
            sn = ServedNet(cfg.net, cfg.backend)
            version = sn.load(net.state_dict())
            planes = obs.numpy().astype(np.uint8)
            served = (sn, version, planes)
            run_sync(sn.backend.infer(version, planes))
        setups[label] = (net, obs, trainer, batch, served)
    kinds = ["fwd", "served", "step"] if args.served else ["fwd", "step"]
    times: dict[str, dict[str, list[float]]] = {k: {n: [] for n in kinds} for k in setups}
    for _ in range(args.repeats):
        for label, (net, obs, trainer, batch, served) in setups.items():
            with torch.inference_mode():
                t0 = time.perf_counter()
                net(obs)
                times[label]["fwd"].append(time.perf_counter() - t0)
            if served is not None:
                times[label]["served"].append(run_sync(_timed_infer(*served)))
            t0 = time.perf_counter()
            trainer.step(batch)
            times[label]["step"].append(time.perf_counter() - t0)
    base = {k: float(np.median(v)) for k, v in times["go9-alphazero"].items()}
    heads = {"fwd": f"forward of {args.rows} rows, eager fp32, ms",
             "served": f"forward of {args.rows} rows, served, ms", "step": "learner step, ms"}  # fmt: skip
    print("| variant | " + " | ".join(f"{heads[k]} | x plain" for k in kinds) + " |")
    print("|---|" + "---:|---:|" * len(kinds))
    for label, t in times.items():
        cells = []
        for k in kinds:
            m = float(np.median(t[k]))
            cells.append(f"{m * 1e3:.1f} | {m / base[k]:.2f}")
        print(f"| {label} | " + " | ".join(cells) + " |")


async def _timed_infer(sn: ServedNet, version: int, planes: np.ndarray) -> float:
    """Seconds of one batch on the server's backend (as its batcher calls it)."""
    t0 = time.perf_counter()
    await sn.backend.infer(version, planes)
    return time.perf_counter() - t0


if __name__ == "__main__":
    main()
