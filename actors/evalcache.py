"""Evaluation cache of one actor process: ``(version, position) -> (logits, value)``.

Connect Four self-play evaluates the same positions again and again: every game starts from
one position, early plies repeat across the hundreds of games in flight, and transpositions
repeat inside one search. Shared by all the games of a process, the cache answers a repeated
position without a message, and a position already in flight by joining that evaluation.

- Exact: a hit returns the very logits and value the network returned for that version and
  position (a read-only array over the row's bytes, kept when the reply arrived); the key is
  the weights version, the observation's kind (shape and dtype) and its bytes, so nothing is
  ever approximate. Logits are kept as float32 or float64 rows (another dtype as float64: the
  same values the search reads), values as the doubles the search reads.
- Bounded by memory: ``max_bytes`` over the entries' footprint (key bytes, logits, and the
  store's own cost per entry: ``entry_overhead``); least recently used entries go first.
  Entries of old versions are never hit again and age out.
- Two stores, one behaviour: the compiled one (``actors._mcts_core.Cache``, a hash table and
  LRU list in C, 96 bytes an entry besides its key and row) whenever the core is built, and
  ``PyStore`` (an ordered dict) otherwise; the tests hold both to the same expectations. With
  the compiled store, ``actors.searchpool`` answers a search's leaves from the cache inside
  the C loop that steps its tree (``Cache.step``): a hit costs no Python at all.
- Torch-free and I/O-free: it wraps any ``evaluate(obs, version) -> awaitable``.
"""

from __future__ import annotations

import asyncio
import functools
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Any

import numpy as np

from actors.games.compiled import core
from azserve.cachestats import CacheStats

PY_ENTRY_OVERHEAD = 290
"""``PyStore``'s bytes per entry besides the key's bytes and the logits row's (the key tuple,
the two bytes headers, the value float, the entry tuple and the ordered dict's slot), as
measured with tracemalloc (``tests/test_evalcache.py``)."""

Result = tuple[np.ndarray, float]
"""One position's (logits ``[A]``, read-only, value)."""
Found = tuple[bytes, int, float]
"""What a store answers for a hit: the logits row's bytes, 1 if float64 (else float32), and
the value."""
Evaluate = Callable[[np.ndarray, int], Awaitable[Any]]
"""``evaluate(obs, version)``: the client's evaluation (``EvalClient.evaluate``)."""

_ROW_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))

__all__ = ["CacheStats", "EvalCache", "PyStore"]


