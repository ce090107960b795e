"""The inference server with real sockets and the real torch backend on a tiny net: every row
checked against a direct model call; a hand-written msgpack client; per-version batching; a
weight load under load; SyncClient; status, ping and Prometheus; a client that outlives its
server."""

from __future__ import annotations

import asyncio
import hashlib
import re
from pathlib import Path
from typing import Any

import msgpack
import numpy as np
import pytest
import uvloop
import zmq

from azserve import (
    ClientConfig,
    EvalClient,
    InferenceServer,
    InitialWeights,
    RemoteError,
    RequestTimeout,
    SyncClient,
    VersionRetired,
    VersionUnavailable,
)
from azserve.backends import BackendConfig, TorchConfig, make_backend
from tests.conftest import (
    NET,
    GatedBackend,
    MakeClient,
    MakeControl,
    MakeServer,
    Reference,
    ZmqSockets,
    eval_header,
    free_tcp_port,
    positions,
    server_config,
    wait_for,
    weights_blob,
)

pytestmark = pytest.mark.timeout(60)


async def test_many_coroutines_through_one_client(
    make_server: MakeServer, make_client: MakeClient, ref: Reference
) -> None:
    server = await make_server()
    client = await make_client(server.endpoint)
    obs = positions(900, seed=1)
    stacks = positions(40, seed=2).reshape(10, 4, *NET.obs_shape)
    logits = np.full((900, NET.num_actions), np.nan, np.float32)
    values = np.full(900, np.nan, np.float32)

    async def game(i: int) -> None:
        # Three sequential leaves per coroutine, like a search awaiting each evaluation.
        for row in range(3 * i, 3 * i + 3):
            logits[row], value = await client.evaluate(obs[row])
            assert isinstance(value, float)
            values[row] = value

    async def stack(i: int) -> tuple[np.ndarray, np.ndarray]:
        return await client.evaluate(stacks[i])

    stacked = await asyncio.gather(*(stack(i) for i in range(10)), *(game(i) for i in range(300)))
    assert ref.rows_matching(obs, logits, values).all()
    for i, (stack_logits, stack_values) in enumerate(stacked[:10]):
        assert stack_logits.shape == (4, NET.num_actions) and stack_values.shape == (4,)
        assert ref.matches(stacks[i], stack_logits, stack_values)
    assert client.stats.rows == 940
    assert client.stats.messages < 310  # leaves of one loop tick travel together
    status = await client.status()
    assert (status["rows"], status["errors"], status["queued_rows"]) == (940, 0, 0)
    assert status["batches"] < 310


async def test_rows_batched_by_their_caller_go_out_as_they_are(
    make_server: MakeServer, make_client: MakeClient, ref: Reference
) -> None:
    """``evaluate_rows`` (a search pool's lane): each stack is one message of its own, its
    buffer sent without a copy, beside single leaves coalesced as before; a stack over
    ``max_rows`` or not ``[n,C,H,W]`` is refused before anything is sent."""
    server = await make_server()
    client = await make_client(server.endpoint, max_rows=16)
    stacks = positions(48, seed=3).reshape(3, 16, *NET.obs_shape)
    leaves = positions(5, seed=4)
    answers = await asyncio.gather(
        *(client.evaluate_rows(stacks[i]) for i in range(3)),
        *(client.evaluate(leaves[i]) for i in range(5)),
    )
    for i in range(3):
        logits, values = answers[i]
        assert logits.shape == (16, NET.num_actions) and values.shape == (16,)
        assert ref.matches(stacks[i], logits, values)
    assert ref.rows_matching(
        leaves, np.stack([a[0] for a in answers[3:]]), np.array([a[1] for a in answers[3:]])
    ).all()
    assert (client.stats.messages, client.stats.rows) == (4, 53)  # 3 stacks + 1 tick of leaves
    with pytest.raises(ValueError, match="max_rows"):
        client.evaluate_rows(positions(17, seed=5))
    with pytest.raises(ValueError, match=r"\[n,C,H,W\]"):
        client.evaluate_rows(leaves[0])
    assert client.stats.messages == 4


