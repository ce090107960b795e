"""Accuracy and speed of the torch backend's execution paths against eager fp32, on positions
from real Connect Four games (played here from the start position, moves drawn from the
network's own policy, so no data set is read), through the backend exactly as the server runs it.

    python scripts/inference_accuracy.py [--positions 10000] [--weights CKPT.safetensors]
        [--paths jit,inductor,inductor-bf16] [--json OUT]

For each path: the fraction of positions whose policy argmax equals eager fp32's (over legal
moves, as MCTS sees them), the largest |value difference| and |logit difference|, and the rows/s
of the path and of eager measured in interleaved rounds at batch 128 (ratios, on a noisy
machine). Without ``--weights`` the net is the seeded version 0 with BatchNorm statistics
drawn at random (fresh statistics would make folding a no-op), which makes argmax ties
close and the agreement figure a harsh one.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from typing import Any

import numpy as np
import torch
from torch import nn

from actors.games import make_game
from azserve.backends.base import BackendConfig
from azserve.backends.torch_backend import TorchBackend
from azserve.config.schema import replace
from azserve.model.network import build_net
from azserve.model.spec import NetConfig
from azserve.model.weights import load_weights_file, state_dict_to_bytes

PATHS: dict[str, dict[str, Any]] = {
    "jit": {"dtype": "float32", "torch": {"compile": "jit"}},
    "inductor": {"dtype": "float32", "torch": {"compile": "inductor"}},
    "inductor-channels_last": {
        "dtype": "float32",
        "torch": {"compile": "inductor", "channels_last": True},
    },
    "inductor-bf16": {"dtype": "bfloat16", "torch": {"compile": "inductor"}},
}


def weights(path: str | None, net: NetConfig) -> bytes:
    if path:
        return state_dict_to_bytes(load_weights_file(path))
    module = build_net(net, seed=0)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.copy_(torch.rand(m.num_features, generator=g) - 0.5)
                m.running_var.copy_(torch.rand(m.num_features, generator=g) + 0.5)
    return state_dict_to_bytes(module.state_dict())


async def game_positions(
    backend: TorchBackend, count: int, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """``count`` distinct positions (uint8 ``[N,2,6,7]``) and legal masks (``[N,7]``) from
    games whose moves are sampled from the net's policy (eager fp32), 64 games at a time."""
    game = make_game("connect4")
    rng = np.random.default_rng(seed)
    seen: dict[bytes, tuple[np.ndarray, np.ndarray]] = {}
    while len(seen) < count:
        states = [game.initial_state() for _ in range(64)]
        while states and len(seen) < count:
            obs = np.stack([game.encode(s) for s in states])
            logits, _ = await backend.infer(0, obs)
            nxt = []
            for s, o, lg in zip(states, obs, logits, strict=True):
                legal = game.legal_actions(s)
                mask = np.zeros(game.num_actions, bool)
                mask[legal] = True
                seen.setdefault(o.tobytes(), (o, mask))
                p = np.exp(lg[legal] - lg[legal].max())
                s2 = game.apply(s, int(rng.choice(legal, p=p / p.sum())))
                if not game.is_terminal(s2):
                    nxt.append(s2)
            states = nxt
    items = list(seen.values())[:count]
    return np.stack([o for o, _ in items]), np.stack([m for _, m in items])


async def outputs(backend: TorchBackend, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    parts = [await backend.infer(0, obs[i : i + 128]) for i in range(0, len(obs), 128)]
    return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])


async def rate(backend: TorchBackend, obs: np.ndarray, seconds: float) -> float:
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        await backend.infer(0, obs)
        n += len(obs)
    return n / (time.perf_counter() - t0)


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--positions", type=int, default=10_000)
    ap.add_argument("--weights", help="a checkpoint (.safetensors); default: see above")
    ap.add_argument("--paths", default="jit,inductor,inductor-bf16")
    ap.add_argument("--rounds", type=int, default=5, help="interleaved speed rounds")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    net = NetConfig()
    blob = weights(args.weights, net)
    backends: dict[str, TorchBackend] = {}
    build_s: dict[str, float] = {}
    for name, over in [("eager", {"dtype": "float32", "torch": {"compile": "none"}})] + [
        (p, PATHS[p]) for p in args.paths.split(",")
    ]:
        t0 = time.perf_counter()
        base = BackendConfig(device="cpu", threads=args.threads)
        path = {"batch_buckets": (128,), **over["torch"]}
        b = TorchBackend(net, replace(base, dtype=over["dtype"], torch=path))
        await b.start()
        await b.load(0, blob)
        build_s[name] = round(time.perf_counter() - t0, 1)
        backends[name] = b
        print(f"{name}: ready in {build_s[name]} s ({b.plan.describe()})", flush=True)
    obs, legal = await game_positions(backends["eager"], args.positions, seed=0)
    ref_l, ref_v = await outputs(backends["eager"], obs)
    ref_arg = np.where(legal, ref_l, -np.inf).argmax(1)
    result: dict[str, Any] = {
        "positions": len(obs),
        "weights": args.weights or "seed 0, random BatchNorm statistics",
        "threads": args.threads,
        "cpu": {
            k: v for k, v in torch.cpu.get_capabilities().items() if "bf16" in k or k == "cpu_name"
        }
        if hasattr(torch.cpu, "get_capabilities")
        else {},
        "paths": {},
    }
    for name, b in backends.items():
        if name == "eager":
            continue
        lg, v = await outputs(b, obs)
        arg = np.where(legal, lg, -np.inf).argmax(1)
        result["paths"][name] = {
            "plan": b.plan.describe(),
            "ready_s": build_s[name],
            "argmax_agreement": round(float((arg == ref_arg).mean()), 5),
            "max_abs_value_diff": float(np.abs(v - ref_v).max()),
            "max_abs_logit_diff": float(np.abs(lg - ref_l).max()),
        }
    batch = obs[:128]
    rates: dict[str, list[float]] = {n: [] for n in backends}
    for _ in range(args.rounds):
        for name, b in backends.items():
            rates[name].append(await rate(b, batch, 0.5))
    med = {n: float(np.median(r)) for n, r in rates.items()}
    result["rows_per_s_batch128_median"] = {n: round(v, 1) for n, v in med.items()}
    result["speed_ratio_to_eager"] = {n: round(v / med["eager"], 2) for n, v in med.items()}
    for b in backends.values():
        await b.aclose()
    text = json.dumps(result, indent=2)
    print(text)
    if args.json:
        with open(args.json, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    asyncio.run(main())
