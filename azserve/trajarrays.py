"""A trajectory's arrays in their wire order, dense or sparse: the one place that knows how a
``Trajectory``'s frames split into obs, policy, outcome and targets (the actors' sinks, the
learner's receiver and the trajectory files all go through ``flatten`` and ``split``).

Dense (``Trajectory.sparse`` unset): ``[obs, policy float32 [T, A], outcome, *targets]``, one
array per target: what it was before sparse policies existed, byte for byte.
Sparse (``Trajectory.sparse = true``): the policy is three arrays, ``offsets int32 [T + 1],
index int16 [n], weight float16 [n]`` (``azserve.sparse.SparseRows``), and so is a ``reply``
target; ``ownership`` and ``score`` stay one array each.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from azserve.errors import ProtocolError
from azserve.protocol import Trajectory
from azserve.sparse import SparseRows

Policy = np.ndarray | SparseRows
"""A game's policies: dense float32 ``[T, A]`` or ``SparseRows``."""

SPARSE_TARGETS = ("reply",)
"""Targets that are policies, sparse with the policy."""


def flatten(
    obs: np.ndarray, policy: Policy, outcome: np.ndarray, targets: Sequence[Policy]
) -> list[np.ndarray]:
    """The arrays of one trajectory, in wire order."""
    out = [obs, *_parts(policy), outcome]
    for t in targets:
        out += _parts(t)
    return out


def _parts(p: Policy) -> list[np.ndarray]:
    return p.arrays() if isinstance(p, SparseRows) else [p]


def is_sparse(msg: Trajectory) -> bool:
    return msg.sparse is True


def split(
    msg: Trajectory, arrays: Sequence[np.ndarray]
) -> tuple[np.ndarray, Policy, np.ndarray, list[Policy]]:
    """(obs, policy, outcome, targets in ``msg.targets`` order) from a trajectory's arrays;
    ``ProtocolError`` when their count does not fit ``msg``."""
    names = msg.targets or []
    sparse = is_sparse(msg)
    width = [3 if sparse and n in SPARSE_TARGETS else 1 for n in names]
    want = 2 + (3 if sparse else 1) + sum(width)
    if len(arrays) != want:
        layout = "obs, offsets, index, weight, outcome" if sparse else "obs, policy, outcome"
        raise ProtocolError(
            f"expected {want} arrays ({layout}, then the targets {list(names)}), got {len(arrays)}"
        )
    if sparse:
        policy: Policy = SparseRows(*arrays[1:4])
        at = 5
    else:
        policy, at = arrays[1], 3
    targets: list[Policy] = []
    for w in width:
        targets.append(SparseRows(*arrays[at : at + 3]) if w == 3 else arrays[at])
        at += w
    return arrays[0], policy, arrays[2 if not sparse else 4], targets