async def test_plain_msgpack_client(
    make_server: MakeServer, zmq_sockets: ZmqSockets, ref: Reference
) -> None:
    """A client written from docs/protocol.md with msgpack, pyzmq and numpy only."""
    server = await make_server()
    sock = zmq_sockets.socket(zmq.DEALER)
    sock.connect(server.endpoint)
    obs = positions(5, seed=3)

    header = {
        "op": "eval",
        "id": 17,
        "proto": 1,
        "model": "default",
        "version": -1,
        "arrays": [{"dtype": "uint8", "shape": [5, 2, 3, 3]}],
    }
    await sock.send_multipart([msgpack.packb(header), obs.tobytes()])
    frames = await asyncio.wait_for(sock.recv_multipart(), 5)
    reply = msgpack.unpackb(frames[0])
    assert reply["op"] == "result"
    assert (reply["id"], reply["version"], reply["latest"]) == (17, 0, 0)
    assert reply["arrays"] == [
        {"dtype": "float32", "shape": [5, 9]},
        {"dtype": "float32", "shape": [5]},
    ]
    assert len(frames) == 3 and (len(frames[1]), len(frames[2])) == (5 * 9 * 4, 5 * 4)
    logits = np.frombuffer(frames[1], "<f4").reshape(5, 9)
    value = np.frombuffer(frames[2], "<f4")
    assert ref.matches(obs, logits, value)

    await sock.send_multipart([msgpack.packb({"op": "ping", "id": 18})])
    pong = msgpack.unpackb((await asyncio.wait_for(sock.recv_multipart(), 5))[0])
    assert pong == {
        "op": "pong",
        "id": 18,
        "arrays": [],
        "latest": 0,
        "server_id": server.server_id,
    }

    await sock.send_multipart([msgpack.packb({"op": "status", "id": 19})])
    status = msgpack.unpackb((await asyncio.wait_for(sock.recv_multipart(), 5))[0])
    assert status["op"] == "status_reply" and status["status"]["rows"] == 5


async def test_req_socket_with_empty_delimiter(
    make_server: MakeServer, zmq_sockets: ZmqSockets, ref: Reference
) -> None:
    """A REQ socket prepends an empty delimiter frame; the server echoes it back."""
    server = await make_server()
    req = zmq_sockets.socket(zmq.REQ)
    req.connect(server.endpoint)
    obs = positions(2, seed=4)
    await req.send_multipart([msgpack.packb(eval_header(1, obs)), obs.tobytes()])
    frames = await asyncio.wait_for(req.recv_multipart(), 5)
    reply = msgpack.unpackb(frames[0])
    assert (reply["op"], reply["id"]) == ("result", 1)
    logits = np.frombuffer(frames[1], "<f4").reshape(2, 9)
    assert ref.matches(obs, logits, np.frombuffer(frames[2], "<f4"))

    # The same with a DEALER that adds the delimiter by hand: it comes back first.
    dealer = zmq_sockets.dealer(server.endpoint)
    await dealer.send_frames([b"", msgpack.packb({"op": "ping", "id": 2})])
    frames = await dealer.recv_frames()
    assert frames[0] == b"" and msgpack.unpackb(frames[1])["op"] == "pong"


async def test_versions_are_batched_apart(
    make_server: MakeServer,
    make_client: MakeClient,
    zmq_sockets: ZmqSockets,
    ref: Reference,
    make_control: MakeControl,
) -> None:
    # A long delay lets requests of all versions sit in the queues together.
    server = await make_server(max_queue_delay_us=20_000)
    ctl = await make_control(server.endpoint)
    client = await make_client(server.endpoint)
    loaded = await ctl.load_weights(1, weights_blob(seed=1))
    assert (loaded.version, loaded.latest, loaded.model) == (1, 1, "default")

    obs = positions(240, seed=5)
    requested = [(0, 1, -1)[i % 3] for i in range(240)]
    results = await asyncio.gather(
        *(client.evaluate(o, v) for o, v in zip(obs, requested, strict=True))
    )
    logits = np.stack([r[0] for r in results])
    values = np.array([r[1] for r in results], np.float32)
    on_v0 = np.array(requested) == 0  # -1 is the latest: version 1
    assert ref.rows_matching(obs[on_v0], logits[on_v0], values[on_v0], seed=0).all()
    assert ref.rows_matching(obs[~on_v0], logits[~on_v0], values[~on_v0], seed=1).all()

    status = await client.status()
    assert status["versions"]["served_rows"] == {"0": 80, "1": 160}
    assert status["versions"]["resident"] == [0, 1]

    raw = zmq_sockets.dealer(server.endpoint)
    pair = obs[:2]
    for rid, version, served_by in [(1, 0, 0), (2, 1, 1), (3, -1, 1)]:
        reply, (logits, value) = await raw.call(
            eval_header(rid, pair, version=version), pair.tobytes()
        )
        assert (reply["op"], reply["version"], reply["latest"]) == ("result", served_by, 1)
        assert ref.matches(pair, logits, value, seed=served_by)


