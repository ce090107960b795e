"""Finished games to the learner with at-least-once delivery.

Every trajectory stays in a bounded outbox until the learner acks it. It is resent when no ack
arrives in time (with exponential backoff), and at once when the connection comes back after
breaking (what was on the wire may be lost); the learner drops the duplicates. When the outbox is
full, ``send()`` waits for space: a learner that cannot keep up, or is unreachable, slows game
production down instead of letting memory grow.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import time
from collections import deque
from dataclasses import dataclass

import msgspec
import numpy as np
import zmq
import zmq.asyncio
from zmq.utils.monitor import parse_monitor_message

from actors.config import ActorsConfig
from actors.sinks import BaseSink, SinkStats
from azserve.auth import AuthConfig, client_auth, client_keys
from azserve.errors import ConfigError, ProtocolError
from azserve.protocol import ErrorReply, Trajectory, TrajectoryAck, decode, encode
from azserve.trajarrays import Policy, flatten

log = logging.getLogger(__name__)


@dataclass
class _Entry:
    frames: list[bytes]
    deadline: float = 0.0
    """When to resend (0: never transmitted)."""
    sent_at: float = 0.0
    """Last transmission (0: never)."""
    attempts: int = 0


class TrajectorySender(BaseSink):
    """DEALER to the learner's ROUTER, owned by one task; at-least-once delivery (see module doc).

    ``send()`` encodes the trajectory (copying it), puts it in the outbox and returns; the owner
    task transmits, matches acks by message id, and resends what stays unacked.
    """

    def __init__(
        self,
        cfg: ActorsConfig,
        *,
        context: zmq.asyncio.Context | None = None,
        auth: AuthConfig | None = None,
    ) -> None:
        super().__init__()
        self.auth = auth or AuthConfig()
        if not cfg.learner:
            raise ConfigError("actors.learner: the trajectory sender needs the learner's endpoint")
        self._learner_key = ("auth.learner_public_key", self.auth.learner_public_key)
        client_keys(self.auth, cfg.learner, self._learner_key)  # a bad key fails here, not in start
        self.cfg = cfg
        self._ctx = context
        self._own_ctx = context is None
        self._sock: zmq.asyncio.Socket | None = None
        self._task: asyncio.Task[None] | None = None
        self._notify: asyncio.Task[None] | None = None
        self._ids = itertools.count(1)
        self._pending: dict[int, _Entry] = {}
        self._unsent: deque[int] = deque()  # ids never transmitted, in send order
        self._timers: list[tuple[float, int]] = []  # (deadline, id) heap; stale rows skipped
        self._wake = asyncio.Event()
        self._space = asyncio.Condition()
        self._idle = asyncio.Event()
        self._idle.set()
        self._resent = self._rejected = self._duplicates = self._reconnects = 0
        self._monitor: zmq.asyncio.Socket | None = None
        self._disconnected_at: float | None = None
        self.last_error: str | None = None
        """The last ErrorReply message from the learner."""

    async def start(self) -> None:
        await super().start()
        if self._ctx is None:
            self._ctx = zmq.asyncio.Context()
        self._sock = self._ctx.socket(zmq.DEALER)
        client_auth(self._sock, self.auth, str(self.cfg.learner), self._learner_key)
        # Connection events tell which trajectories a broken link may have swallowed.
        events = zmq.EVENT_CONNECTED | zmq.EVENT_DISCONNECTED
        self._monitor = self._sock.get_monitor_socket(events)  # type: ignore[assignment]
        self._sock.connect(self.cfg.learner)  # type: ignore[arg-type]
        self._task = self.lifecycle.spawn(self._run(), "run")

    async def _put(
        self,
        traj: Trajectory,
        obs: np.ndarray,
        policy: Policy,
        outcome: np.ndarray,
        *targets: Policy,
    ) -> None:
        # Waits while the outbox is full; ``traj.id`` is replaced by the sender's message id.
        if len(self._pending) >= self.cfg.max_outbox:
            async with self._space:
                await self._space.wait_for(
                    lambda: len(self._pending) < self.cfg.max_outbox or not self.lifecycle.running
                )
            self._check_send(traj, obs, policy, outcome, *targets)
        seq = next(self._ids)
        frames = encode(
            msgspec.structs.replace(traj, id=seq), flatten(obs, policy, outcome, targets)
        )
        self._pending[seq] = _Entry(frames=[bytes(f) for f in frames])
        self._unsent.append(seq)
        self._idle.clear()
        self._wake.set()

    def stats(self) -> SinkStats:
        return SinkStats(
            sent=self._sent,
            acked=self._acked,
            resent=self._resent,
            pending=len(self._pending),
            rejected=self._rejected,
            duplicates=self._duplicates,
            positions=self._positions,
            reconnects=self._reconnects,
        )

    async def aclose(self) -> int:
        """Stop taking trajectories, wait up to ``drain_timeout_s`` for outstanding acks, close.
        Returns how many trajectories stayed unacked (logged as a warning when any)."""
        if not self.lifecycle.begin_close():
            return len(self._pending)
        async with self._space:
            self._space.notify_all()  # waiters for outbox space fail with ServerClosed
        assert self._task is not None and self._sock is not None
        idle = asyncio.ensure_future(self._idle.wait())
        await asyncio.wait(
            [idle, self._task],
            timeout=self.cfg.drain_timeout_s,
            return_when=asyncio.FIRST_COMPLETED,
        )
        idle.cancel()
        self._task.cancel()
        await asyncio.wait([self._task])
        self._sock.disable_monitor()
        assert self._monitor is not None
        self._monitor.close(linger=0)
        self._sock.close(linger=0)
        if self._own_ctx and self._ctx is not None:
            self._ctx.term()
        self.lifecycle.closed()
        unacked = len(self._pending)
        if unacked:
            log.warning("trajectory sender closed with %d unacked trajectories", unacked)
        if self.lifecycle.error is not None:
            raise self.lifecycle.error
        return unacked

    def _on_failure(self, exc: BaseException) -> None:
        # The owner task died: games waiting for outbox space must not wait for ever.
        self._notify = asyncio.get_running_loop().create_task(self._wake_waiters())

    async def _wake_waiters(self) -> None:
        async with self._space:
            self._space.notify_all()

    async def _run(self) -> None:
        sock = self._sock
        assert sock is not None
        assert self._monitor is not None
        recv = asyncio.ensure_future(sock.recv_multipart())
        wake = asyncio.ensure_future(self._wake.wait())
        mon = asyncio.ensure_future(self._monitor.recv_multipart())
        try:
            while True:
                self._wake.clear()
                blocked = await self._transmit_due()
                waits: set[asyncio.Future] = {recv, wake, mon}
                if blocked:  # the send queue is full: wait until it drains
                    waits.add(asyncio.ensure_future(sock.poll(flags=zmq.POLLOUT)))  # type: ignore[call-arg]  # pyzmq stub is wrong
                timeout = (
                    None
                    if blocked or not self._timers
                    else max(self._timers[0][0] - time.monotonic(), 0.0)
                )
                done, _ = await asyncio.wait(
                    waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
                )
                for fut in waits - {recv, wake, mon}:
                    fut.cancel()
                if recv in done:
                    freed = self._on_reply(recv.result())
                    while True:  # drain every reply already queued before sleeping again
                        try:
                            freed += self._on_reply(await sock.recv_multipart(flags=zmq.DONTWAIT))
                        except zmq.Again:
                            break
                    recv = asyncio.ensure_future(sock.recv_multipart())
                    if freed:
                        async with self._space:
                            self._space.notify(freed)
                if wake in done:
                    wake = asyncio.ensure_future(self._wake.wait())
                if mon in done:
                    self._on_link_event(parse_monitor_message(mon.result())["event"])
                    mon = asyncio.ensure_future(self._monitor.recv_multipart())
        finally:
            recv.cancel()
            wake.cancel()
            mon.cancel()

    def _on_link_event(self, event: int) -> None:
        """On reconnect, resend at once what was transmitted before the link broke: it may have
        been lost with the connection. What was sent later waited in ZeroMQ's queue."""
        if event == zmq.EVENT_DISCONNECTED:
            self._disconnected_at = time.monotonic()
            return
        if event != zmq.EVENT_CONNECTED or self._disconnected_at is None:
            return
        self._reconnects += 1
        now = time.monotonic()
        for seq, entry in self._pending.items():
            if 0 < entry.sent_at <= self._disconnected_at:
                entry.deadline, entry.attempts = now, 0
                heapq.heappush(self._timers, (now, seq))
        self._disconnected_at = None

    async def _transmit_due(self) -> bool:
        """Send new trajectories, then overdue resends. True when ZeroMQ's queue is full."""
        now = time.monotonic()
        while self._unsent:
            seq = self._unsent[0]
            entry = self._pending.get(seq)
            if entry is not None:
                if not await self._transmit(entry):
                    return True
                entry.sent_at = now
                entry.deadline = now + self.cfg.resend_after_s
                heapq.heappush(self._timers, (entry.deadline, seq))
            self._unsent.popleft()
        while self._timers and self._timers[0][0] <= now:
            deadline, seq = self._timers[0]
            entry = self._pending.get(seq)
            if entry is not None and entry.deadline == deadline:
                if not await self._transmit(entry):
                    return True
                entry.sent_at = now
                entry.attempts += 1
                self._resent += 1
                backoff = self.cfg.resend_after_s * 2.0**entry.attempts
                entry.deadline = now + min(backoff, self.cfg.max_resend_after_s)
                heapq.heappush(self._timers, (entry.deadline, seq))
            heapq.heappop(self._timers)
        return False

    async def _transmit(self, entry: _Entry) -> bool:
        assert self._sock is not None
        try:
            await self._sock.send_multipart(entry.frames, flags=zmq.DONTWAIT)
        except zmq.Again:
            return False
        return True

    def _on_reply(self, frames: list[bytes]) -> int:
        """Settle the outbox entry a reply is for; returns the number of entries freed."""
        try:
            msg, _ = decode(frames)
        except ProtocolError as exc:
            log.warning("undecodable reply from the learner: %s", exc)
            return 0
        if not isinstance(msg, (TrajectoryAck, ErrorReply)) or msg.id not in self._pending:
            return 0  # an ack for a resend already acked, or not for us
        if isinstance(msg, ErrorReply) and msg.type == "StorageUnavailable":
            # The learner could not store it now (its disk is full): it stays in the outbox
            # and goes again at its next resend time, with the usual backoff.
            self.last_error = f"{msg.type}: {msg.message}"
            return 0
        del self._pending[msg.id]
        if isinstance(msg, TrajectoryAck):
            self._acked += 1
            self._duplicates += msg.duplicate
        else:
            # The learner will never take this one: resending cannot help.
            self._rejected += 1
            self.last_error = f"{msg.type}: {msg.message}"
            log.warning("learner rejected a trajectory: %s", self.last_error)
        if not self._pending:
            self._idle.set()
        return 1
