"""Replay: ring buffer, freshness eviction, rate limiter and metrics, with exact expectations."""

from __future__ import annotations

import numpy as np
import pytest

from azserve.errors import ConfigError
from learner.config import ReplayConfig
from learner.replay import Replay

OBS = (2, 3, 3)
A = 9


class Clock:
    """A settable clock for exact rate expectations."""

    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def traj(start: int, t: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """T positions tagged by their index: obs plane value, policy argmax and outcome = index."""
    ids = np.arange(start, start + t)
    obs = np.broadcast_to((ids % 256).astype(np.uint8)[:, None, None, None], (t, *OBS)).copy()
    policy = np.zeros((t, A), np.float32)
    policy[np.arange(t), ids % A] = 1.0
    return obs, policy, ids.astype(np.float32)


def make(clock: Clock | None = None, **kw: object) -> Replay:
    cfg = ReplayConfig(
        **{"capacity": 8, "max_policy_lag": 1, "reuse_target": 2.0, "min_size": 0, **kw}
    )  # type: ignore[arg-type]
    return Replay(cfg, OBS, A, clock=clock or Clock())


def held(r: Replay) -> set[int]:
    """Tags of every position a large sample draws."""
    b = r.sample(2000, np.random.default_rng(0))
    return set(b.outcome.astype(int).tolist())


def test_ring_overwrites_oldest_first() -> None:
    r = make(capacity=5)
    assert r.insert(*traj(0, 3), version=0) == 3
    assert r.insert(*traj(3, 4), version=0) == 4
    assert len(r) == 5
    assert held(r) == {2, 3, 4, 5, 6}
    m = r.metrics()
    assert (m.inserted, m.overwritten, m.size) == (7, 2, 5)


def test_trajectory_longer_than_ring_keeps_its_tail() -> None:
    r = make(capacity=4)
    assert r.insert(*traj(0, 10), version=0) == 4
    assert held(r) == {6, 7, 8, 9}


def test_sample_returns_consistent_rows() -> None:
    r = make()
    r.insert(*traj(0, 6), version=0)
    b = r.sample(64, np.random.default_rng(1))
    assert b.obs.shape == (64, *OBS) and b.obs.dtype == np.uint8
    assert b.policy.shape == (64, A) and b.policy.dtype == np.float32
    assert b.outcome.dtype == np.float32 and b.version.dtype == np.int64
    tags = b.outcome.astype(int)
    assert (b.obs[:, 0, 0, 0] == tags).all()
    assert (b.policy.argmax(1) == tags % A).all()
    # Same generator state, same batch.
    again = r.sample(64, np.random.default_rng(1))
    assert (again.outcome == b.outcome).all()


def test_stale_positions_are_evicted_and_never_sampled() -> None:
    r = make(capacity=16, max_policy_lag=1)
    r.insert(*traj(0, 3), version=0)
    r.insert(*traj(3, 2), version=1)
    r.insert(*traj(5, 4), version=2)
    assert r.set_current_version(2) == 3  # version 0 lags by 2 > 1
    assert len(r) == 6
    assert held(r) == {3, 4, 5, 6, 7, 8}
    assert r.set_current_version(3) == 2
    assert held(r) == {5, 6, 7, 8}
    m = r.metrics()
    assert m.dropped_stale == 5
    assert m.lag_histogram == [0, 4]  # all four left are one version behind
    assert m.mean_lag == 1.0


def test_stale_trajectory_is_refused_on_insert() -> None:
    r = make(max_policy_lag=1)
    r.set_current_version(5)
    assert r.insert(*traj(0, 3), version=3) == 0
    assert r.insert(*traj(3, 2), version=4) == 2
    m = r.metrics()
    assert (m.dropped_on_insert, m.size, m.inserted) == (3, 2, 2)
    with pytest.raises(ValueError, match="went back"):
        r.set_current_version(4)


def test_sampling_among_mostly_stale_slots_uses_the_mask() -> None:
    r = make(capacity=100, max_policy_lag=0)
    r.insert(*traj(0, 99), version=0)
    r.insert(*traj(99, 1), version=1)
    r.set_current_version(1)
    assert len(r) == 1
    b = r.sample(10, np.random.default_rng(0))
    assert (b.outcome == 99).all()


def test_rate_limiter_holds_reuse_target() -> None:
    # 2 samples trained per sample inserted; batches of 4; start at 4 positions.
    r = make(capacity=64, reuse_target=2.0, min_size=4)
    rng = np.random.default_rng(0)
    r.insert(*traj(0, 3), version=0)
    assert not r.can_sample(4)  # below min_size, though credit is 6
    r.insert(*traj(3, 1), version=0)
    assert r.batches_ready(4) == 2  # credit 8
    r.sample(4, rng)
    r.sample(4, rng)
    assert not r.can_sample(4)  # credit 0: training waits for data
    r.insert(*traj(4, 1), version=0)
    assert not r.can_sample(4)  # credit 2
    r.insert(*traj(5, 1), version=0)
    assert r.batches_ready(4) == 1  # credit 4
    r.sample(4, rng)
    m = r.metrics()
    assert (m.inserted, m.sampled, m.credit) == (6, 12, 0.0)
    assert m.reuse == 2.0


def test_credit_of_evicted_positions_is_forfeited() -> None:
    r = make(capacity=64, reuse_target=2.0, max_policy_lag=0)
    r.insert(*traj(0, 10), version=0)  # credit 20
    r.insert(*traj(10, 2), version=1)  # credit 24
    r.set_current_version(1)  # 10 evicted: 2 left, so at most 2 * 2 = 4 credit
    assert r.metrics().credit == 4.0
    assert r.batches_ready(2) == 2


def test_metrics_rates_and_age() -> None:
    clock = Clock()
    r = make(clock, capacity=64)
    r.insert(*traj(0, 10), version=0)
    clock.t = 1.0
    r.insert(*traj(10, 10), version=0)
    clock.t = 2.0
    r.sample(5, np.random.default_rng(0))
    clock.t = 4.0
    m = r.metrics()
    assert m.insert_rate == 20 / 4.0
    assert m.sample_rate == 5 / 4.0
    assert m.mean_age_s == 4.0 - 0.5  # half inserted at t=0, half at t=1
    assert m.lag_histogram == [20, 0]


def test_rate_window_forgets_old_events() -> None:
    clock = Clock()
    r = Replay(ReplayConfig(capacity=64, min_size=0), OBS, A, clock=clock, rate_window_s=1.0)
    r.insert(*traj(0, 10), version=0)
    for i in range(1, 5):
        clock.t = float(i)
        r.insert(*traj(0, 1), version=0)
    # Marks older than the 1 s window are dropped: the rate is that of the last second.
    assert r.metrics().insert_rate == pytest.approx(1.0)


def test_bad_inputs() -> None:
    r = make()
    obs, policy, outcome = traj(0, 3)
    with pytest.raises(ValueError, match="obs"):
        r.insert(obs.astype(np.float32), policy, outcome, version=0)
    with pytest.raises(ValueError, match="policy"):
        r.insert(obs, policy[:, :4], outcome, version=0)
    with pytest.raises(ValueError, match="no fresh"):
        r.sample(1, np.random.default_rng(0))
    with pytest.raises(ConfigError, match="replay.min_size"):
        ReplayConfig(capacity=10, min_size=11)


def test_own_generator_is_seeded() -> None:
    a, b = make(seed=3), make(seed=3)
    for r in (a, b):
        r.insert(*traj(0, 8), version=0)
    assert (a.sample(16).outcome == b.sample(16).outcome).all()
