"""Batching primitives for both sides of the wire.

``BatchQueue`` (server): I/O-free, knob names from Triton: a batch is ready when it holds
``max_batch_size`` rows or its oldest item has waited ``max_queue_delay_us``; ``take`` always
returns at least one item. ``TickCoalescer`` (clients): what the coroutines of one event-loop
tick asked for, flushed together at the end of the tick, so that one message carries many
leaves (``EvalClient``, and the in-process evaluator of analysis and play).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class BatchQueue(Generic[T]):
    """FIFO of items, each ``rows`` rows, with a size-or-delay readiness rule. No clocks inside:
    callers pass ``now`` (seconds), so the rule is testable without waiting."""

    def __init__(self, max_batch_size: int, max_queue_delay_us: int) -> None:
        if max_batch_size < 1:
            raise ValueError(f"max_batch_size must be >= 1, got {max_batch_size}")
        if max_queue_delay_us < 0:
            raise ValueError(f"max_queue_delay_us must be >= 0, got {max_queue_delay_us}")
        self.max_batch_size = max_batch_size
        self.max_queue_delay = max_queue_delay_us / 1e6
        self._items: deque[tuple[T, int, float]] = deque()
        self._rows = 0

    def __len__(self) -> int:
        return len(self._items)

    @property
    def rows(self) -> int:
        """Rows queued."""
        return self._rows

    def put(self, item: T, rows: int, now: float) -> None:
        """Queue ``item`` of ``rows`` rows that arrived at ``now``."""
        self._items.append((item, rows, now))
        self._rows += rows

    def oldest(self) -> float | None:
        """Arrival time of the oldest item, None when empty."""
        return self._items[0][2] if self._items else None

    def deadline(self) -> float | None:
        """When the oldest item's delay runs out, None when empty."""
        return self._items[0][2] + self.max_queue_delay if self._items else None

    def ready(self, now: float) -> bool:
        """Full, or the oldest item has waited long enough."""
        if not self._items:
            return False
        return self._rows >= self.max_batch_size or now >= self._items[0][2] + self.max_queue_delay

    def take(self) -> tuple[list[T], int]:
        """Pop items in arrival order while they fit in ``max_batch_size`` rows (at least one).
        Returns (items, total rows)."""
        items: list[T] = []
        total = 0
        while self._items:
            rows = self._items[0][1]
            if items and total + rows > self.max_batch_size:
                break
            item, rows, _ = self._items.popleft()
            items.append(item)
            total += rows
        self._rows -= total
        return items, total

    def drain(self) -> list[T]:
        """Pop everything (shutdown: the caller fails each item)."""
        items = [it for it, _, _ in self._items]
        self._items.clear()
        self._rows = 0
        return items


K = TypeVar("K")


class TickCoalescer(Generic[K, T]):
    """Items added during one event-loop tick, grouped by key, handed to ``flush`` once when
    the tick ends (``loop.call_soon``): the client side's batching. Every coroutine that runs
    in a tick adds its leaf; the flush sees them all together and sends one message per key.
    """

    def __init__(self, flush: Callable[[dict[K, list[T]]], None]) -> None:
        self._flush = flush
        self._groups: dict[K, list[T]] = {}
        self._scheduled = False

    def add(self, key: K, item: T) -> None:
        """Queue ``item`` under ``key`` for this tick's flush (scheduled on the first add)."""
        group = self._groups.get(key)
        if group is None:
            self._groups[key] = [item]
        else:
            group.append(item)
        if not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._run)

    def _run(self) -> None:
        self._scheduled = False
        groups, self._groups = self._groups, {}
        self._flush(groups)

    def drain(self) -> list[T]:
        """Take every queued item without flushing (shutdown: the caller fails them)."""
        items = [it for group in self._groups.values() for it in group]
        self._groups.clear()
        return items
