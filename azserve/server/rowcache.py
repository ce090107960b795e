"""The server's evaluation cache (``server.cache_mb``): ``(version, row) -> (logits, value)``,
shared by every client of one server.

The actors' cache (``actors/evalcache.py``) answers a repeated position inside one actor
process without a message; this one answers a position that any client already asked this
server for, on the same weights version, without computing it again, and computes a position
that several requests of one batch carry once. It sits between batch formation and the backend
(``Scheduler._run_batch``): a batch is split into the rows to compute and the rows answered
from the cache, only the former go to the backend, and the replies are put together again.

- Exact: a hit returns the very logits and value the backend returned for that version and row
  (kept as read-only copies); the key is the version, the dtype, the row's shape and its bytes.
- Bounded by memory: ``max_bytes`` over the entries' estimated footprint (``ENTRY_OVERHEAD``
  for the Python objects around each, measured in ``tests/test_server_rowcache.py``); least
  recently used first. Entries of old versions are never hit again and age out.
- Off by default: on an accelerator the lookups cost more Python time per row than the network
  does; it pays where the network is slow and clients do not cache for themselves.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import numpy as np

from azserve.cachestats import CacheStats

ENTRY_OVERHEAD = 480
"""Bytes of Python objects per entry besides the row's bytes and the result arrays' data (the
key tuple and bytes header, two ndarray headers, the result tuple, the ordered dict's slot)."""


Key = tuple[Any, bytes]
Entry = tuple[np.ndarray, np.ndarray]
"""One row's logits ``[A]`` and value ``[1]``, read-only copies of the backend's output."""


@dataclass
class Split:
    """A batch split by ``RowCache.split``: compute ``compute`` (the rows ``rows[compute]``
    index), then ``RowCache.join`` the backend's answers into the whole batch's."""

    compute: list[int]
    """Batch rows to run, one per distinct position not in the cache."""
    keys: list[Key]
    """Their cache keys, aligned with ``compute``."""
    source: list[int]
    """Per batch row: ``s >= 0`` is the ``s``-th computed row; ``-1 - h`` the ``h``-th hit."""
    hits: list[Entry]

    @property
    def all_computed(self) -> bool:
        """Every row is its own, computed: the backend's answers are the batch's as they are."""
        return len(self.compute) == len(self.source)


class RowCache:
    """LRU cache of single rows' evaluations per version, ``max_bytes`` at most."""

    def __init__(self, max_bytes: int) -> None:
        if max_bytes <= 0:
            raise ValueError(f"max_bytes must be > 0, got {max_bytes}")
        self.max_bytes = max_bytes
        self.stats = CacheStats()
        self._entries: OrderedDict[Key, Entry] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def split(self, version: int, obs: np.ndarray) -> Split:
        """Look up every row of ``obs`` ``[rows, ...]`` for ``version``."""
        entries, stats = self._entries, self.stats
        tag = (version, obs.dtype.str, obs.shape[1:])
        flat = obs.reshape(len(obs), -1)
        compute: list[int] = []
        keys: list[Key] = []
        source: list[int] = []
        hits: list[Entry] = []
        slots: dict[Key, int] = {}
        for i in range(len(obs)):
            key = (tag, flat[i].tobytes())
            hit = entries.get(key)
            if hit is not None:
                entries.move_to_end(key)
                source.append(-1 - len(hits))
                hits.append(hit)
                continue
            slot = slots.get(key)
            if slot is None:
                slot = slots[key] = len(compute)
                compute.append(i)
                keys.append(key)
            else:
                stats.shared += 1
            source.append(slot)
        stats.hits += len(hits)
        stats.misses += len(compute)
        return Split(compute, keys, source, hits)

    def join(
        self, split: Split, logits: np.ndarray | None, value: np.ndarray | None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Store the computed rows' answers (``logits [n, A]``, ``value [n]``, aligned with
        ``split.compute``; None when nothing was computed) and return the whole batch's."""
        if logits is not None and value is not None:
            for slot, key in enumerate(split.keys):
                row_l = logits[slot].copy()
                row_v = value[slot : slot + 1].copy()
                row_l.flags.writeable = row_v.flags.writeable = False
                self._put(key, (row_l, row_v))
        if split.all_computed and logits is not None and value is not None:
            return logits, value
        table_l = [logits] if logits is not None else []
        table_v = [value] if value is not None else []
        if split.hits:
            table_l.append(np.stack([h[0] for h in split.hits]))
            table_v.append(np.concatenate([h[1] for h in split.hits]))
        all_l, all_v = np.concatenate(table_l), np.concatenate(table_v)
        computed = len(split.compute)
        index = np.array([s if s >= 0 else computed - 1 - s for s in split.source], np.intp)
        return all_l[index], all_v[index]

    @staticmethod
    def _size(key: Key, entry: Entry) -> int:
        return len(key[1]) + entry[0].nbytes + entry[1].nbytes + ENTRY_OVERHEAD

    def _put(self, key: Key, entry: Entry) -> None:
        size = self._size(key, entry)
        if size > self.max_bytes or key in self._entries:
            return
        self._entries[key] = entry
        stats = self.stats
        stats.bytes += size
        while stats.bytes > self.max_bytes:
            old = self._entries.popitem(last=False)
            stats.bytes -= self._size(*old)
            stats.evictions += 1
        stats.entries = len(self._entries)
