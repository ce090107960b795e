"""Where an actor's finished games go: the learner (``actors.sender.TrajectorySender``), a
file, or nowhere. All sinks share one async interface: ``start()``, ``send(traj, obs, policy,
outcome)``, ``aclose()`` and ``stats()``; ``actors.main.open_sink`` picks one from the actors section.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Protocol, Self

import numpy as np

from azserve.errors import ProtocolError, ServerClosed
from azserve.lifecycle import Lifecycle, State
from azserve.protocol import Trajectory
from azserve.sparse import SparseRows
from azserve.targets import check_targets
from azserve.trajarrays import Policy, is_sparse
from azserve.trajfile import open_for_append, read_trajectory_file, write_record


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
        self,
        traj: Trajectory,
        obs: np.ndarray,
        policy: Policy,
        outcome: np.ndarray,
        *targets: Policy,
    ) -> None:
        """Hand over one finished game: obs ``[T,C,H,W]`` uint8, policy ``[T,A]`` float32,
        outcome ``[T]`` float32, with ``traj.length == T``, then the arrays of the targets
        ``traj.targets`` names (``azserve.targets``). The arrays may be reused afterwards."""
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
        self,
        traj: Trajectory,
        obs: np.ndarray,
        policy: Policy,
        outcome: np.ndarray,
        *targets: Policy,
    ) -> None:
        self.lifecycle.check_running(ServerClosed)
        t = traj.length
        sparse = isinstance(policy, SparseRows)
        if (
            obs.ndim != 4
            or len(obs) != t
            or (isinstance(policy, np.ndarray) and policy.ndim != 2)
            or len(policy) != t
            or outcome.shape != (t,)
            or sparse != is_sparse(traj)
        ):
            raise ValueError(
                f"trajectory length {t} (sparse {is_sparse(traj)}) does not match obs "
                f"{list(obs.shape)}, policy {_shape(policy)}, outcome {list(outcome.shape)}"
            )
        names = traj.targets or []
        # A sparse game's width is the receiver's to check (it knows the game).
        width = policy.shape[1] if isinstance(policy, np.ndarray) else np.iinfo(np.int32).max
        problem = check_targets(names, targets, t, obs.shape[1:], width)
        if problem is not None:
            raise ValueError(f"trajectory {traj.game_id}: {problem}")

    async def send(
        self,
        traj: Trajectory,
        obs: np.ndarray,
        policy: Policy,
        outcome: np.ndarray,
        *targets: Policy,
    ) -> None:
        """See ``TrajectorySink.send``. Raises ``ServerClosed`` unless started and not closing."""
        self._check_send(traj, obs, policy, outcome, *targets)
        await self._put(traj, obs, policy, outcome, *targets)
        self._sent += 1
        self._positions += traj.length

    async def _put(
        self,
        traj: Trajectory,
        obs: np.ndarray,
        policy: Policy,
        outcome: np.ndarray,
        *targets: Policy,
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


def _shape(policy: Policy) -> str:
    return f"sparse [{len(policy)}]" if isinstance(policy, SparseRows) else str(list(policy.shape))


class NullSink(BaseSink):
    """Counts trajectories and drops them (an actor benchmark without a learner)."""


class FileSink(BaseSink):
    """Appends trajectories to a file (``azserve.trajfile``); read back with
    ``read_trajectory_file``. Writes are buffered and small, so they stay on the event loop."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        super().__init__()
        self.path = Path(path)
        self._file: BinaryIO | None = None

    async def start(self) -> None:
        await super().start()
        try:
            self._file = open_for_append(self.path)
        except ProtocolError:
            self.lifecycle.state = State.CLOSED
            raise

    async def _put(
        self,
        traj: Trajectory,
        obs: np.ndarray,
        policy: Policy,
        outcome: np.ndarray,
        *targets: Policy,
    ) -> None:
        assert self._file is not None
        write_record(self._file, traj, obs, policy, outcome, *targets)
        self._acked += 1

    async def aclose(self) -> int:
        if self._file is not None:
            self._file.close()
            self._file = None
        return await super().aclose()


__all__ = [
    "BaseSink",
    "FileSink",
    "NullSink",
    "SinkStats",
    "TrajectorySink",
    "read_trajectory_file",
]