async def test_weight_load_under_load(
    make_server: MakeServer, make_client: MakeClient, ref: Reference, make_control: MakeControl
) -> None:
    """No request fails across a swap; after the ack, new requests for the latest version get
    the new weights while requests pinned to the old version keep the old ones."""
    server = await make_server(max_queue_delay_us=500)
    ctl = await make_control(server.endpoint)
    client = await make_client(server.endpoint)
    publisher = await make_client(server.endpoint)
    obs = positions(64, seed=6)
    stop = asyncio.Event()
    acked = False
    # Per kind of request, (obs row, logits, value) of every reply.
    got: dict[str, list[tuple[int, np.ndarray, float]]] = {"before": [], "after": [], "pinned": []}

    async def game(i: int, pinned: bool) -> None:
        k = i
        while not stop.is_set():
            row = k % len(obs)
            k += 7
            if pinned:
                kind = "pinned"
                logits, value = await client.evaluate(obs[row], version=0)
            else:
                # Asked after the ack: the new version must serve it. Asked before: either may
                # (it can be in flight across the swap), but the row must match one of them.
                kind = "after" if acked else "before"
                logits, value = await client.evaluate(obs[row])
            got[kind].append((row, logits, value))

    def served_by(kind: str, seed: int) -> np.ndarray:
        rows = np.array([r for r, _, _ in got[kind]])
        logits = np.stack([lg for _, lg, _ in got[kind]])
        values = np.array([v for _, _, v in got[kind]], np.float32)
        return ref.rows_matching(obs[rows], logits, values, seed)

    client.pin(0)
    games = [asyncio.create_task(game(i, pinned=i % 2 == 0)) for i in range(32)]
    await wait_for(lambda: len(got["before"]) >= 200)
    loaded = await ctl.load_weights(1, weights_blob(seed=1))
    acked = True
    assert loaded.latest == 1
    await wait_for(lambda: len(got["after"]) >= 200 and len(got["pinned"]) >= 400)
    stop.set()
    await asyncio.gather(*games)  # any failed request raises here
    status = await publisher.status()
    client.unpin(0)

    assert served_by("pinned", seed=0).all()
    assert served_by("after", seed=1).all()
    assert (served_by("before", seed=0) | served_by("before", seed=1)).all()
    assert client.latest_version == 1
    assert status["errors"] == 0
    assert status["versions"]["resident"] == [0, 1]
    assert status["versions"]["pinned"] == {"0": 1}


async def test_sync_client(make_server: MakeServer, ref: Reference) -> None:
    server = await make_server()
    obs = positions(3, seed=7)
    blob = weights_blob(seed=1)

    def standalone_user() -> None:
        with SyncClient(server.endpoint, timeout_s=5.0) as c:
            assert c.ping().server_id == server.server_id
            logits, value, version = c.evaluate(obs)
            assert version == 0 and ref.matches(obs, logits, value, seed=0)
            assert c.load_weights(1, blob).version == 1
            logits, value, version = c.evaluate(obs)
            assert version == 1 and ref.matches(obs, logits, value, seed=1)
            logits, value, version = c.evaluate(obs, version=0)
            assert version == 0 and ref.matches(obs, logits, value, seed=0)
            assert c.status()["versions"]["latest"] == 1
            with pytest.raises(VersionUnavailable, match="version 7 is not resident"):
                c.evaluate(obs, version=7)
            with pytest.raises(RemoteError) as err:
                c.evaluate(obs[:, :1])
            assert err.value.type == "BadShape"

    # Blocking calls run on a thread so that this loop keeps serving.
    await asyncio.to_thread(standalone_user)


