"""Learner steps/s and samples/s on the Connect Four net at batch 256 (CPU), replay sampling and
augmentation included: `python scripts/learner_speed.py [--threads 2] [--steps 15]
[--variants fp32,fp32-cl,bf16,bf16-cl]`.

Each variant is a trainer setting (``bf16``: ``trainer.amp = "bf16"``; ``-cl``:
``trainer.channels_last = true``; ``compile``: ``trainer.compile = true``); they take turns step by step, so that the machine's noise
hits them alike. Besides wall-clock steps/s it reports CPU milliseconds per step (the process's
CPU time over the step), which other jobs on the machine disturb less."""

import argparse
import statistics
import time

import numpy as np
import torch

from actors.games import make_game
from azserve.model.spec import NetConfig
from learner.replay import Replay, ReplayConfig
from learner.trainer import Trainer, TrainerConfig

VARIANTS = {
    "fp32": {},
    "fp32-cl": {"channels_last": True},
    "bf16": {"amp": "bf16"},
    "bf16-cl": {"amp": "bf16", "channels_last": True},
    "compile": {"compile": True},
    "compile-cl": {"compile": True, "channels_last": True},
    "bf16-compile": {"amp": "bf16", "compile": True},
    "bf16-cl-compile": {"amp": "bf16", "channels_last": True, "compile": True},
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--steps", type=int, default=15)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument(
        "--variants", default="fp32", help=f"comma-separated: {', '.join(VARIANTS)}"
    )
    args = parser.parse_args()
    names = [v.strip() for v in args.variants.split(",") if v.strip()]
    for name in names:
        if name not in VARIANTS:
            parser.error(f"--variants: unknown variant {name!r} ({', '.join(VARIANTS)})")
    torch.set_num_threads(args.threads)
    net, game = NetConfig(), make_game("connect4")
    trainers = {
        name: Trainer(
            net,
            TrainerConfig(batch_size=args.batch, device="cpu", **VARIANTS[name]),  # type: ignore[arg-type]
            symmetries=game.symmetries,
        )
        for name in names
    }
    replay = Replay(
        ReplayConfig(capacity=100_000, min_size=0, reuse_target=1e9), net.obs_shape, net.num_actions
    )
    rng = np.random.default_rng(0)
    for _ in range(200):  # 200 synthetic games of 42 positions
        obs = rng.integers(0, 2, (42, *net.obs_shape), dtype=np.uint8)
        policy = rng.dirichlet(np.ones(7), 42).astype(np.float32)
        replay.insert(obs, policy, rng.choice([-1.0, 1.0], 42).astype(np.float32), 0)
    for trainer in trainers.values():
        for _ in range(3):  # warm-up
            trainer.step(replay.sample(args.batch, trainer.rng))
    wall: dict[str, list[float]] = {name: [] for name in names}
    cpu: dict[str, list[float]] = {name: [] for name in names}
    for _ in range(args.steps):
        for name, trainer in trainers.items():
            t0, c0 = time.perf_counter(), time.process_time()
            trainer.step(replay.sample(args.batch, trainer.rng))
            wall[name].append(time.perf_counter() - t0)
            cpu[name].append(time.process_time() - c0)
    base = statistics.median(cpu[names[0]])
    for name in names:
        med = statistics.median(wall[name])
        cpu_ms = statistics.median(cpu[name]) * 1e3
        print(
            f"{name}: median {1 / med:.2f} steps/s = {args.batch / med:.0f} samples/s; "
            f"best {1 / min(wall[name]):.2f} steps/s; {cpu_ms:.1f} CPU ms per step "
            f"({base * 1e3 / cpu_ms:.2f}x {names[0]}'s) ({args.threads} threads, batch {args.batch})"
        )


if __name__ == "__main__":
    main()
