"""Replay: a ring buffer of training positions with a freshness bound and a rate limiter.

Pure and I/O-free. Positions are kept in preallocated numpy arrays (policies dense, or as
sparse entries for a wide game: ``learner.policystore``, densified per batch); a position whose policy
version lags the learner's current version by more than ``max_policy_lag`` is never sampled
again. The rate limiter holds samples-trained / samples-inserted near ``reuse_target`` by making
training wait for fresh data; inserting never blocks. The target may move while the learner runs
(``set_reuse_target``: ``azserve train``'s autopilot, through ``replay.reuse_file``).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from azserve.metrics import WindowRate
from azserve.targets import target_spec
from learner.config import ReplayConfig
from learner.policystore import Policy, make_store


@dataclass(frozen=True)
class Batch:
    """Training positions. obs ``[B,C,H,W]`` uint8, policy ``[B,A]`` float32 (MCTS visit
    distribution), outcome ``[B]`` float32 (final result for the side to move), version ``[B]``
    int64 (weights version that played the position); the targets the replay keeps
    (``azserve.targets``, ``[B, ...]`` each) and, per target, a bool ``[B]`` mask of the
    positions that have it (a resigned game has no final ownership; the last move no reply)."""

    obs: np.ndarray
    policy: np.ndarray
    outcome: np.ndarray
    version: np.ndarray
    targets: Mapping[str, np.ndarray] = field(default_factory=dict)
    target_mask: Mapping[str, np.ndarray] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.outcome)


@dataclass(frozen=True)
class ReplayMetrics:
    """A snapshot of the replay's counters (positions, not trajectories)."""

    size: int
    """Fresh positions that may be sampled."""
    capacity: int
    """Slots in the ring."""
    current_version: int
    """The learner's current version, as last set."""
    inserted: int
    """Positions accepted since the start."""
    sampled: int
    """Positions returned in batches since the start."""
    reuse: float
    """sampled / inserted."""
    reuse_target: float
    """The rate limiter's target now (``replay.reuse_target``, or as last set)."""
    credit: float
    """Positions the rate limiter lets training sample now."""
    insert_rate: float
    """Positions inserted per second over the rate window."""
    sample_rate: float
    """Positions sampled per second over the rate window."""
    dropped_stale: int
    """Positions evicted because their version fell more than max_policy_lag behind."""
    dropped_on_insert: int
    """Positions refused at insertion because they were already too stale."""
    overwritten: int
    """Fresh positions overwritten by the ring before they went stale."""
    lag_histogram: list[int]
    """Fresh positions by lag ``current_version - version``, index 0..max_policy_lag."""
    mean_lag: float
    """Mean lag of fresh positions, in versions."""
    mean_age_s: float
    """Mean time since insertion of fresh positions, in seconds."""


