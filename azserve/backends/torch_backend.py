"""In-process torch backend: CPU or CUDA, several weight versions resident at once.

Compute runs on one dedicated thread (torch releases the GIL), so the server's event loop keeps
receiving while a batch computes; weight loads run on a second thread and publish atomically.
How a version runs (eager, TorchScript, inductor; dtype; buckets) is resolved once at start
(``azserve.backends.torch_program``). Every compile happens while the first version loads,
before the server binds; later versions reuse the compiled graphs (inductor) or are traced on
the loader thread (jit), so a weight swap never stalls serving.

On CUDA, a batch is staged (copied into a pinned host buffer, then to the device on a copy
stream) on a staging thread while the previous batch computes: two batches are in flight.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from azserve.backends.base import Backend, BackendConfig
from azserve.backends.threads import IdleCores, machine_cores, next_threads, thread_steps
from azserve.backends.torch_program import Plan, Weights, chunks, make_program, resolve_plan
from azserve.errors import VersionUnavailable, WeightsError
from azserve.model.device import resolve_device
from azserve.model.spec import NetConfig
from azserve.model.weights import bytes_to_state_dict

log = logging.getLogger("azserve.backends.torch")


@dataclass
class _Runner:
    """One version's prepared weights and the bytes they hold."""

    weights: Weights
    nbytes: int


@dataclass
class _Staged:
    """A batch on the device, ready to run: pieces ``(x, rows)`` and the event that says the
    copy is done (CUDA)."""

    pieces: list[tuple[torch.Tensor, int]]
    hosts: list[tuple[int, torch.Tensor]]
    """(pool key, host buffer) to give back once the batch is done."""
    ready: Any = None


