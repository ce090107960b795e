"""How the replay keeps policies (the search policy, and the ``reply`` target): dense rows, or
a fixed width of sparse entries for a wide game, turned into dense rows when a batch is drawn.

A chess position's policy has about 30 nonzero entries of 4,672: dense float32 rows are 18.7 KB
a position (1.9 GB for 100,000 positions), ``SparsePolicies`` of width 256 are 1 KB (int16
index and float16 weight per entry). A fixed width, not a ragged pool, because a batch is then
one fancy-indexed read of ``[B, K]`` and one scatter of its nonzero entries into ``[B, A]``
(no per-row Python, no compaction as the ring overwrites); the width costs memory only, and 256 is above chess's most
legal moves in any position (218), so nothing is cut there. A row with more entries than the
width keeps its largest ones, rescaled to the row's sum (``replay.policy_width``).
"""

from __future__ import annotations

import numpy as np

from azserve import sparse
from azserve.sparse import SparseRows

Policy = np.ndarray | SparseRows

AUTO_WIDTH = 256
"""``replay.policy_width = -1`` for a wide game (``sparse.AUTO_MIN_ACTIONS``): entries kept
per position."""


class DensePolicies:
    """float32 ``[n, A]`` rows."""

    def __init__(self, n: int, num_actions: int) -> None:
        self.num_actions = num_actions
        self.rows = np.zeros((n, num_actions), np.float32)

    @property
    def nbytes(self) -> int:
        return self.rows.nbytes

    def put(self, slots: np.ndarray, policy: Policy) -> np.ndarray:
        """Store ``policy`` ``[t, ...]`` in ``slots`` ``[t]``; returns bool ``[t]``: the rows
        that are not empty."""
        dense = policy.dense(self.num_actions) if isinstance(policy, SparseRows) else policy
        self.rows[slots] = dense
        return dense.any(axis=1)

    def get(self, slots: np.ndarray) -> np.ndarray:
        """float32 ``[B, A]``."""
        return self.rows[slots]


class SparsePolicies:
    """``width`` entries a row: index ``[n, K]`` (int16, or int32 past 32,767 actions; ``A``
    pads) and float16 weight ``[n, K]``."""

    def __init__(self, n: int, num_actions: int, width: int) -> None:
        if width < 1:
            raise ValueError(f"width must be >= 1, got {width}")
        self.num_actions = num_actions
        self.width = width
        dtype = np.int16 if num_actions < 32767 else np.int32
        self.index = np.full((n, width), num_actions, dtype)
        self.weight = np.zeros((n, width), np.float16)
        self.count = np.zeros(n, np.int32)
        """Entries held per row (packed from column 0)."""
        self.cut = 0
        """Rows stored with more entries than ``width`` (their smallest dropped)."""

    @property
    def nbytes(self) -> int:
        return self.index.nbytes + self.weight.nbytes + self.count.nbytes

    def put(self, slots: np.ndarray, policy: Policy) -> np.ndarray:
        """Store ``policy`` ``[t, ...]`` in ``slots``; returns bool ``[t]``: rows not empty."""
        rows = policy if isinstance(policy, SparseRows) else SparseRows.from_dense(policy)
        counts = rows.counts()
        if (counts > self.width).any():
            rows = self._cut(rows)
            counts = rows.counts()
        t = len(counts)
        index = np.full((t, self.width), self.num_actions, self.index.dtype)
        weight = np.zeros((t, self.width), np.float16)
        which = sparse.rows_of(rows.offsets)
        col = np.arange(len(rows.index)) - np.repeat(rows.offsets[:-1], counts)
        index[which, col] = rows.index
        weight[which, col] = rows.weight
        self.index[slots] = index
        self.weight[slots] = weight
        self.count[slots] = counts
        return counts > 0

    def _cut(self, rows: SparseRows) -> SparseRows:
        """The rows with at most ``width`` entries each: the largest, rescaled to the sum."""
        parts_i, parts_w, counts = [], [], []
        for r in range(len(rows)):
            lo, hi = rows.offsets[r], rows.offsets[r + 1]
            i, w = rows.index[lo:hi], rows.weight[lo:hi].astype(np.float32)
            if hi - lo > self.width:
                self.cut += 1
                keep = np.sort(np.argsort(-w, kind="stable")[: self.width])
                total = w.sum()
                i, w = i[keep], w[keep]
                w = w * (total / w.sum()) if w.sum() > 0 else w
            parts_i.append(i)
            parts_w.append(w.astype(np.float16))
            counts.append(len(i))
        offsets = np.zeros(len(rows) + 1, np.int32)
        np.cumsum(counts, out=offsets[1:])
        return SparseRows(offsets, np.concatenate(parts_i), np.concatenate(parts_w))

    def get(self, slots: np.ndarray) -> np.ndarray:
        """float32 ``[B, A]``: the rows at ``slots`` scattered dense. Only the entries held are
        read and written (a chess row has about 30 of its 256), located from ``count``."""
        counts = self.count[slots]
        rows = np.repeat(np.arange(len(slots)), counts)
        starts = np.cumsum(counts) - counts
        cols = np.arange(len(rows)) - np.repeat(starts, counts)
        at = slots[rows]
        out = np.zeros((len(slots), self.num_actions), np.float32)
        out[rows, self.index[at, cols]] = self.weight[at, cols]
        return out


def make_store(n: int, num_actions: int, width: int) -> DensePolicies | SparsePolicies:
    """The store ``replay.policy_width`` asks for: -1 sparse of ``AUTO_WIDTH`` for a wide game
    (over ``sparse.AUTO_MIN_ACTIONS`` actions) and dense otherwise; 0 dense; K > 0 sparse."""
    if width < 0:
        width = AUTO_WIDTH if num_actions > sparse.AUTO_MIN_ACTIONS else 0
    return SparsePolicies(n, num_actions, width) if width else DensePolicies(n, num_actions)
