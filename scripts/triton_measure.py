"""Measure the Triton backend on a local CPU tritonserver: load time, single-row and 256-row rates."""

import argparse
import asyncio
import json
import tempfile
import time

import numpy as np

from azserve.backends.base import BackendConfig, TritonConfig
from azserve.backends.triton import TritonBackend
from azserve.backends.triton_launch import start_triton
from azserve.model.network import build_net
from azserve.model.spec import NetConfig
from azserve.model.weights import state_dict_to_bytes


async def rate(
    backend: TritonBackend, net: NetConfig, rows: int, concurrency: int, seconds: float
) -> dict:
    obs = np.random.default_rng(0).integers(0, 2, (rows, *net.obs_shape), dtype=np.uint8)
    done = 0
    stop = time.perf_counter() + seconds

    async def worker() -> None:
        nonlocal done
        while time.perf_counter() < stop:
            await backend.infer(1, obs)
            done += 1

    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    el = time.perf_counter() - t0
    return {
        "rows": rows,
        "in_flight": concurrency,
        "requests_per_s": round(done / el),
        "rows_per_s": round(done * rows / el),
    }


async def main(a: argparse.Namespace) -> None:
    net = NetConfig(blocks=a.blocks, channels=a.channels)
    server = start_triton(tempfile.mkdtemp(prefix="azmeasure-") + "/repo")
    cfg = BackendConfig(
        kind="triton",
        device="cpu",
        threads=a.threads,
        triton=TritonConfig(
            url=server.grpc_url,
            repository=str(server.repo_dir),
            instance_count=a.instances,
            dynamic_batching=a.dynamic,
        ),
    )
    backend = TritonBackend(net, cfg)
    try:
        await backend.start()
        out: dict = {
            "net": f"{a.blocks}x{a.channels}",
            "threads": a.threads,
            "instances": a.instances,
            "dynamic_batching": a.dynamic,
        }
        for v in (1, 2):
            t0 = time.perf_counter()
            await backend.load(v, state_dict_to_bytes(build_net(net, seed=v).state_dict()))
            out[f"load_s_with_{v}_versions"] = round(time.perf_counter() - t0, 2)
        await rate(backend, net, 1, 4, 1.0)  # warm-up
        out["single_row"] = await rate(backend, net, 1, a.inflight_single, a.seconds)
        out["batch_256"] = await rate(backend, net, 256, a.inflight_batch, a.seconds)
        print(json.dumps(out))
    finally:
        await backend.aclose()
        server.close()


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--blocks", type=int, default=5)
    ap.add_argument("--channels", type=int, default=64)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--instances", type=int, default=1)
    ap.add_argument("--dynamic", action="store_true")
    ap.add_argument("--inflight-single", type=int, default=16)
    ap.add_argument("--inflight-batch", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=5.0)
    asyncio.run(main(ap.parse_args()))
