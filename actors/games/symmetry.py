"""The 8 symmetries of a square board (the dihedral group D4), for games whose actions are its
cells plus, optionally, a pass that every symmetry leaves where it is (Go, Othello).

``square_symmetries`` applies each transform to the observation planes and, in the same
coordinates, to the policy's cells, so a (position, policy) pair stays consistent. A game whose
action numbering runs from the bottom row (Go: ``row * N + col``, row 0 at the bottom, while
its planes show the top row first) says so with ``bottom_up``.
"""

from __future__ import annotations

import numpy as np


def _transforms(x: np.ndarray) -> list[np.ndarray]:
    """x [..., N, N] under the 8 transforms, identity first: 4 rotations, each also mirrored."""
    out = []
    for k in range(4):
        r = np.rot90(x, k, axes=(-2, -1))
        out.append(r)
        out.append(r[..., ::-1])
    return out


def square_symmetries(
    obs: np.ndarray, policy: np.ndarray, size: int, bottom_up: bool = False
) -> list[tuple[np.ndarray, np.ndarray]]:
    """Every symmetric variant of a batch, identity first.

    Args:
        obs: uint8 [N, C, size, size] planes, row 0 at the top.
        policy: float32 [N, size * size (+ 1 for a pass, kept last)].
        size: the board's side.
        bottom_up: action ``row * size + col`` counts rows from the bottom (Go).
    """
    n, cells = policy.shape[0], size * size
    if policy.shape[1] not in (cells, cells + 1):
        raise ValueError(f"policy of {policy.shape[1]} actions on a {size}x{size} board")
    grid = policy[:, :cells].reshape(n, size, size)
    if bottom_up:
        grid = grid[:, ::-1]  # to the planes' coordinates
    tail = policy[:, cells:]
    out = []
    for o, p in zip(_transforms(obs), _transforms(grid)):
        if bottom_up:
            p = p[:, ::-1]
        flat = p.reshape(n, cells)
        pol = np.concatenate([flat, tail], axis=1) if tail.shape[1] else flat
        out.append((np.ascontiguousarray(o), np.ascontiguousarray(pol, dtype=policy.dtype)))
    return out


__all__ = ["square_symmetries"]
