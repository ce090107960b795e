"""The contract between the inference server and a compute backend (torch, Triton)."""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import Literal

import numpy as np


@dataclass(frozen=True)
class BackendConfig:
    """Where and how the network runs."""

    kind: Literal["torch", "triton", "synthetic"] = "torch"
    """Backend: ``torch`` in-process (the embedded default), a ``triton`` server, or
    ``synthetic``: priors and values hashed from the positions' bytes, no network, no compute
    (a stand-in for an accelerator of unlimited speed, to load the actor side on a CPU)."""
    device: str = "auto"
    """torch: ``cpu``, ``cuda``, ``cuda:N`` or ``auto`` (CUDA when available)."""
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    """torch: compute dtype. Reduced precision pays on GPU; on CPU bf16 needs ``compile``."""
    threads: int = 1
    """torch on CPU: intra-op threads for inference (0 = torch's default)."""
    compile: Literal["none", "jit", "inductor"] = "none"
    """torch: ``jit`` = frozen TorchScript; ``inductor`` = torch.compile (compiles per shape)."""
    channels_last: bool = False
    """torch: use the channels_last memory format."""
    batch_buckets: tuple[int, ...] = ()
    """torch: pad batches up to these sizes (needed for CUDA graphs / compile); empty = exact."""
    cuda_graphs: bool = False
    """torch on CUDA: capture one CUDA graph per batch bucket."""
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

    @abc.abstractmethod
    async def aclose(self) -> None:
        """Release everything; pending calls fail."""
