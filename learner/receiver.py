"""The learner's trajectory intake: a ZeroMQ ROUTER that validates, de-duplicates and acks.

Actors connect DEALER sockets (``actors.sender.TrajectorySender``) and send ``Trajectory``
messages. Every well-formed trajectory is acknowledged with ``TrajectoryAck``, duplicates too
(``duplicate=True``), so that an actor whose ack was lost stops resending. Malformed input gets
an ``ErrorReply`` of type ``BadRequest`` and the receiver keeps serving.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import zmq
import zmq.asyncio

from azserve.auth import AuthConfig, server_auth
from azserve.errors import ConfigError, ProtocolError
from azserve.lifecycle import Lifecycle, State
from azserve.protocol import (
    PROTOCOL_VERSION,
    ErrorReply,
    Frame,
    Message,
    Trajectory,
    TrajectoryAck,
    decode,
    encode,
    request_id_of,
)
from azserve.sparse import SparseRows
from azserve.targets import check_targets
from azserve.trajarrays import Policy, split
from learner.config import LearnerConfig

OnTrajectory = Callable[..., None]
"""``on_trajectory(msg, obs [T,C,H,W] uint8, policy [T,A] float32, outcome [T] float32,
*targets)`` (the targets ``msg.targets`` names, ``azserve.targets``; a sparse trajectory's
policy and reply as ``azserve.sparse.SparseRows``, ``azserve.trajarrays``).
Called once per accepted trajectory, before the ack; the arrays are read-only and stay valid.
``OSError`` means "cannot store it now" (a full disk): the sender gets ``StorageUnavailable``
instead of an ack and sends it again later. Any other exception is a learner bug, not bad
input: it stops the receiver and is re-raised by ``aclose``."""


class DuplicateFilter:
    """Remembers the most recent ``capacity`` (actor, game_id) keys, oldest forgotten first.

    Resends arrive within seconds of the original, so a window of recent keys is enough. Pass
    the same filter to a receiver re-bound in the same process to keep exactly-once delivery
    across the restart.
    """

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._keys: OrderedDict[tuple[str, int], None] = OrderedDict()

    def __len__(self) -> int:
        return len(self._keys)

    def __contains__(self, key: tuple[str, int]) -> bool:
        return key in self._keys

    def add(self, key: tuple[str, int]) -> None:
        self._keys[key] = None
        if len(self._keys) > self.capacity:
            self._keys.popitem(last=False)


@dataclass(frozen=True)
class ReceiverStats:
    """Receiver counters since start."""

    received: int
    """Messages read from the socket."""
    accepted: int
    """Trajectories handed to the learner."""
    positions: int
    """Positions in the accepted trajectories."""
    duplicates: int
    """Trajectories acked but dropped as already accepted."""
    rejected: int
    """Messages answered with an ErrorReply."""
    dropped: int
    """Messages that could not be answered (no routing id or header)."""
    unstored: int
    """Trajectories refused with ``StorageUnavailable`` (the learner could not write them);
    their senders keep them and send them again."""
    by_version: dict[int, int]
    """Accepted trajectories per weights version."""
    auth_refused: int = 0
    """CURVE handshakes refused: a peer without CURVE or the learner's key, or unlisted."""