class Replay:
    """Ring buffer of positions with freshness eviction and a samples-per-insert rate limiter.

    Rate limiter: every inserted position earns ``reuse_target`` credit, every sampled position
    spends one. A batch may be sampled while ``size >= min_size`` and the credit covers it. The
    credit is capped at ``reuse_target * size`` so that credit earned by positions that were
    later evicted (stale or overwritten) cannot be spent on the survivors.

    ``reuse_target`` starts at the config's and may be moved while the learner runs
    (``set_reuse_target``).
    """

    def __init__(
        self,
        cfg: ReplayConfig,
        obs_shape: tuple[int, int, int],
        num_actions: int,
        clock: Callable[[], float] = time.monotonic,
        rate_window_s: float = 10.0,
        targets: Sequence[str] = (),
    ) -> None:
        """``targets``: the names of the targets to keep (``azserve.targets``); others that
        trajectories carry are not stored. None kept: the replay is what it was without them."""
        n = cfg.capacity
        self.cfg = cfg
        self.obs_shape = tuple(obs_shape)
        self.num_actions = num_actions
        self._clock = clock
        self.rng = np.random.default_rng(cfg.seed)
        self._obs = np.zeros((n, *self.obs_shape), np.uint8)
        self._policy = make_store(n, num_actions, cfg.policy_width)
        self._outcome = np.zeros(n, np.float32)
        self._version = np.zeros(n, np.int64)
        self._time = np.zeros(n, np.float64)
        self._fresh = np.zeros(n, bool)
        self._targets: dict[str, np.ndarray] = {}
        self._has: dict[str, np.ndarray] = {}
        self._reply = None
        for name in targets:
            self._has[name] = np.zeros(n, bool)
            if name == "reply":  # a policy: kept as the policies are
                self._reply = make_store(n, num_actions, cfg.policy_width)
                continue
            dtype, shape = target_spec(name, n, self.obs_shape, num_actions)
            self._targets[name] = np.zeros(shape, dtype)
        self._head = 0  # next slot to write
        self._written = 0  # slots [0, written) have been written at least once
        self._size = 0  # fresh slots
        self._current_version = 0
        self._credit = 0.0
        self.reuse_target = cfg.reuse_target
        """Credit each inserted position earns (``set_reuse_target`` moves it)."""
        self._dropped_stale = 0
        self._dropped_on_insert = 0
        self._overwritten = 0
        now = clock()
        self._inserts = WindowRate(rate_window_s, now)
        self._samples = WindowRate(rate_window_s, now)

    def __len__(self) -> int:
        """Fresh positions that may be sampled."""
        return self._size

    @property
    def current_version(self) -> int:
        return self._current_version

    @property
    def policy_bytes(self) -> int:
        """Memory of the policies held (and of the ``reply`` target's, if kept)."""
        return self._policy.nbytes + (self._reply.nbytes if self._reply is not None else 0)

    def insert(
        self,
        obs: np.ndarray,
        policy: Policy,
        outcome: np.ndarray,
        version: int,
        targets: Mapping[str, Policy] | None = None,
    ) -> int:
        """Insert one trajectory: obs ``[T,C,H,W]`` uint8, policy ``[T,A]`` (or sparse rows,
        ``azserve.sparse.SparseRows``, as is the ``reply`` target of a sparse one), outcome ``[T]``,
        all played by weights ``version``, and its ``targets`` by name (checked by the
        receiver; a kept target it lacks is masked off for these positions). Returns the
        positions stored (0 when the trajectory is already too stale; only the last
        ``capacity`` positions when it is longer than the ring).
        """
        t = len(outcome)
        if obs.shape != (t, *self.obs_shape) or obs.dtype != np.uint8:
            raise ValueError(
                f"obs must be uint8 {[t, *self.obs_shape]}, got {obs.dtype}{list(obs.shape)}"
            )
        if len(policy) != t or (
            isinstance(policy, np.ndarray) and policy.shape != (t, self.num_actions)
        ):
            shape = list(policy.shape) if isinstance(policy, np.ndarray) else [len(policy)]
            raise ValueError(f"policy must be {[t, self.num_actions]}, got {shape}")
        if outcome.ndim != 1:
            raise ValueError(f"outcome must be [T], got {list(outcome.shape)}")
        if self._current_version - version > self.cfg.max_policy_lag:
            self._dropped_on_insert += t
            return 0
        targets = targets or {}
        if t > self.cfg.capacity:
            obs, policy, outcome = (
                obs[-self.cfg.capacity :],
                _tail(policy, self.cfg.capacity),
                outcome[-self.cfg.capacity :],
            )
            targets = {k: _tail(v, self.cfg.capacity) for k, v in targets.items()}
            t = self.cfg.capacity
        idx = (self._head + np.arange(t)) % self.cfg.capacity
        replaced = int(np.count_nonzero(self._fresh[idx]))
        self._overwritten += replaced
        self._obs[idx] = obs
        self._policy.put(idx, policy)
        self._outcome[idx] = outcome
        self._version[idx] = version
        for name, has in self._has.items():
            got = targets.get(name)
            if got is None:
                has[idx] = False
            elif name == "reply":
                assert self._reply is not None
                # An empty reply row is "no reply" (the last move, or one not recorded).
                has[idx] = self._reply.put(idx, got)
            else:
                self._targets[name][idx] = got
                has[idx] = True
        now = self._clock()
        self._time[idx] = now
        self._fresh[idx] = True
        self._head = int((self._head + t) % self.cfg.capacity)
        self._written = min(self._written + t, self.cfg.capacity)
        self._size += t - replaced
        self._credit += self.reuse_target * t
        self._cap_credit()
        self._inserts.add(t, now)
        return t

    def set_current_version(self, version: int) -> int:
        """The learner now publishes ``version``: evict positions that lag it by more than
        ``max_policy_lag``. Returns the number evicted."""
        if version < self._current_version:
            raise ValueError(f"version went back from {self._current_version} to {version}")
        self._current_version = version
        stale = self._fresh & (self._version < version - self.cfg.max_policy_lag)
        n = int(np.count_nonzero(stale))
        if n:
            self._fresh[stale] = False
            self._size -= n
            self._dropped_stale += n
            self._cap_credit()
        return n

    def set_reuse_target(self, target: float) -> None:
        """Hold reuse near ``target`` from now on. Positions inserted from now on earn the new
        credit, and the credit held is repriced: what the positions held still owe at the old
        target they owe ``target / old`` of at the new one (capped at ``target * size`` as
        always). So a lower target leaves no backlog earned at the old one to train the same
        positions on while they age; a higher one, set while the learner waits for credit
        (little held), lets it train at once on what it holds."""
        if not (target > 0 and math.isfinite(target)):
            raise ValueError(f"reuse target must be a positive number, got {target}")
        self._credit *= target / self.reuse_target
        self.reuse_target = float(target)
        self._cap_credit()

    def _cap_credit(self) -> None:
        self._credit = min(self._credit, self.reuse_target * self._size)

    def batches_ready(self, batch_size: int) -> int:
        """How many batches of ``batch_size`` the rate limiter allows now (0: wait for data)."""
        if self._size < max(self.cfg.min_size, 1):
            return 0
        return max(int(self._credit // batch_size), 0)

    def can_sample(self, batch_size: int) -> bool:
        """True when a batch may be trained now without exceeding the reuse target."""
        return self.batches_ready(batch_size) > 0

    def sample(self, batch_size: int, rng: np.random.Generator | None = None) -> Batch:
        """Draw ``batch_size`` fresh positions uniformly, with replacement, and spend their credit.

        ``rng`` defaults to the replay's own generator; the learner passes ``Trainer.rng``, which
        is checkpointed. Does not check the rate limiter (callers do, with ``can_sample``); raises
        ``ValueError`` when no fresh position is held.
        """
        if self._size == 0:
            raise ValueError("replay holds no fresh positions")
        idx = self._draw(batch_size, rng if rng is not None else self.rng)
        self._credit -= batch_size
        self._samples.add(batch_size, self._clock())
        targets = {k: v[idx] for k, v in self._targets.items()}
        if self._reply is not None:
            targets["reply"] = self._reply.get(idx)
        return Batch(
            obs=self._obs[idx],
            policy=self._policy.get(idx),
            outcome=self._outcome[idx],
            version=self._version[idx],
            targets={k: targets[k] for k in self._has},
            target_mask={k: v[idx] for k, v in self._has.items()},
        )

    def _draw(self, k: int, rng: np.random.Generator) -> np.ndarray:
        frac = self._size / self._written
        if frac < 0.25:
            # Rejection would mostly miss: pay one pass over the mask instead.
            return rng.choice(np.flatnonzero(self._fresh), size=k)
        out = np.empty(0, np.int64)
        while len(out) < k:
            cand = rng.integers(0, self._written, size=int((k - len(out)) / frac) + 8)
            out = np.concatenate([out, cand[self._fresh[cand]]])
        return out[:k]

    def metrics(self) -> ReplayMetrics:
        """Counters, rates and the lag distribution of the fresh positions (O(capacity))."""
        now = self._clock()
        fresh = self._fresh
        lags = self._current_version - self._version[fresh]
        hist = np.bincount(np.clip(lags, 0, None), minlength=self.cfg.max_policy_lag + 1)
        inserted, sampled = self._inserts.total, self._samples.total
        return ReplayMetrics(
            size=self._size,
            capacity=self.cfg.capacity,
            current_version=self._current_version,
            inserted=inserted,
            sampled=sampled,
            reuse=sampled / inserted if inserted else 0.0,
            reuse_target=self.reuse_target,
            credit=self._credit,
            insert_rate=self._inserts.rate(now),
            sample_rate=self._samples.rate(now),
            dropped_stale=self._dropped_stale,
            dropped_on_insert=self._dropped_on_insert,
            overwritten=self._overwritten,
            lag_histogram=[int(c) for c in hist[: self.cfg.max_policy_lag + 1]],
            mean_lag=float(lags.mean()) if len(lags) else 0.0,
            mean_age_s=float(now - self._time[fresh].mean()) if len(lags) else 0.0,
        )


def _tail(p: Policy | np.ndarray, n: int) -> Policy | np.ndarray:
    """The last ``n`` rows of an array or of sparse rows."""
    if isinstance(p, np.ndarray):
        return p[-n:]
    o = p.offsets[-n - 1 :]
    return type(p)(o - o[0], p.index[o[0] :], p.weight[o[0] :])
