"""Which weights the server holds: load, unload, leases and eviction, one owner per version.

Every resident version is known by its number *and* the SHA-256 of its bytes. A load of a
number already held is idempotent only for the same bytes (a publisher retrying after a lost
ack); other bytes under a held number are ``BadVersion``, never a silent ack. Loads happen off
the hot path: the backend builds and warms the new version, then it is published atomically.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from azserve.backends.base import Backend
from azserve.errors import RemoteError
from azserve.files import checksum
from azserve.server.config import ServerConfig
from azserve.server.metrics import ServerMetrics
from azserve.versions import VersionRegistry

log = logging.getLogger("azserve.server")


class Residency:
    """Resident versions of one server.

    ``busy()`` names versions with queued or computing batches (never evicted); ``on_retire``
    is called with a version about to go and whether it goes for good (no lease pinned it), so
    its queued requests fail with a clear error.
    """

    def __init__(
        self,
        cfg: ServerConfig,
        backend: Backend,
        metrics: ServerMetrics,
        busy: Callable[[], set[int]],
        on_retire: Callable[[int, bool], None],
    ) -> None:
        self.cfg = cfg
        self.backend = backend
        self.metrics = metrics
        self.registry = VersionRegistry(
            max_versions=cfg.max_versions,
            memory_budget_bytes=int(cfg.memory_budget_mb * 2**20),
            grace_s=cfg.version_grace_s,
        )
        self._busy = busy
        self._on_retire = on_retire
        self._loading: dict[int, tuple[str, asyncio.Event]] = {}
        self._last_housekeep: float | None = None
        self.paused_s = 0.0
        """Seconds the server was seen not running (stopped, a long GC, a stalled device)."""

    @property
    def latest(self) -> int:
        return self.registry.latest

    def resident(self) -> list[int]:
        return self.registry.resident()

    def resolve(self, requested: int) -> int:
        """The version serving a request (-1 = latest); raises ``VersionUnavailable``."""
        return self.registry.resolve(requested)

    # --- loading ---------------------------------------------------------------------------

    async def load(self, version: int, blob: bytes, sha256: str) -> None:
        """Make ``version`` live with ``blob``; returns once it serves. Raises ``RemoteError``
        (``BadWeights``, ``BadVersion``, ``Overloaded``) or ``WeightsError``."""
        if version < 0:
            raise RemoteError("BadRequest", f"version must be >= 0, got {version}")
        if checksum(blob) != sha256:
            raise RemoteError("BadWeights", f"sha256 mismatch for version {version}")
        loading = self._loading.get(version)
        if loading is not None:
            # A retry that overtakes the first load is acked only once that load is live.
            other, done = loading
            self._check_same(version, other, sha256)
            await done.wait()
            if version not in self.registry:
                raise RemoteError("BadWeights", f"the concurrent load of version {version} failed")
            return
        held = self.registry.sha256(version)
        if held is not None:
            self._check_same(version, held, sha256)
            return  # idempotent: a publisher retrying after a lost ack
        if version < self.registry.latest and version not in self.registry.pinned():
            # An older version comes back only to restore what live games are pinned to (the
            # server restarted under them); anything else would be a publisher going back.
            raise RemoteError(
                "BadVersion",
                f"version {version} is older than the latest {self.registry.latest}, not held "
                "and pinned by no live game",
            )
        await self._load_new(version, blob, sha256)

    @staticmethod
    def _check_same(version: int, held: str, offered: str) -> None:
        if held != offered:
            raise RemoteError(
                "BadVersion",
                f"version {version} is already held with other weights (sha256 {held[:12]}, "
                f"offered {offered[:12]}): a version number names one set of weights for ever",
            )

    async def load_initial(self, version: int, blob: bytes) -> None:
        """The weights a server starts with (before its socket is bound)."""
        await self._load_new(version, blob, checksum(blob))

    async def _load_new(self, version: int, blob: bytes, sha256: str) -> None:
        t0 = time.monotonic()
        done = asyncio.Event()
        self._loading[version] = (sha256, done)
        try:
            for old in self.registry.check_admit(len(blob), time.monotonic(), self._busy()):
                await self.unload(old)
            await self.backend.load(version, blob)
            self.registry.add(
                version, self.backend.version_bytes(version), sha256, time.monotonic()
            )
            self.metrics.swaps.inc()
        finally:
            del self._loading[version]
            done.set()
        log.info(
            "version %d live in %.0f ms (resident %s)",
            version,
            (time.monotonic() - t0) * 1e3,
            self.registry.resident(),
        )

    async def unload(self, version: int) -> None:
        """Retire ``version``: requests queued for it fail, the backend releases it."""
        self.registry.remove(version)
        self._on_retire(version, self.registry.is_retired(version))
        await self.backend.unload(version)
        log.info("version %d retired", version)

    # --- leases and eviction ---------------------------------------------------------------

    def update_lease(self, client: str, pins: dict[int, int], lease_s: float, now: float) -> None:
        if not 0.0 <= lease_s <= self.cfg.max_lease_s:  # also refuses NaN
            raise RemoteError(
                "BadRequest", f"lease_s must be in [0, {self.cfg.max_lease_s:g}], got {lease_s}"
            )
        self.registry.update_lease(client, pins, lease_s, now, self.cfg.max_leases)

    async def housekeep(self, now: float, period_s: float) -> None:
        """Expire leases not renewed in time, then retire versions no one needs. Called every
        ``period_s``: a longer gap means the whole server was paused, and the renewals clients
        sent meanwhile are still unread in the socket, so the pause does not count against any
        lease (expiry waits until they could have been read)."""
        last, self._last_housekeep = self._last_housekeep, now
        if last is not None and now - last > 2 * period_s:
            pause = now - last - period_s
            self.paused_s += pause
            self.registry.extend_leases(pause)
            log.warning("server was paused for %.1f s: leases extended by as much", pause)
        expired = self.registry.expire_leases(now)
        if expired:
            log.info(
                "leases of %d client(s) expired: %s%s",
                len(expired),
                ", ".join(expired[:3]),
                " ..." if len(expired) > 3 else "",
            )
        for v in self.registry.evictable(now, self._busy()):
            await self.unload(v)

    def touch(self, version: int, rows: int, now: float) -> None:
        self.registry.touch(version, rows, now)


__all__ = ["Residency"]
