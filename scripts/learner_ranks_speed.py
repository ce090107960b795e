"""Learner samples/s of one process against a data-parallel group on this host: the Connect
Four default net, global batch 256, synthetic batches, through the same code path as the
learner's ranks (``Trainer`` with a ``RankGroup``: rank 0 augments and scatters, gradients
all-reduced, global batch norm).

    .venv/bin/python scripts/learner_ranks_speed.py [--layouts 1x2,2x1,2x1n] [--steps 30] [--rounds 3]

A layout ``RxT`` is R ranks of T torch threads each; ``RxTn`` puts each rank in its own network
namespace (root only: veth pairs on one bridge, as the cluster tests make them), so that the
collectives cross a network boundary as between hosts. The layouts take turns for ``--rounds``
rounds, so the machine's noise hits them alike; each round times ``--steps`` steps on rank 0
after 5 warm-up steps, and the best round counts."""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]

RANK = textwrap.dedent(
    """
    import sys, time
    import numpy as np
    import torch
    from actors.games import make_game
    from azserve.config.schema import load_config
    from learner.distributed import RankGroup
    from learner.replay import Batch
    from learner.trainer import Trainer

    rank, world, threads, addr, steps, out = sys.argv[1:7]
    rank, world, threads, steps = int(rank), int(world), int(threads), int(steps)
    torch.set_num_threads(threads)
    cfg = load_config("configs/connect4.toml")
    game = make_game(cfg.game)
    group = RankGroup(rank, world, f"tcp://{addr}", torch.device("cpu"), 120.0) if world > 1 else None
    trainer = Trainer(cfg.net, cfg.trainer, symmetries=game.symmetries, group=group)
    rows = cfg.trainer.batch_size
    data = np.random.default_rng(0)
    obs = data.integers(0, 2, (rows, *cfg.net.obs_shape), dtype=np.uint8)
    policy = data.dirichlet(np.ones(cfg.net.num_actions), rows).astype(np.float32)
    outcome = data.choice([-1.0, 0.0, 1.0], rows).astype(np.float32)
    batch = Batch(obs, policy, outcome, np.zeros(rows, np.int64))
    shapes = ((rows // world, *cfg.net.obs_shape), (rows // world, cfg.net.num_actions), (rows // world,))

    def step():
        if group is None:
            return trainer.step(batch)
        whole = trainer.prepare(batch) if rank == 0 else None
        return trainer.step(group.scatter_batch(whole, shapes), lr=0.01, prepared=True)

    for _ in range(5):
        step()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    dt = time.perf_counter() - t0
    if rank == 0:
        open(out, "w").write(repr(rows * steps / dt))
    if group is not None:
        group.close()
    """
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_layout(ranks: int, threads: int, steps: int, work: Path, lan: Any = None) -> float:
    """Samples/s of rank 0; ``lan``: a namespace per rank (``tests.netns.NetnsLan``)."""
    script = work / "rank.py"
    script.write_text(RANK)
    out = work / "out.txt"
    addr = f"{lan[0].address}:29500" if lan is not None else f"127.0.0.1:{free_port()}"
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": str(threads)}
    procs = []
    for r in range(ranks):
        argv = [sys.executable, str(script), str(r), str(ranks), str(threads), addr,
                str(steps), str(out)]  # fmt: skip
        if lan is not None:
            argv = lan[r].argv(argv)
        procs.append(subprocess.Popen(argv, cwd=REPO, env=env))
    for p in procs:
        if p.wait(timeout=600) != 0:
            raise SystemExit(f"a rank of layout {ranks}x{threads} failed")
    return float(out.read_text())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--layouts", default="1x2,2x1", help="RxT,...: R ranks of T threads")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    layouts = []
    for name in args.layouts.split(","):
        m = re.fullmatch(r"(\d+)x(\d+)(n?)", name.strip())
        if not m:
            p.error(f"--layouts: {name!r} is not RxT or RxTn")
        layouts.append((name.strip(), int(m[1]), int(m[2]), bool(m[3])))
    best: dict[str, float] = {}
    lan = None
    if any(ns for *_, ns in layouts):
        sys.path.insert(0, str(REPO))
        from tests.netns import destroy_lan, make_lan, unavailable

        if unavailable():
            raise SystemExit(f"RxTn layouts need network namespaces: {unavailable()}")
        lan = make_lan(max(r for _, r, _, ns in layouts if ns))
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for _ in range(args.rounds):
                for name, r, t, ns in layouts:
                    rate = run_layout(r, t, args.steps, Path(tmp), lan if ns else None)
                    best[name] = max(best.get(name, 0.0), rate)
                    print(f"{name}: {rate:,.0f} samples/s", flush=True)
    finally:
        if lan is not None:
            destroy_lan(lan)
    print(json.dumps({k: round(v) for k, v in best.items()}))


if __name__ == "__main__":
    main()
