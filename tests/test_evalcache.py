"""The actors' evaluation cache: exact hits keyed by (version, position), joins of evaluations
in flight, errors and cancellations, the memory bound (LRU eviction, footprint measured), and
self-play through the cache against the real server, hits equal to the network's answers."""

from __future__ import annotations

import asyncio
import gc
import tracemalloc
from typing import Any

import numpy as np
import pytest

from actors.config import ActorsConfig
from actors.evalcache import EvalCache
from actors.games.compiled import core
from actors.search import MCTSConfig
from actors.selfplay import SelfPlay
from azserve.client import ClientConfig, EvalClient
from azserve.errors import VersionUnavailable
from tests.conftest import MakeServer, Reference

pytestmark = pytest.mark.timeout(60)

STORES = ["python", "compiled"]
"""Both stores are held to the same expectations (the compiled one: when the core is built)."""


@pytest.fixture(params=STORES)
def store(request: pytest.FixtureRequest) -> str:
    if request.param == "compiled" and core is None:
        pytest.skip("the compiled core is not built")
    return str(request.param)


A = 7


class FakeNet:
    """``evaluate(obs, version)`` that answers after ``delay`` with logits derived from the
    position's bytes and the version, and counts its calls."""

    def __init__(self, delay: float = 0.0, fail: BaseException | None = None) -> None:
        self.calls = 0
        self.delay = delay
        self.fail = fail

    async def _answer(self, obs: np.ndarray, version: int) -> tuple[np.ndarray, float]:
        self.calls += 1
        await asyncio.sleep(self.delay)
        if self.fail is not None:
            raise self.fail
        seed = int(obs.sum()) * 31 + version
        return np.random.default_rng(seed).standard_normal(A).astype(np.float32), seed / 1000

    def __call__(self, obs: np.ndarray, version: int) -> Any:
        return asyncio.ensure_future(self._answer(obs, version))


def board(i: int) -> np.ndarray:
    obs = np.zeros((2, 6, 7), np.uint8)
    obs.reshape(-1)[: i + 1] = 1
    return obs


async def test_hits_are_exact_and_cost_no_call(store: str) -> None:
    net, cache = FakeNet(), EvalCache(1 << 20, store)
    ev = cache.evaluator(net, version=3)
    first = await ev(board(5))
    again = await ev(board(5).copy())  # equal bytes, another array
    assert net.calls == 1
    assert np.array_equal(first[0], again[0]) and first[1] == again[1]
    want = await net._answer(board(5), 3)
    assert np.array_equal(again[0], want[0]) and again[1] == want[1]
    assert not again[0].flags.writeable, "a hit must not be changed by its user"
    assert (cache.stats.hits, cache.stats.misses) == (1, 1)
    assert cache.stats.hit_rate == 0.5


async def test_versions_and_shapes_are_part_of_the_key(store: str) -> None:
    net, cache = FakeNet(), EvalCache(1 << 20, store)
    await cache.evaluator(net, 1)(board(2))
    other = await cache.evaluator(net, 2)(board(2))
    assert net.calls == 2
    assert other[1] == (await net._answer(board(2), 2))[1]
    flat = board(2).reshape(2, 7, 6)  # same bytes, another shape
    await cache.evaluator(net, 1)(flat)
    assert net.calls == 4  # (one more for the _answer above)


async def test_a_position_in_flight_is_joined_and_a_cancelled_joiner_harms_nobody(
    store: str,
) -> None:
    net, cache = FakeNet(delay=0.05), EvalCache(1 << 20, store)
    ev = cache.evaluator(net, 0)
    a, b, c = ev(board(1)), ev(board(1)), ev(board(1))
    b.cancel()  # one game ended meanwhile
    ra, rc = await a, await c
    assert net.calls == 1 and cache.stats.shared == 2
    assert np.array_equal(ra[0], rc[0])
    assert len(cache) == 1


async def test_errors_reach_every_waiter_and_are_not_cached(store: str) -> None:
    net = FakeNet(delay=0.01, fail=VersionUnavailable("VersionUnavailable", "gone"))
    cache = EvalCache(1 << 20, store)
    ev = cache.evaluator(net, 0)
    results = await asyncio.gather(ev(board(1)), ev(board(1)), return_exceptions=True)
    assert all(isinstance(r, VersionUnavailable) for r in results)
    assert len(cache) == 0
    net.fail = None
    await ev(board(1))
    assert net.calls == 2  # retried, not answered from a cached failure


async def test_stacks_pass_through(store: str) -> None:
    net, cache = FakeNet(), EvalCache(1 << 20, store)
    stack = np.stack([board(1), board(2)])
    await cache.evaluator(net, 0)(stack)
    assert net.calls == 1 and len(cache) == 0 and cache.stats.misses == 0


