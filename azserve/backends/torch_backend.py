"""In-process torch backend: CPU or CUDA, several weight versions resident at once.

Compute runs on one dedicated thread (torch releases the GIL), so the server's event loop keeps
receiving while a batch computes; weight loads run on a second thread and publish atomically.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import torch

from azserve.backends.base import Backend, BackendConfig
from azserve.errors import VersionUnavailable
from azserve.model.device import DTYPES, resolve_device
from azserve.model.network import build_net, param_bytes
from azserve.model.spec import NetConfig
from azserve.model.weights import bytes_to_state_dict, load_strict


class _Runner:
    """One version's compiled callable plus its bucket-padded input handling."""

    def __init__(self, module: torch.nn.Module, fn: Any, nbytes: int) -> None:
        self.module = module
        self.fn = fn
        self.nbytes = nbytes


class TorchBackend(Backend):
    """``infer(version, obs uint8 [B,C,H,W]) -> (logits [B,A] f32, value [B] f32)`` with torch."""

    def __init__(self, net: NetConfig, cfg: BackendConfig) -> None:
        self.net_cfg = net
        self.cfg = cfg
        self.device = resolve_device(cfg.device, "backend.device")
        self.dtype = DTYPES[cfg.dtype]
        self.max_inflight = 1  # one compute thread; the next batch forms while this one runs
        self._runners: dict[int, _Runner] = {}
        self._compute: ThreadPoolExecutor | None = None
        self._loader: ThreadPoolExecutor | None = None
        self._buckets = tuple(sorted(cfg.batch_buckets))

    async def start(self) -> None:
        if self._compute is not None:
            raise RuntimeError("TorchBackend already started")
        if self.device.type == "cpu" and self.cfg.threads > 0:
            torch.set_num_threads(self.cfg.threads)
        self._compute = ThreadPoolExecutor(1, thread_name_prefix="azserve-compute")
        self._loader = ThreadPoolExecutor(1, thread_name_prefix="azserve-loader")

    # --- loading -----------------------------------------------------------------------------

    async def load(self, version: int, blob: bytes) -> None:
        assert self._loader is not None, "start() first"
        loop = asyncio.get_running_loop()
        runner = await loop.run_in_executor(self._loader, self._build, blob)
        self._runners[version] = runner  # atomic publish: the next batch for `version` sees it

    def _build(self, blob: bytes) -> _Runner:
        return self._build_from_state(bytes_to_state_dict(blob))

    def _build_from_state(self, state: dict[str, torch.Tensor]) -> _Runner:
        module = build_net(self.net_cfg, seed=None)
        load_strict(module, state)
        module = module.to(self.device).eval()
        if self.dtype != torch.float32:
            module = module.to(self.dtype)
        if self.cfg.channels_last:
            module = module.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
        fn = self._compile(module)
        runner = _Runner(module, fn, param_bytes(module))
        # Warm up every bucket (or one small batch) off the hot path, so the first real batch
        # on this version pays no compile or allocation cost.
        with torch.inference_mode():
            for b in self._buckets or (1,):
                self._forward(runner, np.zeros((b, *self.net_cfg.obs_shape), np.uint8))
        return runner

    def _compile(self, module: torch.nn.Module) -> Any:
        kind = self.cfg.compile
        if kind == "none":
            return module
        example = torch.zeros((1, *self.net_cfg.obs_shape), dtype=self.dtype, device=self.device)
        if kind == "jit":
            with torch.inference_mode(False), torch.no_grad():
                traced = torch.jit.trace(module, example)
                return torch.jit.optimize_for_inference(torch.jit.freeze(traced))
        mode = "reduce-overhead" if self.cfg.cuda_graphs and self.device.type == "cuda" else None
        return torch.compile(module, mode=mode, dynamic=False)

    async def unload(self, version: int) -> None:
        self._runners.pop(version, None)

    def version_bytes(self, version: int) -> int:
        r = self._runners.get(version)
        return r.nbytes if r else 0

    def versions(self) -> list[int]:
        return sorted(self._runners)

    # --- compute -----------------------------------------------------------------------------

    async def infer(self, version: int, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        assert self._compute is not None, "start() first"
        runner = self._runners.get(version)
        if runner is None:
            raise VersionUnavailable("VersionUnavailable", f"version {version} is not loaded")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._compute, self._infer_sync, runner, obs)

    def _infer_sync(self, runner: _Runner, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        with torch.inference_mode():
            return self._forward(runner, obs)

    def _forward(self, runner: _Runner, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        n = obs.shape[0]
        size = self._bucket(n)
        if size != n:
            padded = np.zeros((size, *obs.shape[1:]), obs.dtype)
            padded[:n] = obs
            obs = padded
        x = torch.from_numpy(np.ascontiguousarray(obs)).to(self.device, non_blocking=True)
        x = x.to(self.dtype)  # uint8 planes become floats on the device
        if self.cfg.channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        logits, value = runner.fn(x)
        logits = logits[:n].float().cpu().numpy()
        value = value[:n].float().cpu().numpy()
        return logits, value

    def _bucket(self, n: int) -> int:
        for b in self._buckets:
            if b >= n:
                return b
        return n

    async def aclose(self) -> None:
        for pool in (self._compute, self._loader):
            if pool is not None:
                pool.shutdown(wait=True, cancel_futures=True)
        self._compute = self._loader = None
        self._runners.clear()
