"""The shared load generator: C coroutines in one process, each calling a server back to back.

    python -m azserve.perf.load --dir DIR --index I --target azserve --endpoint E ...

A worker connects, writes ``DIR/ready-I``, waits for ``DIR/go.json`` (the measurement window),
drives the target until the window ends and writes ``DIR/result-I.npz``: the send and reply
times (monotonic seconds) of every call that finished inside the window, and an error count.

Targets:
- ``azserve``: one position per ``EvalClient.evaluate`` call, as a game's leaf is; the client
  coalesces everything pending in one loop tick into one message, so C coroutines cost one
  message per tick, not C. With ``--legal K`` each call is sparse (``azserve.sparse``): K
  random legal actions of ``--num-actions`` go with it and only their logits come back.
- ``triton``: one gRPC request of ``--rows`` positions per call through tritonclient's asyncio
  client (``--rows 1``: Triton fed one position per request).

``drive`` is also used in-process by peers whose client cannot live in a worker (Ray Serve).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from azserve.perf.common import Workers, python_argv, sleep_until

Call = Callable[[np.ndarray], Awaitable[Any]]
"""Evaluates obs uint8 ``[C,H,W]`` (one position) or ``[rows,C,H,W]``; the result is ignored."""


@dataclass
class Samples:
    """Calls that finished inside the window: send and reply times (monotonic s)."""

    t_send: list[float] = field(default_factory=list)
    t_done: list[float] = field(default_factory=list)
    errors: int = 0
    last_error: str = ""

    def latency_ms(self) -> np.ndarray:
        return (np.asarray(self.t_done) - np.asarray(self.t_send)) * 1e3


def positions(n: int, obs_shape: tuple[int, int, int], seed: int) -> np.ndarray:
    """Synthetic positions: random 0/1 uint8 planes ``[n, C, H, W]``. The server's cost does not
    depend on their content (no cache sits in front of the network)."""
    return np.random.default_rng(seed).integers(0, 2, (n, *obs_shape), dtype=np.uint8)


async def drive(
    call: Call, pool: np.ndarray, coroutines: int, rows: int, t_measure: float, t_end: float
) -> Samples:
    """Run ``coroutines`` callers back to back until ``t_end``; keep calls finishing in
    ``[t_measure, t_end)``. Calls still in flight at ``t_end`` are abandoned, not counted."""
    samples = Samples()
    n = len(pool)

    async def caller(k: int) -> None:
        i = (k * 7919) % n
        while True:
            t0 = time.monotonic()
            if t0 >= t_end:
                return
            obs = pool[i] if rows == 1 else pool[i : i + rows] if i + rows <= n else pool[:rows]
            i = (i + rows) % n
            try:
                await call(obs)
            except Exception as exc:  # noqa: BLE001 - counted and reported, the load goes on
                samples.errors += 1
                samples.last_error = f"{type(exc).__name__}: {exc}"
                await asyncio.sleep(0.01)  # a failing target must not turn into a busy loop
                continue
            t1 = time.monotonic()
            if t_measure <= t1 < t_end:
                samples.t_send.append(t0)
                samples.t_done.append(t1)

    tasks = [asyncio.create_task(caller(k), name=f"caller-{k}") for k in range(coroutines)]
    await asyncio.wait(tasks, timeout=max(0.0, t_end - time.monotonic()) + 5.0)
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return samples


# --- targets ---------------------------------------------------------------------------------


class _AzserveTarget:
    def __init__(self, args: argparse.Namespace) -> None:
        from azserve.client import ClientConfig, EvalClient

        cfg = ClientConfig(
            server=args.endpoint, model=args.model, max_rows=args.max_rows, request_timeout_s=60.0
        )
        self.client = EvalClient(cfg)
        self.legal = args.legal
        self.num_actions = args.num_actions

    async def start(self) -> Call:
        await self.client.start(timeout_s=60.0)
        if not self.legal:
            return self.client.evaluate
        rng = np.random.default_rng(0)
        pool = [
            np.sort(rng.choice(self.num_actions, self.legal, replace=False)) for _ in range(997)
        ]
        turn = iter(range(1 << 62))
        evaluate = self.client.evaluate

        def call(obs: np.ndarray) -> Any:
            return evaluate(obs, -1, pool[next(turn) % 997])

        return call

    async def aclose(self) -> None:
        await self.client.aclose()


class _TritonTarget:
    def __init__(self, args: argparse.Namespace) -> None:
        import tritonclient.grpc.aio as grpcaio

        self.client = grpcaio.InferenceServerClient(args.endpoint)
        self.model = args.model
        self.input = args.input_name

    async def start(self) -> Call:
        import tritonclient.grpc as grpcclient

        async def call(obs: np.ndarray) -> Any:
            batch = obs[None] if obs.ndim == 3 else obs
            inp = grpcclient.InferInput(self.input, list(batch.shape), "UINT8")
            inp.set_data_from_numpy(np.ascontiguousarray(batch))
            return await self.client.infer(self.model, [inp], client_timeout=60.0)

        return call

    async def aclose(self) -> None:
        await self.client.close()


async def _wait_go(path: Path, timeout_s: float) -> dict[str, float]:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"no {path} after {timeout_s:.0f} s")
        await asyncio.sleep(0.02)
    return json.loads(path.read_text())


async def _worker(args: argparse.Namespace) -> None:
    workdir = Path(args.dir)
    target = _AzserveTarget(args) if args.target == "azserve" else _TritonTarget(args)
    obs_shape = tuple(int(x) for x in args.obs_shape.split(","))
    pool = positions(4096, obs_shape, seed=args.index)  # type: ignore[arg-type]
    call = await target.start()
    try:
        (workdir / f"ready-{args.index}").touch()
        window = await _wait_go(workdir / "go.json", args.go_timeout)
        samples = await drive(
            call, pool, args.coroutines, args.rows, window["t_measure"], window["t_end"]
        )
    finally:
        await target.aclose()
    np.savez(
        workdir / f"result-{args.index}.npz",
        t_send=np.asarray(samples.t_send),
        t_done=np.asarray(samples.t_done),
        errors=np.asarray(samples.errors),
        last_error=np.asarray(samples.last_error),
    )


def worker_argv(
    workdir: Path,
    index: int,
    target: str,
    endpoint: str,
    model: str,
    coroutines: int,
    obs_shape: tuple[int, ...],
    rows: int = 1,
    max_rows: int = 256,
    input_name: str = "obs",
    legal: int = 0,
    num_actions: int = 0,
) -> list[str]:
    """The command line of load worker ``index``."""
    return python_argv(
        "azserve.perf.load",
        "--dir",
        str(workdir),
        "--index",
        str(index),
        "--target",
        target,
        "--endpoint",
        endpoint,
        "--model",
        model,
        "--coroutines",
        str(coroutines),
        "--obs-shape",
        ",".join(map(str, obs_shape)),
        "--rows",
        str(rows),
        "--max-rows",
        str(max_rows),
        "--input-name",
        input_name,
        "--legal",
        str(legal),
        "--num-actions",
        str(num_actions),
    )


def read_results(workdir: Path, count: int) -> Samples:
    """Merge the result files of ``count`` workers."""
    merged = Samples()
    for i in range(count):
        with np.load(workdir / f"result-{i}.npz", allow_pickle=False) as r:
            merged.t_send.extend(r["t_send"].tolist())
            merged.t_done.extend(r["t_done"].tolist())
            merged.errors += int(r["errors"])
            merged.last_error = str(r["last_error"]) or merged.last_error
    return merged


@dataclass
class LoadRun:
    """One measured window of load: the callers' samples, the server's status at both ends of
    the window and the CPU cores the load workers used."""

    samples: Samples
    seconds: float
    status: tuple[dict[str, Any], dict[str, Any]] | None
    load_cpu_cores: float | None


def run_load(
    workdir: Path,
    argvs: list[list[str]],
    warmup: float,
    duration: float,
    status: Callable[[], dict[str, Any]] | None = None,
) -> LoadRun:
    """Start the workers, let them warm up, measure ``duration`` seconds; with ``status``, take
    the server's status at both ends of the window."""
    workdir.mkdir(parents=True, exist_ok=True)
    with Workers(workdir, argvs) as workers:
        workers.wait_ready()
        t_measure, t_end = workers.go(warmup, duration)
        sleep_until(t_measure)
        cpu0 = workers.cpu_seconds()
        first = status() if status else None
        sleep_until(t_end)
        last = status() if status else None
        cpu1 = workers.cpu_seconds()
        workers.wait_done(120)
    window = (first, last) if first is not None and last is not None else None
    cores = (cpu1 - cpu0) / duration if cpu0 is not None and cpu1 is not None else None
    return LoadRun(read_results(workdir, len(argvs)), duration, window, cores)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", required=True, help="work directory shared with the bench")
    ap.add_argument("--index", type=int, required=True, help="this worker's number")
    ap.add_argument("--target", choices=["azserve", "triton"], default="azserve")
    ap.add_argument("--endpoint", required=True, help="azserve endpoint or Triton gRPC host:port")
    ap.add_argument("--model", default="default")
    ap.add_argument("--coroutines", type=int, default=256)
    ap.add_argument("--obs-shape", required=True, help="C,H,W")
    ap.add_argument("--rows", type=int, default=1, help="positions per call")
    ap.add_argument("--max-rows", type=int, default=256, help="azserve: client.max_rows")
    ap.add_argument("--input-name", default="obs", help="triton: input tensor name")
    ap.add_argument("--legal", type=int, default=0, help="azserve: legal actions per sparse call")
    ap.add_argument("--num-actions", type=int, default=0, help="azserve: the game's actions")
    ap.add_argument("--go-timeout", type=float, default=300.0)
    args = ap.parse_args(argv)
    import uvloop

    uvloop.run(_worker(args))


if __name__ == "__main__":
    main()
