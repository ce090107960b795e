"""The learner's journal: every trajectory it accepts is on disk before it is acked.

Replay lives in memory, so without a journal a learner killed between two checkpoints loses
games it has acked (the actors will not resend them). The receiver hands each accepted
trajectory to the learner before acking it; the learner appends it here first, flushed to the
kernel (it survives the process being killed; ``fsync`` at each rotation bounds what a host
crash can take).

The journal is one file per segment, ``seg-NNNNNNNNN.azt`` (``azserve.trajfile`` format),
numbered in order. A segment starts at every checkpoint, and the checkpoint records the number
of the first segment after it (``journal_from``): the games it counts are exactly those of the
segments before. A learner that resumes from it adds the games of segments ``>= journal_from``
to its count, puts the fresh ones back into replay and remembers every journaled
``(actor, game_id)`` to drop resends.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

import numpy as np

from azserve.errors import ProtocolError
from azserve.protocol import Trajectory
from azserve.trajfile import open_for_append, read_trajectory_file, write_record

log = logging.getLogger("learner.journal")

_NAME = re.compile(r"^seg-(\d+)\.azt$")

Record = tuple[Trajectory, np.ndarray, np.ndarray, np.ndarray]
"""(msg, obs ``[T,C,H,W]`` uint8, policy ``[T,A]`` float32, outcome ``[T]`` float32)."""


class Journal:
    """Append-only segments in ``directory``."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.dir = Path(directory)
        self._file: BinaryIO | None = None
        self.segment: int | None = None
        """The number of the open segment."""

    def segments(self) -> list[tuple[int, Path]]:
        """(number, path) of every segment, oldest first."""
        if not self.dir.is_dir():
            return []
        found = [(int(m.group(1)), p) for p in self.dir.iterdir() if (m := _NAME.match(p.name))]
        return sorted(found)

    def read(self) -> Iterator[tuple[int, Record]]:
        """(segment number, trajectory) of every kept segment, oldest first. A torn last
        record (the learner was killed mid-append) ends its segment; an unreadable segment is
        logged and skipped."""
        for version, path in self.segments():
            try:
                for record in read_trajectory_file(path):
                    yield version, record
            except ProtocolError as exc:
                log.error("journal segment %s is unreadable, skipped: %s", path.name, exc)

    def rotate(self, keep_from: int) -> int:
        """Close the open segment (fsynced), start the next one and return its number; delete
        segments numbered below ``keep_from`` (no checkpoint that may be resumed needs them)."""
        self.close()
        found = self.segments()
        number = self._open_next()
        for n, path in found:
            if n < keep_from:
                path.unlink(missing_ok=True)
        return number

    def _open_next(self) -> int:
        found = self.segments()
        number = found[-1][0] + 1 if found else 0
        self._file = open_for_append(self.dir / f"seg-{number:09d}.azt")
        self.segment = number
        return number

    def append(
        self, traj: Trajectory, obs: np.ndarray, policy: np.ndarray, outcome: np.ndarray
    ) -> None:
        """Write one trajectory and flush it to the kernel (before the learner acks it).
        Raises ``OSError`` when the disk is full: the trajectory is then not acked."""
        if self._file is None:  # the last append failed: its torn record ends that segment
            self._open_next()
        assert self._file is not None
        try:
            write_record(self._file, traj, obs, policy, outcome)
            self._file.flush()
        except OSError:
            # A torn record may be on disk: what follows goes to a new segment, so the reader,
            # which stops a segment at a torn record, loses nothing written after it.
            with contextlib.suppress(OSError):
                self._file.close()
            self._file = None
            raise

    def close(self) -> None:
        if self._file is not None:
            try:
                self._file.flush()
                os.fsync(self._file.fileno())
            except OSError as exc:  # a full disk: what could not be written was never acked
                log.error("journal segment could not be synced: %s", exc)
            self._file.close()
            self._file = None
