"""Peers measured beside azserve in one ``bench serve`` run: same net, same machine, same callers.

- ``naive``: the backend called with one position per forward pass, serially: no batching.
- ``ray_serve``: a Ray Serve deployment with ``@serve.batch`` (the same ``max_batch_size`` and
  wait as the azserve server), driven by as many concurrent callers as azserve was.
- ``triton_single``: a real Triton server (python backend, the same torch net, Triton's own
  dynamic batching with the same size and delay) fed one position per gRPC request.
- ``triton_batched``: the same server fed pre-batched ``max_batch_size``-row requests.
- ``azserve_triton``: the azserve server forwarding its batches to that Triton (backend.kind =
  triton), under the same load as azserve with the torch backend.

Each reports ``positions_per_s`` and ``latency_ms`` {p50, p90, p99}, or ``{"skipped": reason}``
when its packages are missing or it fails. Ray runs in its own process (``python -m
azserve.perf.peers ray_serve ...``) with a hard time limit, and is shut down fully.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

from azserve.config.schema import Config, replace
from azserve.perf.common import (
    ServerChild,
    load_cfg,
    overrides_args,
    percentiles,
    python_argv,
    run_json_child,
)
from azserve.perf.load import Samples, drive, positions, run_load, worker_argv

PEERS = ("naive", "ray_serve", "triton_single", "triton_batched", "azserve_triton")


def summarize(samples: Samples, rows_per_call: int, seconds: float) -> dict[str, Any]:
    """positions/s and per-call latency of a load window."""
    out: dict[str, Any] = {
        "positions_per_s": round(len(samples.t_done) * rows_per_call / seconds, 1),
        "requests_per_s": round(len(samples.t_done) / seconds, 1),
        "latency_ms": percentiles(samples.latency_ms()),
    }
    if samples.errors:
        out["errors"] = samples.errors
        out["last_error"] = samples.last_error
    return out


def run_peers(
    names: list[str],
    config: str,
    overrides: list[str],
    processes: int,
    coroutines: int,
    duration: float,
    warmup: float,
    workdir: Path,
    batch1: dict[str, Any],
) -> dict[str, Any]:
    """Run each named peer in turn; unknown names are reported, never fatal. ``batch1`` is the
    model's own measurement at batch size 1, which is the ``naive`` peer."""
    cfg = load_cfg(config, overrides)
    out: dict[str, Any] = {}
    triton = [n for n in names if n.startswith("triton") or n == "azserve_triton"]
    for name in names:
        if name == "naive":
            out[name] = batch1
        elif name == "ray_serve":
            out[name] = _ray_in_child(
                config, overrides, processes * coroutines, duration, warmup, workdir, cfg
            )
        elif name not in PEERS:
            out[name] = {"skipped": f"unknown peer (known: {', '.join(PEERS)})"}
    if triton:
        out.update(
            _triton_peers(
                triton, config, overrides, processes, coroutines, duration, warmup, workdir, cfg
            )
        )
    return {n: out[n] for n in names}


# --- Ray Serve -------------------------------------------------------------------------------


def _ray_in_child(
    config: str,
    overrides: list[str],
    callers: int,
    duration: float,
    warmup: float,
    workdir: Path,
    cfg: Config,
) -> dict[str, Any]:
    if importlib.util.find_spec("ray") is None:
        return {"skipped": "ray is not installed (pip install 'azserve[bench]')"}
    out = workdir / "ray.json"
    argv = python_argv(
        "azserve.perf.peers",
        "ray_serve",
        "--config",
        config,
        *overrides_args(overrides),
        "--callers",
        str(callers),
        "--duration",
        str(duration),
        "--warmup",
        str(warmup),
        "--json",
        str(out),
    )
    # Ray's start-up (GCS, raylet, controller, replica) takes tens of seconds on 2 cores.
    return run_json_child(
        argv, out, 240 + warmup + 2 * duration, cfg.backend.threads, workdir / "ray.log"
    )


