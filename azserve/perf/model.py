"""The network's own speed, measured alone in a process of its own (no load, no event-loop
traffic competing for the GIL or the cores).

``ModelProbe`` starts ``python -m azserve.perf.model --dir DIR --config C [--set ...]`` early
(its torch import overlaps the server's start) and asks it to measure at chosen moments,
through numbered command files (``cmd-K.json`` -> ``out-K.json``), so that a bench can measure
the model right before *and* right after a load window on a machine whose other tenants come
and go:

- ``infer(sizes, seconds)``: the server's torch backend (same device, dtype, compile, threads)
  called back to back at each batch size: the rows/s the server could reach if it added no cost
  at all. At batch size 1 it is also the ``naive`` peer (one position per forward call).
- ``train(steps)``: trainer steps at the config's batch size: the learner's samples/s.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from azserve.config.schema import Config
from azserve.errors import AzserveError
from azserve.perf.common import overrides_args, percentiles, python_argv, write_json_atomic
from azserve.perf.load import positions
from azserve.run.supervisor import Child, child_env

if TYPE_CHECKING:
    from azserve.model.spec import NetConfig
    from learner.replay import Batch


class ModelProbe:
    """Orchestrator side: ``start()``, then ``infer(...)`` / ``train(...)`` any number of times,
    then ``close()``. Each call blocks until the child has measured."""

    def __init__(self, config: str, overrides: Sequence[str], workdir: Path, threads: int) -> None:
        self.dir = workdir / "model"
        argv = python_argv(
            "azserve.perf.model",
            "--dir",
            str(self.dir),
            "--config",
            config,
            *overrides_args(overrides),
        )
        self.child = Child("model", argv, workdir / "model.log", child_env(threads))
        self._k = 0

    def start(self) -> ModelProbe:
        self.dir.mkdir(parents=True, exist_ok=True)
        self.child.start()
        return self

    def infer(self, sizes: Sequence[int], seconds: float) -> dict[str, Any]:
        """``{size: {positions_per_s, latency_ms, calls}}`` for each batch size."""
        return self._ask(
            {"sizes": sorted(set(sizes)), "seconds": seconds}, 240 + 3 * seconds * len(sizes)
        )

    def train(self, steps: int) -> dict[str, Any]:
        """``{batch_size, steps, steps_per_s, samples_per_s}``."""
        return self._ask({"train_steps": steps}, 240 + 20 * steps)

    def _ask(self, cmd: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        k, self._k = self._k, self._k + 1
        write_json_atomic(self.dir / f"cmd-{k}.json", cmd)
        out = self.dir / f"out-{k}.json"
        deadline = time.monotonic() + timeout_s
        while not out.exists():
            if self.child.poll() is not None:
                raise AzserveError(
                    f"model probe exited with code {self.child.poll()}:\n{self.child.tail()}"
                )
            if time.monotonic() > deadline:
                raise AzserveError(
                    f"model probe gave no answer in {timeout_s:.0f} s:\n{self.child.tail()}"
                )
            time.sleep(0.05)
        return json.loads(out.read_text())

    def close(self) -> None:
        if self.child.poll() is None:
            write_json_atomic(self.dir / f"cmd-{self._k}.json", {"exit": True})
            if self.child.wait(30) is None:
                self.child.stop(timeout=10)

    def __enter__(self) -> ModelProbe:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


# --- the child -------------------------------------------------------------------------------


class _Inference:
    """The torch backend with version 0 loaded (random weights: speed does not depend on them)."""

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.backend: Any = None

    async def time(self, sizes: list[int], seconds: float) -> dict[str, Any]:
        import torch

        from azserve.backends import make_backend
        from azserve.model.network import build_net
        from azserve.model.weights import state_dict_to_bytes

        if self.cfg.backend.threads > 0:  # a training measurement may have changed it
            torch.set_num_threads(self.cfg.backend.threads)
        if self.backend is None:
            # The reference is the in-process torch backend even when the server forwards to
            # Triton: it is what the network costs on this machine with these settings.
            self.backend = make_backend(
                self.cfg.net, dataclasses.replace(self.cfg.backend, kind="torch")
            )
            await self.backend.start()
            await self.backend.load(
                0, state_dict_to_bytes(build_net(self.cfg.net, seed=0).state_dict())
            )
        pool = positions(max(sizes) * 4, self.cfg.net.obs_shape, seed=0)
        out: dict[str, Any] = {}
        for size in sizes:
            await self.backend.infer(0, pool[:size])  # the first call of a shape allocates
            lat: list[float] = []
            cpu_start = time.process_time()
            t_start = time.monotonic()
            i = 0
            while time.monotonic() - t_start < seconds or len(lat) < 3:
                obs = pool[i : i + size]
                i = (i + size) % (len(pool) - size + 1)
                t0 = time.monotonic()
                await self.backend.infer(0, obs)
                lat.append((time.monotonic() - t0) * 1e3)
            total_s = time.monotonic() - t_start
            cpu_s = time.process_time() - cpu_start
            out[str(size)] = {
                "positions_per_s": round(size * len(lat) / total_s, 1),
                # Per CPU-second: what other tenants of the machine cannot shrink.
                "positions_per_cpu_s": round(size * len(lat) / cpu_s, 1),
                "latency_ms": percentiles(lat),
                "calls": len(lat),
            }
        return out

    async def aclose(self) -> None:
        if self.backend is not None:
            await self.backend.aclose()


def random_batch(net: NetConfig, targets: Sequence[str], size: int, seed: int = 0) -> Batch:
    """``size`` random training positions of ``net``'s shapes: policies, results and every
    one of ``targets`` (``azserve.targets``) filled in, so that a trainer whose config trains
    them (Go's ownership and score) steps as it does on played games."""
    from azserve.targets import target_spec
    from learner.replay import Batch

    rng = np.random.default_rng(seed)
    extra: dict[str, np.ndarray] = {}
    for name in targets:
        dtype, shape = target_spec(name, size, net.obs_shape, net.num_actions)
        if name == "reply":
            extra[name] = rng.dirichlet(np.ones(net.num_actions), size).astype(np.float32)
        elif np.issubdtype(dtype, np.integer):
            extra[name] = rng.integers(-1, 2, shape).astype(dtype)
        else:
            extra[name] = rng.normal(0.0, 5.0, shape).astype(dtype)
    return Batch(
        obs=positions(size, net.obs_shape, seed=seed + 1),
        policy=rng.dirichlet(np.ones(net.num_actions), size).astype(np.float32),
        outcome=rng.choice([-1.0, 0.0, 1.0], size).astype(np.float32),
        version=np.zeros(size, np.int64),
        targets=extra,
        target_mask={name: np.ones(size, bool) for name in targets},
    )


def time_training(cfg: Config, steps: int) -> dict[str, Any]:
    """Samples/s of ``steps`` trainer steps at ``trainer.batch_size`` on random data (with the
    targets the config trains)."""
    import torch

    from actors.games import make_game
    from learner.trainer import Trainer

    if cfg.learner.threads > 0:
        torch.set_num_threads(cfg.learner.threads)
    game = make_game(cfg.game)
    trainer = Trainer(cfg.net, cfg.trainer, game.symmetries, score_scale=game.score_scale)
    bs = cfg.trainer.batch_size
    batch = random_batch(cfg.net, trainer.targets, bs)
    trainer.step(batch)  # the first step allocates optimizer state
    t0 = time.monotonic()
    for _ in range(steps):
        trainer.step(batch)
    dt = time.monotonic() - t0
    return {
        "batch_size": bs,
        "steps": steps,
        "steps_per_s": round(steps / dt, 3),
        "samples_per_s": round(steps * bs / dt, 1),
    }


async def _serve(cfg: Config, workdir: Path) -> None:
    """Answer numbered commands until told to exit or orphaned."""
    parent = os.getppid()
    inference = _Inference(cfg)
    k = 0
    try:
        while True:
            cmd_path = workdir / f"cmd-{k}.json"
            while not cmd_path.exists():
                if os.getppid() != parent:
                    return  # the bench died: do not linger
                await asyncio.sleep(0.02)
            cmd = json.loads(cmd_path.read_text())
            if cmd.get("exit"):
                return
            if "sizes" in cmd:
                result = await inference.time(cmd["sizes"], cmd["seconds"])
            else:
                result = time_training(cfg, cmd["train_steps"])
            write_json_atomic(workdir / f"out-{k}.json", result)
            k += 1
    finally:
        await inference.aclose()


def main(argv: list[str] | None = None) -> None:
    from azserve.config.schema import load_config

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", required=True, help="command directory shared with the bench")
    ap.add_argument("--config", required=True)
    ap.add_argument("--set", dest="overrides", action="append", default=[])
    args = ap.parse_args(argv)
    asyncio.run(_serve(load_config(args.config, args.overrides), Path(args.dir)))


if __name__ == "__main__":
    main()
