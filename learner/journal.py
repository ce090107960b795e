"""The learner's journal: every trajectory it accepts is on disk before it is acked.

Replay lives in memory, so without a journal a learner killed between two checkpoints loses
games it has acked (the actors will not resend them). The receiver hands each accepted
trajectory to the learner before acking it; the learner appends it here first, flushed to the
kernel, so it survives the process being killed. A host crash (power, kernel) loses what the
kernel had not yet written: the journal fsyncs by group commit, at most every
``learner.journal_sync_ms`` (``sync_due``, called after each append and by the learner's
timer), so a host crash loses at most that window of acked games, plus one fsync's time; 0
fsyncs every game before its ack (nothing acked is lost, at a measured cost:
scripts/journal_sync_cost.py, docs/reliability.md). Rotation and close always fsync.

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
import time
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

import numpy as np

from azserve.errors import ProtocolError
from azserve.protocol import Trajectory
from azserve.trajarrays import Policy
from azserve.trajfile import Record, open_for_append, read_trajectory_file, write_record

log = logging.getLogger("learner.journal")

_NAME = re.compile(r"^seg-(\d+)\.azt$")


class Journal:
    """Append-only segments in ``directory``."""

    def __init__(self, directory: str | os.PathLike[str], sync_ms: float | None = 100.0) -> None:
        self.dir = Path(directory)
        self._file: BinaryIO | None = None
        self.segment: int | None = None
        """The number of the open segment."""
        self.sync_s = None if sync_ms is None else sync_ms / 1e3
        """Group-commit window (0: fsync every append; None: only at rotation and close)."""
        self.unsynced = 0
        """Records appended since the last fsync."""
        self.syncs = 0
        """fsyncs made (group commits, rotations and closes)."""
        self._synced_at = time.monotonic()

    def segments(self) -> list[tuple[int, Path]]:
        """(number, path) of every segment, oldest first."""
        if not self.dir.is_dir():
            return []
        found = [(int(m.group(1)), p) for p in self.dir.iterdir() if (m := _NAME.match(p.name))]
        return sorted(found)

    def read(self, start: int = 0) -> Iterator[tuple[int, Record]]:
        """(segment number, trajectory) of every kept segment numbered ``start`` or later,
        oldest first. A torn last record (the learner was killed mid-append) ends its segment;
        an unreadable segment is logged and skipped."""
        for version, path in self.segments():
            if version < start:
                continue
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
        self,
        traj: Trajectory,
        obs: np.ndarray,
        policy: Policy,
        outcome: np.ndarray,
        *targets: Policy,
    ) -> None:
        """Write one trajectory (a sparse one's policies as ``SparseRows``) and flush it to the kernel (before the learner acks it).
        Raises ``OSError`` when the disk is full: the trajectory is then not acked."""
        if self._file is None:  # the last append failed: its torn record ends that segment
            self._open_next()
        assert self._file is not None
        try:
            write_record(self._file, traj, obs, policy, outcome, *targets)
            self._file.flush()
            self.unsynced += 1
            if self.sync_s == 0:
                self._fsync()
        except OSError:
            # A torn record may be on disk: what follows goes to a new segment, so the reader,
            # which stops a segment at a torn record, loses nothing written after it.
            with contextlib.suppress(OSError):
                self._file.close()
            self._file = None
            raise

    def sync_due(self, now: float) -> bool:
        """fsync the open segment if it holds unsynced records and the group-commit window
        has passed since the last fsync; True when it did. ``OSError`` propagates (the caller
        logs it: the records stay flushed to the kernel, and the next call retries)."""
        if (
            self.sync_s is None
            or not self.unsynced
            or self._file is None
            or now - self._synced_at < self.sync_s
        ):
            return False
        self._fsync()
        return True

    def _fsync(self) -> None:
        assert self._file is not None
        os.fsync(self._file.fileno())
        self.syncs += 1
        self.unsynced = 0
        self._synced_at = time.monotonic()

    def close(self) -> None:
        if self._file is not None:
            try:
                self._file.flush()
                self._fsync()
            except OSError as exc:  # a full disk: what could not be written was never acked
                log.error("journal segment could not be synced: %s", exc)
            self._file.close()
            self._file = None
