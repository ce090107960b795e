"""Evaluation cache of one actor process: ``(version, position) -> (logits, value)``.

Connect Four self-play evaluates the same positions again and again: every game starts from
one position, early plies repeat across the hundreds of games in flight, and transpositions
repeat inside one search. Shared by all the games of a process, the cache answers a repeated
position without a message, and a position already in flight by joining that evaluation.

- Exact: a hit returns the very logits and value the network returned for that version and
  position (a read-only array over the row's bytes, kept when the reply arrived); the key is
  the weights version, the observation's shape and dtype, and its bytes, so nothing is ever
  approximate. A row is kept as bytes, not as an array: 402 bytes an entry instead of 512
  for Connect Four, and a whole reply's rows are cut from one copy of it (``put_rows``).
- Bounded by memory: ``max_bytes`` over the entries' estimated footprint (key bytes, logits,
  and the Python objects around them: ``ENTRY_OVERHEAD``); least recently used entries go
  first. Entries of old versions are never hit again and age out.
- Torch-free and I/O-free: it wraps any ``evaluate(obs, version) -> awaitable``.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Any

import numpy as np

from azserve.cachestats import CacheStats

ENTRY_OVERHEAD = 290
"""Bytes of Python objects per entry besides the key's bytes and the logits row's (the key
tuple, the two bytes headers, the value float, the entry tuple and the ordered dict's slot), as
measured with tracemalloc (``tests/test_evalcache.py``; 400 when rows were kept as arrays)."""

Result = tuple[np.ndarray, float]
"""One position's (logits ``[A]``, read-only, value)."""
Entry = tuple[bytes, np.dtype, float]
"""What the cache keeps of a result: the logits row's bytes and dtype, and the value."""
Evaluate = Callable[[np.ndarray, int], Awaitable[Any]]
"""``evaluate(obs, version)``: the client's evaluation (``EvalClient.evaluate``)."""

__all__ = ["ENTRY_OVERHEAD", "CacheStats", "EvalCache"]


class EvalCache:
    """LRU cache of single-position evaluations, ``max_bytes`` at most."""

    def __init__(self, max_bytes: int) -> None:
        if max_bytes <= 0:
            raise ValueError(f"max_bytes must be > 0, got {max_bytes}")
        self.max_bytes = max_bytes
        self.stats = CacheStats()
        self._entries: OrderedDict[tuple[Any, ...], Entry] = OrderedDict()
        self._shapes: dict[tuple[int, ...], tuple[int, ...]] = {}  # one tuple per shape
        self._inflight: dict[tuple[Any, ...], list[asyncio.Future[Result]]] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def evaluator(self, evaluate: Evaluate, version: int) -> Callable[[np.ndarray], Any]:
        """``evaluate`` on ``version`` through the cache: one position ``[C,H,W]`` -> an
        awaitable of (logits ``[A]``, value); stacks ``[n,C,H,W]`` pass through uncached.

        A miss hands its caller ``evaluate``'s own future (no second future, no extra turn of
        the event loop before the caller resumes); the answer is stored by a callback that runs
        before the caller's. Callers that join a position in flight get futures of their own."""
        loop = asyncio.get_running_loop()

        def cached(obs: np.ndarray) -> Any:
            if obs.ndim != 3:
                return evaluate(obs, version)
            shape = self._shapes.setdefault(obs.shape, obs.shape)
            key = (version, shape, obs.dtype.char, obs.tobytes())
            hit = self._entries.get(key)
            if hit is not None:
                self._entries.move_to_end(key)
                self.stats.hits += 1
                fut: asyncio.Future[Result] = loop.create_future()
                fut.set_result((np.frombuffer(hit[0], hit[1]), hit[2]))
                return fut
            waiters = self._inflight.get(key)
            if waiters is not None:
                self.stats.shared += 1
                fut = loop.create_future()
                waiters.append(fut)
                return fut
            self.stats.misses += 1
            self._inflight[key] = []
            return self._ask(evaluate, version, key, obs)

        return cached

    def lookup(self, version: int, obs: np.ndarray) -> tuple[tuple[Any, ...], Result | None]:
        """The cached result of one position ``[C,H,W]`` on ``version`` (counted as a hit), or
        None (counted as a miss), with its key, under which ``put_rows`` stores the answer of a
        miss: the synchronous path of ``actors.searchpool``. (``cached`` builds the same key
        inline, on its own hot path.)"""
        shape = self._shapes.setdefault(obs.shape, obs.shape)
        key = (version, shape, obs.dtype.char, obs.tobytes())
        hit = self._entries.get(key)
        if hit is None:
            self.stats.misses += 1
            return key, None
        self._entries.move_to_end(key)
        self.stats.hits += 1
        return key, (np.frombuffer(hit[0], hit[1]), hit[2])

    def put_rows(
        self, keys: list[tuple[Any, ...]], logits: np.ndarray, values: list[float]
    ) -> None:
        """Store the rows ``logits [n, A]`` and ``values`` (n floats) of one reply under the
        keys ``lookup`` gave their positions (a key already present is kept), the rows cut
        from one copy of the reply."""
        if len(keys) != len(logits) or len(keys) != len(values):
            raise ValueError(f"{len(keys)} keys for {len(logits)} rows and {len(values)} values")
        entries = self._entries
        stats = self.stats
        data = np.ascontiguousarray(logits).tobytes()
        dtype = logits.dtype
        width = len(data) // len(keys) if keys else 0
        size = len(keys[0][3]) + width + ENTRY_OVERHEAD if keys else 0
        if size > self.max_bytes:
            return
        start = 0
        for key, value in zip(keys, values):
            if key not in entries:
                entries[key] = (data[start : start + width], dtype, value)
                stats.bytes += size
            start += width
        self._evict()

    def _ask(
        self, evaluate: Evaluate, version: int, key: tuple[Any, ...], obs: np.ndarray
    ) -> asyncio.Future[Any]:
        source = asyncio.ensure_future(evaluate(obs, version))
        source.add_done_callback(lambda src: self._arrived(evaluate, version, key, obs, src))
        return source

    def _arrived(
        self,
        evaluate: Evaluate,
        version: int,
        key: tuple[Any, ...],
        obs: np.ndarray,
        source: asyncio.Future[Any],
    ) -> None:
        waiters = [w for w in self._inflight.pop(key) if not w.done()]
        if source.cancelled():
            # The first caller's game ended (its future was the evaluation itself): the
            # others still wait for this position, so it is asked for again on their behalf.
            if waiters:
                self._inflight[key] = waiters
                self._ask(evaluate, version, key, obs)
            return
        exc = source.exception()
        if exc is not None:
            for w in waiters:
                w.set_exception(exc)
            return
        logits, value = source.result()
        logits = np.ascontiguousarray(logits)
        entry: Entry = (logits.tobytes(), logits.dtype, float(value))
        self._put(key, entry)
        if waiters:
            result = (np.frombuffer(entry[0], entry[1]), entry[2])
            for w in waiters:
                w.set_result(result)

    @staticmethod
    def _size(key: tuple[Any, ...], entry: Entry) -> int:
        return len(key[3]) + len(entry[0]) + ENTRY_OVERHEAD

    def _put(self, key: tuple[Any, ...], entry: Entry) -> None:
        size = self._size(key, entry)
        if size > self.max_bytes:
            return
        self._entries[key] = entry
        self.stats.bytes += size
        self._evict()

    def _evict(self) -> None:
        """Least recently used entries go until the footprint is within ``max_bytes``."""
        stats, entries = self.stats, self._entries
        while stats.bytes > self.max_bytes:
            old = entries.popitem(last=False)
            stats.bytes -= self._size(*old)
            stats.evictions += 1
        stats.entries = len(entries)
