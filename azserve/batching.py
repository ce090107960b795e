"""The batch queue: one small I/O-free primitive used on both sides of the wire (the client
coalesces coroutines' leaves into messages, the server forms batches from messages).

Knob names follow Triton: a batch is ready when it holds ``max_batch_size`` rows or its oldest
item has waited ``max_queue_delay_us``. ``take`` always returns at least one item.
"""

from __future__ import annotations

from collections import deque
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
