"""Ragged rows of a wide policy: what a sparse evaluation and a sparse policy target carry.

A game with thousands of actions (chess: 4,672) has a few dozen legal in a position. Instead of
a dense ``[rows, A]`` array, a ragged one is ``offsets int32 [rows + 1]`` (``offsets[0] == 0``,
non-decreasing) and ``index [n]`` (int16 when ``A <= 32768``, else int32) with ``n ==
offsets[-1]``: row ``i`` holds ``index[offsets[i]:offsets[i + 1]]``, and a values array ``[n]``
runs alongside (the logits of a sparse reply, float16; the weights of a policy target, float16).

Used on both sides of the wire: ``check`` is the server's (and the learner's) validation,
``gather`` the server's cut of the dense logits, ``scatter`` the client's and the replay's way
back to a dense row. docs/protocol.md states the wire layout.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np

SparsePolicy = Literal["auto", "on", "off"]

AUTO_MIN_ACTIONS = 512
"""``sparse_policy = "auto"`` goes sparse for games wider than this (chess, 4,672; not Go 19x19,
362)."""

ILLEGAL_LOGIT = -1e9
"""What a dense row rebuilt from a sparse reply holds at the actions it did not ask for: finite,
so a softmax over a row whose every entry is this stays uniform instead of NaN; exp() of it
beside any real logit is 0."""

INDEX_DTYPES = (np.dtype("<i2"), np.dtype("<i4"))


def wanted(policy: SparsePolicy, num_actions: int) -> bool:
    """Whether a game of ``num_actions`` goes sparse under ``policy``."""
    if policy not in ("auto", "on", "off"):
        raise ValueError(f"sparse_policy must be auto, on or off, got {policy!r}")
    return policy == "on" or (policy == "auto" and num_actions > AUTO_MIN_ACTIONS)


def ragged(rows: Sequence[np.ndarray | bytes]) -> tuple[np.ndarray, np.ndarray]:
    """Rows of actions (int arrays, or the compiled tree's uint16 bytes) -> (offsets, index):
    int16 index when every action is below 32,768 (the compiled core's always are), else
    int32."""
    counts: np.ndarray
    if rows and isinstance(rows[0], bytes | bytearray | memoryview):
        # One join, one view: the core's uint16 actions are < 32768 (int16 games only).
        index = np.frombuffer(b"".join(rows), "<i2")  # type: ignore[arg-type]
        counts = np.fromiter((len(r) >> 1 for r in rows), np.int32, len(rows))
    else:
        counts = np.fromiter((len(r) for r in rows), np.int32, len(rows))
        flat = (
            np.concatenate([np.asarray(r, np.int64) for r in rows])
            if rows
            else np.zeros(0, np.int64)
        )
        wide = len(flat) and flat.max() >= 32768
        index = flat.astype(INDEX_DTYPES[1] if wide else INDEX_DTYPES[0])
    offsets = np.zeros(len(rows) + 1, np.int32)
    np.cumsum(counts, out=offsets[1:])
    return offsets, index


def check(
    offsets: np.ndarray, index: np.ndarray, rows: int, num_actions: int, name: str = "actions"
) -> str | None:
    """What is wrong with a ragged ``(offsets, index)`` of ``rows`` rows over ``num_actions``,
    or None. Each reason names the array and the first bad value."""
    if offsets.dtype != np.dtype("<i4"):
        return f"offsets dtype {offsets.dtype.name} must be int32"
    if offsets.shape != (rows + 1,):
        return f"offsets shape {list(offsets.shape)} must be [{rows + 1}] (rows + 1)"
    if index.dtype not in INDEX_DTYPES:
        return f"{name} dtype {index.dtype.name} must be int16 or int32"
    if index.ndim != 1:
        return f"{name} shape {list(index.shape)} must be [n]"
    if offsets[0] != 0:
        return f"offsets[0] is {int(offsets[0])}, must be 0"
    steps = np.diff(offsets)
    if rows and steps.min() < 0:
        i = int(np.argmax(steps < 0))
        return (
            f"offsets not monotone: offsets[{i + 1}] = {int(offsets[i + 1])} < "
            f"offsets[{i}] = {int(offsets[i])}"
        )
    if offsets[-1] != len(index):
        return f"offsets[-1] = {int(offsets[-1])} does not match the {len(index)} {name} sent"
    if len(index):
        bad = (index < 0) | (index >= num_actions)
        if bad.any():
            j = int(np.argmax(bad))
            return f"{name}[{j}] = {int(index[j])} is out of range 0..{num_actions - 1}"
    return None


def rows_of(offsets: np.ndarray) -> np.ndarray:
    """The row of each ragged entry: ``[n]`` intp (``0,0,0,1,1,...``)."""
    return np.repeat(np.arange(len(offsets) - 1), np.diff(offsets))


def gather(dense: np.ndarray, offsets: np.ndarray, index: np.ndarray) -> np.ndarray:
    """The entries ``dense[row, index]`` of a ragged layout as float16 ``[n]``."""
    return dense[rows_of(offsets), index].astype(np.float16)


def scatter(
    offsets: np.ndarray,
    index: np.ndarray,
    values: np.ndarray,
    num_actions: int,
    fill: float = 0.0,
) -> np.ndarray:
    """A ragged layout as dense float32 ``[rows, num_actions]``, ``fill`` elsewhere (a
    duplicate index keeps its last value)."""
    out = np.full((len(offsets) - 1, num_actions), fill, np.float32)
    out[rows_of(offsets), index] = values
    return out


class SparseRows:
    """Policies as their nonzero entries, ragged: ``offsets`` int32 ``[T + 1]``, ``index``
    int16 (int32 past 32,768 actions) ``[n]``, ``weight`` float16 ``[n]``. A wide game's search
    policies (chess: about 30 of 4,672 moves) on the wire, in the journal and in the replay;
    an empty row is "no policy" (a ``reply`` target's last move)."""

    __slots__ = ("index", "offsets", "weight")

    def __init__(self, offsets: np.ndarray, index: np.ndarray, weight: np.ndarray) -> None:
        self.offsets = offsets
        self.index = index
        self.weight = weight

    def __len__(self) -> int:
        return len(self.offsets) - 1

    @classmethod
    def from_dense(cls, dense: np.ndarray) -> SparseRows:
        """The nonzero entries of ``dense [T, A]``, row by row (weights rounded to float16)."""
        rows, cols = np.nonzero(dense)
        offsets = np.zeros(len(dense) + 1, np.int32)
        np.cumsum(np.bincount(rows, minlength=len(dense)), out=offsets[1:])
        wide = dense.ndim == 2 and dense.shape[1] > 32768
        index = cols.astype(INDEX_DTYPES[1] if wide else INDEX_DTYPES[0])
        return cls(offsets, index, dense[rows, cols].astype(np.float16))

    def arrays(self) -> list[np.ndarray]:
        """``[offsets, index, weight]``: how the rows travel (in this order)."""
        return [self.offsets, self.index, self.weight]

    @property
    def nbytes(self) -> int:
        return self.offsets.nbytes + self.index.nbytes + self.weight.nbytes

    def dense(self, num_actions: int) -> np.ndarray:
        """float32 ``[T, num_actions]``, zero off the entries."""
        return scatter(self.offsets, self.index, self.weight, num_actions)

    def counts(self) -> np.ndarray:
        """Entries per row ``[T]``."""
        return np.diff(self.offsets)

    def problem(self, rows: int, num_actions: int) -> str | None:
        """Why these are not ``rows`` policies over ``num_actions`` (finite, non-negative
        weights), or None."""
        why = check(self.offsets, self.index, rows, num_actions, "index")
        if why is not None:
            return why
        if self.weight.dtype != np.dtype("<f2") or self.weight.shape != self.index.shape:
            return (
                f"weight must be float16[{len(self.index)}], got "
                f"{self.weight.dtype.name}{list(self.weight.shape)}"
            )
        if not (np.isfinite(self.weight).all() and (self.weight >= 0).all()):
            return "weight has negative or non-finite entries"
        return None
