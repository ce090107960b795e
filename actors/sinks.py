"""Where an actor's finished games go: the learner (``actors.sender.TrajectorySender``), a
file, or nowhere. All sinks share one async interface: ``start()``, ``send(traj, obs, policy,
outcome)``, ``aclose()`` and ``stats()``; ``actors.main.open_sink`` picks one from the actors section.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Protocol, Self

import numpy as np

from azserve.errors import ProtocolError, ServerClosed
from azserve.lifecycle import Lifecycle, State
from azserve.protocol import Trajectory, decode, encode

FILE_MAGIC = b"AZTRAJ\x00\x01"
"""First 8 bytes of a trajectory file. Then records: u32 frame count, and per frame a u64
length and the frame's bytes (all little-endian); the frames are ``protocol.encode``'s."""


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


class BaseSink:
    """Lifecycle, counters and argument checks shared by the sinks."""

    def __init__(self) -> None:
        self.lifecycle = Lifecycle(type(self).__name__, self._on_failure)
        self._sent = self._acked = self._positions = 0

    async def start(self) -> None:
        self.lifecycle.begin_start()
        self.lifecycle.started()

    def _on_failure(self, exc: BaseException) -> None:
        """An owner task died (the sender's): nothing to fail here by default."""

    def _check_send(
        self, traj: Trajectory, obs: np.ndarray, policy: np.ndarray, outcome: np.ndarray
    ) -> None:
        self.lifecycle.check_running(ServerClosed)
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
        self.lifecycle.begin_close()
        self.lifecycle.closed()
        return 0


class NullSink(BaseSink):
    """Counts trajectories and drops them (an actor benchmark without a learner)."""


class FileSink(BaseSink):
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
                    self.lifecycle.state = State.CLOSED
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
