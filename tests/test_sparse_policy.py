"""Sparse, half-precision replies (azserve/sparse.py, docs/protocol.md "Sparse requests"): the
ragged layout and its checks, the wire round trip, malformed sparse input against a live server,
and the same priors as the dense path on real chess positions within float16's tolerance."""

from __future__ import annotations

import asyncio

import msgpack
import numpy as np
import pytest
import torch

from actors.evalcache import EvalCache
from actors.games import make_game
from actors.games.compiled import core
from actors.search import MCTSConfig
from actors.searches import make_search
from actors.searchpool import SearchPool
from actors.selfplay import GameLeaves, SelfPlayStats
from azserve import protocol as P
from azserve import sparse
from azserve.backends import BackendConfig, TorchConfig, make_backend
from azserve.errors import RemoteError
from azserve.model.network import build_net
from azserve.model.spec import NetConfig
from azserve.model.weights import state_dict_to_bytes
from azserve.server.dispatch import InitialWeights
from tests.conftest import NET, eval_header, positions

# --- the ragged layout -------------------------------------------------------------------------


def test_ragged_gather_scatter_round_trip() -> None:
    rows = [np.array([0, 4, 8]), np.array([], np.int64), np.array([3])]
    offsets, index = sparse.ragged(rows)
    assert offsets.tolist() == [0, 3, 3, 4] and offsets.dtype == np.int32
    assert index.tolist() == [0, 4, 8, 3] and index.dtype == np.int16
    assert sparse.check(offsets, index, 3, 9) is None
    dense = np.arange(27, dtype=np.float32).reshape(3, 9) / 7
    got = sparse.gather(dense, offsets, index)
    assert got.dtype == np.float16
    assert got.tolist() == dense[[0, 0, 0, 2], [0, 4, 8, 3]].astype(np.float16).tolist()
    back = sparse.scatter(offsets, index, got, 9, fill=-5.0)
    assert back[0, 4] == np.float32(np.float16(4 / 7)) and back[1].tolist() == [-5.0] * 9
    # The compiled core's uint16 bytes take the same route, and wide games get int32.
    as_bytes = sparse.ragged([np.array(r, "<u2").tobytes() for r in rows])
    assert [a.tolist() for a in as_bytes] == [offsets.tolist(), index.tolist()]
    assert sparse.ragged([np.array([40000])])[1].dtype == np.int32


@pytest.mark.parametrize(
    ("offsets", "actions", "needle"),
    [
        ([0, 2, 1, 3], [1, 2, 3], "offsets not monotone: offsets[2] = 1 < offsets[1] = 2"),
        ([0, 1, 2, 3], [1, 2, 9], "actions[2] = 9 is out of range 0..8"),
        ([0, 1, 2, 3], [1, 2, -1], "actions[2] = -1 is out of range"),
        ([0, 1, 2, 5], [1, 2, 3], "offsets[-1] = 5 does not match the 3 actions"),
        ([1, 1, 2, 3], [1, 2, 3], "offsets[0] is 1"),
        ([0, 1, 3], [1, 2, 3], "offsets shape [3] must be [4]"),
    ],
)
def test_check_names_what_is_wrong(offsets: list[int], actions: list[int], needle: str) -> None:
    why = sparse.check(np.array(offsets, np.int32), np.array(actions, np.int16), 3, 9)
    assert why is not None and needle in why


def test_check_dtypes() -> None:
    assert "int32" in (sparse.check(np.zeros(2, np.int64), np.zeros(0, np.int16), 1, 9) or "")
    why = sparse.check(np.zeros(2, np.int32), np.zeros(0, np.float32), 1, 9)
    assert why is not None and "int16 or int32" in why


def test_wanted_follows_the_knob() -> None:
    assert sparse.wanted("auto", 4672) and not sparse.wanted("auto", 82)
    assert sparse.wanted("on", 9) and not sparse.wanted("off", 4672)
    with pytest.raises(ValueError, match="sparse_policy"):
        sparse.wanted("yes", 9)  # type: ignore[arg-type]