async def _ray_serve(cfg: Config, callers: int, duration: float, warmup: float) -> dict[str, Any]:
    import ray
    from ray import serve

    from azserve.model.device import resolve_device, resolve_dtype

    net, bcfg = cfg.net, cfg.backend
    on_gpu = resolve_device(bcfg.device).type == "cuda"

    @serve.deployment(
        max_ongoing_requests=callers + 8,
        ray_actor_options={"num_cpus": 1, "num_gpus": 1 if on_gpu else 0},
    )
    class Model:
        """The same net, device and dtype as the azserve backend, batched by ``@serve.batch``."""

        def __init__(self) -> None:
            import torch

            from azserve.model.network import build_net

            if bcfg.threads > 0:
                torch.set_num_threads(bcfg.threads)
            self.torch = torch
            self.device = resolve_device(bcfg.device)
            self.dtype = resolve_dtype(bcfg.dtype, self.device)
            self.net = build_net(net, seed=0).eval().to(self.device, self.dtype)

        @serve.batch(
            max_batch_size=cfg.server.max_batch_size,
            batch_wait_timeout_s=cfg.server.max_queue_delay_us / 1e6,
        )
        async def __call__(self, obs: list[np.ndarray]) -> list[tuple[np.ndarray, float]]:
            torch = self.torch
            with torch.inference_mode():
                x = torch.from_numpy(np.stack(obs)).to(self.device).to(self.dtype)
                logits, value = self.net(x)
                logits, value = logits.float().cpu().numpy(), value.float().cpu().numpy()
            return list(zip(logits, value.tolist()))

    ray.init(
        num_cpus=os.cpu_count(),
        include_dashboard=False,
        log_to_driver=False,
        object_store_memory=256 << 20,
    )
    try:
        serve.start(proxy_location="Disabled")
        # serve.deployment turns the class into a Deployment, which mypy cannot see.
        handle = serve.run(Model.bind(), name="azserve-bench", route_prefix=None)  # type: ignore[attr-defined]
        pool = positions(4096, net.obs_shape, seed=0)
        await handle.remote(pool[0])  # the replica is up and has run once
        t_measure = time.monotonic() + warmup
        samples = await drive(handle.remote, pool, callers, 1, t_measure, t_measure + duration)
        return {**summarize(samples, 1, duration), "callers": callers}
    finally:
        serve.shutdown()
        ray.shutdown()


# --- Triton ----------------------------------------------------------------------------------


def _triton_peers(
    names: list[str],
    config: str,
    overrides: list[str],
    processes: int,
    coroutines: int,
    duration: float,
    warmup: float,
    workdir: Path,
    cfg: Config,
) -> dict[str, Any]:
    try:
        from azserve.backends.triton_launch import TritonStartError, start_triton
    except ImportError as exc:
        return {n: {"skipped": f"Triton support is not importable: {exc}"} for n in names}
    try:
        triton = start_triton(workdir / "triton-repo", workdir=workdir / "triton")
    except TritonStartError as exc:
        reason = str(exc).splitlines()[0]
        return {n: {"skipped": f"tritonserver unavailable: {reason}"} for n in names}
    out: dict[str, Any] = {}
    try:
        model = _load_peer_model(cfg, workdir / "triton-repo", triton.grpc_url)
        mbs = cfg.server.max_batch_size
        for name in names:
            if name == "triton_single":
                out[name] = _triton_load(
                    workdir, triton.grpc_url, model, processes, coroutines, 1, duration, warmup, cfg
                )
            elif name == "triton_batched":
                # Two requests per worker in flight: one computing, one queued behind it.
                out[name] = _triton_load(
                    workdir, triton.grpc_url, model, processes, 2, mbs, duration, warmup, cfg
                )
            else:
                out[name] = _azserve_on_triton(
                    config,
                    overrides,
                    triton.grpc_url,
                    workdir,
                    processes,
                    coroutines,
                    duration,
                    warmup,
                )
    except Exception as exc:  # noqa: BLE001 - a failing peer is reported, the bench goes on
        for n in names:
            out.setdefault(n, {"skipped": f"failed: {type(exc).__name__}: {exc}"})
    finally:
        triton.close()
    return out


