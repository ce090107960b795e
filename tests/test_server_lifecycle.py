"""The lifecycle checklist: start twice, call after close, close while a batch waits, two
clients, stress with a close midway, a client with no server. Every future must resolve."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from azserve import RequestTimeout, ServerClosed
from azserve.errors import ComponentFailed
from azserve.server import dispatch
from tests.conftest import (
    GatedBackend,
    MakeClient,
    MakeServer,
    Reference,
    ZmqSockets,
    eval_header,
    positions,
    wait_for,
)

pytestmark = pytest.mark.timeout(60)


async def test_server_start_twice_raises(make_server: MakeServer) -> None:
    server = await make_server()
    with pytest.raises(RuntimeError, match="cannot start: it is running"):
        await server.start()


async def test_server_close_is_idempotent_and_final(make_server: MakeServer) -> None:
    server = await make_server()
    await server.aclose()
    await server.aclose()
    assert server.status()["state"] == "closed"
    with pytest.raises(RuntimeError, match="cannot start: it is closed"):
        await server.start()


async def test_server_as_context_manager(make_server: MakeServer, make_client: MakeClient) -> None:
    server = await make_server(start=False)
    async with server:
        client = await make_client(server.endpoint)
        assert (await client.ping()).server_id == server.server_id
    assert server.status()["state"] == "closed"


async def test_client_start_twice_raises(make_server: MakeServer, make_client: MakeClient) -> None:
    server = await make_server()
    client = await make_client(server.endpoint)
    with pytest.raises(RuntimeError, match="cannot start: it is running"):
        await client.start()


async def test_call_after_client_close_raises_server_closed(
    make_server: MakeServer, make_client: MakeClient
) -> None:
    server = await make_server()
    client = await make_client(server.endpoint)
    await client.aclose()
    with pytest.raises(ServerClosed, match="closed"):
        client.evaluate(positions(1)[0])
    with pytest.raises(ServerClosed):
        await client.ping()
    with pytest.raises(RuntimeError, match="cannot start"):
        await client.start()


async def test_client_close_fails_its_pending_requests(
    make_server: MakeServer, make_client: MakeClient
) -> None:
    backend = GatedBackend()  # the batch never finishes while the client is open
    server = await make_server(backend=backend)
    client = await make_client(server.endpoint)
    pending = client.evaluate(positions(2))
    await asyncio.wait_for(backend.entered.wait(), 5)
    await client.aclose()
    with pytest.raises(ServerClosed, match="EvalClient closed"):
        await pending
    backend.gate.set()


async def test_close_while_a_batch_waits(
    make_server: MakeServer, make_client: MakeClient, ref: Reference
) -> None:
    """The batch computing at close replies; requests still queued get ServerClosed."""
    backend = GatedBackend()
    server = await make_server(backend=backend, max_batch_size=4, max_queue_delay_us=10_000_000)
    client = await make_client(server.endpoint)
    obs = positions(4, seed=1)
    running = client.evaluate(obs)  # a full batch: it starts at once and waits at the gate
    await asyncio.wait_for(backend.entered.wait(), 5)
    queued = [client.evaluate(o) for o in positions(3, seed=2)]  # 3 rows < 4: they wait
    await wait_for(lambda: server.status()["queued_rows"] == 3)

    closing = asyncio.create_task(server.aclose())
    await wait_for(lambda: server.status()["state"] == "closing")
    backend.gate.set()
    await asyncio.wait_for(closing, 10)

    logits, values = await asyncio.wait_for(running, 5)
    assert ref.matches(obs, logits, values)
    for fut in queued:
        with pytest.raises(ServerClosed, match="shutting down"):
            await asyncio.wait_for(fut, 5)
    assert backend.batches == [(0, 4)]  # the queued rows never reached the backend


async def test_two_clients(
    make_server: MakeServer, make_client: MakeClient, ref: Reference
) -> None:
    server = await make_server(max_queue_delay_us=5000)
    a = await make_client(server.endpoint)
    b = await make_client(server.endpoint)
    obs_a, obs_b = positions(100, seed=3), positions(100, seed=4)
    got_a, got_b = await asyncio.gather(
        asyncio.gather(*(a.evaluate(o) for o in obs_a)),
        asyncio.gather(*(b.evaluate(o) for o in obs_b)),
    )
    for obs, got in [(obs_a, got_a), (obs_b, got_b)]:
        logits = np.stack([lg for lg, _ in got])
        values = np.array([v for _, v in got], np.float32)
        assert ref.rows_matching(obs, logits, values).all()
    assert (await a.status())["rows"] == 200


async def test_stress_with_close_midway(
    make_server: MakeServer, make_client: MakeClient, ref: Reference
) -> None:
    """200 games hammer the server; it closes under them. Every game ends with a correct
    result stream followed by ServerClosed or RequestTimeout: nothing hangs, nothing wrong."""
    server = await make_server(max_queue_delay_us=1000)
    client = await make_client(
        server.endpoint, heartbeat_s=0.05, retry_after_s=0.2, request_timeout_s=1.0
    )
    obs = positions(97, seed=5)
    served: list[tuple[int, np.ndarray, float]] = []

    async def game(i: int) -> type[BaseException]:
        k = i
        while True:
            row = k % len(obs)
            k += 1
            try:
                logits, value = await client.evaluate(obs[row])
            except (ServerClosed, RequestTimeout) as exc:
                return type(exc)
            served.append((row, logits, value))

    games = [asyncio.create_task(game(i)) for i in range(200)]
    await wait_for(lambda: len(served) >= 2000)
    await server.aclose()
    endings = await asyncio.wait_for(asyncio.gather(*games), 20)
    rows = np.array([r for r, _, _ in served])
    logits = np.stack([lg for _, lg, _ in served])
    values = np.array([v for _, _, v in served], np.float32)
    assert ref.rows_matching(obs[rows], logits, values).all()

    assert len(endings) == 200
    assert set(endings) <= {ServerClosed, RequestTimeout}


async def test_client_start_without_server_times_out(
    make_client: MakeClient, tcp_endpoint: str
) -> None:
    with pytest.raises(RequestTimeout, match=f"no server answered at {tcp_endpoint}"):
        await make_client(tcp_endpoint, timeout_s=0.5)


async def test_a_dead_owner_task_fails_the_server_promptly(
    make_server: MakeServer, make_client: MakeClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bug that kills the receive task must not leave a deaf server reporting ``serving``:
    the server fails, queued requests fail at once with a clear error, ``failed`` is set."""
    backend = GatedBackend(hold_infer=True)
    server = await make_server(backend=backend, max_queue_delay_us=0)
    client = await make_client(server.endpoint, retry_after_s=600.0)
    computing = client.evaluate(positions(1)[0])
    await asyncio.wait_for(backend.entered.wait(), 5)  # one batch held in the backend
    queued = [client.evaluate(o) for o in positions(2)]
    await wait_for(lambda: server.status()["queued_rows"] == 2)

    def boom(*_: object) -> None:
        raise RuntimeError("bug in dispatch")

    monkeypatch.setattr(server, "_dispatch", boom)
    late = client.evaluate(positions(1)[0])  # its message reaches the broken dispatch
    await asyncio.wait_for(server.lifecycle.failed.wait(), 5)
    assert server.status()["state"] == "failed"
    assert "bug in dispatch" in repr(server.lifecycle.error)
    for fut in queued:
        with pytest.raises(ServerClosed, match="server failed"):
            await asyncio.wait_for(fut, 5)
    backend.gate.set()  # the batch that was computing still completes and replies
    await asyncio.wait_for(computing, 5)
    late.cancel()


