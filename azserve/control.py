"""The control channel to one inference server: ping, status and weight loads (asyncio).

The learner's publisher holds one ``ControlClient`` per server. It heartbeats the server so
that ``latest`` (the server's newest version) and ``server_id`` (changes when the server
restarts) stay current without anyone asking; evaluation traffic goes through ``EvalClient``,
never through here.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from typing import Any

import numpy as np
import zmq
import zmq.asyncio

from azserve import protocol as P
from azserve.auth import AuthConfig, connect_dealer
from azserve.errors import ConfigError, RequestTimeout, ServerClosed, remote_error
from azserve.files import checksum
from azserve.lifecycle import Lifecycle

log = logging.getLogger("azserve.control")


class ControlClient:
    """``async with ControlClient(endpoint, model) as c: await c.load_weights(v, blob)``."""

    def __init__(
        self,
        endpoint: str,
        model: str = "default",
        auth: AuthConfig | None = None,
        heartbeat_s: float = 0.5,
    ) -> None:
        self.endpoint = endpoint
        self.model = model
        self.auth = auth or AuthConfig()
        self.heartbeat_s = heartbeat_s
        self.latest = -1
        """The server's latest version, as of its last reply (-1: none heard yet)."""
        self.server_id: str | None = None
        """The server's identity; a new one means it restarted."""
        self.restarts = 0
        """Times ``server_id`` changed."""
        self.lifecycle = Lifecycle(f"control {endpoint}", self._fail_all)
        self._ids = itertools.count(1)
        self._waiting: dict[int, asyncio.Future[Any]] = {}
        self._ctx: zmq.asyncio.Context | None = None
        self._sock: zmq.asyncio.Socket | None = None

    async def start(self) -> None:
        """Connect (no wait: the server may come later) and start heartbeating."""
        self.lifecycle.begin_start()
        self._ctx = zmq.asyncio.Context()
        try:
            # Queue only to a live connection: a load or ping for a server that is down times
            # out here instead of waiting in a pipe and arriving, stale, when it comes back.
            sock = connect_dealer(self._ctx, self.endpoint, self.auth, IMMEDIATE=1)
        except (ConfigError, zmq.ZMQError):
            self._ctx.term()
            self.lifecycle.closed()
            raise
        self._sock = sock
        self.lifecycle.spawn(self._recv_loop(), "recv")
        self.lifecycle.spawn(self._heartbeat_loop(), "heartbeat")
        self.lifecycle.started()

    async def __aenter__(self) -> ControlClient:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if not self.lifecycle.begin_close():
            return
        await self.lifecycle.cancel()
        self._fail_all(ServerClosed("ControlClient closed"))
        if self._sock is not None:
            self._sock.close(linger=0)
        if self._ctx is not None:
            self._ctx.term()
        self.lifecycle.closed()

    # --- calls -------------------------------------------------------------------------------

    async def ping(self, timeout_s: float = 5.0) -> P.Pong:
        return await self._call(P.Ping(), timeout_s)

    async def status(self, timeout_s: float = 5.0) -> dict[str, Any]:
        reply = await self._call(P.StatusRequest(), timeout_s)
        return reply.status

    async def load_weights(self, version: int, blob: bytes, timeout_s: float = 60.0) -> P.Loaded:
        """Send ``blob`` as ``version``; returns once the server acks it live. The server
        refuses (``RemoteError`` ``BadVersion``) a number it holds with other bytes."""
        msg = P.LoadWeights(model=self.model, version=version, sha256=checksum(blob))
        reply: P.Loaded = await self._call(msg, timeout_s, [np.frombuffer(blob, np.uint8)])
        self.latest = max(self.latest, reply.latest)
        return reply

    async def _call(
        self, msg: P.Message, timeout_s: float, arrays: list[np.ndarray] | None = None
    ) -> Any:
        self.lifecycle.check_running(ServerClosed)
        rid = next(self._ids)
        msg.id = rid
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._waiting[rid] = fut
        assert self._sock is not None
        try:
            async with asyncio.timeout(timeout_s):
                await self._sock.send_multipart(P.encode(msg, arrays or []), copy=False)
                return await fut
        except TimeoutError:
            raise RequestTimeout(
                f"{type(msg).__name__} got no reply from {self.endpoint} in {timeout_s:g} s"
            ) from None
        finally:
            self._waiting.pop(rid, None)

    # --- owner tasks -------------------------------------------------------------------------

    async def _recv_loop(self) -> None:
        assert self._sock is not None
        while True:
            frames = await self._sock.recv_multipart()
            try:
                msg, _ = P.decode(frames)
            except P.ProtocolError as exc:
                log.error("undecodable reply from %s: %s", self.endpoint, exc)
                continue
            if isinstance(msg, P.Pong):
                self._on_pong(msg)
            fut = self._waiting.get(msg.id) if msg.id is not None else None
            if fut is None or fut.done():
                continue
            if isinstance(msg, P.ErrorReply):
                fut.set_exception(remote_error(msg.type, msg.message))
            else:
                fut.set_result(msg)

    def _on_pong(self, msg: P.Pong) -> None:
        if self.server_id is not None and msg.server_id != self.server_id:
            self.restarts += 1
            log.info("server %s restarted (now at v%d)", self.endpoint, msg.latest)
            self.latest = msg.latest
            # Calls sent to the dead server will never be answered: fail them now, so a
            # publisher re-sends to the new one at once instead of waiting out its timeout.
            lost = ServerClosed(f"server {self.endpoint} restarted: the request was lost")
            for rid, fut in list(self._waiting.items()):
                if rid != msg.id and not fut.done():
                    fut.set_exception(lost)
        else:
            self.latest = max(self.latest, msg.latest)
        self.server_id = msg.server_id

    async def _heartbeat_loop(self) -> None:
        while True:
            try:
                await self.ping(timeout_s=max(1.0, 3 * self.heartbeat_s))
            except RequestTimeout:
                pass  # down or busy: the next ping tells
            await asyncio.sleep(self.heartbeat_s)

    def _fail_all(self, err: BaseException) -> None:
        for fut in self._waiting.values():
            if not fut.done():
                fut.set_exception(err)
        self._waiting.clear()