async def test_status_and_ping(make_server: MakeServer, make_client: MakeClient) -> None:
    server = await make_server()
    client = await make_client(server.endpoint)
    pong = await client.ping()
    assert (pong.server_id, pong.latest) == (server.server_id, 0)
    assert client.server_id == server.server_id and client.latest_version == 0

    await asyncio.gather(*(client.evaluate(o) for o in positions(10, seed=8)))
    status = await client.status()
    assert status["server_id"] == server.server_id
    assert (status["state"], status["model"]) == ("serving", "default")
    assert status["versions"]["latest"] == 0 and status["versions"]["resident"] == [0]
    assert (status["rows"], status["queued_rows"], status["errors"], status["dropped"]) == (
        10,
        0,
        0,
        0,
    )
    assert status["requests"] >= 1 and status["batches"] >= 1
    assert sum(status["batch_hist"].values()) == status["batches"]
    assert set(status["latency_ms"]) == {"p50", "p90", "p99"}
    assert "latest 0" in server.status_line()
    # The thread count in force ends the line (scripts/threads_effect.py reads it there).
    threads = status["backend"].get("threads")
    assert server.status_line().endswith(f"  threads {threads}") == bool(threads)


async def test_prometheus_endpoint(make_server: MakeServer, make_client: MakeClient) -> None:
    port = free_tcp_port()
    server = await make_server(metrics_port=port)
    client = await make_client(server.endpoint)
    await client.evaluate(positions(3, seed=9))

    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n")
    await writer.drain()
    response = await asyncio.wait_for(reader.read(), 5)
    writer.close()
    await writer.wait_closed()

    head, body = response.split(b"\r\n\r\n", 1)
    assert head.startswith(b"HTTP/1.1 200 OK")
    text = body.decode()
    for name, kind in [
        ("azserve_requests_total", "counter"),
        ("azserve_rows_total", "counter"),
        ("azserve_batches_total", "counter"),
        ("azserve_error_replies_total", "counter"),
        ("azserve_dropped_total", "counter"),
        ("azserve_compute_busy_seconds_total", "counter"),
        ("azserve_weight_loads_total", "counter"),
        ("azserve_batch_size", "histogram"),
        ("azserve_queue_delay_seconds", "histogram"),
        ("azserve_compute_seconds", "histogram"),
        ("azserve_latency_seconds", "histogram"),
        ("azserve_queued_rows", "gauge"),
        ("azserve_latest_version", "gauge"),
        ("azserve_versions_resident", "gauge"),
        ("azserve_build_info", "gauge"),
        ("process_resident_memory_bytes", "gauge"),
    ]:
        assert f"# TYPE {name} {kind}\n" in text, name
    assert '\nazserve_rows_total{model="default"} 3.0\n' in text
    assert '\nazserve_batch_size_bucket{le="+Inf",model="default"} 1.0\n' in text
    # Latencies in seconds, with _sum and _count: rate() and aggregation across servers work.
    assert '\nazserve_latency_seconds_count{model="default"} 1.0\n' in text
    assert 'role="server"' in text


async def test_client_outlives_a_server_restart(
    make_server: MakeServer,
    make_client: MakeClient,
    zmq_sockets: ZmqSockets,
    ipc_endpoint: str,
    ref: Reference,
) -> None:
    """Requests a dying server swallowed are resent when the new server answers a heartbeat
    (retry_after_s is far too long to explain it); requests sent while no server was there
    are delivered when one binds. All complete with correct results."""
    first = await make_server(ipc_endpoint)
    client = await make_client(ipc_endpoint, heartbeat_s=0.05, retry_after_s=600.0)
    obs = positions(30, seed=10)
    assert ref.matches(obs[:5], *(await client.evaluate(obs[:5])))
    await first.aclose()

    # A "server" that takes requests and dies without answering.
    swallower = zmq_sockets.socket(zmq.ROUTER)
    swallower.bind(ipc_endpoint)
    lost = client.evaluate(obs[5:15])
    frames = await asyncio.wait_for(swallower.recv_multipart(), 5)
    assert msgpack.unpackb(frames[1])["op"] in ("eval", "ping")
    while msgpack.unpackb(frames[1])["op"] != "eval":
        frames = await asyncio.wait_for(swallower.recv_multipart(), 5)
    swallower.close(linger=0)

    queued = client.evaluate(obs[15:30])  # no server at all now
    await asyncio.sleep(0.1)
    second = await make_server(ipc_endpoint)

    logits, value = await asyncio.wait_for(lost, 10)
    assert ref.matches(obs[5:15], logits, value)
    logits, value = await asyncio.wait_for(queued, 10)
    assert ref.matches(obs[15:30], logits, value)
    assert client.server_id == second.server_id
    assert client.stats.server_restarts == 1
    assert client.stats.resent >= 1