async def test_memory_bound_evicts_least_recently_used(store: str) -> None:
    per_entry = 2 * 6 * 7 + A * 4 + EvalCache(1, store).entry_overhead
    net, cache = FakeNet(), EvalCache(10 * per_entry, store)
    ev = cache.evaluator(net, 0)
    for i in range(10):
        await ev(board(i))
    assert len(cache) == 10 and cache.stats.evictions == 0
    await ev(board(0))  # board 0 is now the most recently used
    await ev(board(10))  # one over: the least recently used (board 1) goes
    assert len(cache) == 10 and cache.stats.evictions == 1
    assert cache.stats.bytes <= cache.max_bytes
    calls = net.calls
    await ev(board(0))
    assert net.calls == calls, "the recently used entry survived"
    await ev(board(1))
    assert net.calls == calls + 1, "the least recently used entry was evicted"
    for i in range(100):
        await ev(board(20 + i % 60))
        assert cache.stats.bytes <= cache.max_bytes and len(cache) <= 10


async def test_footprint_estimate_covers_the_real_memory(store: str) -> None:
    """``ENTRY_OVERHEAD`` is a measurement: the memory really held per entry stays within
    the estimate (and not far below it, or the bound would waste memory)."""
    net, cache = FakeNet(), EvalCache(1 << 30, store)
    ev = cache.evaluator(net, 0)
    obs = [np.random.default_rng(i).integers(0, 2, (2, 6, 7), dtype=np.uint8) for i in range(8_000)]
    for o in obs:  # numpy keeps an array's buffer description once exported: not the cache's
        memoryview(o).release()
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for o in obs:
        await ev(o)
    gc.collect()
    held = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    estimated = cache.stats.bytes
    assert 0.7 * estimated <= held <= 1.2 * estimated, (held, estimated)


async def test_rows_stored_from_a_reply_are_the_evaluators_entries(store: str) -> None:
    """``lookup`` + ``put_rows`` (the pool's bulk path) make the same entries as the evaluator:
    read-only copies, found by either path, kept when present, within the memory bound."""
    per_entry = 2 * 6 * 7 + A * 4 + EvalCache(1, store).entry_overhead
    cache = EvalCache(6 * per_entry, store)
    boards = np.stack([board(i) for i in range(4)])
    assert [cache.lookup(3, b) for b in boards] == [None] * 4 and cache.stats.misses == 4
    logits = np.arange(4 * A, dtype=np.float32).reshape(4, A)
    cache.put_rows(3, boards, logits, np.array([0.5, -0.5, 0.25, 0.0], np.float32))
    logits[:] = -1  # the reply's buffer is reused: the entries are copies
    assert len(cache) == 4 and cache.stats.bytes == 4 * per_entry
    hit = cache.lookup(3, board(2))
    assert hit is not None and hit[0].dtype == np.float32
    assert hit[0].tolist() == list(range(2 * A, 3 * A)) and hit[1] == 0.25
    assert not hit[0].flags.writeable
    net = FakeNet()
    assert (await cache.evaluator(net, 3)(board(1)))[1] == -0.5 and net.calls == 0
    assert cache.lookup(4, board(1)) is None  # another version
    # Present keys are kept (first answer wins); the LRU bound holds for bulk stores too.
    cache.put_rows(3, boards[:1], np.ones((1, A), np.float32), np.array([9.0]))
    assert cache.lookup(3, board(0))[1] == 0.5  # type: ignore[index]
    more = np.stack([board(i) for i in range(4, 9)])
    cache.put_rows(3, more, np.zeros((5, A), np.float32), np.zeros(5))
    assert len(cache) == 6 and cache.stats.evictions == 3
    assert cache.stats.bytes == 6 * per_entry <= cache.max_bytes
    assert cache.lookup(3, board(0)) is not None, "the most recently used of the first four"
    assert cache.lookup(3, board(3)) is None, "the least recently used went first"
    with pytest.raises(ValueError, match="4 positions for 3 rows"):
        cache.put_rows(3, boards, np.zeros((3, A), np.float32), np.zeros(3))


async def test_other_logit_dtypes_are_kept_as_the_doubles_the_search_reads(store: str) -> None:
    net = FakeNet()
    cache = EvalCache(1 << 20, store)

    async def half(obs: np.ndarray, version: int) -> tuple[np.ndarray, float]:
        logits, value = await net._answer(obs, version)
        return logits.astype(np.float16), value

    ev = cache.evaluator(lambda o, v: asyncio.ensure_future(half(o, v)), 0)
    first = await ev(board(4))
    again = await ev(board(4))
    assert again[0].dtype == np.float64 and again[0].tolist() == first[0].tolist()
    # A float64 reply is kept as it is.
    rows = np.random.default_rng(0).standard_normal((2, A))
    cache.put_rows(1, np.stack([board(5), board(6)]), rows, np.array([0.25, 0.5]))
    hit = cache.lookup(1, board(6))
    assert hit is not None and hit[0].dtype == np.float64 and hit[0].tolist() == rows[1].tolist()