def test_sparse_request_and_reply_round_trip_on_the_wire() -> None:
    obs = positions(2)
    offsets, actions = sparse.ragged([np.array([1, 5]), np.array([0, 2, 8])])
    frames = P.encode(P.EvalRequest(id=7, version=3), [obs, offsets, actions])
    msg, arrays = P.decode(frames)
    assert isinstance(msg, P.EvalRequest) and msg.version == 3
    assert [a.dtype.name for a in arrays] == ["uint8", "int32", "int16"]
    assert arrays[1].tolist() == [0, 2, 5] and arrays[2].tolist() == [1, 5, 0, 2, 8]
    logits = np.array([0.5, -1.25, 3.0, 0.0, 2.5], np.float16)
    reply, out = P.decode(
        P.encode(P.EvalReply(id=7, version=3, latest=3), [logits, np.ones(2, np.float32)])
    )
    assert isinstance(reply, P.EvalReply)
    assert out[0].dtype == np.float16 and out[0].tolist() == logits.tolist()
    assert len(frames[1 + 1]) == 12 and len(P.encode(reply, out)[1]) == 10  # bytes on the wire


# --- the server --------------------------------------------------------------------------------


def _sparse_header(rid: int, obs: np.ndarray, offsets: np.ndarray, actions: np.ndarray) -> dict:
    header = eval_header(rid, obs)
    header["arrays"] += [
        {"dtype": offsets.dtype.name, "shape": list(offsets.shape)},
        {"dtype": actions.dtype.name, "shape": list(actions.shape)},
    ]
    return header


async def test_malformed_sparse_input_is_answered_and_serving_goes_on(
    make_server, zmq_sockets
) -> None:
    server = await make_server()
    dealer = zmq_sockets.dealer(server.endpoint)
    obs = positions(2)
    bad = [
        (np.array([0, 3, 1], np.int32), np.array([1, 2, 3], np.int16), "not monotone"),
        (np.array([0, 1, 2], np.int32), np.array([1, 9], np.int16), "out of range 0..8"),
        (np.array([0, 1, 4], np.int32), np.array([1, 2], np.int16), "does not match the 2"),
        (np.array([0, 1, 2], np.int64), np.array([1, 2], np.int16), "must be int32"),
        (np.array([0, 1], np.int32), np.array([1], np.int16), "must be [3]"),
    ]
    for rid, (offsets, actions, needle) in enumerate(bad, 1):
        reply, _ = await dealer.call(
            _sparse_header(rid, obs, offsets, actions),
            obs.tobytes(),
            offsets.tobytes(),
            actions.tobytes(),
        )
        assert reply["op"] == "error" and reply["type"] == "BadLegal", reply
        assert needle in reply["message"]
    two = eval_header(9, obs)
    two["arrays"].append({"dtype": "int32", "shape": [3]})
    reply, _ = await dealer.call(two, obs.tobytes(), np.zeros(3, np.int32).tobytes())
    assert reply["type"] == "BadRequest" and "3 (obs, offsets, actions)" in reply["message"]
    # The server still serves, dense and sparse.
    offsets, actions = np.array([0, 2, 3], np.int32), np.array([4, 0, 8], np.int16)
    reply, arrays = await dealer.call(
        _sparse_header(20, obs, offsets, actions),
        obs.tobytes(),
        offsets.tobytes(),
        actions.tobytes(),
    )
    assert reply["op"] == "result"
    assert arrays[0].dtype == np.float16 and arrays[0].shape == (3,)
    reply, arrays = await dealer.call(eval_header(21, obs), obs.tobytes())
    assert reply["op"] == "result" and arrays[0].shape == (2, 9)
    assert server.status()["errors"] == len(bad) + 1  # and the BadRequest


