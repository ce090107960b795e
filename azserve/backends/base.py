"""The contract between the inference server and a compute backend (torch, Triton)."""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from azserve.errors import ConfigError


@dataclass(frozen=True)
class TorchConfig:
    """How the in-process torch backend (``backend.kind = "torch"``) runs the net."""

    compile: Literal["auto", "none", "jit", "inductor"] = "auto"
    """Execution path. ``none`` = eager; ``jit`` = frozen TorchScript, traced per version;
    ``inductor`` = torch.compile of the BatchNorm-folded net, one graph per batch bucket compiled
    before serving and shared by every version; ``auto`` = inductor (the fastest path measured on an
    AVX2 CPU, and bf16 inductor where the CPU has bf16: docs/benchmarks.md). Tiny nets gain
    nothing from compiling (its start-up cost is seconds): use ``none`` for them."""
    batch_buckets: tuple[int, ...] = ()
    """Pad batches up to these sizes; a batch above the largest runs in chunks of it, so a
    compiled path never meets a new shape. Empty: exact sizes, or for ``inductor``
    1, 8, 16, 32, 64, 128, 256."""
    channels_last: bool = False
    """Use the channels_last memory format."""
    cuda_graphs: bool = True
    """On CUDA with ``inductor``: one CUDA graph per batch bucket (``reduce-overhead``)."""
    auto_threads: bool = False
    """On CPU: follow the idle cores of the machine: every ``threads_interval_s`` the compute
    thread steps up when the idle cores cover the next count and down when none is idle, among
    1, 2, 4, ... and ``max_threads``, starting from ``backend.threads`` (a compiled path compiles
    each count's graphs before serving)."""
    max_threads: int = 0
    """On CPU with ``auto_threads``: most intra-op threads (0 = the machine's cores)."""
    threads_interval_s: float = 5.0
    """On CPU with ``auto_threads``: seconds between two looks at the idle cores."""

    def __post_init__(self) -> None:
        bad = [b for b in self.batch_buckets if b < 1]
        if bad:
            raise ConfigError(
                f"backend.torch.batch_buckets={list(self.batch_buckets)}: every bucket must be "
                f">= 1 (got {bad[0]})"
            )


@dataclass(frozen=True)
class TritonConfig:
    """The Triton server a ``backend.kind = "triton"`` server forwards its batches to, and the
    model repository azserve writes for it (docs/triton.md)."""

    url: str = "127.0.0.1:8001"
    """gRPC address of the Triton server."""
    repository: str = ""
    """Model repository directory azserve writes (must be Triton's --model-repository)."""
    model_form: Literal["python", "pytorch"] = "python"
    """``python`` backend model.py (CPU tests) or TorchScript for ``pytorch_libtorch``."""
    model_name: str = "azserve"
    """Model name inside the repository."""
    max_inflight: int = 4
    """Batches in flight to Triton at once."""
    keep_versions: int = 8
    """``version_policy { latest { num_versions } }`` in config.pbtxt (at least
    ``server.max_versions``)."""
    instance_count: int = 1
    """Model instances (``instance_group.count``)."""
    dynamic_batching: bool = False
    """Let Triton batch again (adds its delay to azserve's; see docs/triton.md)."""
    request_timeout_s: float = 30.0
    """Timeout of one inference call."""


@dataclass(frozen=True)
class BackendConfig:
    """Where and how the network runs: the keys every backend reads; what only one backend
    reads is in its own table, ``[backend.torch]`` or ``[backend.triton]``."""

    kind: Literal["torch", "triton", "synthetic"] = "torch"
    """Backend: ``torch`` in-process (the embedded default), a ``triton`` server, or
    ``synthetic``: priors and values hashed from the positions' bytes, no network, no compute
    (a stand-in for an accelerator of unlimited speed, to load the actor side on a CPU)."""
    device: str = "auto"
    """``cpu``, ``cuda``, ``cuda:N`` or ``auto`` (torch: CUDA when available; triton: the
    ``instance_group`` kind, ``auto`` = Triton's choice)."""
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    """Compute dtype. torch: ``auto`` is bfloat16 where the device has it natively (a CPU with
    AVX512-BF16 or AMX, a CUDA device with bf16), else float32 (emulated bf16 on an AVX2 CPU is
    several times slower than fp32); on CPU, reduced precision needs ``backend.torch.compile`` !=
    ``none``. triton: ``auto`` is float32."""
    threads: int = 1
    """On CPU: intra-op threads for inference (0 = torch's default); with
    ``backend.torch.auto_threads``, the count it starts with; triton's ``python`` model: its torch
    threads."""
    torch: TorchConfig = field(default_factory=TorchConfig)
    """``[backend.torch]``: read only when ``kind = "torch"``."""
    triton: TritonConfig = field(default_factory=TritonConfig)
    """``[backend.triton]``: read only when ``kind = "triton"``."""

    @property
    def fixed_dtype(self) -> str:
        """``dtype`` for a model that cannot look at its device (Triton's): ``auto`` is
        float32 there."""
        return "float32" if self.dtype == "auto" else self.dtype


FLAT_KEYS: dict[str, str] = {
    "backend.compile": "backend.torch.compile",
    "backend.batch_buckets": "backend.torch.batch_buckets",
    "backend.channels_last": "backend.torch.channels_last",
    "backend.cuda_graphs": "backend.torch.cuda_graphs",
    "backend.auto_threads": "backend.torch.auto_threads",
    "backend.max_threads": "backend.torch.max_threads",
    "backend.threads_interval_s": "backend.torch.threads_interval_s",
    "backend.url": "backend.triton.url",
    "backend.repository": "backend.triton.repository",
    "backend.model_form": "backend.triton.model_form",
    "backend.triton_model_name": "backend.triton.model_name",
    "backend.max_inflight": "backend.triton.max_inflight",
    "backend.keep_versions": "backend.triton.keep_versions",
    "backend.instance_count": "backend.triton.instance_count",
    "backend.triton_dynamic_batching": "backend.triton.dynamic_batching",
    "backend.request_timeout_s": "backend.triton.request_timeout_s",
}
"""The keys ``[backend]`` held before it had a table per backend (old key -> its place now):
configs, ``--set`` overrides and checkpoints that use them still load (``config.load``)."""


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
