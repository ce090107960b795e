"""Trajectory transport over real sockets (ipc and tcp loopback), and the local sinks."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import numpy as np
import pytest
import zmq
import zmq.asyncio

from actors.config import ActorsConfig
from actors.main import open_sink
from actors.sender import TrajectorySender
from actors.sinks import FileSink, NullSink, read_trajectory_file
from azserve.errors import ProtocolError, ServerClosed
from azserve.protocol import ErrorReply, EvalRequest, Trajectory, TrajectoryAck, decode, encode
from azserve.sparse import SparseRows
from learner.config import LearnerConfig
from learner.receiver import DuplicateFilter, TrajectoryReceiver

OBS = (2, 3, 3)
A = 9
Arrays = tuple[np.ndarray, np.ndarray, np.ndarray]


def traj(
    game_id: int, t: int = 3, version: int = 0, actor: str = "actor-1", game: str = "tictactoe"
) -> tuple[Trajectory, np.ndarray, np.ndarray, np.ndarray]:
    msg = Trajectory(actor=actor, game_id=game_id, game=game, version=version, length=t, result=1.0)
    obs = np.full((t, *OBS), game_id % 256, np.uint8)
    policy = np.full((t, A), 1 / A, np.float32)
    outcome = np.ones(t, np.float32)
    return msg, obs, policy, outcome


async def until(cond: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.01)


@pytest.fixture
async def ctx() -> AsyncIterator[zmq.asyncio.Context]:
    """One context per test; whatever a test leaves open is closed with linger=0."""
    c = zmq.asyncio.Context()
    yield c
    c.destroy(linger=0)


@pytest.fixture(params=["ipc", "tcp"])
def endpoint(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return f"ipc://{tmp_path}/traj.sock" if request.param == "ipc" else "tcp://127.0.0.1:*"


class Learner:
    """What the learner loop would do with accepted trajectories: keep them."""

    def __init__(self) -> None:
        self.got: list[tuple[str, int, int]] = []
        self.arrays: dict[tuple[str, int], Arrays] = {}

    def __call__(
        self, msg: Trajectory, obs: np.ndarray, policy: np.ndarray, outcome: np.ndarray
    ) -> None:
        self.got.append((msg.actor, msg.game_id, msg.version))
        self.arrays[(msg.actor, msg.game_id)] = (obs, policy, outcome)


def receiver(
    ctx: zmq.asyncio.Context,
    endpoint: str,
    learner: Learner,
    bind_retry_s: float = 2.0,
    **kw: object,
) -> TrajectoryReceiver:
    cfg = LearnerConfig(bind=endpoint, close_linger_ms=0, bind_retry_s=bind_retry_s)
    return TrajectoryReceiver(cfg, OBS, A, learner, game="tictactoe", context=ctx, **kw)  # type: ignore[arg-type]


def sender(ctx: zmq.asyncio.Context, endpoint: str, **kw: object) -> TrajectorySender:
    cfg = ActorsConfig(learner=endpoint, **{"resend_after_s": 0.2, "drain_timeout_s": 2.0, **kw})  # type: ignore[arg-type]
    return TrajectorySender(cfg, context=ctx)


async def test_delivery_and_acks_from_two_senders(ctx: zmq.asyncio.Context, endpoint: str) -> None:
    learner = Learner()
    async with receiver(ctx, endpoint, learner) as rx:
        assert rx.endpoint is not None and not rx.endpoint.endswith("*")
        s1, s2 = sender(ctx, rx.endpoint), sender(ctx, rx.endpoint)
        await s1.start()
        await s2.start()
        for i in range(10):
            await s1.send(*traj(i, version=i % 2, actor="a"))
            await s2.send(*traj(i, t=2, actor="b"))
        await until(lambda: s1.stats().acked == 10 and s2.stats().acked == 10)
        assert await s1.aclose() == 0 and await s2.aclose() == 0
        st = rx.stats()
        assert (st.accepted, st.positions, st.duplicates, st.rejected) == (20, 50, 0, 0)
        assert st.by_version == {0: 15, 1: 5}
    assert sorted(learner.got) == sorted(
        [("a", i, i % 2) for i in range(10)] + [("b", i, 0) for i in range(10)]
    )
    obs, policy, outcome = learner.arrays[("a", 7)]
    assert obs.shape == (3, *OBS) and (obs == 7).all() and policy.dtype == np.float32
    s = s1.stats()
    assert (s.sent, s.acked, s.pending, s.positions) == (10, 10, 0, 30)


async def test_duplicates_are_acked_and_dropped(ctx: zmq.asyncio.Context, endpoint: str) -> None:
    learner = Learner()
    async with receiver(ctx, endpoint, learner) as rx:
        dealer = ctx.socket(zmq.DEALER)
        dealer.connect(rx.endpoint)
        msg, *arrays = traj(5)
        msg.id = 42
        frames = encode(msg, arrays)
        replies = []
        for _ in range(2):
            await dealer.send_multipart(frames)
            replies.append(decode(await dealer.recv_multipart())[0])
        assert replies == [
            TrajectoryAck(id=42, game_id=5),
            TrajectoryAck(id=42, game_id=5, duplicate=True),
        ]
        assert rx.stats().duplicates == 1
        dealer.close(linger=0)
    assert learner.got == [("actor-1", 5, 0)]


def bad_messages() -> list[tuple[int | None, list[bytes | memoryview], str]]:
    """(expected reply id, frames, expected message fragment)."""
    out: list[tuple[int | None, list[bytes | memoryview], str]] = []
    out.append((None, [b"\xc1not msgpack"], "bad header"))
    out.append((7, [b"\x82\xa2op\xa4nope\xa2id\x07"], "bad header"))  # {"op": "nope", "id": 7}
    out.append((8, encode(EvalRequest(id=8), [np.zeros((1, *OBS), np.uint8)]), "expected a 'traj'"))
    m, o, p, z = traj(1)
    m.id = 9
    out.append((9, encode(m, [o[:, :1], p, z]), "obs must be uint8[3, 2, 3, 3]"))
    m.id = 10
    out.append((10, encode(m, [o.astype(np.float32), p, z]), "obs must be uint8"))
    m.id = 11
    out.append((11, encode(m, [o[:2], p[:2], z[:2]]), "obs must be uint8[3,"))  # length says 3
    m.id = 12
    out.append((12, encode(m, [o, p, z])[:-1], "2 followed"))
    m.id = 13
    out.append((13, encode(m, [o, np.full_like(p, math.nan), z]), "non-finite"))
    m.id = 14
    out.append((14, encode(m, [o, p]), "expected 3 arrays"))
    g, o, p, z = traj(2, game="connect4")
    g.id = 15
    out.append((15, encode(g, [o, p, z]), "not this learner's"))
    m, o, p, z = traj(3)
    m.id, m.moves = 16, 2
    out.append((16, encode(m, [o, p, z]), "moves 2 < length 3"))
    # Sparse policies (azserve/trajarrays.py): offsets, index, weight in the policy's place.
    m, o, p, z = traj(4)
    m.sparse = True
    rows = SparseRows.from_dense(p)
    m.id = 17
    out.append((17, encode(m, [o, *rows.arrays()]), "expected 5 arrays (obs, offsets, index"))
    m.id = 18
    bad_index = rows.index.copy()
    bad_index[4] = A
    out.append(
        (
            18,
            encode(m, [o, rows.offsets, bad_index, rows.weight, z]),
            "index[4] = 9 is out of range",
        )
    )
    m.id = 19
    out.append(
        (19, encode(m, [o, rows.offsets, rows.index, -rows.weight, z]), "weight has negative")
    )
    m.id = 20
    short = rows.offsets.copy()
    short[-1] -= 1
    out.append(
        (20, encode(m, [o, short, rows.index, rows.weight, z]), "offsets[-1] = 26 does not match")
    )
    return out


async def test_malformed_input_gets_error_replies_and_the_receiver_keeps_serving(
    ctx: zmq.asyncio.Context, endpoint: str
) -> None:
    learner = Learner()
    async with receiver(ctx, endpoint, learner) as rx:
        dealer = ctx.socket(zmq.DEALER)
        dealer.connect(rx.endpoint)
        cases = bad_messages()
        for rid, frames, fragment in cases:
            await dealer.send_multipart(frames)
            reply, _ = decode(await asyncio.wait_for(dealer.recv_multipart(), 5))
            assert isinstance(reply, ErrorReply), (rid, reply)
            assert (reply.id, reply.type) == (rid, "BadRequest")
            assert fragment in reply.message, (fragment, reply.message)
        dealer.close(linger=0)
        good = sender(ctx, rx.endpoint)
        await good.start()
        await good.send(*traj(1))
        await until(lambda: good.stats().acked == 1)
        await good.aclose()
        assert rx.stats().rejected == len(cases)
    assert learner.got == [("actor-1", 1, 0)]


async def test_sparse_trajectory_is_delivered_as_sparse_rows(
    ctx: zmq.asyncio.Context, endpoint: str
) -> None:
    learner = Learner()
    async with receiver(ctx, endpoint, learner) as rx:
        tx = sender(ctx, rx.endpoint)
        await tx.start()
        msg, obs, policy, outcome = traj(6)
        msg.sparse = True
        await tx.send(msg, obs, SparseRows.from_dense(policy), outcome)
        await until(lambda: tx.stats().acked == 1)
        await tx.aclose()
        assert rx.stats().rejected == 0
    _, got, _ = learner.arrays[("actor-1", 6)]
    assert isinstance(got, SparseRows)
    np.testing.assert_allclose(got.dense(A), policy, rtol=1e-3)


async def test_rejected_trajectory_is_dropped_not_resent(
    ctx: zmq.asyncio.Context, endpoint: str
) -> None:
    async with receiver(ctx, endpoint, Learner()) as rx:
        tx = sender(ctx, rx.endpoint)
        await tx.start()
        await tx.send(*traj(1, game="connect4"))
        await until(lambda: tx.stats().rejected == 1)
        assert tx.stats().pending == 0 and "BadRequest" in (tx.last_error or "")
        await asyncio.sleep(0.3)  # past resend_after_s: nothing is resent
        assert tx.stats().resent == 0
        await tx.aclose()


def fixed(endpoint: str, bound: str) -> str:
    """The endpoint a restarted receiver binds: the same port when the first one picked it."""
    return bound if endpoint.endswith("*") else endpoint


async def test_restart_on_same_endpoint_delivers_exactly_once(
    ctx: zmq.asyncio.Context, endpoint: str
) -> None:
    learner, seen = Learner(), DuplicateFilter(1000)
    r1 = receiver(ctx, endpoint, learner, dedup=seen)
    await r1.start()
    assert r1.endpoint is not None
    ep = fixed(endpoint, r1.endpoint)
    tx = sender(ctx, ep)
    await tx.start()
    for i in range(5):
        await tx.send(*traj(i))
    await until(lambda: tx.stats().acked == 5)
    await r1.aclose()
    for i in range(5, 10):  # the learner is away
        await tx.send(*traj(i))
    r2 = receiver(ctx, ep, learner, dedup=seen)
    await r2.start()
    for i in range(10, 15):
        await tx.send(*traj(i))
    await until(lambda: tx.stats().acked == 15, timeout=10)
    assert await tx.aclose() == 0
    await r2.aclose()
    assert sorted(g for _, g, _ in learner.got) == list(range(15))


async def test_unacked_trajectory_is_resent_after_the_timeout(
    ctx: zmq.asyncio.Context, endpoint: str
) -> None:
    # A learner that loses the first copy and acks the second.
    fake = ctx.socket(zmq.ROUTER)
    fake.bind(endpoint)
    tx = sender(ctx, fake.getsockopt_string(zmq.LAST_ENDPOINT), resend_after_s=0.2)
    await tx.start()
    # Timed from the send, not from this test's read of the first copy: on a loaded machine that
    # read can come late, and the resend (due 0.2 s after the send) soon after it.
    t0 = time.monotonic()
    await tx.send(*traj(1))
    first = await asyncio.wait_for(fake.recv_multipart(), 5)
    again = await asyncio.wait_for(fake.recv_multipart(), 5)
    assert time.monotonic() - t0 >= 0.2 and again[1:] == first[1:]
    msg, _ = decode(again[1:])
    await fake.send_multipart([again[0], *encode(TrajectoryAck(id=msg.id, game_id=1))])
    await until(lambda: tx.stats().acked == 1)
    s = tx.stats()
    assert (s.resent, s.pending, s.reconnects) == (1, 0, 0)
    await tx.aclose()
    fake.close(linger=0)


async def test_unacked_trajectory_is_resent_on_reconnect(
    ctx: zmq.asyncio.Context, endpoint: str
) -> None:
    # A learner that dies before acking: it reads the trajectory and never answers.
    dead = ctx.socket(zmq.ROUTER)
    dead.bind(endpoint)
    ep = fixed(endpoint, dead.getsockopt_string(zmq.LAST_ENDPOINT))
    tx = sender(ctx, ep, resend_after_s=30.0)  # the timer cannot be what resends it
    await tx.start()
    await tx.send(*traj(1))
    await asyncio.wait_for(dead.recv_multipart(), 5)
    dead.close(linger=0)
    learner = Learner()
    async with receiver(ctx, ep, learner):
        await until(lambda: tx.stats().acked == 1, timeout=10)
        s = tx.stats()
        assert s.resent == 1 and s.reconnects == 1
        await tx.aclose()
    assert learner.got == [("actor-1", 1, 0)]


async def test_send_waits_for_outbox_space(ctx: zmq.asyncio.Context, tmp_path: Path) -> None:
    ep = f"ipc://{tmp_path}/late.sock"
    tx = sender(ctx, ep, max_outbox=2)
    await tx.start()
    await tx.send(*traj(0))
    await tx.send(*traj(1))
    third = asyncio.create_task(tx.send(*traj(2)))
    await asyncio.sleep(0.3)
    assert not third.done() and tx.stats().pending == 2
    learner = Learner()
    async with receiver(ctx, ep, learner):
        await asyncio.wait_for(third, 5)
        await until(lambda: tx.stats().acked == 3)
        assert await tx.aclose() == 0
    assert sorted(g for _, g, _ in learner.got) == [0, 1, 2]


async def test_aclose_reports_unacked_and_fails_waiting_sends(
    ctx: zmq.asyncio.Context, tmp_path: Path
) -> None:
    tx = sender(ctx, f"ipc://{tmp_path}/nobody.sock", max_outbox=2, drain_timeout_s=0.2)
    await tx.start()
    await tx.send(*traj(0))
    await tx.send(*traj(1))
    waiting = asyncio.create_task(tx.send(*traj(2)))
    await asyncio.sleep(0.05)
    assert await tx.aclose() == 2
    with pytest.raises(ServerClosed):
        await waiting
    with pytest.raises(ServerClosed):
        await tx.send(*traj(3))
    assert await tx.aclose() == 2  # idempotent


async def test_lifecycle(ctx: zmq.asyncio.Context, endpoint: str) -> None:
    rx = receiver(ctx, endpoint, Learner())
    await rx.start()
    with pytest.raises(RuntimeError, match="cannot start"):
        await rx.start()
    assert rx.endpoint is not None
    if endpoint.startswith("tcp"):  # (ZeroMQ's ipc bind silently takes over the path)
        clash = receiver(ctx, rx.endpoint, Learner(), bind_retry_s=0.1)
        with pytest.raises(zmq.ZMQError):
            await clash.start()
        await clash.aclose()
    tx = sender(ctx, rx.endpoint)
    await tx.start()
    with pytest.raises(RuntimeError, match="cannot start"):
        await tx.start()
    with pytest.raises(ValueError, match="does not match"):
        m, o, p, z = traj(0)
        await tx.send(m, o, p[:2], z)
    await tx.aclose()
    await rx.aclose()
    await rx.aclose()


async def test_callback_error_stops_the_receiver_and_is_reraised(
    ctx: zmq.asyncio.Context, endpoint: str
) -> None:
    def broken(*_: object) -> None:
        raise KeyError("learner bug")

    rx = TrajectoryReceiver(
        LearnerConfig(bind=endpoint, close_linger_ms=0), OBS, A, broken, context=ctx
    )
    await rx.start()
    assert rx.endpoint is not None
    dealer = ctx.socket(zmq.DEALER)
    dealer.connect(rx.endpoint)
    msg, *arrays = traj(0)
    await dealer.send_multipart(encode(msg, arrays))
    await until(lambda: rx.stats().received == 1)
    await asyncio.sleep(0.05)
    with pytest.raises(KeyError, match="learner bug"):
        await rx.aclose()
    dealer.close(linger=0)


def test_duplicate_filter_forgets_oldest_first() -> None:
    f = DuplicateFilter(3)
    for i in range(4):
        f.add(("a", i))
    assert ("a", 0) not in f and all(("a", i) in f for i in (1, 2, 3)) and len(f) == 3


async def test_file_sink_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "out" / "games.azt"
    async with FileSink(path) as sink:
        for i in range(3):
            await sink.send(*traj(i, t=i + 1))
    async with FileSink(path) as sink:  # appends to an existing file
        await sink.send(*traj(3))
        assert sink.stats().sent == 1
    got = list(read_trajectory_file(path))
    assert [m.game_id for m, *_ in got] == [0, 1, 2, 3]
    msg, obs, policy, outcome, targets = got[2]
    assert targets == {}
    assert msg.length == 3 and obs.shape == (3, *OBS) and (obs == 2).all()
    assert policy.dtype == np.float32 and outcome.tolist() == [1.0, 1.0, 1.0]
    # A writer that died mid-record leaves a truncated tail: the complete records still read.
    data = path.read_bytes()
    path.write_bytes(data[:-5])
    assert [m.game_id for m, *_ in read_trajectory_file(path)] == [0, 1, 2]
    path.write_bytes(b"something else")
    with pytest.raises(ProtocolError, match="not a trajectory file"):
        list(read_trajectory_file(path))
    with pytest.raises(ProtocolError, match="not a trajectory file"):
        await FileSink(path).start()


async def test_null_sink_counts_and_open_sink_picks(tmp_path: Path) -> None:
    async with NullSink() as sink:
        await sink.send(*traj(0, t=4))
        await sink.send(*traj(1, t=2))
        s = sink.stats()
        assert (s.sent, s.acked, s.positions, s.pending) == (2, 2, 6, 0)
    with pytest.raises(ServerClosed):
        await sink.send(*traj(2))
    assert isinstance(open_sink(ActorsConfig(sink="null")), NullSink)
    assert isinstance(open_sink(ActorsConfig(sink="file", file=str(tmp_path / "x.azt"))), FileSink)
    assert isinstance(
        open_sink(ActorsConfig(learner="tcp://127.0.0.1:1", file="x")), TrajectorySender
    )


async def test_full_zeromq_queue_is_retried_when_the_learner_comes(
    ctx: zmq.asyncio.Context, tmp_path: Path
) -> None:
    ep = f"ipc://{tmp_path}/hwm.sock"
    tight = zmq.asyncio.Context()
    tight.setsockopt(zmq.SNDHWM, 1)  # ZeroMQ's own queue takes one message: the rest must wait
    try:
        tx = TrajectorySender(ActorsConfig(learner=ep, resend_after_s=5.0), context=tight)
        await tx.start()
        for i in range(6):
            await tx.send(*traj(i))
        await asyncio.sleep(0.1)
        learner = Learner()
        async with receiver(ctx, ep, learner):
            await until(lambda: tx.stats().acked == 6)  # well before any resend is due
            assert await tx.aclose() == 0
        assert tx.stats().resent == 0
        assert sorted(g for _, g, _ in learner.got) == list(range(6))
    finally:
        tight.destroy(linger=0)