@pytest.mark.parametrize("cache_mb", [0.0, 1.0])
async def test_client_sparse_answers_match_dense(make_server, make_client, cache_mb: float) -> None:
    server = await make_server(cache_mb=cache_mb)
    client = await make_client(server.endpoint)
    obs = positions(6, seed=3)
    dense, values = await client.evaluate(obs)
    legal = [np.flatnonzero(np.random.default_rng(i).random(9) < 0.5) for i in range(6)]
    # One leaf at a time (coalesced in one message) ...
    got = await asyncio.gather(*[client.evaluate(obs[i], -1, legal[i]) for i in range(6)])
    for i, (logits, value) in enumerate(got):
        assert logits.dtype == np.float16 and logits.shape == (len(legal[i]),)
        np.testing.assert_allclose(logits, dense[i, legal[i]], rtol=1e-3, atol=1e-3)
        assert value == pytest.approx(float(values[i]), rel=1e-5, abs=1e-6)
    # ... and a stack batched by its caller.
    offsets, actions = sparse.ragged(legal)
    flat, vals = await client.evaluate_rows(obs, -1, (offsets, actions))
    assert flat.dtype == np.float16 and flat.shape == (int(offsets[-1]),)
    back = sparse.scatter(offsets, actions, flat, 9, fill=np.nan)
    mask = ~np.isnan(back)
    np.testing.assert_allclose(back[mask], dense[mask], rtol=1e-3, atol=1e-3)
    np.testing.assert_allclose(vals, values, rtol=1e-5, atol=1e-6)


# --- chess: real positions, real server, real searches ----------------------------------------

CHESS = "chess(max_plies=256,history=1)"


def _chess_positions(n: int, seed: int = 0) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Planes and legal actions of ``n`` positions from random chess games."""
    game = make_game(CHESS)
    rng = np.random.default_rng(seed)
    obs, legal = [], []
    state = game.initial_state()
    while len(obs) < n:
        if game.is_terminal(state):
            state = game.initial_state()
            continue
        acts = game.legal_actions(state)
        obs.append(game.encode(state))
        legal.append(np.array(acts))
        state = game.apply(state, int(rng.choice(acts)))
    return obs, legal


def _chess_net() -> tuple[NetConfig, bytes]:
    """A small chess net whose policy logits spread like a trained one's (several units across a position's moves), so
    that float16's rounding is tested where it matters."""
    game = make_game(CHESS)
    c, h, w = game.obs_shape
    cfg = NetConfig(
        in_channels=c,
        height=h,
        width=w,
        num_actions=game.num_actions,
        blocks=1,
        channels=16,
        policy_channels=4,
    )
    net = build_net(cfg, seed=1)
    with torch.no_grad():
        net.policy_fc.weight.mul_(120.0)
    return cfg, state_dict_to_bytes(net.state_dict())


@pytest.fixture
async def chess_server(make_server):
    from azserve import InferenceServer
    from tests.conftest import server_config

    cfg, blob = _chess_net()
    backend = make_backend(cfg, BackendConfig(device="cpu", torch=TorchConfig(compile="none")))
    server = InferenceServer(server_config("tcp://127.0.0.1:*"), cfg.spec, backend)
    await server.start(InitialWeights(0, blob))
    yield server
    await server.aclose()


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x.astype(np.float64) - x.max())
    return e / e.sum()