class PyStore:
    """The cache's store in Python, with the compiled ``Cache``'s interface: keys ``(version,
    kind, obs bytes)``, entries ``(row bytes, is_double, value)`` in least recently used order.
    The store of a process whose compiled core was not built."""

    entry_overhead = PY_ENTRY_OVERHEAD

    def __init__(self, max_bytes: int) -> None:
        if max_bytes <= 0:
            raise ValueError(f"max_bytes must be > 0, got {max_bytes}")
        self.max_bytes = max_bytes
        self.bytes = self.hits = self.misses = self.evictions = 0
        self._entries: OrderedDict[tuple[int, int, bytes], Found] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def lookup(self, version: int, kind: int, obs: Any) -> Found | None:
        key = (version, kind, bytes(obs))
        hit = self._entries.get(key)
        if hit is None:
            self.misses += 1
            return None
        self._entries.move_to_end(key)
        self.hits += 1
        return hit

    def put(self, version: int, kind: int, obs: Any, logits: np.ndarray, value: float) -> None:
        self._store(version, kind, bytes(obs), logits.tobytes(), logits.dtype, float(value))

    def put_rows(
        self, version: int, kind: int, stack: np.ndarray, logits: np.ndarray, values: Any
    ) -> None:
        data, keys = logits.tobytes(), stack.tobytes()
        n = len(logits)
        width, klen = (len(data) // n, len(keys) // n) if n else (0, 0)
        for i, value in enumerate(np.asarray(values).tolist()):
            row = data[i * width : (i + 1) * width]
            self._store(version, kind, keys[i * klen : (i + 1) * klen], row, logits.dtype, value)

    def entries(self) -> list[tuple[int, int, bytes, bytes, int, float]]:
        return [(*key, *entry) for key, entry in self._entries.items()]

    def _store(
        self, version: int, kind: int, key_bytes: bytes, row: bytes, dtype: np.dtype, v: float
    ) -> None:
        if dtype not in _ROW_DTYPES:
            raise TypeError("logits must be float32 or float64")
        size = len(key_bytes) + len(row) + PY_ENTRY_OVERHEAD
        key = (version, kind, key_bytes)
        if size > self.max_bytes or key in self._entries:
            return
        self._entries[key] = (row, int(dtype == np.float64), v)
        self.bytes += size
        while self.bytes > self.max_bytes:
            (_, _, k), (r, _, _) = self._entries.popitem(last=False)
            self.bytes -= len(k) + len(r) + PY_ENTRY_OVERHEAD
            self.evictions += 1


Store = Any
"""``actors._mcts_core.Cache`` or ``PyStore``: the same calls."""


class EvalCache:
    """LRU cache of single-position evaluations, ``max_bytes`` at most.

    ``store``: ``"auto"`` (the compiled store when the core is built, else ``PyStore``),
    ``"compiled"`` or ``"python"``.
    """

    def __init__(self, max_bytes: int, store: str = "auto") -> None:
        if max_bytes <= 0:
            raise ValueError(f"max_bytes must be > 0, got {max_bytes}")
        if store not in ("auto", "compiled", "python"):
            raise ValueError(f"store must be auto, compiled or python, got {store!r}")
        if store == "compiled" and core is None:
            raise ValueError("store='compiled': the compiled core is not built")
        self.max_bytes = max_bytes
        use_core = core is not None and store != "python"
        self._store: Store = core.Cache(max_bytes) if use_core else PyStore(max_bytes)
        self.compiled: Any = self._store if use_core else None
        """The compiled store (``Cache.step`` feeds trees from it in C), or None."""
        self.entry_overhead: int = core.CACHE_ENTRY_OVERHEAD if use_core else PY_ENTRY_OVERHEAD
        """The store's bytes per entry besides the key's and the row's."""
        self._joins = 0
        """Lookups that missed the store and joined an evaluation in flight."""
        self._kinds: dict[tuple[tuple[int, ...], str], int] = {}
        self._inflight: dict[tuple[int, int, bytes], list[asyncio.Future[Result]]] = {}

    def __len__(self) -> int:
        return len(self._store)

    @property
    def stats(self) -> CacheStats:
        """A snapshot of the counters."""
        s = self._store
        return CacheStats(
            hits=s.hits,
            shared=self._joins,
            misses=s.misses - self._joins,
            evictions=s.evictions,
            entries=len(s),
            bytes=s.bytes,
        )

    def kind(self, obs: np.ndarray) -> int:
        """The number of ``obs``'s shape and dtype in this cache's keys."""
        sig = (obs.shape, obs.dtype.char)
        kind = self._kinds.get(sig)
        if kind is None:
            kind = self._kinds[sig] = len(self._kinds)
        return kind

    def entries(self) -> list[tuple[int, np.ndarray, np.ndarray, float]]:
        """``(version, obs, logits, value)`` of every entry, least recently used first."""
        shapes = {kind: sig for sig, kind in self._kinds.items()}
        out = []
        for version, kind, key, row, is_double, value in self._store.entries():
            shape, char = shapes[kind]
            obs = np.frombuffer(key, np.dtype(char)).reshape(shape)
            out.append((version, obs, np.frombuffer(row, _ROW_DTYPES[is_double]), value))
        return out

    def evaluator(self, evaluate: Evaluate, version: int) -> Callable[[np.ndarray], Any]:
        """``evaluate`` on ``version`` through the cache: one position ``[C,H,W]`` -> an
        awaitable of (logits ``[A]``, value); stacks ``[n,C,H,W]`` pass through uncached.

        With ``legal`` (``cached(obs, legal)``, a sparse search's leaf) a miss is asked for as
        ``evaluate(obs, version, legal)``, which must answer the dense row (``GameLeaves``).
        A miss hands its caller ``evaluate``'s own future (no second future, no extra turn of
        the event loop before the caller resumes); the answer is stored by a callback that runs
        before the caller's. Callers that join a position in flight get futures of their own."""
        loop = asyncio.get_running_loop()

        def cached(obs: np.ndarray, legal: np.ndarray | None = None) -> Any:
            if obs.ndim != 3:
                return evaluate(obs, version)
            kind = self.kind(obs)
            obs = np.ascontiguousarray(obs)
            hit = self._find(version, kind, obs)
            if hit is not None:
                fut: asyncio.Future[Result] = loop.create_future()
                fut.set_result(hit)
                return fut
            key = (version, kind, obs.tobytes())
            waiters = self._inflight.get(key)
            if waiters is not None:
                self._joins += 1  # shared, not a miss: nothing is sent for it
                fut = loop.create_future()
                waiters.append(fut)
                return fut
            self._inflight[key] = []
            if legal is not None:  # a sparse evaluation: the dense row it answers is cached
                return self._ask(functools.partial(_with_legal, evaluate, legal), key, obs)
            return self._ask(evaluate, key, obs)

        return cached

    def lookup(self, version: int, obs: np.ndarray) -> Result | None:
        """The cached result of one position ``[C,H,W]`` on ``version`` (counted as a hit), or
        None (counted as a miss). The one lookup in Python: ``evaluator`` (a search's leaves,
        one by one) and ``actors.searchpool`` (a pooled search's root, or every leaf without the
        compiled store) both call it; ``Cache.step`` is the same store's lookup in C."""
        return self._find(version, self.kind(obs), np.ascontiguousarray(obs))

    def _find(self, version: int, kind: int, obs: np.ndarray) -> Result | None:
        hit = self._store.lookup(version, kind, obs)
        return None if hit is None else _result(hit)

    def put_rows(
        self, version: int, stack: np.ndarray, logits: np.ndarray, values: np.ndarray
    ) -> None:
        """Store the rows ``logits [n, A]`` and ``values [n]`` of one reply as the answers to
        the positions ``stack [n, C, H, W]`` (a key already present is kept)."""
        if not (len(stack) == len(logits) == len(values)):
            raise ValueError(
                f"{len(stack)} positions for {len(logits)} rows and {len(values)} values"
            )
        if not len(stack):
            return
        self._store.put_rows(
            version, self.kind(stack[0]), np.ascontiguousarray(stack), _rows(logits), values
        )

    def _ask(
        self, evaluate: Evaluate, key: tuple[int, int, bytes], obs: np.ndarray
    ) -> asyncio.Future[Any]:
        source = asyncio.ensure_future(evaluate(obs, key[0]))
        source.add_done_callback(lambda src: self._arrived(evaluate, key, obs, src))
        return source

    def _arrived(
        self,
        evaluate: Evaluate,
        key: tuple[int, int, bytes],
        obs: np.ndarray,
        source: asyncio.Future[Any],
    ) -> None:
        waiters = [w for w in self._inflight.pop(key) if not w.done()]
        if source.cancelled():
            # The first caller's game ended (its future was the evaluation itself): the
            # others still wait for this position, so it is asked for again on their behalf.
            if waiters:
                self._inflight[key] = waiters
                self._ask(evaluate, key, obs)
            return
        exc = source.exception()
        if exc is not None:
            for w in waiters:
                w.set_exception(exc)
            return
        logits, value = source.result()
        logits = _rows(np.asarray(logits))
        self._store.put(key[0], key[1], obs, logits, float(value))
        if waiters:
            result = (_readonly(logits), float(value))
            for w in waiters:
                w.set_result(result)


def _with_legal(evaluate: Any, legal: np.ndarray, obs: np.ndarray, version: int) -> Any:
    return evaluate(obs, version, legal)


def _rows(logits: np.ndarray) -> np.ndarray:
    """Logits as the store keeps them: C-contiguous float32 or float64."""
    if logits.dtype not in _ROW_DTYPES:
        logits = logits.astype(np.float64)
    return np.ascontiguousarray(logits)


def _readonly(a: np.ndarray) -> np.ndarray:
    a = a.copy()
    a.flags.writeable = False
    return a


def _result(hit: Found) -> Result:
    return np.frombuffer(hit[0], _ROW_DTYPES[hit[1]]), hit[2]
