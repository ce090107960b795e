"""The learner's publisher against a server that never acks (cut off by a partition, or hung):
the publish round goes on without it, no second send piles up behind the first, and the server
is caught up with the newest weights once it answers again. Found by the chaos run's network
strikes: a partitioned server held each publish, and training, for ``publish_timeout_s``."""

from __future__ import annotations

import asyncio

import pytest
import zmq

from learner.publisher import Publisher
from tests.conftest import MakeServer, ZmqSockets, free_tcp_port, wait_for, weights_blob

pytestmark = [pytest.mark.faults, pytest.mark.timeout(60)]


async def test_a_server_that_never_acks_holds_up_no_publish(
    make_server: MakeServer, zmq_sockets: ZmqSockets
) -> None:
    good = await make_server()
    silent_endpoint = f"tcp://127.0.0.1:{free_tcp_port()}"
    silent = zmq_sockets.socket(zmq.ROUTER)  # takes every message, answers none
    silent.bind(silent_endpoint)
    publisher = Publisher([good.endpoint, silent_endpoint], timeout_s=3.0, wait_s=0.5)
    await publisher.start()
    try:
        # Bounded far below the send's own timeout: the round does not wait for the silent one.
        first = await asyncio.wait_for(publisher.publish(1, weights_blob(seed=1)), 2.5)
        assert set(first.acked_ms) == {good.endpoint}
        assert "no ack within 0.5 s: still sending" in first.failed[silent_endpoint]
        assert 1 in good.versions

        second = await asyncio.wait_for(publisher.publish(2, weights_blob(seed=2)), 2.5)
        assert set(second.acked_ms) == {good.endpoint} and 2 in good.versions
        assert "earlier send is still in flight" in second.failed[silent_endpoint]

        # The link heals: a real server answers on that endpoint. The send in flight ends (its
        # timeout), and the catch-up gives the server the newest version, not the old one.
        silent.close(linger=0)
        healed = await make_server(silent_endpoint)
        await wait_for(lambda: 2 in healed.versions, 20)
        assert 1 not in healed.versions
    finally:
        await publisher.aclose()


async def test_without_wait_s_a_publish_waits_for_every_send(make_server: MakeServer) -> None:
    """``wait_s=None`` (the swap bench's measure of a round): every server's ack is counted."""
    servers = [await make_server(), await make_server()]
    publisher = Publisher([s.endpoint for s in servers], wait_s=None)
    await publisher.start()
    try:
        result = await publisher.publish(1, weights_blob(seed=1))
        assert set(result.acked_ms) == {s.endpoint for s in servers} and result.failed == {}
    finally:
        await publisher.aclose()
