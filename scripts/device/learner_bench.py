"""The learner's training step on one device: steps/s and samples/s of a config's net, targets
and trainer settings, on synthetic batches (random positions, policies, results and targets of
the right shapes; augmentation as configured).

    python scripts/device/learner_bench.py --config go9 --device cuda --amp bf16 \
        --batch 256,1024 --seconds 10 --json out.json

What the lent GPU run (scripts/device/run) reports beside the actors' rate: whether one GPU
learner outruns a host's actors. ``--device cpu`` runs the same on this machine."""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import replace
from typing import Any

import torch

from actors.games import make_game
from azserve.config.presets import resolve_config
from azserve.config.schema import load_config
from azserve.perf.model import random_batch
from learner.trainer import Trainer


def measure(config: str, device: str, amp: str, batch: int, seconds: float) -> dict[str, Any]:
    cfg = load_config(resolve_config(config))
    game = make_game(cfg.game)
    tcfg = replace(cfg.trainer, device=device, amp=amp, batch_size=batch, lr_schedule="constant")
    trainer = Trainer(cfg.net, tcfg, symmetries=game.symmetries)
    targets = list(trainer.targets)
    batches = [random_batch(cfg.net, targets, batch, seed=i) for i in range(4)]
    on_cuda = trainer.device.type == "cuda"

    def sync() -> None:
        if on_cuda:
            torch.cuda.synchronize()

    t0 = time.perf_counter()
    for i in range(3):  # warm-up: allocator, cuDNN's choices, a compile if trainer.compile
        trainer.step(batches[i % len(batches)])
    sync()
    warm_s = time.perf_counter() - t0
    times: list[float] = []
    start = time.perf_counter()
    i = 0
    while time.perf_counter() - start < seconds or len(times) < 5:
        t = time.perf_counter()
        trainer.step(batches[i % len(batches)])  # step() reads its losses back: it syncs
        sync()
        times.append(time.perf_counter() - t)
        i += 1
    med = statistics.median(times)
    return {
        "config": config,
        "device": str(trainer.device),
        "device_name": torch.cuda.get_device_name(trainer.device) if on_cuda else "cpu",
        "amp": amp,
        "batch": batch,
        "targets": targets,
        "net": {"blocks": cfg.net.blocks, "channels": cfg.net.channels},
        "steps": len(times),
        "warmup_s": round(warm_s, 2),
        "steps_per_s": round(1 / med, 2),
        "samples_per_s": round(batch / med, 1),
        "step_ms": {"median": round(med * 1e3, 2), "min": round(min(times) * 1e3, 2)},
    }


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--config", default="go9", help="comma-separated config names or paths")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--amp", default="bf16", choices=["none", "bf16", "fp16"])
    ap.add_argument("--batch", default="256,1024", help="comma-separated batch sizes")
    ap.add_argument("--seconds", type=float, default=10.0, help="timed seconds per point")
    ap.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    ap.add_argument("--json", help="write the points here too")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("learner_bench: --device cuda, but torch sees no CUDA device", file=sys.stderr)
        return 1
    points = []
    for config in [c for c in args.config.split(",") if c]:
        for b in [int(x) for x in args.batch.split(",") if x]:
            p = measure(config, args.device, args.amp, b, args.seconds)
            print(
                f"{config} batch {b} {p['device']} amp {args.amp}: {p['samples_per_s']:.0f} "
                f"samples/s ({p['steps_per_s']} steps/s, warm-up {p['warmup_s']} s)",
                flush=True,
            )
            points.append(p)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"bench": "learner", "points": points}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
