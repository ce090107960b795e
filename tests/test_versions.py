"""VersionRegistry: resolving -1 to the latest, which versions may be evicted (latest, pinned,
busy and recently used ones may not), client leases and their expiry, and the admission rule
(version count and memory budget)."""

from __future__ import annotations

import pytest

from azserve.errors import Overloaded, VersionUnavailable
from azserve.versions import VersionRegistry

pytestmark = pytest.mark.timeout(30)


def registry(**kw: object) -> VersionRegistry:
    return VersionRegistry(
        **{"max_versions": 8, "memory_budget_bytes": 1000, "grace_s": 10.0, **kw}
    )  # type: ignore[arg-type]


def test_resolve_latest_and_pinned_versions() -> None:
    r = registry()
    with pytest.raises(VersionUnavailable, match="no weights yet"):
        r.resolve(-1)
    r.add(0, 100, "sha", now=0.0)
    assert r.resolve(-1) == 0
    r.add(2, 100, "sha", now=1.0)
    assert (r.resolve(-1), r.resolve(0), r.resolve(2)) == (2, 0, 2)
    with pytest.raises(
        VersionUnavailable, match=r"version 1 is not resident \(resident: \[0, 2\], latest: 2\)"
    ):
        r.resolve(1)
    with pytest.raises(VersionUnavailable):
        r.resolve(-2)


def test_adding_an_older_version_keeps_the_latest() -> None:
    r = registry()
    r.add(5, 100, "sha", now=0.0)
    r.add(3, 100, "sha", now=0.0)
    assert r.latest == 5 and r.resident() == [3, 5]
    assert 3 in r and 4 not in r


def test_remove() -> None:
    r = registry()
    r.add(0, 100, "sha", now=0.0)
    r.add(1, 100, "sha", now=0.0)
    r.remove(0)
    r.remove(7)  # unknown: no-op
    assert r.resident() == [1]
    with pytest.raises(VersionUnavailable):
        r.resolve(0)


def test_evictable_excludes_latest_recent_busy_and_pinned() -> None:
    r = registry(grace_s=10.0)
    for v in range(4):
        r.add(v, 100, "sha", now=0.0)
    assert r.evictable(now=9.9, busy=set()) == []  # all used within the grace
    assert sorted(r.evictable(now=10.0, busy=set())) == [0, 1, 2]  # never the latest (3)
    r.touch(1, rows=5, now=5.0)
    assert sorted(r.evictable(now=10.0, busy=set())) == [0, 2]
    assert sorted(r.evictable(now=10.0, busy={0})) == [2]
    r.update_lease("c1", {2: 1}, lease_s=5.0, now=10.0)
    assert r.evictable(now=10.0, busy={0}) == []


def test_leases_sum_over_clients_and_expire() -> None:
    r = registry()
    r.update_lease("c1", {0: 2, 1: 1}, lease_s=5.0, now=0.0)
    r.update_lease("c2", {0: 3, 4: 0}, lease_s=1.0, now=0.0)
    assert r.pinned() == {0: 5, 1: 1}  # zero counts do not pin
    assert r.expire_leases(now=0.5) == []
    assert r.expire_leases(now=1.0) == ["c2"]
    assert r.pinned() == {0: 2, 1: 1}
    r.update_lease("c1", {1: 1}, lease_s=5.0, now=4.0)  # a heartbeat replaces the pins
    assert r.pinned() == {1: 1}
    assert r.expire_leases(now=8.9) == []
    assert r.expire_leases(now=9.0) == ["c1"]
    assert r.pinned() == {}


def test_empty_pins_release_the_lease() -> None:
    r = registry()
    r.update_lease("c1", {0: 1}, lease_s=5.0, now=0.0)
    r.update_lease("c1", {}, lease_s=5.0, now=1.0)
    assert r.pinned() == {}
    assert r.snapshot()["clients_with_leases"] == 0


def test_pinned_version_becomes_evictable_when_its_lease_expires() -> None:
    r = registry(grace_s=0.0)
    r.add(0, 100, "sha", now=0.0)
    r.add(1, 100, "sha", now=0.0)
    r.update_lease("actor", {0: 4}, lease_s=5.0, now=0.0)
    assert r.evictable(now=4.0, busy=set()) == []
    r.expire_leases(now=5.0)
    assert r.evictable(now=5.0, busy=set()) == [0]


def test_admission_by_version_count_evicts_least_recently_used() -> None:
    r = registry(max_versions=3, grace_s=0.0)
    for v in range(3):
        r.add(v, 10, "sha", now=float(v))
    r.touch(0, rows=1, now=5.0)  # 0 is now used more recently than 1
    assert r.check_admit(10, now=6.0, busy=set()) == [1]
    assert r.resident() == [0, 1, 2]  # check_admit only advises


def test_admission_by_memory_budget() -> None:
    r = registry(memory_budget_bytes=1000, grace_s=0.0)
    r.add(0, 400, "sha", now=0.0)
    r.add(1, 300, "sha", now=1.0)
    r.add(2, 200, "sha", now=2.0)
    assert r.total_bytes() == 900
    assert r.check_admit(100, now=3.0, busy=set()) == []
    assert r.check_admit(300, now=3.0, busy=set()) == [0]  # oldest first, just enough
    assert r.check_admit(700, now=3.0, busy=set()) == [0, 1]


def test_admission_fails_when_nothing_can_go() -> None:
    r = registry(memory_budget_bytes=1000, grace_s=0.0)
    r.add(0, 500, "sha", now=0.0)
    r.add(1, 400, "sha", now=0.0)
    r.update_lease("actor", {0: 1}, lease_s=60.0, now=0.0)
    with pytest.raises(Overloaded, match="all are latest, pinned or in use"):
        r.check_admit(200, now=1.0, busy=set())
    with pytest.raises(Overloaded):
        r.check_admit(2000, now=1.0, busy=set())  # larger than the whole budget


def test_touch_counts_rows_and_snapshot_reports() -> None:
    r = registry()
    r.add(0, 100, "sha", now=0.0)
    r.add(1, 50, "sha", now=0.0)
    r.touch(0, rows=7, now=1.0)
    r.touch(0, rows=3, now=2.0)
    r.touch(9, rows=3, now=2.0)  # not resident: ignored
    r.update_lease("c", {0: 2}, lease_s=5.0, now=0.0)
    assert r.snapshot() == {
        "latest": 1,
        "resident": [0, 1],
        "pinned": {"0": 2},
        "clients_with_leases": 1,
        "bytes": 150,
        "served_rows": {"0": 10, "1": 0},
    }


def test_admission_under_pressure_evicts_versions_only_the_grace_protects() -> None:
    """A publisher faster than the grace period is not refused: versions kept only by the
    grace go (idle ones first, then least recently used); pinned and busy ones stay."""
    r = registry(max_versions=4, grace_s=10.0)
    for v in range(4):
        r.add(v, 10, "sha", now=float(v))
    r.update_lease("game-client", {1: 1}, lease_s=60.0, now=3.0)
    # At t=4 every version is inside its grace; 3 is latest, 1 pinned, 2 busy: 0 must go.
    assert r.check_admit(10, now=4.0, busy={2}) == [0]
    r.add(4, 10, "sha", now=4.0)
    r.remove(0)
    with pytest.raises(Overloaded):
        r.check_admit(10, now=4.5, busy={2, 3})  # 4 latest, 1 pinned, 2 and 3 busy
