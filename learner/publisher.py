"""Publishing weights to every inference server, acked, and catching up servers that were down.

``publish(version, blob)`` sends the safetensors bytes (with their checksum) to all servers at
once over one ``ControlClient`` each, and returns which servers acked the version live within
``wait_s`` (the learner trains on meanwhile): a server that has not acked by then, one cut off
by a partition or hung, keeps its send going in the background (up to ``timeout_s``), takes no
second send while that one is in flight, and is caught up once it ends. A background task watches each server's latest version (the control client's heartbeats) and
re-sends the newest weights to a server that is behind: one that was down, or restarted. It
also restores older versions that live games are pinned to but a server lacks (a restarted
server learns the pins from the games' heartbeats): the publisher keeps the weights of the
last ``keep_versions`` versions, and ``fetch`` finds older ones (the learner's checkpoints).
A server *ahead* of the learner (another learner's versions, or a learner that lost its
checkpoints) is never published over: the learner says so instead of reporting a publish.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from azserve.auth import AuthConfig
from azserve.control import ControlClient
from azserve.errors import AzserveError
from azserve.lifecycle import Lifecycle

log = logging.getLogger("learner.publisher")


@dataclass(frozen=True)
class PublishResult:
    """What one ``publish`` did: ms from send to live ack per server that took it, and why
    each of the others did not."""

    acked_ms: dict[str, float]
    failed: dict[str, str]


class Publisher:
    """Keeps every server in ``servers`` on the newest published version."""

    def __init__(
        self,
        servers: list[str],
        model: str = "default",
        auth: AuthConfig | None = None,
        timeout_s: float = 60.0,
        keep_versions: int = 8,
        fetch: Callable[[int], bytes | None] | None = None,
        wait_s: float | None = None,
    ) -> None:
        """``fetch(version)`` returns the weights of a version no longer kept in memory (or
        None); it runs on a worker thread. ``wait_s``: how long ``publish`` waits for acks
        (None: until every send ends, each within ``timeout_s``)."""
        self.servers = list(servers)
        self.keep_versions = max(1, keep_versions)
        self._kept: OrderedDict[int, bytes] = OrderedDict()
        self._fetch = fetch
        self.restored = 0
        """Pinned versions re-published to servers that had lost them."""
        self.timeout_s = timeout_s
        self.wait_s = wait_s
        self.version = -1
        """The newest version handed to ``publish``."""
        self._blob = b""
        # The learner's own key pair is its identity: servers take loads from that key only.
        learner = (auth or AuthConfig()).as_learner()
        self._clients = {s: ControlClient(s, model, learner, heartbeat_s=0.5) for s in servers}
        self._busy: dict[str, asyncio.Lock] = {s: asyncio.Lock() for s in servers}
        self.last_result: PublishResult | None = None
        """What the latest ``publish`` did."""
        self.lifecycle = Lifecycle("publisher")
        self._warned_ahead: set[tuple[str, int]] = set()
        self._catching_up: set[str] = set()

    async def start(self) -> None:
        self.lifecycle.begin_start()
        for c in self._clients.values():
            await c.start()
        self.lifecycle.spawn(self._catch_up_loop(), "catch-up")
        self.lifecycle.started()

    async def aclose(self) -> None:
        if not self.lifecycle.begin_close():
            return
        await self.lifecycle.cancel()
        for c in self._clients.values():
            await c.aclose()
        self.lifecycle.closed()

    async def publish(self, version: int, blob: bytes) -> PublishResult:
        """Send ``version`` to every server and wait up to ``wait_s`` for the acks; servers
        that fail, or have not answered by then, are caught up later (module docstring)."""
        self.version, self._blob = version, blob
        self._kept[version] = blob
        while len(self._kept) > self.keep_versions:
            self._kept.popitem(last=False)
        failed: dict[str, str] = {}
        sends: dict[str, asyncio.Task[float | str]] = {}
        for s in self.servers:
            if self._busy[s].locked():  # an earlier send still waits for its ack
                failed[s] = "an earlier send is still in flight (caught up when it ends)"
            else:
                sends[s] = self.lifecycle.spawn(
                    self._send(s, version, blob), f"publish v{version} to {s}", owner=False
                )
        if sends:
            await asyncio.wait(sends.values(), timeout=self.wait_s)
        acked: dict[str, float] = {}
        for s, task in sends.items():
            if not task.done():
                failed[s] = (
                    f"no ack within {self.wait_s:g} s: still sending in the background "
                    f"(up to {self.timeout_s:g} s), caught up after"
                )
            elif isinstance(result := task.result(), float):
                acked[s] = result
            else:
                failed[s] = result
        self.last_result = PublishResult(acked, failed)
        return self.last_result

    async def statuses(self) -> dict[str, dict[str, Any] | None]:
        """Each server's status reply (None for a server that did not answer in a second)."""

        async def one(c: ControlClient) -> dict[str, Any] | None:
            try:
                return await c.status(timeout_s=1.0)
            except AzserveError:
                return None

        replies = await asyncio.gather(*(one(c) for c in self._clients.values()))
        return dict(zip(self._clients, replies))

    async def _send(
        self, server: str, version: int, blob: bytes, restore: bool = False
    ) -> float | str:
        """ms to the live ack, or why the server did not take ``version`` (``restore``: an
        older version that games on the server are pinned to)."""
        async with self._busy[server]:
            client = self._clients[server]
            if client.latest > version and not restore:
                key = (server, client.latest)
                if key not in self._warned_ahead:
                    self._warned_ahead.add(key)
                    log.error(
                        "server %s is at v%d, ahead of this learner's v%d: not publishing over "
                        "it (another learner, or this run's newer checkpoints were lost)",
                        server,
                        client.latest,
                        version,
                    )
                return f"server is ahead (v{client.latest})"
            t0 = time.monotonic()
            try:
                # Sent even when the server already reports ``version``: it acks the same bytes
                # at once and refuses other bytes under that number (BadVersion).
                await client.load_weights(version, blob, timeout_s=self.timeout_s)
            except AzserveError as exc:
                log.warning("publishing v%d to %s failed: %s (will retry)", version, server, exc)
                return str(exc)
            return (time.monotonic() - t0) * 1e3

    async def _catch_up_loop(self) -> None:
        """Every half second, one catch-up task per server not already being caught up: a
        server that hangs or is down never holds up the others."""
        while True:
            await asyncio.sleep(0.5)
            for server in self.servers:
                if server not in self._catching_up and not self._busy[server].locked():
                    self._catching_up.add(server)
                    self.lifecycle.spawn(self._catch_up(server), f"catch-up {server}", owner=False)

    async def _catch_up(self, server: str) -> None:
        """Re-send the newest weights to ``server`` if it is behind (down before, or
        restarted), then restore versions its games are pinned to but it lacks."""
        try:
            client = self._clients[server]
            if client.server_id is None or self.version < 0:
                return  # never heard from it, or nothing published yet
            if client.latest < self.version:
                log.info(
                    "server %s is at v%d, behind v%d: re-publishing",
                    server,
                    client.latest,
                    self.version,
                )
                await self._send(server, self.version, self._blob)
            await self._restore_pinned(server)
        finally:
            self._catching_up.discard(server)

    async def _restore_pinned(self, server: str) -> None:
        """Re-publish versions that games on ``server`` are pinned to but it no longer holds."""
        try:
            versions = (await self._clients[server].status(timeout_s=1.0))["versions"]
        except AzserveError:
            return
        held = set(versions["resident"])
        for v in sorted(int(k) for k in versions["pinned"]):
            if v in held or v > self.version:
                continue
            blob = self._kept.get(v)
            if blob is None and self._fetch is not None:
                blob = await asyncio.to_thread(self._fetch, v)
            if blob is None:
                continue  # not ours to restore: those games will be abandoned
            log.info("server %s lost v%d that games are pinned to: restoring it", server, v)
            if isinstance(await self._send(server, v, blob, restore=True), float):
                self.restored += 1