class TorchBackend(Backend):
    """``infer(version, obs uint8 [B,C,H,W]) -> (logits [B,A] f32, value [B] f32)`` with torch."""

    def __init__(self, net: NetConfig, cfg: BackendConfig) -> None:
        self.net_cfg = net
        self.cfg = cfg
        self.device = resolve_device(cfg.device, "backend.device")
        self.plan: Plan = resolve_plan(cfg, self.device)
        self.dtype = self.plan.dtype
        self.cuda = self.device.type == "cuda"
        # CPU: one batch at a time (the next forms while it runs). CUDA: two, so that one
        # batch's host-to-device copy overlaps the other's compute.
        self.max_inflight = 2 if self.cuda else 1
        self._program = make_program(net, self.plan, self.device)
        self._warm = False
        self.bucket_ms: list[float] = []
        """Milliseconds a batch of each of ``plan.buckets`` takes, timed after the warm-up
        (empty without buckets): what a row costs at each batch size, in the status reply, where
        ``azserve train``'s autopilot finds the server's best batch."""
        self._runners: dict[int, _Runner] = {}
        self._compute: ThreadPoolExecutor | None = None
        self._loader: ThreadPoolExecutor | None = None
        self._stager: ThreadPoolExecutor | None = None
        self._host: dict[int, list[torch.Tensor]] = {}  # bucket -> free (pinned) host buffers
        self._copy_stream = torch.cuda.Stream(self.device) if self.cuda else None
        self.threads = cfg.threads
        # Thread counts matter on the CPU only (on CUDA torch's threads run no inference).
        self._follow = cfg.torch.auto_threads and self.device.type == "cpu"
        self._steps = thread_steps(cfg.torch.max_threads or machine_cores()) if self._follow else ()
        self._idle: IdleCores | None = None
        self._next_look = 0.0

    async def start(self) -> None:
        if self._compute is not None:
            raise RuntimeError("TorchBackend already started")
        if self._follow:
            self.threads = max(n for n in self._steps if n <= max(1, self.threads))
            self._idle = IdleCores()
            self._next_look = time.monotonic() + self.cfg.torch.threads_interval_s
        # torch's thread count is per OS thread (OpenMP): set it in the compute thread itself.
        self._compute = ThreadPoolExecutor(
            1, thread_name_prefix="azserve-compute", initializer=self._set_threads
        )
        self._loader = ThreadPoolExecutor(
            1, thread_name_prefix="azserve-loader", initializer=self._set_threads
        )
        if self.cuda:
            self._stager = ThreadPoolExecutor(1, thread_name_prefix="azserve-stage")
        log.info("torch backend: %s on %s", self.plan.describe(), self.device)

    def _set_threads(self) -> None:
        if self.device.type == "cpu" and self.threads > 0:
            torch.set_num_threads(self.threads)

    def status(self) -> dict[str, Any]:
        """The resolved plan and the current thread count."""
        return {**self.plan.describe(), "threads": self.threads, "bucket_ms": self.bucket_ms}

    # --- loading -----------------------------------------------------------------------------

    async def load(self, version: int, blob: bytes) -> None:
        assert self._loader is not None and self._compute is not None, "start() first"
        loop = asyncio.get_running_loop()
        runner = await loop.run_in_executor(self._loader, self._build, blob)
        # The first version compiles every bucket (nothing is served yet); later ones run one
        # small batch. On CUDA both run on the compute thread, as CUDA graphs belong to the
        # thread that records them (a check there is one small batch: no stall). A warm
        # inductor graph's check runs there too: dynamo's guards are not safe to evaluate from
        # two threads at once (pytorch#123177; a Go run met a spurious "recompile" under
        # fail_on_recompile when a check on the loader met a batch), so once serving, one
        # thread calls the compiled graph.
        on_compute = self.cuda or (self._warm and self.plan.compile == "inductor")
        pool = self._compute if on_compute else self._loader
        await loop.run_in_executor(pool, self._check if self._warm else self._warm_up, runner)
        self._runners[version] = runner  # atomic publish: the next batch for `version` sees it

    def _build(self, blob: bytes) -> _Runner:
        return self._build_from_state(bytes_to_state_dict(blob))

    def _build_from_state(self, state: dict[str, torch.Tensor]) -> _Runner:
        weights = self._program.prepare(state)
        itemsize = torch.empty(0, dtype=self.dtype).element_size()
        return _Runner(weights, sum(t.numel() for t in state.values()) * itemsize)

    def _check(self, runner: _Runner) -> None:
        """One small batch: the weights run, and on a compiled graph without a recompile
        (that raises under the graph's ``fail_on_recompile`` stance)."""
        size = self.plan.buckets[0] if self.plan.buckets else 1
        try:
            with torch.inference_mode():
                self._forward(
                    runner, self._stage(np.zeros((size, *self.net_cfg.obs_shape), np.uint8))
                )
        except RuntimeError as exc:
            raise WeightsError(f"weights do not run on the compiled graph: {exc}") from exc

    def _warm_up(self, runner: _Runner) -> None:
        """Run every bucket (or one small batch) once, three times for CUDA graphs (inductor's
        graph trees run eagerly once, record, then replay), so the first real batch pays no
        compile, capture or allocation."""
        t0 = time.monotonic()
        # A compiled graph holds the thread count it was made with: one set per count that
        # following the idle cores may switch to, all made here, before serving.
        counts = self._steps if self.plan.compile == "inductor" and self._steps else (0,)
        self._program.expect_graphs(len(self.plan.buckets or (1,)) * len(counts))
        with torch.inference_mode():
            for n in counts:
                if n:
                    torch.set_num_threads(n)
                for b in self.plan.buckets or (1,):
                    for _ in range(3 if self.plan.cuda_graphs else 1):
                        self._forward(
                            runner, self._stage(np.zeros((b, *self.net_cfg.obs_shape), np.uint8))
                        )
        self._set_threads()  # this (loader) thread back to its own count
        if self.cuda:
            torch.cuda.synchronize(self.device)
        self.bucket_ms = self._time_buckets(runner)
        self._program.warmed()
        self._warm = True
        log.info(
            "torch backend warm: %d bucket(s)%s in %.1f s",
            len(self.plan.buckets) or 1,
            f" x threads {list(counts)}" if counts != (0,) else "",
            time.monotonic() - t0,
        )

    def _time_buckets(self, runner: _Runner) -> list[float]:
        """The best of three timings of a batch of each bucket, in ms (the graphs are warm:
        a few batches, well under a second for the shipped nets on a CPU)."""
        out = []
        with torch.inference_mode():
            for b in self.plan.buckets:
                obs = np.zeros((b, *self.net_cfg.obs_shape), np.uint8)
                best = float("inf")
                for _ in range(3):
                    t = time.perf_counter()
                    self._forward(runner, self._stage(obs))  # its .cpu() waits for the device
                    best = min(best, time.perf_counter() - t)
                out.append(round(best * 1e3, 3))
        return out

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
        if self._stager is None:
            return await loop.run_in_executor(self._compute, self._infer_sync, runner, obs)
        staged = await loop.run_in_executor(self._stager, self._stage, obs)
        return await loop.run_in_executor(self._compute, self._infer_staged, runner, staged)

    def _infer_sync(self, runner: _Runner, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if self._idle is not None and time.monotonic() >= self._next_look:
            self._follow_idle_cores()
        with torch.inference_mode():
            return self._forward(runner, self._stage(obs))

    def _infer_staged(self, runner: _Runner, staged: _Staged) -> tuple[np.ndarray, np.ndarray]:
        with torch.inference_mode():
            return self._forward(runner, staged)

    def _follow_idle_cores(self) -> None:
        assert self._idle is not None
        self._next_look = time.monotonic() + self.cfg.torch.threads_interval_s
        idle = self._idle.sample()
        if idle is None:
            return
        threads = next_threads(self.threads, idle, self._steps)
        if threads != self.threads:
            # DEBUG: a server swings between counts as the learner starts and stops, and the
            # count in force is on every status line (``threads N``).
            log.debug("compute threads %d -> %d (%.2f cores idle)", self.threads, threads, idle)
            self.threads = threads
            torch.set_num_threads(threads)

    def _stage(self, obs: np.ndarray) -> _Staged:
        """obs ``[n, C, H, W]`` as device tensors in the plan's dtype and layout, one piece
        per bucket-sized chunk (padded rows are zeros-or-stale and sliced off after)."""
        pieces, hosts = [], []
        stream = self._copy_stream
        on_stream = torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext()
        with torch.inference_mode(), on_stream:
            for start, stop, size in chunks(self.plan.buckets, obs.shape[0]):
                key = _key(size, obs.dtype)
                host = self._host_buffer(key, size, obs.dtype)
                host[: stop - start].copy_(torch.from_numpy(np.ascontiguousarray(obs[start:stop])))
                x = host.to(self.device, non_blocking=True).to(self.dtype)
                if self.plan.channels_last:
                    x = x.contiguous(memory_format=torch.channels_last)
                pieces.append((x, stop - start))
                hosts.append((key, host))
        ready = None
        if stream is not None:
            ready = torch.cuda.Event()
            ready.record(stream)
        return _Staged(pieces, hosts, ready)

    def _host_buffer(self, key: int, size: int, dtype: np.dtype[Any]) -> torch.Tensor:
        free = self._host.get(key)
        if free:
            return free.pop()  # list.pop/append are atomic: threads never share a buffer
        return torch.empty(
            (size, *self.net_cfg.obs_shape),
            dtype=torch.from_numpy(np.zeros(0, dtype)).dtype,
            pin_memory=self.cuda,
        )

    def _forward(self, runner: _Runner, staged: _Staged) -> tuple[np.ndarray, np.ndarray]:
        if staged.ready is not None:
            compute = torch.cuda.current_stream(self.device)
            compute.wait_event(staged.ready)
            for x, _ in staged.pieces:  # made on the copy stream, read on this one
                x.record_stream(compute)
        logits_parts, value_parts = [], []
        for x, n in staged.pieces:
            logits, value = self._program(runner.weights, x)
            logits_parts.append(logits[:n].float().cpu().numpy())
            value_parts.append(value[:n].float().cpu().numpy())
        for key, host in staged.hosts:  # .cpu() waited for the batch: its buffers are free
            self._host.setdefault(key, []).append(host)
        if len(logits_parts) == 1:
            return logits_parts[0], value_parts[0]
        return np.concatenate(logits_parts), np.concatenate(value_parts)

    async def aclose(self) -> None:
        for pool in (self._compute, self._loader, self._stager):
            if pool is not None:
                pool.shutdown(wait=True, cancel_futures=True)
        self._compute = self._loader = self._stager = None
        self._runners.clear()


def _key(size: int, dtype: np.dtype[Any]) -> int:
    return size * 64 + dtype.itemsize  # uint8 and float32 inputs keep separate buffers