@pytest.mark.parametrize("caught_up", [True, False])
async def test_a_server_restarted_behind_does_not_send_new_games_back_to_old_weights(
    make_server: MakeServer,
    make_client: MakeClient,
    make_control: MakeControl,
    ipc_endpoint: str,
    ref: Reference,
    caught_up: bool,
) -> None:
    """A restarted server comes back on its initial weights (v0) before the learner catches it
    up. New games keep the newest version seen (their requests wait, as for a lost version)
    rather than start on v0; only a server that stays behind past ``catch_up_s`` (one replaced
    by another) gets its own latest taken."""
    first = await make_server(ipc_endpoint)
    ctl = await make_control(ipc_endpoint)
    await ctl.load_weights(1, weights_blob(seed=1))
    await ctl.load_weights(2, weights_blob(seed=2))
    client = await make_client(ipc_endpoint, heartbeat_s=0.05, catch_up_s=1.0)
    await wait_for(lambda: client.latest_version == 2)
    await first.aclose()
    second = await make_server(ipc_endpoint)  # back on v0
    await wait_for(lambda: client.server_id == second.server_id)
    assert (client.server_latest, client.latest_version) == (0, 2)
    with client.pin_latest() as v:
        assert v == 2
        obs = positions(4, seed=11)
        with pytest.raises(VersionUnavailable):
            await client.evaluate(obs, version=v)
        if caught_up:
            ctl2 = await make_control(ipc_endpoint)
            await ctl2.load_weights(2, weights_blob(seed=2))  # the learner's catch-up
            assert ref.matches(obs, *(await client.evaluate(obs, version=v)), seed=2)
    if caught_up:
        await asyncio.sleep(1.5)  # past catch_up_s: nothing to give up, it caught up
        assert (client.server_latest, client.latest_version) == (2, 2)
    else:
        await wait_for(lambda: client.latest_version == 0, timeout_s=5)
        assert client.server_latest == 0


async def test_request_fails_clearly_when_no_server_comes_back(
    make_server: MakeServer, make_client: MakeClient, ipc_endpoint: str
) -> None:
    server = await make_server(ipc_endpoint)
    client = await make_client(
        ipc_endpoint, heartbeat_s=0.05, retry_after_s=0.1, request_timeout_s=0.5
    )
    await server.aclose()
    with pytest.raises(RequestTimeout, match="no reply from ipc://.* after 1 attempt"):
        await asyncio.wait_for(client.evaluate(positions(1)[0]), 10)
    assert client.stats.resent == 0  # nothing answers: resending into the void does not help
    # the request's wait, measured to its timeout: request_timeout_s, give or take a heartbeat
    assert 0.5 <= client.stats.longest_wait_s < 0.5 + 5.0


async def test_a_long_queue_is_waited_for_not_resent(
    make_server: MakeServer, make_client: MakeClient
) -> None:
    """A live server with a queue longer than ``retry_after_s`` (its heartbeats answered)
    gets each request once: resending would only queue the same rows again."""
    backend = GatedBackend(hold_infer=True)
    server = await make_server(backend=backend, max_queue_delay_us=0)
    client = await make_client(server.endpoint, heartbeat_s=0.05, retry_after_s=0.2)
    futs = [client.evaluate(o) for o in positions(3)]
    await asyncio.sleep(1.0)  # five retry periods with every batch held
    backend.gate.set()
    await asyncio.wait_for(asyncio.gather(*futs), 10)
    assert client.stats.resent == 0 and server.status()["rows"] == 3  # each row computed once
    assert client.stats.longest_wait_s >= 1.0  # they waited the second the batches were held


