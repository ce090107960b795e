"""Where an actor's finished games go: the learner (``TrajectorySender``), a file or nowhere.

All sinks share one async interface: ``start()``, ``send(traj, obs, policy, outcome)``,
``aclose()`` and ``stats()``. ``open_sink`` picks one from the config.

``TrajectorySender`` gives at-least-once delivery: every trajectory stays in a bounded outbox
until the learner acks it. It is resent when no ack arrives in time (with exponential backoff),
and at once when the connection comes back after breaking (what was on the wire may be lost);
the learner drops the duplicates. When the outbox is
full, ``send()`` waits for space: a learner that cannot keep up, or is unreachable, slows game
production down instead of letting memory grow.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import os
import struct
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Protocol, Self

import msgspec
import numpy as np
import zmq
import zmq.asyncio
from zmq.utils.monitor import parse_monitor_message

from azserve.auth import AuthConfig, client_auth
from azserve.errors import ConfigError, ProtocolError, ServerClosed
from azserve.protocol import ErrorReply, Trajectory, TrajectoryAck, decode, encode

log = logging.getLogger(__name__)

FILE_MAGIC = b"AZTRAJ\x00\x01"
"""First 8 bytes of a trajectory file. Then records: u32 frame count, and per frame a u64
length and the frame's bytes (all little-endian); the frames are ``protocol.encode``'s."""


@dataclass(frozen=True)
class SinkConfig:
    """Trajectory output section of the actor config."""

    endpoint: str | None = None
    """Learner endpoint to send to; None: write to ``path`` or only count."""
    path: str | None = None
    """Append trajectories to this file when no endpoint is set."""
    max_outbox: int = 1024
    """Unacked trajectories held; ``send()`` waits while the outbox is full."""
    resend_after_s: float = 5.0
    """Resend a trajectory not acked after this long (doubling on each resend)."""
    max_resend_after_s: float = 60.0
    """Upper bound of the resend interval."""
    drain_timeout_s: float = 5.0
    """How long ``aclose()`` waits for outstanding acks."""

    def __post_init__(self) -> None:
        if self.max_outbox < 1:
            raise ConfigError(f"trajectories.max_outbox: must be >= 1, got {self.max_outbox}")
        if not 0 < self.resend_after_s <= self.max_resend_after_s:
            raise ConfigError("trajectories: need 0 < resend_after_s <= max_resend_after_s")


@dataclass(frozen=True)
class SinkStats:
    """Counters of a sink (trajectories, except ``positions``)."""

    sent: int
    """Trajectories accepted by ``send()``."""
    acked: int
    """Acknowledged by the learner (stored, for local sinks)."""
    resent: int
    """Resend transmissions."""
    pending: int
    """In the outbox, not yet acked."""
    rejected: int
    """Refused by the learner with an ErrorReply (not resent)."""
    duplicates: int
    """Acks saying the learner already had it (a resend crossed an ack)."""
    positions: int
    """Positions in the trajectories sent."""
    reconnects: int = 0
    """Times the link to the learner came back after breaking."""


class TrajectorySink(Protocol):
    """Common interface of the sinks."""

    async def start(self) -> None: ...

    async def send(
        self, traj: Trajectory, obs: np.ndarray, policy: np.ndarray, outcome: np.ndarray
    ) -> None:
        """Hand over one finished game: obs ``[T,C,H,W]`` uint8, policy ``[T,A]`` float32,
        outcome ``[T]`` float32, with ``traj.length == T``. The arrays may be reused afterwards."""
        ...

    async def aclose(self) -> int:
        """Flush and close; returns the number of trajectories not delivered."""
        ...

    def stats(self) -> SinkStats: ...


class _Sink:
    """Lifecycle, counters and argument checks shared by the sinks."""

    def __init__(self) -> None:
        self._state = "new"
        self._sent = self._acked = self._positions = 0

    async def start(self) -> None:
        if self._state != "new":
            raise RuntimeError(f"{type(self).__name__} cannot start: it is {self._state}")
        self._state = "running"

    def _check_send(
        self, traj: Trajectory, obs: np.ndarray, policy: np.ndarray, outcome: np.ndarray
    ) -> None:
        if self._state != "running":
            raise ServerClosed(f"{type(self).__name__} is {self._state}")
        t = traj.length
        if (
            obs.ndim != 4
            or len(obs) != t
            or policy.ndim != 2
            or len(policy) != t
            or outcome.shape != (t,)
        ):
            raise ValueError(
                f"trajectory length {t} does not match obs {list(obs.shape)}, "
                f"policy {list(policy.shape)}, outcome {list(outcome.shape)}"
            )

    async def send(
        self, traj: Trajectory, obs: np.ndarray, policy: np.ndarray, outcome: np.ndarray
    ) -> None:
        """See ``TrajectorySink.send``. Raises ``ServerClosed`` unless started and not closing."""
        self._check_send(traj, obs, policy, outcome)
        await self._put(traj, obs, policy, outcome)
        self._sent += 1
        self._positions += traj.length

    async def _put(
        self, traj: Trajectory, obs: np.ndarray, policy: np.ndarray, outcome: np.ndarray
    ) -> None:
        self._acked += 1  # a local sink has stored it

    def stats(self) -> SinkStats:
        return SinkStats(self._sent, self._acked, 0, 0, 0, 0, self._positions)

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> int:
        self._state = "closed"
        return 0


class NullSink(_Sink):
    """Counts trajectories and drops them (an actor benchmark without a learner)."""


class FileSink(_Sink):
    """Appends trajectories to a file (format: ``FILE_MAGIC``); read back with
    ``read_trajectory_file``. Writes are buffered and small, so they stay on the event loop."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        super().__init__()
        self.path = Path(path)
        self._file: BinaryIO | None = None

    async def start(self) -> None:
        await super().start()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = self.path.open("ab")
        if self._file.tell() == 0:
            self._file.write(FILE_MAGIC)
        else:
            with self.path.open("rb") as f:
                if f.read(len(FILE_MAGIC)) != FILE_MAGIC:
                    self._file.close()
                    self._state = "closed"
                    raise ProtocolError(f"{self.path} exists and is not a trajectory file")

    async def _put(
        self, traj: Trajectory, obs: np.ndarray, policy: np.ndarray, outcome: np.ndarray
    ) -> None:
        assert self._file is not None
        frames = encode(traj, [obs, policy, outcome])
        parts: list[bytes | memoryview] = [struct.pack("<I", len(frames))]
        for frame in frames:
            parts += [struct.pack("<Q", len(frame)), frame]
        self._file.write(b"".join(parts))
        self._acked += 1

    async def aclose(self) -> int:
        if self._file is not None:
            self._file.close()
            self._file = None
        return await super().aclose()