async def test_a_dead_client_task_fails_its_pending_calls_at_once(
    make_server: MakeServer, make_client: MakeClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bug in the reply handler fails every pending evaluation now, not 30 s later."""
    server = await make_server()
    client = await make_client(server.endpoint, request_timeout_s=30.0)

    def boom(*_: object) -> None:
        raise RuntimeError("bug in reply handler")

    monkeypatch.setattr(client, "_on_reply", boom)
    fut = client.evaluate(positions(1)[0])
    with pytest.raises(ComponentFailed, match="EvalClient failed.*bug in reply handler"):
        await asyncio.wait_for(fut, 5)
    assert client.lifecycle.state.value == "failed"
    with pytest.raises(ServerClosed, match="EvalClient is failed"):
        client.evaluate(positions(1)[0])


async def test_requests_met_while_the_server_starts_are_served(
    make_server: MakeServer,
    zmq_sockets: ZmqSockets,
    ipc_endpoint: str,
    ref: Reference,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A restarted server meets its clients' resent requests before ``start`` returns (the
    receive task runs while it still opens the metrics endpoint). They are served, not refused
    as ``ServerClosed``: that refusal once gave up every game in flight after a kill -9."""
    gate = asyncio.Event()
    real = dispatch.start_endpoint

    async def held_open(*args: object, **kwargs: object) -> object:
        await gate.wait()
        return await real(*args, **kwargs)

    monkeypatch.setattr(dispatch, "start_endpoint", held_open)
    raw = zmq_sockets.dealer(ipc_endpoint)
    starting = asyncio.create_task(make_server(ipc_endpoint))
    obs = positions(3, seed=21)
    reply, arrays = await raw.call(eval_header(1, obs), obs.tobytes(), timeout_s=10)
    assert not starting.done()  # answered inside the window, while start() waited
    assert reply["op"] == "result", reply
    logits, value = arrays
    assert ref.matches(obs, logits, value)
    gate.set()
    server = await asyncio.wait_for(starting, 10)
    assert server.lifecycle.running
