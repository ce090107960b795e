"""The server's evaluation cache (``server.cache_mb``): exact answers, rows computed once per
version and position, memory bound, and its counts in the status reply, status line and
Prometheus text, on a real server with real clients."""

from __future__ import annotations

import asyncio
import gc
import tracemalloc

import numpy as np
import pytest

from azserve.server.rowcache import RowCache
from tests.conftest import MakeClient, MakeControl, MakeServer, Reference, positions, weights_blob

pytestmark = pytest.mark.timeout(60)

A = 9


def net(obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A stand-in backend: logits and value derived from each row's bytes."""
    flat = obs.reshape(len(obs), -1).astype(np.float32)
    logits = np.stack([row[:A] * 3 - row.sum() for row in flat]).astype(np.float32)
    return logits, (flat.mean(axis=1) - 0.5).astype(np.float32)


def run(cache: RowCache, version: int, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """One batch through the cache; returns its answers and the rows computed."""
    split = cache.split(version, obs)
    todo = obs[split.compute]
    logits, value = net(todo) if len(todo) else (None, None)
    out_l, out_v = cache.join(split, logits, value)
    return out_l, out_v, len(todo)


def test_hits_duplicates_and_versions_give_the_networks_answers() -> None:
    cache = RowCache(1 << 20)
    obs = positions(32, seed=1)
    want_l, want_v = net(obs)
    l1, v1, n1 = run(cache, 0, obs)
    assert n1 == 32 and np.array_equal(l1, want_l) and np.array_equal(v1, want_v)
    # The same rows again, shuffled, with duplicates and two new ones: only the new computed.
    new = positions(2, seed=99)
    batch = np.concatenate([obs[::-1], obs[:5], new, new[:1]])
    l2, v2, n2 = run(cache, 0, batch)
    assert n2 == 2
    bl, bv = net(batch)
    assert np.array_equal(l2, bl) and np.array_equal(v2, bv)
    assert (cache.stats.hits, cache.stats.shared, cache.stats.misses) == (37, 1, 34)
    # Another version computes everything afresh.
    _, _, n3 = run(cache, 1, obs)
    assert n3 == 32
    # A batch answered from the cache alone.
    l4, v4, n4 = run(cache, 1, obs[:3])
    assert n4 == 0 and np.array_equal(l4, want_l[:3]) and np.array_equal(v4, want_v[:3])
    assert l4.dtype == np.float32 and v4.dtype == np.float32


def test_dtype_is_part_of_the_key_and_entries_are_read_only() -> None:
    cache = RowCache(1 << 20)
    obs = positions(4, seed=2)
    run(cache, 0, obs)
    _, _, n = run(cache, 0, obs.astype(np.float32))
    assert n == 4
    split = cache.split(0, obs)
    assert not split.compute and all(not h[0].flags.writeable for h in split.hits)


def test_memory_bound_evicts_the_least_recently_used() -> None:
    obs = positions(400, seed=3)
    one = RowCache(1 << 20)
    run(one, 0, obs[:1])
    size = one.stats.bytes
    cache = RowCache(100 * size)
    run(cache, 0, obs[:100])
    run(cache, 0, obs[:1])  # row 0 is now the most recent
    run(cache, 0, obs[100:150])
    assert cache.stats.entries == 100 and cache.stats.evictions == 50
    assert cache.stats.bytes <= cache.max_bytes
    _, _, n = run(cache, 0, obs[:1])
    assert n == 0  # kept: it was used last
    _, _, n = run(cache, 0, obs[1:2])
    assert n == 1  # evicted


def test_entry_size_estimate_matches_the_memory_held() -> None:
    cache = RowCache(1 << 30)
    obs = positions(6000, seed=4)
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for i in range(0, len(obs), 128):
        run(cache, 0, obs[i : i + 128])
    gc.collect()
    held = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    assert 0.8 * cache.stats.bytes <= held <= 1.2 * cache.stats.bytes, (held, cache.stats.bytes)


def test_zero_bytes_is_refused() -> None:
    with pytest.raises(ValueError, match="max_bytes"):
        RowCache(0)


async def test_a_second_client_is_answered_from_the_servers_cache(
    make_server: MakeServer, make_client: MakeClient, make_control: MakeControl, ref: Reference
) -> None:
    server = await make_server(cache_mb=4, max_queue_delay_us=20_000)
    a, b = await make_client(server.endpoint), await make_client(server.endpoint)
    obs = positions(24, seed=7)
    la, va = await a.evaluate(obs)
    assert ref.rows_matching(obs, la, va).all()
    status = await a.status()
    assert status["rows"] == 24 and status["cache"]["misses"] == 24

    lb, vb = await b.evaluate(obs[::-1].copy())
    assert np.array_equal(lb, la[::-1]) and np.array_equal(vb, va[::-1])  # bit for bit
    # One request carrying a position twice, and a position new to the server.
    new = positions(1, seed=8)
    lc, vc = await b.evaluate(np.concatenate([new, new, obs[:1]]))
    assert np.array_equal(lc[0], lc[1]) and np.array_equal(lc[2], la[0])
    assert ref.rows_matching(new, lc[:1], vc[:1]).all()

    status = await b.status()
    assert status["rows"] == 25  # computed by the network: 24, then the one new position
    assert status["requests"] == 3
    c = status["cache"]
    assert (c["hits"], c["shared"], c["misses"], c["entries"]) == (25, 1, 25, 25)
    assert 0 < c["bytes"] <= 4 * 2**20

    # A new version is computed afresh, on its own weights.
    ctl = await make_control(server.endpoint)
    await ctl.load_weights(1, weights_blob(seed=1))
    l1, v1 = await a.evaluate(obs, 1)
    assert ref.rows_matching(obs, l1, v1, seed=1).all()
    assert (await a.status())["rows"] == 49

    line = server.status_line()
    assert "cache hit" in line and "entries 49" in line
    text = server.metrics.render()
    assert 'azserve_cache_hits_total{model="default"} 25.0' in text
    assert 'azserve_cache_entries{model="default"} 49.0' in text


async def test_many_clients_asking_the_same_positions_at_once(
    make_server: MakeServer, make_client: MakeClient, ref: Reference
) -> None:
    """Concurrent requests for one set of positions (batches formed while others compute):
    every answer is the network's, and no position is computed twice on one version except
    by batches already running when it was first asked."""
    server = await make_server(cache_mb=4)
    clients = [await make_client(server.endpoint) for _ in range(4)]
    obs = positions(16, seed=11)
    results = await asyncio.gather(*(c.evaluate(o) for _ in range(3) for c in clients for o in obs))
    logits = np.stack([r[0] for r in results])
    values = np.array([r[1] for r in results], np.float32)
    assert ref.rows_matching(np.tile(obs, (12, 1, 1, 1)), logits, values).all()
    status = await clients[0].status()
    assert status["cache"]["entries"] == 16
    assert status["rows"] <= 16 * server.backend.max_inflight
    assert status["cache"]["hits"] + status["cache"]["shared"] + status["rows"] == 192


async def test_off_by_default(make_server: MakeServer, make_client: MakeClient) -> None:
    server = await make_server()
    client = await make_client(server.endpoint)
    obs = positions(4, seed=1)
    await client.evaluate(obs)
    await client.evaluate(obs)
    status = await client.status()
    assert "cache" not in status and status["rows"] == 8
    assert "cache" not in server.status_line()
    assert "azserve_cache_hits" not in server.metrics.render()


def test_bench_selfplay_reports_the_servers_cache_over_its_window() -> None:
    from azserve.perf.selfplay import server_cache_window

    first = {"cache": {"hits": 10, "shared": 2, "misses": 88, "evictions": 0, "entries": 88,
                       "bytes": 2**20}}  # fmt: skip
    last = {"cache": {"hits": 70, "shared": 2, "misses": 128, "evictions": 5, "entries": 123,
                      "bytes": 3 * 2**20}}  # fmt: skip
    w = server_cache_window(first, last)
    assert w == {"hits": 60, "shared": 0, "misses": 40, "evictions": 5, "hit_rate": 0.6,
                 "entries": 123, "mb": 3.0}  # fmt: skip
    assert server_cache_window({}, {}) is None