async def test_retirement_spares_versions_in_use(
    make_server: MakeServer, make_client: MakeClient, ref: Reference, make_control: MakeControl
) -> None:
    """With no grace, an unpinned old version is retired once idle, but never while a batch
    on it computes; a request for a retired version gets VersionUnavailable."""
    backend = GatedBackend()
    server = await make_server(backend=backend, version_grace_s=0.0)
    ctl = await make_control(server.endpoint)
    client = await make_client(server.endpoint)
    obs = positions(3, seed=11)
    on_v0 = client.evaluate(obs, version=0)  # v0 is the latest: it cannot go yet
    await asyncio.wait_for(backend.entered.wait(), 5)
    for v in (1, 2):
        await ctl.load_weights(v, weights_blob(seed=v))
    # v1 is idle and unpinned: retired at the next housekeeping pass, which spares v0.
    await wait_for(lambda: 1 not in server.versions)
    assert server.versions.resident() == [0, 2]

    backend.gate.set()
    assert ref.matches(obs, *(await on_v0), seed=0)
    await wait_for(lambda: 0 not in server.versions)
    with pytest.raises(VersionRetired, match="version 0 was retired here"):
        await client.evaluate(obs, version=0)


async def test_duplicate_load_is_acked_only_when_live(
    make_server: MakeServer, zmq_sockets: ZmqSockets, ref: Reference
) -> None:
    """A publisher that resends a load (lost ack) while the first one is still loading gets
    its ack only once the version serves."""
    backend = GatedBackend(hold_infer=False)
    server = await make_server(backend=backend)
    backend.load_gate.clear()
    raw = zmq_sockets.dealer(server.endpoint)
    blob = weights_blob(seed=1)
    load = {"op": "load", "version": 1, "sha256": hashlib.sha256(blob).hexdigest()}
    load_arrays = [{"dtype": "uint8", "shape": [len(blob)]}]
    await raw.send({**load, "id": 1, "arrays": load_arrays}, blob)
    await asyncio.wait_for(backend.load_entered.wait(), 5)
    await raw.send({**load, "id": 2, "arrays": load_arrays}, blob)
    # Two round trips give the server every chance to answer the duplicate: an ack sent
    # before the status reply would arrive before it.
    early = []
    for rid, op in [(3, "ping"), (4, "status")]:
        await raw.send({"op": op, "id": rid})
        while (reply := (await raw.recv())[0])["id"] != rid:
            early.append(reply)
    assert early == []
    assert reply["status"]["versions"]["latest"] == 0

    backend.load_gate.set()
    acks = [await raw.recv(), await raw.recv()]
    assert sorted((h["op"], h["id"], h["version"]) for h, _ in acks) == [
        ("loaded", 1, 1),
        ("loaded", 2, 1),
    ]
    obs = positions(2, seed=12)
    reply, (logits, value) = await raw.call(eval_header(5, obs), obs.tobytes())
    assert reply["version"] == 1 and ref.matches(obs, logits, value, seed=1)


async def test_protocol_doc_example_runs(make_server: MakeServer, ref: Reference) -> None:
    """The complete program in docs/protocol.md (msgpack and pyzmq only) talks to a server."""
    doc = (Path(__file__).parents[1] / "docs" / "protocol.md").read_text()
    program = re.search(r"```python\n(.*?)```", doc, re.S)
    assert program is not None
    namespace: dict[str, Any] = {"__name__": "protocol_example"}
    exec(compile(program.group(1), "docs/protocol.md", "exec"), namespace)
    server = await make_server()
    latest, version, results = await asyncio.to_thread(namespace["main"], server.endpoint)
    assert (latest, version) == (0, 0)
    obs = np.zeros((2, *NET.obs_shape), np.uint8)
    obs[0, 0, 1, 1] = 1
    logits = np.array([lg for lg, _ in results], np.float32)
    values = np.array([v for _, v in results], np.float32)
    assert ref.rows_matching(obs, logits, values).all()


def test_serves_on_uvloop(ref: Reference) -> None:
    """The production event loop: server and client on uvloop."""

    async def scenario() -> tuple[np.ndarray, list[tuple[np.ndarray, float]]]:
        server = InferenceServer(
            server_config("tcp://127.0.0.1:*"),
            NET.spec,
            make_backend(NET, BackendConfig(device="cpu", torch=TorchConfig(compile="none"))),
        )
        await server.start(InitialWeights(0, weights_blob(seed=NET.seed)))
        try:
            async with EvalClient(ClientConfig(server=server.endpoint)) as client:
                obs = positions(100, seed=13)
                return obs, await asyncio.gather(*(client.evaluate(o) for o in obs))
        finally:
            await server.aclose()

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        obs, results = runner.run(scenario())
    logits = np.stack([lg for lg, _ in results])
    values = np.array([v for _, v in results], np.float32)
    assert ref.rows_matching(obs, logits, values).all()
