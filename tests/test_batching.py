"""BatchQueue: the size-or-delay rule with explicit clocks, FIFO takes that never exceed
``max_batch_size`` rows (unless one item alone does), and drain."""

from __future__ import annotations

import random

import pytest

from azserve.batching import BatchQueue

pytestmark = pytest.mark.timeout(30)


def test_knobs_are_checked() -> None:
    with pytest.raises(ValueError, match="max_batch_size"):
        BatchQueue(0, 100)
    with pytest.raises(ValueError, match="max_queue_delay_us"):
        BatchQueue(4, -1)


def test_empty_queue_is_never_ready() -> None:
    q: BatchQueue[str] = BatchQueue(4, 0)
    assert not q.ready(1e9)
    assert q.oldest() is None and q.deadline() is None
    assert (len(q), q.rows) == (0, 0)


def test_ready_when_full_even_before_the_delay() -> None:
    q: BatchQueue[str] = BatchQueue(max_batch_size=4, max_queue_delay_us=1_000_000)
    q.put("a", 3, now=10.0)
    assert not q.ready(10.0)
    q.put("b", 1, now=10.1)
    assert q.ready(10.1)
    assert q.rows == 4


def test_ready_when_the_oldest_item_has_waited_the_delay() -> None:
    q: BatchQueue[str] = BatchQueue(max_batch_size=100, max_queue_delay_us=2000)
    q.put("a", 1, now=5.0)
    q.put("b", 1, now=5.001)
    assert q.oldest() == 5.0
    assert q.deadline() == pytest.approx(5.002)
    assert not q.ready(5.0019)
    assert q.ready(5.002)
    assert q.ready(6.0)


def test_zero_delay_is_ready_at_once() -> None:
    q: BatchQueue[str] = BatchQueue(max_batch_size=100, max_queue_delay_us=0)
    q.put("a", 1, now=3.0)
    assert q.ready(3.0)


def test_take_is_fifo_and_fits_max_rows() -> None:
    q: BatchQueue[str] = BatchQueue(max_batch_size=8, max_queue_delay_us=0)
    for name, rows in [("a", 3), ("b", 3), ("c", 3), ("d", 1)]:
        q.put(name, rows, now=0.0)
    assert q.take() == (["a", "b"], 6)  # "c" would make 9 > 8; FIFO, so "d" does not jump it
    assert (len(q), q.rows) == (2, 4)
    assert q.take() == (["c", "d"], 4)
    assert (len(q), q.rows) == (0, 0)
    assert q.take() == ([], 0)


def test_take_returns_an_oversized_item_alone() -> None:
    q: BatchQueue[str] = BatchQueue(max_batch_size=4, max_queue_delay_us=0)
    q.put("big", 10, now=0.0)
    q.put("small", 1, now=0.0)
    assert q.take() == (["big"], 10)
    assert q.take() == (["small"], 1)


def test_oldest_moves_with_take() -> None:
    q: BatchQueue[str] = BatchQueue(max_batch_size=1, max_queue_delay_us=1000)
    q.put("a", 1, now=1.0)
    q.put("b", 1, now=2.0)
    q.take()
    assert q.oldest() == 2.0
    assert q.deadline() == pytest.approx(2.001)


def test_drain_returns_everything_in_order() -> None:
    q: BatchQueue[int] = BatchQueue(max_batch_size=2, max_queue_delay_us=0)
    for i in range(5):
        q.put(i, 2, now=float(i))
    assert q.drain() == [0, 1, 2, 3, 4]
    assert (len(q), q.rows, q.oldest()) == (0, 0, None)
    assert not q.ready(100.0)


@pytest.mark.parametrize("seed", range(20))
def test_random_takes_preserve_order_and_the_row_bound(seed: int) -> None:
    rng = random.Random(seed)
    max_rows = rng.randint(1, 16)
    q: BatchQueue[int] = BatchQueue(max_batch_size=max_rows, max_queue_delay_us=0)
    sizes = [rng.randint(1, 20) for _ in range(200)]
    taken: list[int] = []
    for i, rows in enumerate(sizes):
        q.put(i, rows, now=float(i))
        if rng.random() < 0.3:
            items, total = q.take()
            assert items, "take returns at least one item when the queue is not empty"
            assert total == sum(sizes[i] for i in items)
            assert total <= max_rows or len(items) == 1
            # Greedy: the next item would not have fit.
            if len(q):
                assert total + sizes[items[-1] + 1] > max_rows
            taken += items
    while len(q):
        items, total = q.take()
        assert total <= max_rows or len(items) == 1
        taken += items
    assert taken == list(range(len(sizes)))
    assert q.rows == 0
