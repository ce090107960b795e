"""The contract between the inference server and a compute backend (torch, Triton)."""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from azserve.errors import ConfigError


@dataclass(frozen=True)
class BackendConfig:
    """Where and how the network runs."""

    kind: Literal["torch", "triton", "synthetic"] = "torch"
    """Backend: ``torch`` in-process (the embedded default), a ``triton`` server, or
    ``synthetic``: priors and values hashed from the positions' bytes, no network, no compute
    (a stand-in for an accelerator of unlimited speed, to load the actor side on a CPU)."""
    device: str = "auto"
    """torch: ``cpu``, ``cuda``, ``cuda:N`` or ``auto`` (CUDA when available)."""
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    """torch: compute dtype. ``auto``: bfloat16 where the device has it natively (a CPU with
    AVX512-BF16 or AMX, a CUDA device with bf16), else float32 (emulated bf16 on an AVX2 CPU is
    several times slower than fp32). On CPU, reduced precision needs ``compile`` != ``none``."""
    threads: int = 1
    """torch on CPU: intra-op threads for inference (0 = torch's default); with
    ``auto_threads``, the count it starts with."""
    auto_threads: bool = False
    """torch on CPU: follow the idle cores of the machine: every ``threads_interval_s`` the
    compute thread steps up when the idle cores cover the next count and down when none is
    idle, among 1, 2, 4, ... and ``max_threads`` (a compiled path compiles each count's graphs
    before serving)."""
    max_threads: int = 0
    """torch on CPU with ``auto_threads``: most intra-op threads (0 = the machine's cores)."""
    threads_interval_s: float = 5.0
    """torch on CPU with ``auto_threads``: seconds between two looks at the idle cores."""
    compile: Literal["auto", "none", "jit", "inductor"] = "auto"
    """torch: execution path. ``none`` = eager; ``jit`` = frozen TorchScript, traced per version;
    ``inductor`` = torch.compile of the BatchNorm-folded net, one graph per batch bucket compiled
    before serving and shared by every version; ``auto`` = inductor (the fastest path measured on an
    AVX2 CPU, and bf16 inductor where the CPU has bf16: docs/benchmarks.md). Tiny nets gain
    nothing from compiling (its start-up cost is seconds): use ``none`` for them."""
    channels_last: bool = False
    """torch: use the channels_last memory format."""
    batch_buckets: tuple[int, ...] = ()
    """torch: pad batches up to these sizes; a batch above the largest runs in chunks of it, so
    a compiled path never meets a new shape. Empty: exact sizes, or for ``inductor``
    1, 8, 16, 32, 64, 128, 256."""
    cuda_graphs: bool = True
    """torch on CUDA with ``inductor``: one CUDA graph per batch bucket (``reduce-overhead``)."""
    url: str = "127.0.0.1:8001"
    """triton: gRPC address of the Triton server."""
    repository: str = ""
    """triton: model repository directory azserve writes (must be Triton's --model-repository)."""
    model_form: Literal["python", "pytorch"] = "python"
    """triton: ``python`` backend model.py (CPU tests) or TorchScript for ``pytorch_libtorch``."""
    triton_model_name: str = "azserve"
    """triton: model name inside the repository."""
    max_inflight: int = 4
    """triton: batches in flight to Triton at once."""
    keep_versions: int = 8
    """triton: ``version_policy { latest { num_versions } }`` in config.pbtxt."""
    instance_count: int = 1
    """triton: model instances (``instance_group.count``)."""
    triton_dynamic_batching: bool = False
    """triton: let Triton batch again (adds its delay to azserve's; see docs/triton.md)."""
    request_timeout_s: float = 30.0
    """triton: timeout of one inference call."""

    @property
    def fixed_dtype(self) -> str:
        """``dtype`` for a model that cannot look at its device (Triton's): ``auto`` is
        float32 there."""
        return "float32" if self.dtype == "auto" else self.dtype

    def __post_init__(self) -> None:
        bad = [b for b in self.batch_buckets if b < 1]
        if bad:
            raise ConfigError(
                f"backend.batch_buckets={list(self.batch_buckets)}: every bucket must be >= 1 "
                f"(got {bad[0]})"
            )


class Backend(abc.ABC):
    """Runs batches of positions for resident weight versions.

    All methods are coroutines; the server calls ``infer`` for at most ``max_inflight`` batches
    at once and never mixes versions in one batch.
    """

    max_inflight: int = 1
    """Batches the server may have in flight at once."""

    @abc.abstractmethod
    async def start(self) -> None:
        """Acquire resources (threads, connections)."""

    @abc.abstractmethod
    async def load(self, version: int, blob: bytes) -> None:
        """Make ``version`` (safetensors bytes) servable: build, load, warm up. Raises
        ``WeightsError`` for bad weights. Must not pause serving of other versions."""

    @abc.abstractmethod
    async def unload(self, version: int) -> None:
        """Release ``version``."""

    @abc.abstractmethod
    async def infer(self, version: int, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """obs ``[B, C, H, W]`` uint8 (or float32) -> (logits ``[B, A]`` float32, value ``[B]``
        float32). A version that is not loaded raises ``VersionUnavailable``."""

    @abc.abstractmethod
    def version_bytes(self, version: int) -> int:
        """Memory held by ``version`` (for the server's memory budget)."""

    def status(self) -> dict[str, Any]:
        """What the backend runs (execution path, threads) for the server's status reply."""
        return {}

    @abc.abstractmethod
    async def aclose(self) -> None:
        """Release everything; pending calls fail."""
