"""Publishing weights to every inference server, acked, and catching up servers that were down.

``publish(version, blob)`` sends the safetensors bytes (with their checksum) to all servers at
once and returns when each has acked the version live or timed out. A background task watches
each server's latest version (learned from heartbeats) and re-sends the newest weights to a
server that is behind: one that was down, or restarted with its initial weights.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from azserve.auth import AuthConfig
from azserve.client import ClientConfig, EvalClient
from azserve.errors import AzserveError

log = logging.getLogger("learner.publisher")


class Publisher:
    """Keeps every server in ``servers`` on the newest published version."""

    def __init__(
        self,
        servers: list[str],
        model: str = "default",
        auth: AuthConfig | None = None,
        timeout_s: float = 60.0,
    ) -> None:
        self.servers = list(servers)
        self.timeout_s = timeout_s
        self.version = -1
        self._blob = b""
        self._clients = {
            s: EvalClient(ClientConfig(server=s, model=model, heartbeat_s=0.5), auth)
            for s in servers
        }
        self._busy: dict[str, asyncio.Lock] = {s: asyncio.Lock() for s in servers}
        self._task: asyncio.Task[None] | None = None
        self.last_publish_ms: dict[str, float] = {}

    async def start(self) -> None:
        for c in self._clients.values():
            await c.start(wait_ready=False)
        self._task = asyncio.create_task(self._catch_up_loop(), name="publisher-catch-up")

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        for c in self._clients.values():
            await c.aclose()

    async def publish(self, version: int, blob: bytes) -> dict[str, float]:
        """Send ``version`` to every server; returns server -> ms from send to live ack
        (servers that failed are left out and caught up later)."""
        self.version, self._blob = version, blob
        results = await asyncio.gather(*(self._send(s, version, blob) for s in self.servers))
        out = {s: ms for s, ms in zip(self.servers, results) if ms is not None}
        self.last_publish_ms = out
        return out

    async def _send(self, server: str, version: int, blob: bytes) -> float | None:
        async with self._busy[server]:
            client = self._clients[server]
            if client.latest_version >= version and client.server_id is not None:
                return 0.0
            t0 = time.monotonic()
            try:
                await client.load_weights(version, blob, timeout_s=self.timeout_s)
            except AzserveError as exc:
                log.warning("publishing v%d to %s failed: %s (will retry)", version, server, exc)
                return None
            client.latest_version = max(client.latest_version, version)
            return (time.monotonic() - t0) * 1e3

    async def _catch_up_loop(self) -> None:
        while True:
            await asyncio.sleep(0.5)
            for server, client in self._clients.items():
                behind = client.server_id is not None and client.latest_version < self.version
                if behind and not self._busy[server].locked():
                    log.info(
                        "server %s is at v%d, behind v%d: re-publishing",
                        server,
                        client.latest_version,
                        self.version,
                    )
                    await self._send(server, self.version, self._blob)
