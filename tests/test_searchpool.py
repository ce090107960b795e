"""``actors.searchpool.SearchPool``: the games' compiled searches driven in rounds give the same
games as the per-leaf path (same seed and evaluator: same training data and counters), across
lanes and versions, with the cache; failures and cancellations stay with their searches."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from typing import Any

import numpy as np
import pytest

from actors.evalcache import EvalCache
from actors.games import ConnectFour, TicTacToe
from actors.games.compiled import compiled_available, step_many
from actors.search import MCTSConfig
from actors.searches import make_search
from actors.searchpool import SearchPool
from actors.selfplay import FinishedGame, SelfPlayStats, play_game
from tests.test_compiled_mcts import hashed

pytestmark = [
    pytest.mark.skipif(
        not compiled_available(ConnectFour()), reason="actors._mcts_core was not built"
    ),
    pytest.mark.timeout(120),
]

C4, TTT = ConnectFour(), TicTacToe()
ONE = hashed()


class Client:
    """``EvalClient``'s calls that play_game and the pool make, on a deterministic net that
    answers after ``delay``; counts messages and rows. The version changes the answers."""

    def __init__(self, delay: float = 0.0, fail_on: int = 0) -> None:
        self.latest_version = 3
        self.delay = delay
        self.messages = 0
        self.rows = 0
        self.fail_on = fail_on

    def pin_latest(self) -> Any:
        return contextlib.nullcontext(self.latest_version)

    async def _answer(self, obs: np.ndarray, version: int) -> Any:
        self.messages += 1
        if self.delay:
            await asyncio.sleep(self.delay)
        if self.fail_on and self.messages == self.fail_on:
            raise RuntimeError("the server broke")
        rows = obs if obs.ndim == 4 else obs[None]
        self.rows += len(rows)
        out = [
            await ONE(np.concatenate([r, np.full((1, *r.shape[1:]), version, r.dtype)]))
            for r in rows
        ]
        logits = np.stack([o[0] for o in out])
        values = np.array([o[1] for o in out], np.float32)
        return (logits, values) if obs.ndim == 4 else (logits[0], float(values[0]))

    def evaluate(self, obs: np.ndarray, version: int = -1) -> Any:
        return asyncio.ensure_future(self._answer(obs, version))


CONFIGS = {
    "gumbel": MCTSConfig(algorithm="gumbel", num_simulations=16, resign_threshold=-0.7),
    "gumbel_capped": MCTSConfig(
        algorithm="gumbel", num_simulations=16, full_search_fraction=0.4, fast_simulations=4
    ),
    "puct": MCTSConfig(num_simulations=24, no_resign_fraction=0.5),
}


def same(a: FinishedGame, b: FinishedGame) -> None:
    np.testing.assert_array_equal(a.obs, b.obs)
    np.testing.assert_array_equal(a.policy, b.policy)
    np.testing.assert_array_equal(a.outcome, b.outcome)
    assert (a.result, a.resigned, a.moves, a.version) == (b.result, b.resigned, b.moves, b.version)


def counts(s: SelfPlayStats) -> dict[str, Any]:
    return {k: v for k, v in dataclasses.asdict(s).items() if k != "loop_lag_ms"}


async def _games(
    cfg: MCTSConfig, seeds: list[int], pooled: bool, cache_mb: float, rows: int, store: str = "auto"
):
    client = Client(delay=0.001)
    stats = SelfPlayStats()
    cache = EvalCache(int(cache_mb * 2**20), store) if cache_mb else None
    pool = SearchPool(client.evaluate, rows, stats, cache) if pooled else None
    lanes = 0
    try:
        games = await asyncio.gather(
            *(
                play_game(C4, cfg, client, np.random.default_rng(s), stats, 5.0, cache, pool)  # type: ignore[arg-type]
                for s in seeds
            )
        )
    finally:
        if pool is not None:
            lanes = pool.lanes
            await pool.aclose()
    return games, stats, client, lanes


@pytest.mark.parametrize("cache", ["off", "python", "compiled"])
@pytest.mark.parametrize("name", sorted(CONFIGS))
async def test_pooled_games_are_the_per_leaf_games(name: str, cache: str) -> None:
    """Twelve games at once in lanes of five: each game is the one the per-leaf path plays,
    and the counters agree; the pool sends far fewer messages. With the cache, either store
    (the compiled one answers the pool's leaves inside its C loop)."""
    cfg, seeds = CONFIGS[name], list(range(12))
    cache_mb = 0 if cache == "off" else 8
    want, want_stats, leaf_client, _ = await _games(cfg, seeds, False, cache_mb, 5, "python")
    got, got_stats, pool_client, lanes = await _games(cfg, seeds, True, cache_mb, 5, cache)
    for a, b in zip(want, got, strict=True):
        same(a, b)
    if cache_mb == 0:  # with the cache, joins of leaves in flight differ (the pool has none)
        assert counts(got_stats) == counts(want_stats)
        assert pool_client.rows == leaf_client.rows
    else:
        assert got_stats.evaluations == want_stats.evaluations
        assert got_stats.simulations == want_stats.simulations
    assert lanes >= 3  # 12 searches, at most 5 per lane
    # The per-leaf fake sends a message per leaf; the pool, one per lane round.
    assert pool_client.messages < 0.75 * leaf_client.messages


async def test_games_on_several_versions_share_rounds_and_keep_their_own() -> None:
    cfg = CONFIGS["gumbel"]
    client = Client()
    stats = SelfPlayStats()
    pool = SearchPool(client.evaluate, 64, stats)

    async def on(version: int, seed: int) -> FinishedGame:
        c = Client()
        c.latest_version = version
        c.evaluate = client.evaluate  # type: ignore[method-assign]
        return await play_game(C4, cfg, c, np.random.default_rng(seed), stats, pool=pool)  # type: ignore[arg-type]

    got = await asyncio.gather(*(on(v, s) for v in (3, 4) for s in range(3)))
    await pool.aclose()
    for (v, s), g in zip([(v, s) for v in (3, 4) for s in range(3)], got, strict=True):
        solo = Client()
        solo.latest_version = v
        same(g, await play_game(C4, cfg, solo, np.random.default_rng(s), SelfPlayStats()))  # type: ignore[arg-type]
        assert g.version == v


async def test_a_failed_evaluation_fails_its_searches_and_the_pool_goes_on() -> None:
    client = Client(fail_on=3)
    pool = SearchPool(client.evaluate, 8)
    searches = [make_search(C4, CONFIGS["gumbel"], np.random.default_rng(i)) for i in range(4)]
    futs = [pool.search(s, C4.initial_state(), 3, True, 16) for s in searches]
    results = await asyncio.gather(*futs, return_exceptions=True)
    assert all(isinstance(r, RuntimeError) for r in results)
    assert all(s.tree_nodes == 0 for s in searches)  # reset: never reused half-searched
    # The same pool serves the next searches.
    again = await pool.search(searches[0], C4.initial_state(), 3, True, 16)
    assert again.visits.sum() == 16
    await pool.aclose()


async def test_bad_logits_fail_only_that_search() -> None:
    good = Client()

    def evaluate(obs: np.ndarray, version: int) -> Any:
        if version == 9:
            fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
            fut.set_result((np.zeros((len(obs), 3), np.float32), np.zeros(len(obs), np.float32)))
            return fut
        return good.evaluate(obs, version)

    pool = SearchPool(evaluate, 8)
    bad = pool.search(
        make_search(C4, MCTSConfig(), np.random.default_rng(0)), C4.initial_state(), 9, False, 8
    )
    ok = pool.search(
        make_search(C4, MCTSConfig(), np.random.default_rng(1)), C4.initial_state(), 3, False, 8
    )
    with pytest.raises(ValueError, match=r"logits of shape \(3,\)"):
        await bad
    assert (await ok).visits.sum() == 8
    await pool.aclose()


async def test_a_cancelled_search_leaves_its_lane() -> None:
    client = Client(delay=0.01)
    pool = SearchPool(client.evaluate, 8)
    a = make_search(
        C4, MCTSConfig(algorithm="gumbel", num_simulations=64), np.random.default_rng(0)
    )
    b = make_search(
        C4, MCTSConfig(algorithm="gumbel", num_simulations=16), np.random.default_rng(1)
    )
    fa = pool.search(a, C4.initial_state(), 3, True, 64)
    fb = pool.search(b, C4.initial_state(), 3, True, 16)
    await asyncio.sleep(0.05)
    fa.cancel()
    assert (await fb).visits.sum() == 16
    await asyncio.sleep(0.05)
    assert a.tree_nodes == 0  # dropped and reset
    assert sum(lane.size for lane in pool._lanes) == 0
    await pool.aclose()


async def test_searches_the_pool_cannot_drive_are_told_apart() -> None:
    rng = np.random.default_rng(0)
    assert SearchPool.supports(make_search(C4, CONFIGS["gumbel"], rng))
    assert SearchPool.supports(make_search(TTT, MCTSConfig(), rng))
    assert not SearchPool.supports(make_search(C4, MCTSConfig(leaves_in_flight=4), rng))
    assert not SearchPool.supports(make_search(C4, MCTSConfig(core="python"), rng))
    assert not SearchPool.supports(
        make_search(C4, dataclasses.replace(CONFIGS["gumbel"], core="python"), rng)
    )
    with pytest.raises(ValueError, match="max_rows"):
        SearchPool(Client().evaluate, 0)


# --- step_many: every tree's step at once, in C ---------------------------------------------------


def _started(cfg: MCTSConfig, seed: int) -> tuple[Any, np.ndarray]:
    """A compiled search from the opening, its root expanded and its first leaf in obs."""
    search = make_search(C4, cfg, np.random.default_rng(seed))
    assert search.begin(C4.initial_state())
    root = np.empty(C4.obs_shape, np.uint8)
    search.tree.root_obs(root)
    logits, value = _answer(root[None], np.float32)
    search.tree.expand_root(logits[0], float(value[0]))
    search.prepare(True, cfg.num_simulations)
    obs = np.empty(C4.obs_shape, np.uint8)
    assert search.tree.descend(obs) == 1
    return search, obs


def _answer(stack: np.ndarray, dtype: Any) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(int(stack.sum()) + len(stack))
    logits = (rng.standard_normal((len(stack), 7)) * 2).astype(dtype)
    return logits, rng.uniform(-1, 1, len(stack)).astype(dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", ["gumbel", "puct"])
def test_step_many_is_step_on_each_tree(name: str, dtype: Any) -> None:
    """Six searches stepped one by one and six stepped by step_many, on the same answers: the
    same leaves at every round, the same flags, results and counts of leaves fed."""
    cfg = CONFIGS[name]
    one = [_started(cfg, i) for i in range(6)]
    many = [_started(cfg, i) for i in range(6)]
    live = list(range(6))
    rounds = 0
    while live:
        stack = np.stack([one[i][1] for i in live])
        np.testing.assert_array_equal(stack, np.stack([many[i][1] for i in live]))
        logits, values = _answer(stack, dtype)
        want = [
            one[i][0].tree.step(logits[j], float(values[j]), one[i][1]) for j, i in enumerate(live)
        ]
        flags, errors = step_many(
            [many[i][0].tree for i in live], logits, values, [many[i][1] for i in live]
        )
        assert errors is None
        assert list(flags) == [int(w > 0) for w in want]
        live = [i for i, f in zip(live, flags, strict=True) if f]
        rounds += 1
    assert rounds == cfg.num_simulations  # no terminal leaf this early in the game
    for (a, _), (b, _) in zip(one, many, strict=True):
        assert a.tree.fed == b.tree.fed == cfg.num_simulations
        ra, rb = a.result(1), b.result(1)
        np.testing.assert_array_equal(ra.visits, rb.visits)
        assert ra.root_value == rb.root_value


def test_step_many_fails_only_the_trees_that_cannot_step() -> None:
    cfg = CONFIGS["gumbel"]
    (a, oa), (b, ob) = _started(cfg, 0), _started(cfg, 1)
    idle = make_search(C4, cfg, np.random.default_rng(2))  # no search: no pending leaf
    logits, values = _answer(np.stack([oa, oa, ob, oa]), np.float32)
    flags, errors = step_many(
        [a.tree, idle.tree, b.tree, "not a tree"], logits, values, [oa, oa.copy(), ob, oa.copy()]
    )
    assert list(flags) == [1, 0, 1, 0]  # a and b stepped, waiting for their next leaves
    assert [i for i, _ in errors] == [1, 3]
    assert isinstance(errors[0][1], RuntimeError) and "one pending leaf" in str(errors[0][1])
    assert isinstance(errors[1][1], TypeError)
    assert a.tree.fed == b.tree.fed == 1
    with pytest.raises(ValueError, match=r"logits must be \[n, A\]"):
        step_many([a.tree], logits[0], values, [oa])  # one row, not [n, A]
    with pytest.raises(ValueError, match=r"logits must be \[n, A\]"):
        step_many([a.tree], logits.astype(np.float16), values, [oa])
    with pytest.raises(ValueError, match="1 trees but 2 outs"):
        step_many([a.tree], logits, values, [oa, ob])


def _per_position(stack: np.ndarray, dtype: Any) -> tuple[np.ndarray, np.ndarray]:
    """Answers that depend on each position alone (as a network's do), so a cache may give them."""
    out = [_answer(row[None], dtype) for row in stack]
    return np.concatenate([o[0] for o in out]), np.concatenate([o[1] for o in out])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", ["gumbel", "puct"])
def test_the_compiled_cache_steps_trees_as_step_would(name: str, dtype: Any) -> None:
    """``Cache.step``: a tree's leaves answered from the cache in C are the leaves ``step``
    answers from the same rows; searches fed only from the cache (nothing sent) or partly end
    with the same visits, values and leaves fed, and every leaf is a hit or a miss once."""
    cfg = CONFIGS[name]
    cache = EvalCache(1 << 22, "compiled")
    store, kind = cache.compiled, cache.kind(np.empty(C4.obs_shape, np.uint8))
    want = [_started(cfg, i) for i in range(6)]
    live, leaves = list(range(6)), 6
    while live:  # the per-tree path, every answer stored as the pool stores replies
        stack = np.stack([want[i][1] for i in live])
        logits, values = _per_position(stack, dtype)
        cache.put_rows(7, stack, logits, values)
        flags, _ = step_many([want[i][0].tree for i in live], logits, values,
                             [want[i][1] for i in live])  # fmt: skip
        live = [i for i, f in zip(live, flags, strict=True) if f]
        leaves += len(live)

    got = [_started(cfg, i) for i in range(6)]
    flags, errors, hits = store.step([g.tree for g, _ in got], None, None,
                                     [o for _, o in got], 7, kind)  # fmt: skip
    assert errors is None and list(flags) == [0] * 6 and hits == 6 * cfg.num_simulations
    assert store.misses == 0
    for (a, _), (b, _) in zip(want, got, strict=True):
        assert b.tree.fed == a.tree.fed == cfg.num_simulations
        ra, rb = a.result(1), b.result(1)
        np.testing.assert_array_equal(ra.visits, rb.visits)
        assert ra.root_value == rb.root_value

    # Another version misses everywhere; the misses are answered as replies and stored, and
    # the searches continue in C from the rows they share with others.
    part = [_started(cfg, i) for i in range(6)]
    trees, outs = [t for t, _ in part], [o for _, o in part]
    flags, errors, hits = store.step([t.tree for t in trees], None, None, outs, 8, kind)
    assert errors is None and list(flags) == [1] * 6 and hits == 0 and store.misses == 6
    live, answered = list(range(6)), 0
    while live:
        stack = np.stack([outs[i] for i in live])
        logits, values = _per_position(stack, dtype)
        cache.put_rows(8, stack, logits, values)
        answered += len(live)
        flags, errors, more = store.step([trees[i].tree for i in live], logits, values,
                                         [outs[i] for i in live], 8, kind)  # fmt: skip
        assert errors is None
        hits += more
        live = [i for i, f in zip(live, flags, strict=True) if f]
    assert hits + answered == 6 * cfg.num_simulations
    for (a, _), b in zip(want, trees, strict=True):
        np.testing.assert_array_equal(a.result(1).visits, b.result(1).visits)


def test_the_compiled_cache_step_fails_only_the_trees_that_cannot_step() -> None:
    cfg = CONFIGS["gumbel"]
    cache = EvalCache(1 << 20, "compiled")
    store, kind = cache.compiled, cache.kind(np.empty(C4.obs_shape, np.uint8))
    (a, oa) = _started(cfg, 0)
    idle = make_search(C4, cfg, np.random.default_rng(2))
    logits, values = _answer(np.stack([oa, oa]), np.float32)
    flags, errors, hits = store.step([a.tree, idle.tree], logits, values, [oa, oa.copy()], 1, kind)
    assert list(flags) == [1, 0] and hits == 0 and [i for i, _ in errors] == [1]
    assert "one pending leaf" in str(errors[0][1])
    with pytest.raises(TypeError, match="step"):
        store.step([a.tree], logits, values, [oa])
    with pytest.raises(ValueError, match="1 trees but 2 outs"):
        store.step([a.tree], None, None, [oa, oa], 1, kind)


def _count_step_many(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The pool's ``step_many`` calls, counted: the trees of each."""
    import actors.searchpool as sp

    calls: list[int] = []

    def counting(trees: list[Any], *rest: Any) -> Any:
        calls.append(len(trees))
        return step_many(trees, *rest)

    monkeypatch.setattr(sp, "step_many", counting)
    return calls


def _three_columns_after_the_root_on(bad: int) -> Any:
    """An evaluator: good answers, except on version ``bad`` after its first message (the
    roots'), where the logits have 3 columns instead of 7."""
    good = Client()
    seen: dict[int, int] = {}

    def evaluate(obs: np.ndarray, version: int) -> Any:
        seen[version] = seen.get(version, 0) + 1
        if version == bad and seen[version] > 1:
            fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
            fut.set_result((np.zeros((len(obs), 3), np.float32), np.zeros(len(obs), np.float32)))
            return fut
        return good.evaluate(obs, version)

    return evaluate


async def test_the_pool_steps_inner_leaves_in_c_and_fails_bad_rows_per_search(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Without the cache the pool feeds inner leaves through step_many; logits of the wrong
    width after the root fail that version's searches, and the others go on."""
    calls = _count_step_many(monkeypatch)
    evaluate = _three_columns_after_the_root_on(9)

    pool = SearchPool(evaluate, 8)
    cfg = CONFIGS["gumbel"]
    bad = [pool.search(make_search(C4, cfg, np.random.default_rng(i)), C4.initial_state(), 9,
                       True, 16) for i in range(2)]  # fmt: skip
    ok = pool.search(
        make_search(C4, cfg, np.random.default_rng(5)), C4.initial_state(), 3, True, 16
    )
    for fut in bad:
        with pytest.raises(ValueError, match=r"logits of shape \(3,\)"):
            await fut
    assert (await ok).visits.sum() == 16
    assert calls and max(calls) == 2  # two inner leaves at once on a version
    assert sum(lane.size for lane in pool._lanes) == 0
    await pool.aclose()


class _CountingStore:
    """The compiled cache store, its ``step`` calls counted (the trees of each with a reply)."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self.calls: list[int] = []

    def step(self, trees: list[Any], logits: Any, *rest: Any) -> Any:
        if logits is not None:
            self.calls.append(len(trees))
        return self.store.step(trees, logits, *rest)


@pytest.mark.parametrize("store", ["python", "compiled"])
async def test_with_the_cache_inner_leaves_still_step_in_c_and_bad_replies_are_not_cached(
    monkeypatch: pytest.MonkeyPatch, store: str
) -> None:
    """With the cache on, the pool stores each well-formed reply and steps the inner leaves in
    C at once (the compiled store: ``Cache.step``, which also answers their next leaves from
    the cache; the Python store: ``step_many``); a reply of the wrong width fails its searches
    and is never cached, so it cannot answer another search later."""
    calls = _count_step_many(monkeypatch)
    evaluate = _three_columns_after_the_root_on(9)

    cache = EvalCache(1 << 22, store)
    if store == "compiled":
        counting = _CountingStore(cache.compiled)
        cache.compiled = counting
        calls = counting.calls
    pool = SearchPool(evaluate, 8, cache=cache)
    cfg = CONFIGS["gumbel"]
    bad = [pool.search(make_search(C4, cfg, np.random.default_rng(i)), C4.initial_state(), 9,
                       True, 16) for i in range(2)]  # fmt: skip
    ok = [pool.search(make_search(C4, cfg, np.random.default_rng(i)), C4.initial_state(), 3,
                      True, 16) for i in range(2)]  # fmt: skip
    for fut in bad:
        with pytest.raises(ValueError, match=r"logits of shape \(3,\)"):
            await fut
    results = [await fut for fut in ok]
    assert [r.visits.sum() for r in results] == [16, 16]
    assert calls and max(calls) >= 2  # inner leaves of one version stepped at once, in C
    # Of version 9 only the root's (well-formed) answer is kept: both searches start from the
    # same position. None of the 3-column rows is; version 3's leaves are all there.
    entries = cache.entries()
    assert [obs.tobytes() for version, obs, _, _ in entries if version == 9] == [
        C4.encode(C4.initial_state()).tobytes()
    ]
    assert sum(version == 3 for version, *_ in entries) > 16
    assert all(logits.shape == (C4.num_actions,) for _, _, logits, _ in entries)
    assert sum(lane.size for lane in pool._lanes) == 0
    await pool.aclose()


async def test_rounds_go_out_full_while_every_game_is_playing() -> None:
    """A game whose search finished takes its move and hands in its next search before its
    lane's next round goes out: with as many games as lanes hold, rounds are full (before,
    each round missed the searches that finished in the last one)."""
    sizes: list[int] = []
    client = Client()

    def evaluate(obs: np.ndarray, version: int) -> Any:
        sizes.append(len(obs))
        return client.evaluate(obs, version)

    cfg = dataclasses.replace(CONFIGS["gumbel"], resign_threshold=-2.0)
    pool = SearchPool(evaluate, 8)
    stats = SelfPlayStats()
    stop = False

    async def player(seed: int) -> None:
        while not stop:
            rng = np.random.default_rng([seed, len(sizes)])
            await play_game(C4, cfg, client, rng, stats, 5.0, None, pool)  # type: ignore[arg-type]

    tasks = [asyncio.ensure_future(player(i)) for i in range(16)]  # two lanes of 8
    while len(sizes) < 400:
        await asyncio.sleep(0.01)
    stop = True
    steady = sizes[20:400]
    await asyncio.gather(*tasks)
    lanes = pool.lanes
    await pool.aclose()
    assert stats.games > 16  # games ended and new ones began meanwhile
    assert lanes == 2
    # Rounds with a root are full too; only a game's last move leaves a gap until it restarts.
    assert sum(n == 8 for n in steady) >= 0.9 * len(steady), sorted(steady)[:20]


async def test_a_lane_that_dies_fails_its_searches_and_the_pool(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A bug in a lane (here: its round raises) is not swallowed: the lane's searches fail
    with it, the pool's lifecycle holds it, and later searches are refused."""
    from actors import searchpool
    from azserve.errors import ComponentFailed

    async def broken(self: Any, jobs: Any) -> None:
        raise RuntimeError("a bug in the round")

    monkeypatch.setattr(searchpool._Lane, "_round", broken)
    pool = SearchPool(Client().evaluate, 8)
    search = make_search(C4, CONFIGS["gumbel"], np.random.default_rng(0))
    fut = pool.search(search, C4.initial_state(), 3, True, 16)
    with pytest.raises(ComponentFailed, match="a bug in the round"):
        await fut
    await asyncio.sleep(0)
    assert isinstance(pool.lifecycle.error, RuntimeError) and pool.lifecycle.failed.is_set()
    assert search.tree_nodes == 0  # its tree was reset
    other = make_search(C4, CONFIGS["gumbel"], np.random.default_rng(1))
    with pytest.raises(ComponentFailed, match="search-pool is failed"):
        pool.search(other, C4.initial_state(), 3, True, 16)
    await pool.aclose()