class TrajectoryReceiver:
    """ROUTER socket owned by one task: receive -> validate -> de-duplicate -> hand over -> ack."""

    def __init__(
        self,
        cfg: LearnerConfig,
        obs_shape: tuple[int, int, int],
        num_actions: int,
        on_trajectory: OnTrajectory,
        *,
        game: str | None = None,
        dedup: DuplicateFilter | None = None,
        context: zmq.asyncio.Context | None = None,
        auth: AuthConfig | None = None,
    ) -> None:
        """``obs_shape`` (C, H, W) and ``num_actions`` are the network's; with ``game`` set,
        trajectories of another game are refused."""
        self.cfg = cfg
        self.obs_shape = tuple(obs_shape)
        self.num_actions = num_actions
        self.game = game
        self.dedup = dedup if dedup is not None else DuplicateFilter(cfg.dedup_capacity)
        self._on_trajectory = on_trajectory
        self.auth = auth or AuthConfig()
        self._authenticator: Any = None
        self._ctx = context
        self._own_ctx = context is None
        self._sock: zmq.asyncio.Socket | None = None
        self.lifecycle = Lifecycle("TrajectoryReceiver")
        """Its receive task is watched: ``lifecycle.failed`` is set if it dies."""
        self.endpoint: str | None = None
        """The bound endpoint, with the actual port, once started."""
        self._received = self._accepted = self._positions = 0
        self._duplicates = self._rejected = self._dropped = self._unstored = 0
        self._auth_refused = 0
        self._by_version: Counter[int] = Counter()

    async def start(self) -> None:
        """Bind and start serving. A receiver starts once."""
        self.lifecycle.begin_start()
        if self._ctx is None:
            self._ctx = zmq.asyncio.Context()
        sock = self._ctx.socket(zmq.ROUTER)
        sock.setsockopt(zmq.MAXMSGSIZE, self.cfg.max_message_bytes)
        try:
            self._authenticator = server_auth(
                self._ctx,
                sock,
                self.auth,
                self.cfg.bind,
                role="learner",
                monitor=True,
                on_refused=self._refused,
            )
            await self._bind(sock)
        except (zmq.ZMQError, ConfigError, asyncio.CancelledError):
            sock.close(linger=0)
            self._stop_auth()
            self._close_ctx()
            self.lifecycle.state = State.CLOSED
            raise
        self._sock = sock
        self.endpoint = sock.getsockopt_string(zmq.LAST_ENDPOINT)
        self.lifecycle.spawn(self._run(), "recv")
        if self._authenticator is not None:
            self.lifecycle.spawn(self._authenticator.watch(), "auth")
        self.lifecycle.started()

    async def _bind(self, sock: zmq.asyncio.Socket) -> None:
        deadline = time.monotonic() + self.cfg.bind_retry_s
        while True:
            try:
                sock.bind(self.cfg.bind)
                return
            except zmq.ZMQError as exc:
                if exc.errno != zmq.EADDRINUSE or time.monotonic() >= deadline:
                    raise
            await asyncio.sleep(0.02)

    async def aclose(self) -> None:
        """Stop receiving and close the socket. Re-raises an error that stopped the receiver."""
        if not self.lifecycle.begin_close():
            return
        assert self._sock is not None
        await self.lifecycle.cancel()
        self._sock.close(linger=self.cfg.close_linger_ms)
        self._stop_auth()
        self._close_ctx()
        self.lifecycle.closed()
        if self.lifecycle.error is not None:
            raise self.lifecycle.error

    def _stop_auth(self) -> None:
        if self._authenticator is not None:
            self._authenticator.stop()
            self._authenticator = None

    def _close_ctx(self) -> None:
        if self._own_ctx and self._ctx is not None:
            self._ctx.term()
            self._ctx = None

    async def __aenter__(self) -> TrajectoryReceiver:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def stats(self) -> ReceiverStats:
        return ReceiverStats(
            received=self._received,
            accepted=self._accepted,
            positions=self._positions,
            duplicates=self._duplicates,
            rejected=self._rejected,
            dropped=self._dropped,
            unstored=self._unstored,
            by_version=dict(self._by_version),
            auth_refused=self._auth_refused,
        )

    def _refused(self, reason: str) -> None:
        self._auth_refused += 1

    async def _run(self) -> None:
        sock = self._sock
        assert sock is not None
        while True:
            frames = await sock.recv_multipart()
            self._received += 1
            if len(frames) < 2:  # ROUTER prepends the routing id; nothing to answer to
                self._dropped += 1
                continue
            reply = self._handle(frames[1:])
            await sock.send_multipart([frames[0], *encode(reply)])

    def _handle(self, body: Sequence[Frame]) -> Message:
        try:
            msg, arrays = decode(body)
        except ProtocolError as exc:
            return self._error(request_id_of(body[0]), str(exc))
        if not isinstance(msg, Trajectory):
            return self._error(msg.id, f"expected a 'traj' message, got {type(msg).__name__}")
        try:
            obs, policy, outcome, targets = split(msg, arrays)
        except ProtocolError as exc:
            return self._error(msg.id, f"trajectory {msg.actor}/{msg.game_id}: {exc}")
        problem = self._check(msg, obs, policy, outcome, targets)
        if problem is not None:
            return self._error(msg.id, f"trajectory {msg.actor}/{msg.game_id}: {problem}")
        key = (msg.actor, msg.game_id)
        if key in self.dedup:
            self._duplicates += 1
            return TrajectoryAck(id=msg.id, game_id=msg.game_id, duplicate=True)
        try:
            self._on_trajectory(msg, obs, policy, outcome, *targets)
        except OSError as exc:  # the learner cannot store it now (disk full): no ack
            self._unstored += 1
            return ErrorReply(id=msg.id, type="StorageUnavailable", message=str(exc))
        self.dedup.add(key)
        self._accepted += 1
        self._positions += msg.length
        self._by_version[msg.version] += 1
        return TrajectoryAck(id=msg.id, game_id=msg.game_id)

    def _error(self, request_id: int | None, message: str) -> ErrorReply:
        self._rejected += 1
        return ErrorReply(id=request_id, type="BadRequest", message=message)

    def _check(
        self,
        msg: Trajectory,
        obs: np.ndarray,
        policy: Policy,
        outcome: np.ndarray,
        targets: list[Policy],
    ) -> str | None:
        """Why the trajectory cannot be stored, or None when it is fine."""
        if msg.proto != PROTOCOL_VERSION:
            return f"protocol version {msg.proto} is not {PROTOCOL_VERSION}"
        if self.game is not None and msg.game != self.game:
            return f"game {msg.game!r} is not this learner's {self.game!r}"
        if msg.version < 0:
            return f"negative version {msg.version}"
        names = msg.targets or []
        t = msg.length
        if t < 1:
            return f"length {t} < 1"
        if msg.moves and msg.moves < t:
            return f"moves {msg.moves} < length {t}"
        want: dict[str, tuple[Any, Any, tuple[int, ...]]] = {
            "obs": (obs, np.uint8, (t, *self.obs_shape))
        }
        if not isinstance(policy, SparseRows):
            want["policy"] = (policy, np.float32, (t, self.num_actions))
        want["outcome"] = (outcome, np.float32, (t,))
        if isinstance(policy, SparseRows) and (why := policy.problem(t, self.num_actions)):
            return f"policy: {why}"
        for name, (a, dtype, shape) in want.items():
            if a.dtype != dtype or a.shape != shape:
                return f"{name} must be {np.dtype(dtype).name}{list(shape)}, got {a.dtype.name}{list(a.shape)}"
        # NaN or out-of-range targets would silently poison training: refuse them here.
        if not isinstance(policy, SparseRows) and not (
            np.isfinite(policy).all() and (policy >= 0).all()
        ):
            return "policy has negative or non-finite entries"
        if not (np.isfinite(outcome).all() and (np.abs(outcome) <= 1).all()):
            return "outcome outside [-1, 1]"
        return check_targets(names, targets, t, self.obs_shape, self.num_actions)