def read_trajectory_file(
    path: str | os.PathLike[str],
) -> Iterator[tuple[Trajectory, np.ndarray, np.ndarray, np.ndarray]]:
    """Yield ``(traj, obs, policy, outcome)`` from a ``FileSink`` file. A truncated last record
    (the writer died mid-append) ends the iteration; anything else malformed raises ProtocolError."""
    with Path(path).open("rb") as f:
        if f.read(len(FILE_MAGIC)) != FILE_MAGIC:
            raise ProtocolError(f"{path}: not a trajectory file")
        while head := f.read(4):
            if len(head) < 4:
                return
            (count,) = struct.unpack("<I", head)
            frames = []
            for _ in range(count):
                size_raw = f.read(8)
                if len(size_raw) < 8:
                    return
                (size,) = struct.unpack("<Q", size_raw)
                frame = f.read(size)
                if len(frame) < size:
                    return
                frames.append(frame)
            msg, arrays = decode(frames)
            if not isinstance(msg, Trajectory) or len(arrays) != 3:
                raise ProtocolError(f"{path}: record is not a trajectory")
            yield msg, arrays[0], arrays[1], arrays[2]


@dataclass
class _Entry:
    frames: list[bytes]
    deadline: float = 0.0
    """When to resend (0: never transmitted)."""
    sent_at: float = 0.0
    """Last transmission (0: never)."""
    attempts: int = 0


class TrajectorySender(_Sink):
    """DEALER to the learner's ROUTER, owned by one task; at-least-once delivery (see module doc).

    ``send()`` encodes the trajectory (copying it), puts it in the outbox and returns; the owner
    task transmits, matches acks by message id, and resends what stays unacked.
    """

    def __init__(
        self,
        cfg: SinkConfig,
        *,
        context: zmq.asyncio.Context | None = None,
        auth: AuthConfig | None = None,
    ) -> None:
        super().__init__()
        self.auth = auth or AuthConfig()
        if cfg.endpoint is None:
            raise ConfigError("trajectories.endpoint: TrajectorySender needs an endpoint")
        self.cfg = cfg
        self._ctx = context
        self._own_ctx = context is None
        self._sock: zmq.asyncio.Socket | None = None
        self._task: asyncio.Task[None] | None = None
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
        client_auth(self._sock, self.auth)
        # Connection events tell which trajectories a broken link may have swallowed.
        events = zmq.EVENT_CONNECTED | zmq.EVENT_DISCONNECTED
        self._monitor = self._sock.get_monitor_socket(events)  # type: ignore[assignment]
        self._sock.connect(self.cfg.endpoint)  # type: ignore[arg-type]
        self._task = asyncio.create_task(self._run(), name=f"trajectory-sender {self.cfg.endpoint}")

    async def _put(
        self, traj: Trajectory, obs: np.ndarray, policy: np.ndarray, outcome: np.ndarray
    ) -> None:
        # Waits while the outbox is full; ``traj.id`` is replaced by the sender's message id.
        if len(self._pending) >= self.cfg.max_outbox:
            async with self._space:
                await self._space.wait_for(
                    lambda: len(self._pending) < self.cfg.max_outbox or self._state != "running"
                )
            self._check_send(traj, obs, policy, outcome)
        seq = next(self._ids)
        frames = encode(msgspec.structs.replace(traj, id=seq), [obs, policy, outcome])
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
        if self._state != "running":
            self._state = "closed"
            return len(self._pending)
        self._state = "closing"
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
        self._state = "closed"
        unacked = len(self._pending)
        if unacked:
            log.warning("trajectory sender closed with %d unacked trajectories", unacked)
        error = None if self._task.cancelled() else self._task.exception()
        if error is not None:
            raise error
        return unacked

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


def open_sink(
    cfg: SinkConfig, *, context: zmq.asyncio.Context | None = None, auth: AuthConfig | None = None
) -> TrajectorySink:
    """The sink the config asks for: the learner endpoint, else the file, else a counter."""
    if cfg.endpoint is not None:
        return TrajectorySender(cfg, context=context, auth=auth)
    if cfg.path is not None:
        return FileSink(cfg.path)
    return NullSink()
