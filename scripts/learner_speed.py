"""Learner steps/s and samples/s on the Connect Four net at batch 256 (CPU), replay sampling and
augmentation included: `python scripts/learner_speed.py [--threads 2] [--steps 15]`."""

import argparse
import statistics
import time

import numpy as np
import torch

from actors.games import make_game
from azserve.model.spec import NetConfig
from learner.replay import Replay, ReplayConfig
from learner.trainer import Trainer, TrainerConfig


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--steps", type=int, default=15)
    parser.add_argument("--batch", type=int, default=256)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    net, game = NetConfig(), make_game("connect4")
    trainer = Trainer(
        net, TrainerConfig(batch_size=args.batch, device="cpu"), symmetries=game.symmetries
    )
    replay = Replay(
        ReplayConfig(capacity=100_000, min_size=0, reuse_target=1e9), net.obs_shape, net.num_actions
    )
    rng = np.random.default_rng(0)
    for _ in range(200):  # 200 synthetic games of 42 positions
        obs = rng.integers(0, 2, (42, *net.obs_shape), dtype=np.uint8)
        policy = rng.dirichlet(np.ones(7), 42).astype(np.float32)
        replay.insert(obs, policy, rng.choice([-1.0, 1.0], 42).astype(np.float32), 0)
    for _ in range(3):  # warm-up
        trainer.step(replay.sample(args.batch, trainer.rng))
    times = []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        trainer.step(replay.sample(args.batch, trainer.rng))
        times.append(time.perf_counter() - t0)
    med = statistics.median(times)
    print(
        f"median {1 / med:.2f} steps/s = {args.batch / med:.0f} samples/s; "
        f"best {1 / min(times):.2f} steps/s ({args.threads} threads, batch {args.batch})"
    )


if __name__ == "__main__":
    main()