def _load_peer_model(cfg: Config, repo: Path, url: str) -> str:
    """Write the torch net as a python-backend model with Triton's dynamic batching at the
    azserve server's size and delay; load it; return its name."""
    import tritonclient.grpc as grpcclient

    from azserve.backends.triton_repo import ModelRepository, config_pbtxt
    from azserve.model.network import build_net
    from azserve.model.weights import state_dict_to_bytes

    bcfg = replace(
        cfg.backend,
        kind="triton",
        triton={
            "model_form": "python",
            "model_name": "peer",
            "dynamic_batching": True,
            "instance_count": 1,
        },
    )
    mbs = cfg.server.max_batch_size
    repository = ModelRepository(repo, cfg.net, bcfg, max_batch_size=mbs)
    repository.prepare()
    repository.write_version(1, state_dict_to_bytes(build_net(cfg.net, seed=0).state_dict()))
    text = config_pbtxt(cfg.net, bcfg, mbs)
    delay = "max_queue_delay_microseconds: 0"
    if delay not in text:
        raise RuntimeError("config_pbtxt no longer writes a zero dynamic-batching delay to replace")
    text = text.replace(delay, f"max_queue_delay_microseconds: {cfg.server.max_queue_delay_us}")
    (repository.model_dir / "config.pbtxt").write_text(text)
    with grpcclient.InferenceServerClient(url) as client:
        client.load_model("peer")
        deadline = time.monotonic() + 120
        while not client.is_model_ready("peer", "1"):
            if time.monotonic() > deadline:
                raise RuntimeError("Triton did not make the peer model ready in 120 s")
            time.sleep(0.1)
    return "peer"


def _triton_load(
    workdir: Path,
    url: str,
    model: str,
    processes: int,
    coroutines: int,
    rows: int,
    duration: float,
    warmup: float,
    cfg: Config,
) -> dict[str, Any]:
    d = workdir / f"triton-load-{rows}"
    argvs = [
        worker_argv(d, i, "triton", url, model, coroutines, cfg.net.obs_shape, rows=rows)
        for i in range(processes)
    ]
    run = run_load(d, argvs, warmup, duration)
    return {**summarize(run.samples, rows, duration), "rows_per_request": rows}


def _azserve_on_triton(
    config: str,
    overrides: list[str],
    url: str,
    workdir: Path,
    processes: int,
    coroutines: int,
    duration: float,
    warmup: float,
) -> dict[str, Any]:
    d = workdir / "azserve-triton"
    d.mkdir(exist_ok=True)
    server = ServerChild(
        config,
        [
            *overrides,
            "backend.kind=triton",
            f"backend.triton.url={url}",
            f"backend.triton.repository={workdir / 'triton-repo'}",
            "backend.triton.model_name=azserve_backend",
        ],
        d,
    )
    server.start()
    try:
        cfg = server.cfg
        argvs = [
            worker_argv(
                d,
                i,
                "azserve",
                server.endpoint,
                cfg.server.model,
                coroutines,
                cfg.net.obs_shape,
                max_rows=cfg.client.max_rows,
            )
            for i in range(processes)
        ]
        run = run_load(d, argvs, warmup, duration)
        return summarize(run.samples, 1, duration)
    finally:
        server.stop()


def main(argv: list[str] | None = None) -> None:
    """Run one peer that needs a process of its own (``ray_serve``) and write its JSON."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("peer", choices=["ray_serve"])
    ap.add_argument("--config", required=True)
    ap.add_argument("--set", dest="overrides", action="append", default=[])
    ap.add_argument("--callers", type=int, default=1024)
    ap.add_argument("--duration", type=float, default=10.0)
    ap.add_argument("--warmup", type=float, default=2.0)
    ap.add_argument("--json", required=True)
    args = ap.parse_args(argv)
    cfg = load_cfg(args.config, args.overrides)
    result = asyncio.run(_ray_serve(cfg, args.callers, args.duration, args.warmup))
    Path(args.json).write_text(json.dumps(result))


if __name__ == "__main__":
    main()
