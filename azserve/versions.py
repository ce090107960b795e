"""Which weight versions the server holds, who is pinned to them, and when one may go.

A version stays resident while it is the latest, while any live lease pins it, or while it was
used within ``grace_s`` (a game that started just before a swap may not have reported its pin
yet). Leases come from clients' heartbeats and expire when a client stops renewing them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from azserve.errors import Overloaded, VersionRetired, VersionUnavailable

RETIRED_KEPT = 4096
"""How many retired version numbers a registry remembers (8 bytes each, about)."""


@dataclass
class _Version:
    nbytes: int
    sha256: str
    loaded_at: float
    last_used: float
    served_rows: int = 0


@dataclass
class _Lease:
    pins: dict[int, int]
    expires: float


@dataclass
class VersionRegistry:
    """Resident versions, the latest one, and client leases. Pure bookkeeping, no I/O."""

    max_versions: int = 8
    memory_budget_bytes: int = 1 << 30
    grace_s: float = 10.0
    latest: int = -1
    _versions: dict[int, _Version] = field(default_factory=dict)
    _leases: dict[str, _Lease] = field(default_factory=dict)
    _retired: dict[int, None] = field(default_factory=dict)
    """Versions retired while unpinned, oldest first (the last ``RETIRED_KEPT``): a request for
    one is answered ``VersionRetired`` at once, not left to wait for a restore."""

    def resident(self) -> list[int]:
        return sorted(self._versions)

    def __contains__(self, version: int) -> bool:
        return version in self._versions

    def resolve(self, requested: int) -> int:
        """The version a request is served by: -1 means the latest. Raises VersionUnavailable."""
        v = self.latest if requested == -1 else requested
        if v not in self._versions:
            if v in self._retired:
                raise VersionRetired(
                    "VersionRetired",
                    f"version {v} was retired here while no lease pinned it (latest: "
                    f"{self.latest}); it will not be restored",
                )
            if requested == -1:
                raise VersionUnavailable("VersionUnavailable", "the server holds no weights yet")
            raise VersionUnavailable(
                "VersionUnavailable",
                f"version {requested} is not resident (resident: {self.resident()}, latest: {self.latest})",
            )
        return v

    def touch(self, version: int, rows: int, now: float) -> None:
        info = self._versions.get(version)
        if info is not None:
            info.last_used = now
            info.served_rows += rows

    def check_admit(self, nbytes: int, now: float, busy: set[int]) -> list[int]:
        """Versions to evict so that one more of ``nbytes`` fits the budget. Raises
        ``Overloaded`` when even evicting every evictable version would not make room."""
        # Idle past the grace first; then, under pressure, versions that only the grace period
        # protects (no lease pins them and no request is queued or computing), least recently
        # used first: a publisher faster than the grace must not be refused.
        idle = set(self.evictable(now, busy))
        soft = set(self.evictable(now + self.grace_s, busy)) - idle
        by_use = lambda v: self._versions[v].last_used  # noqa: E731
        evictable = sorted(idle, key=by_use) + sorted(soft, key=by_use)
        count = len(self._versions)
        used = self.total_bytes()
        evict: list[int] = []
        while count + 1 > self.max_versions or used + nbytes > self.memory_budget_bytes:
            if not evictable:
                raise Overloaded(
                    "Overloaded",
                    f"cannot load another version: {count} resident using {used} bytes "
                    f"(limits: {self.max_versions} versions, {self.memory_budget_bytes} bytes) "
                    f"and all are latest, pinned or in use: {self.resident()}",
                )
            v = evictable.pop(0)
            evict.append(v)
            count -= 1
            used -= self._versions[v].nbytes
        return evict

    def add(self, version: int, nbytes: int, sha256: str, now: float) -> None:
        """Publish ``version`` (its weights' checksum ``sha256``); it becomes the latest if it
        is the newest."""
        self._versions[version] = _Version(
            nbytes=nbytes, sha256=sha256, loaded_at=now, last_used=now
        )
        self._retired.pop(version, None)  # loaded again: served again
        self.latest = max(self.latest, version)

    def sha256(self, version: int) -> str | None:
        """Checksum of the weights held as ``version`` (None when not resident)."""
        info = self._versions.get(version)
        return info.sha256 if info else None

    def remove(self, version: int) -> None:
        """Drop ``version``; one no lease pins is remembered as retired (``VersionRetired``).
        A pinned one is not: its games wait for the learner to restore it."""
        if self._versions.pop(version, None) is not None and version not in self.pinned():
            self._retired[version] = None
            while len(self._retired) > RETIRED_KEPT:
                del self._retired[next(iter(self._retired))]

    def is_retired(self, version: int) -> bool:
        """Whether ``version`` was retired here while unpinned (``VersionRetired``)."""
        return version in self._retired

    def total_bytes(self) -> int:
        return sum(v.nbytes for v in self._versions.values())

    # --- leases --------------------------------------------------------------------------------

    def update_lease(
        self, client: str, pins: dict[int, int], lease_s: float, now: float, max_leases: int = 0
    ) -> None:
        """Replace ``client``'s pins; an empty map releases its lease. A new client past
        ``max_leases`` (0: no cap) is refused with ``Overloaded``."""
        live = {v: n for v, n in pins.items() if n > 0}
        if live and max_leases and client not in self._leases and len(self._leases) >= max_leases:
            raise Overloaded(
                "Overloaded", f"{len(self._leases)} clients hold leases (limit {max_leases})"
            )
        if live:
            self._leases[client] = _Lease(pins=live, expires=now + lease_s)
        else:
            self._leases.pop(client, None)

    def extend_leases(self, seconds: float) -> None:
        """Push every lease's expiry back by ``seconds`` (time the server was not running)."""
        for lease in self._leases.values():
            lease.expires += seconds

    def expire_leases(self, now: float) -> list[str]:
        """Drop leases not renewed in time; returns the clients dropped."""
        dead = [c for c, lease in self._leases.items() if lease.expires <= now]
        for c in dead:
            del self._leases[c]
        return dead

    def pinned(self) -> dict[int, int]:
        """Version -> games pinned to it, over all live leases."""
        out: dict[int, int] = {}
        for lease in self._leases.values():
            for v, n in lease.pins.items():
                out[v] = out.get(v, 0) + n
        return out

    def evictable(self, now: float, busy: set[int]) -> list[int]:
        """Resident versions that no one needs: not latest, unpinned, idle past the grace."""
        pinned = self.pinned()
        return [
            v
            for v, info in self._versions.items()
            if v != self.latest
            and v not in pinned
            and v not in busy
            and now - info.last_used >= self.grace_s
        ]

    def snapshot(self) -> dict[str, object]:
        return {
            "latest": self.latest,
            "resident": self.resident(),
            "pinned": {str(v): n for v, n in sorted(self.pinned().items())},
            "clients_with_leases": len(self._leases),
            "bytes": self.total_bytes(),
            "served_rows": {str(v): i.served_rows for v, i in sorted(self._versions.items())},
        }
