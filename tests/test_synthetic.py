"""The synthetic backend (deterministic outputs from the positions' bytes, no network) behind a
real server and client, and the client's batched send and reply routing on it: mixed single
and stacked leaves, non-contiguous arrays, one message per tick."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pytest

from actors.config import ActorsConfig
from actors.search import MCTSConfig
from actors.selfplay import SelfPlay
from azserve.backends import BackendConfig, make_backend
from azserve.backends.synthetic import projection, synthetic_outputs
from azserve.errors import VersionUnavailable
from tests.conftest import NET, MakeClient, MakeServer, positions
from tests.test_selfplay import ListSink, ResultSink

pytestmark = pytest.mark.timeout(60)


def test_outputs_are_a_pure_function_of_each_row() -> None:
    m = projection(NET.obs_shape, NET.num_actions)
    obs = positions(64, seed=3)
    logits, value = synthetic_outputs(obs, m)
    assert logits.shape == (64, NET.num_actions) and value.shape == (64,)
    assert logits.dtype == value.dtype == np.float32
    assert logits.min() >= -2 and logits.max() < 2 and value.min() >= -1 and value.max() < 1
    # Row by row, in another batch order: the same outputs.
    order = np.random.default_rng(0).permutation(64)
    l2, v2 = synthetic_outputs(obs[order], m)
    np.testing.assert_array_equal(l2, logits[order])
    np.testing.assert_array_equal(v2, value[order])
    # Different positions differ (no constant output).
    assert len({round(float(v), 6) for v in value}) > 50
    assert len({tuple(row) for row in logits.round(4).tolist()}) == len({o.tobytes() for o in obs})


async def test_backend_serves_loaded_versions_only() -> None:
    backend = make_backend(NET, BackendConfig(kind="synthetic"))
    await backend.start()
    with pytest.raises(VersionUnavailable):
        await backend.infer(0, positions(2, seed=0))
    await backend.load(0, b"not read")
    logits, value = await backend.infer(0, positions(2, seed=0))
    assert logits.shape == (2, NET.num_actions)
    await backend.unload(0)
    with pytest.raises(VersionUnavailable):
        await backend.infer(0, positions(2, seed=0))
    await backend.aclose()


async def test_client_routes_mixed_leaves_of_one_tick(
    make_server: MakeServer, make_client: MakeClient
) -> None:
    server = await make_server(backend=BackendConfig(kind="synthetic"))
    client = await make_client(server.endpoint, max_rows=64)
    m = projection(NET.obs_shape, NET.num_actions)
    obs = positions(300, seed=5)
    wide = np.zeros((*obs.shape[:3], 2 * obs.shape[3]), np.uint8)
    wide[..., ::2] = obs  # wide[i, ..., ::2] is obs[i], not C-contiguous
    stack = obs[200:212].reshape(3, 4, *NET.obs_shape)
    before = client.stats.messages
    calls = [client.evaluate(obs[i]) for i in range(100)]
    calls += [client.evaluate(wide[i, ..., ::2]) for i in range(100, 200)]
    calls += [client.evaluate(s) for s in stack]
    results = await asyncio.gather(*calls)
    want_logits, want_value = synthetic_outputs(obs, m)
    for i in range(200):
        logits, value = results[i]
        assert isinstance(value, float)
        np.testing.assert_array_equal(logits, want_logits[i])
        assert value == float(want_value[i])
    for j in range(3):
        logits, value = results[200 + j]
        np.testing.assert_array_equal(logits, want_logits[200 + 4 * j : 204 + 4 * j])
        np.testing.assert_array_equal(value, want_value[200 + 4 * j : 204 + 4 * j])
    # 212 rows of one tick at 64 rows per message: 4 messages, not 203.
    assert client.stats.messages - before == 4


async def test_selfplay_on_the_synthetic_backend(
    make_server: MakeServer, make_client: MakeClient
) -> None:
    server = await make_server(backend=BackendConfig(kind="synthetic"))
    client = await make_client(server.endpoint)
    sink = ListSink()
    cfg = ActorsConfig(games=16, max_games=16, sink="null", status_interval_s=0)
    sp = SelfPlay("tictactoe", cfg, MCTSConfig(num_simulations=8), client, sink, "t")
    stats = await sp.run(asyncio.Event())
    assert stats.games >= 16 and len(sink.items) >= 16
    assert stats.evaluations > 0 and stats.simulations == 8 * stats.positions + 8 * stats.resigned


async def test_simulations_are_counted_as_the_search_goes(
    make_server: MakeServer, make_client: MakeClient
) -> None:
    """The status line's rates come from counts made as leaves are asked for (a count at each
    search's end came in bursts, the games' searches ending together), and each move still
    adds exactly its simulations."""
    from actors.games import make_game
    from actors.selfplay import SelfPlayStats, play_game

    server = await make_server(backend=BackendConfig(kind="synthetic"))
    client = await make_client(server.endpoint)
    stats = SelfPlayStats()
    seen: list[int] = []

    class Recording:
        def pin_latest(self) -> Any:
            return client.pin_latest()

        async def evaluate(self, obs: np.ndarray, version: int) -> Any:
            seen.append(stats.simulations)
            return await client.evaluate(obs, version)

    mcts = MCTSConfig(num_simulations=16, resign_threshold=-2.0)
    game = await play_game(
        make_game("tictactoe"),
        mcts,
        Recording(),
        np.random.default_rng(0),
        stats,  # type: ignore[arg-type]
    )
    assert stats.simulations == 16 * stats.moves and stats.moves == len(game.policy)
    # The first search's leaves saw the count grow under them, before that search ended.
    first = [n for n in seen if n < 16]
    assert first == sorted(first) and len(set(first)) > 8
    assert stats.evaluations == len(seen)


async def test_chess_self_play_on_the_synthetic_backend(make_client: MakeClient) -> None:
    """A wide game (chess, 4,672 actions) on the synthetic backend: one row hash per position,
    not a projection to every output, so a batch costs milliseconds; sparse replies, as for a
    network, carry the legal moves' logits only and they are the dense outputs' own."""
    from actors.games import make_game
    from actors.games.compiled import core
    from azserve import InferenceServer, sparse
    from azserve.model.spec import NetConfig
    from azserve.server.dispatch import InitialWeights
    from tests.conftest import server_config

    if core is None:
        pytest.skip("chess needs the compiled core")
    game = make_game("chess(max_plies=16,history=1)")
    c, h, w = game.obs_shape
    net = NetConfig(in_channels=c, height=h, width=w, num_actions=game.num_actions)
    backend = make_backend(net, BackendConfig(kind="synthetic"))
    server = InferenceServer(server_config("tcp://127.0.0.1:*"), net.spec, backend)
    await server.start(InitialWeights(0, b"synthetic: not read"))
    try:
        client = await make_client(server.endpoint)
        sink = ResultSink()  # chess's policies travel sparse
        cfg = ActorsConfig(games=8, max_games=8, sink="null", status_interval_s=0)
        mcts = MCTSConfig(algorithm="gumbel", num_simulations=8, num_sampled_actions=8)
        sp = SelfPlay("chess(max_plies=16,history=1)", cfg, mcts, client, sink, "t")
        stats = await asyncio.wait_for(sp.run(asyncio.Event()), 50)
        assert stats.games >= 8 and stats.evaluations > 0
        assert client.stats.sparse_messages == client.stats.messages > 0
        s = game.apply(game.initial_state(), game.legal_actions(game.initial_state())[0])
        legal = np.array(game.legal_actions(s))
        offsets, actions = sparse.ragged([legal])
        flat, _ = await client.evaluate_rows(game.encode(s)[None], -1, (offsets, actions))
        dense, _ = synthetic_outputs(game.encode(s)[None], projection(game.obs_shape, 4672))
        np.testing.assert_allclose(flat, dense[0, legal], atol=2e-3)  # float16 on the wire
    finally:
        await server.aclose()
