"""A backend with no network: deterministic pseudo-random priors and values from the positions'
bytes, at almost no cost. It stands in for an accelerator of unlimited speed, so that
``azserve bench selfplay --set backend.kind=synthetic`` measures the actor side at full load on
a CPU-only machine.

Each row's uint8 planes ``x [D]`` (D = C*H*W) are projected by a fixed random integer matrix
``M [D, A+1]`` (seeded, so every server and test sees the same one); the products, folded to 16
bits, give logits in [-2, 2) and a value in [-1, 1). Equal positions always get equal outputs,
different ones differ, and the whole batch is one integer matmul.
"""

from __future__ import annotations

import numpy as np

from azserve.backends.base import Backend, BackendConfig
from azserve.errors import VersionUnavailable
from azserve.model.spec import NetConfig

SEED = 20261201
"""Seed of the projection: fixed, so outputs are reproducible across processes and runs."""


def projection(obs_shape: tuple[int, int, int], num_actions: int) -> np.ndarray:
    """int64 ``[C*H*W, A+1]``: the fixed random matrix the outputs are folded from."""
    size = obs_shape[0] * obs_shape[1] * obs_shape[2]
    return np.random.default_rng(SEED).integers(1, 1 << 20, size=(size, num_actions + 1))


def synthetic_outputs(obs: np.ndarray, matrix: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """obs uint8 ``[B, C, H, W]`` -> (logits float32 ``[B, A]`` in [-2, 2), value float32
    ``[B]`` in [-1, 1)): a pure function of each row's bytes (``matrix`` from ``projection``)."""
    flat = obs.reshape(obs.shape[0], -1).astype(np.int64)
    folded = ((flat @ matrix) * 2654435761 >> 8) & 0xFFFF  # Knuth's multiplicative hash, 16 bits
    out = folded.astype(np.float32) / np.float32(1 << 15) - np.float32(1.0)  # [-1, 1)
    a = matrix.shape[1] - 1
    return out[:, :a] * np.float32(2.0), out[:, a].copy()


class SyntheticBackend(Backend):
    """``infer(version, obs uint8 [B,C,H,W]) -> (logits [B,A] f32, value [B] f32)`` without a
    network; any weights blob makes a version servable (its bytes are not read)."""

    def __init__(self, net: NetConfig, cfg: BackendConfig) -> None:
        self.cfg = cfg
        self.max_inflight = 1
        self._versions: set[int] = set()
        self._matrix = projection(net.obs_shape, net.num_actions)

    async def start(self) -> None:
        pass

    async def load(self, version: int, blob: bytes) -> None:
        self._versions.add(version)

    async def unload(self, version: int) -> None:
        self._versions.discard(version)

    def version_bytes(self, version: int) -> int:
        return 0

    async def infer(self, version: int, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if version not in self._versions:
            raise VersionUnavailable("VersionUnavailable", f"version {version} is not loaded")
        return synthetic_outputs(obs, self._matrix)

    async def aclose(self) -> None:
        self._versions.clear()