@pytest.mark.skipif(core is None, reason="chess needs the compiled core")
async def test_chess_priors_fp16_match_fp32(chess_server, make_client) -> None:
    client = await make_client(chess_server.endpoint)
    obs, legal = _chess_positions(48)
    stack = np.stack(obs)
    dense, values = await client.evaluate(stack)
    offsets, actions = sparse.ragged(legal)
    flat, vals = await client.evaluate_rows(stack, -1, (offsets, actions))
    assert flat.nbytes == 2 * len(actions) and len(actions) < 48 * 60
    spread = []
    for i, acts in enumerate(legal):
        p32 = _softmax(dense[i, acts])
        p16 = _softmax(flat[offsets[i] : offsets[i + 1]])
        # Priors from float16 logits: off by at most exp(2 * 2^-9 * max|logit| / 2) - 1 or so,
        # relative; a few tenths of a percent at these magnitudes.
        np.testing.assert_allclose(p16, p32, rtol=1e-2, atol=1e-4)
        spread.append(float(np.ptp(dense[i, acts])))
    assert np.median(spread) > 5.0  # the logits do spread: the tolerance above is tested
    np.testing.assert_array_equal(vals, values)  # values stay float32, bit for bit


@pytest.mark.skipif(core is None, reason="chess needs the compiled core")
@pytest.mark.parametrize("route", ["pool", "leaves", "python", "puct-python", "puct-wide"])
async def test_chess_search_sparse_matches_dense(chess_server, make_client, route: str) -> None:
    """The same search, seed and server, dense then sparse: the same root visits (fp16 moves
    priors by well under the gaps that decide 16 Gumbel simulations at these positions)."""
    game = make_game(CHESS)
    cfg = MCTSConfig(
        algorithm="puct" if route.startswith("puct") else "gumbel",
        num_simulations=16,
        num_sampled_actions=8,
        leaves_in_flight=4 if route == "puct-wide" else 2 if route == "puct-python" else 1,
        core="python" if route.endswith("python") else "compiled",
    )
    state = game.initial_state()
    for i in (3, 0):
        state = game.apply(state, game.legal_actions(state)[i])
    results = {}
    for policy in ("off", "on"):
        client = await make_client(chess_server.endpoint, sparse_policy=policy)
        search = make_search(game, cfg, np.random.default_rng(5))
        stats = SelfPlayStats()
        cache = EvalCache(1 << 24)
        pool = None
        if route == "pool":
            pool = SearchPool(
                client.evaluate_rows, 64, stats, cache, sparse.wanted(policy, game.num_actions)
            )
        leaves = GameLeaves(
            game, client, 0, stats, cache, pool, sparse.wanted(policy, game.num_actions)
        )
        assert leaves.sparse == (policy == "on")
        try:
            res = await leaves.search(search, state, True, 16)
        finally:
            if pool is not None:
                await pool.aclose()
        results[policy] = res
        sent = client.stats.sparse_messages
        assert client.stats.messages > 0 and sent == (
            client.stats.messages if policy == "on" else 0
        )
    dense, sparse_ = results["off"], results["on"]
    np.testing.assert_array_equal(sparse_.visits, dense.visits)
    np.testing.assert_allclose(sparse_.root_prior, dense.root_prior, rtol=1e-2, atol=1e-4)
    if route in ("pool", "leaves", "python"):
        np.testing.assert_allclose(sparse_.policy, dense.policy, rtol=2e-2, atol=1e-3)
    assert (sparse_.root_prior > 0).sum() == len(game.legal_actions(state))  # every legal move
    assert abs(sparse_.root_value - dense.root_value) < 1e-3


def test_sparse_header_is_plain_msgpack() -> None:
    """A hand-built sparse request (msgpack + numpy only) decodes as azserve's own."""
    obs = positions(1)
    offsets, actions = np.array([0, 2], np.int32), np.array([3, 7], np.int32)
    head = msgpack.packb(_sparse_header(1, obs, offsets, actions))
    msg, arrays = P.decode([head, obs.tobytes(), offsets.tobytes(), actions.tobytes()])
    assert isinstance(msg, P.EvalRequest) and arrays[2].dtype == np.int32
    assert sparse.check(arrays[1], arrays[2], 1, NET.num_actions) is None


def test_remote_error_type_is_kept() -> None:
    from azserve.errors import remote_error

    err = remote_error("BadLegal", "actions[0] = 9 is out of range 0..8")
    assert isinstance(err, RemoteError) and err.type == "BadLegal"