def test_zero_bytes_is_refused(store: str) -> None:
    with pytest.raises(ValueError, match="max_bytes"):
        EvalCache(0, store)


async def test_selfplay_through_the_cache_hits_with_the_networks_answers(
    make_server: MakeServer, ref: Reference, store: str
) -> None:
    """Tic-tac-toe games from one start position repeat positions: the cache hits, saves
    messages, and every cached answer equals the served network's output."""
    server = await make_server()
    async with EvalClient(ClientConfig(server=server.endpoint)) as client:
        sp = SelfPlay(
            "tictactoe",
            ActorsConfig(games=8, max_games=16, status_interval_s=0, cache_mb=8.0),
            MCTSConfig(num_simulations=16, resign_threshold=-2.0),
            client,
            _NullSink(),
            "a0",
        )
        sp.cache = EvalCache(8 << 20, store)
        stats = await asyncio.wait_for(sp.run(asyncio.Event()), 45)
        sent_rows = client.stats.rows
    cache = sp.cache
    assert cache is not None and stats.games >= 16
    s = cache.stats
    assert s.hits + s.shared > 0 and s.misses == sent_rows
    assert stats.evaluations == s.hits + s.shared + s.misses
    entries = cache.entries()
    obs = np.stack([e[1] for e in entries])
    logits = np.stack([e[2] for e in entries])
    values = np.array([e[3] for e in entries])
    assert ref.rows_matching(obs, logits, values).all()


class _NullSink:
    async def start(self) -> None:
        pass

    async def send(self, *args: Any) -> None:
        pass

    async def aclose(self) -> int:
        return 0


def test_bench_reads_the_window_from_the_status_lines() -> None:
    from actors.evalcache import CacheStats
    from azserve.perf.selfplay import cache_window

    first = CacheStats(hits=10, shared=5, misses=85, entries=80, bytes=2**20, evictions=0)
    last = CacheStats(hits=110, shared=25, misses=165, entries=200, bytes=3 * 2**20, evictions=4)
    log = f"x  abandoned 0  {first.line()}\n y  abandoned 0  {last.line()}\n"
    win = cache_window([log, log], evals_per_position=40.0)
    assert win is not None
    # Per process over the window: 120 of 200 lookups without a message.
    assert win["hit_rate"] == 0.6 and win["joined_in_flight_fraction"] == 0.1
    assert (win["entries"], win["mb"], win["evictions"]) == (400, 6.0, 8)
    assert win["evaluations_saved_per_position"] == 24.0
    assert cache_window(["no cache here"], 40.0) is None


async def test_a_cancelled_first_caller_leaves_the_joiners_answered(store: str) -> None:
    """The first caller awaits the evaluation's own future; if its game ends (cancelled), the
    callers that joined it are asked for again and still get the network's answer."""
    net, cache = FakeNet(delay=0.05), EvalCache(1 << 20, store)
    ev = cache.evaluator(net, 0)
    a, b = ev(board(3)), ev(board(3))
    await asyncio.sleep(0.01)  # the evaluation has started
    a.cancel()
    rb = await b
    want = await net._answer(board(3), 0)
    assert np.array_equal(rb[0], want[0]) and rb[1] == want[1]
    assert net.calls == 3 and len(cache) == 1  # a's, b's re-ask, and the check above
    assert np.array_equal((await ev(board(3)))[0], want[0]) and net.calls == 3  # a hit now


def test_the_compiled_store_refuses_what_it_cannot_keep() -> None:
    """The C store's own calls: rows must be float32 or float64, one per position; a store
    never initialised says so instead of crashing."""
    if core is None:
        pytest.skip("the compiled core is not built")
    store = core.Cache(1 << 20)
    stack = np.stack([board(1), board(2)])
    with pytest.raises(TypeError, match="logits must be float32 or float64"):
        store.put_rows(0, 0, stack, np.zeros((2, A), np.int32), np.zeros(2))
    with pytest.raises(TypeError, match="values must be float32 or float64"):
        store.put_rows(0, 0, stack, np.zeros((2, A), np.float32), np.zeros(2, np.int64))
    with pytest.raises(ValueError, match="the same n"):
        store.put_rows(0, 0, stack, np.zeros((3, A), np.float32), np.zeros(3))
    with pytest.raises(TypeError, match="logits must be float32 or float64"):
        store.put(0, 0, board(1), np.zeros(A, np.float16), 0.5)
    assert len(store) == 0 and store.bytes == 0
    store.put(0, 0, board(1), np.arange(A, dtype=np.float32), 0.5)
    row, is_double, value = store.lookup(0, 0, board(1))
    assert np.frombuffer(row, np.float32).tolist() == list(range(A)) and (is_double, value) == (
        0,
        0.5,
    )
    assert store.lookup(0, 1, board(1)) is None  # another kind
    fresh = core.Cache.__new__(core.Cache)
    with pytest.raises(RuntimeError, match="not initialised"):
        fresh.lookup(0, 0, board(1))
