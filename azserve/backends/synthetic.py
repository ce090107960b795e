"""A backend with no network: deterministic pseudo-random priors and values from the positions'
bytes, at almost no cost. It stands in for an accelerator of unlimited speed, so that
``azserve bench selfplay --set backend.kind=synthetic`` measures the actor side at full load on
a CPU-only machine.

Each row's uint8 planes ``x [D]`` (D = C*H*W) are hashed by a fixed random integer matrix
``M [D, 2]`` (seeded, so every server and test sees the same one) into two 64-bit lanes; each
output (the A logits, then the value) is SplitMix64's finalizer of the row's hash and the
output's number, folded to 16 bits: logits in [-2, 2) and a value in [-1, 1). Equal positions
always get equal outputs, different ones differ, and a batch costs one ``[B, D] @ [D, 2]``
integer product and ``B x (A + 1)`` mixes: a few milliseconds for chess's 4,672 actions (a
projection to every output, as before, was a ``[2240, 4673]`` integer matmul per batch).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from azserve.backends.base import Backend, BackendConfig
from azserve.errors import VersionUnavailable
from azserve.model.spec import NetConfig

SEED = 20261201
"""Seed of the projection: fixed, so outputs are reproducible across processes and runs."""

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_STEP = np.uint64(0xD1B54A32D192ED03)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)


class Projection(NamedTuple):
    """The fixed hash of a game's rows: int64 ``lanes [C*H*W, 2]`` and the outputs per row."""

    lanes: np.ndarray
    num_actions: int


def projection(obs_shape: tuple[int, int, int], num_actions: int) -> Projection:
    """The fixed random hash the outputs are drawn from."""
    size = obs_shape[0] * obs_shape[1] * obs_shape[2]
    lanes = np.random.default_rng(SEED).integers(1, 1 << 20, size=(size, 2))
    return Projection(lanes, num_actions)


def synthetic_outputs(obs: np.ndarray, proj: Projection) -> tuple[np.ndarray, np.ndarray]:
    """obs uint8 ``[B, C, H, W]`` -> (logits float32 ``[B, A]`` in [-2, 2), value float32
    ``[B]`` in [-1, 1)): a pure function of each row's bytes (``proj`` from ``projection``)."""
    flat = obs.reshape(obs.shape[0], -1).astype(np.int64)
    h = (flat @ proj.lanes).astype(np.uint64)  # [B, 2]
    row = h[:, 0] * _GOLDEN ^ h[:, 1]
    x = row[:, None] + np.arange(1, proj.num_actions + 2, dtype=np.uint64)[None, :] * _STEP
    x ^= x >> np.uint64(30)
    x *= _MIX1
    x ^= x >> np.uint64(27)
    x *= _MIX2
    x ^= x >> np.uint64(31)
    folded = (x >> np.uint64(48)).astype(np.float32)  # 16 bits
    out = folded / np.float32(1 << 15) - np.float32(1.0)  # [-1, 1)
    a = proj.num_actions
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
