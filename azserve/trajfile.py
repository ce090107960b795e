"""The trajectory file format: ``FILE_MAGIC``, then records, each the frames of one
``protocol.encode``-d ``Trajectory``: u32 frame count, and per frame a u64 length and the
frame's bytes (all little-endian). Written by the actors' ``FileSink`` and the learner's
journal; a truncated last record (a writer killed mid-append) is ignored on reading. A
trajectory's targets (``azserve.targets``) are frames of its record like its other arrays, and
a sparse one's policies are its three arrays each (``azserve.trajarrays``): files written
before sparse policies existed read as they did."""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

import numpy as np

from azserve.errors import ProtocolError
from azserve.protocol import Trajectory, decode, encode
from azserve.trajarrays import Policy, flatten, split

FILE_MAGIC = b"AZTRAJ\x00\x01"
"""First 8 bytes of a trajectory file."""


def open_for_append(path: str | os.PathLike[str]) -> BinaryIO:
    """Open (creating it with the magic) a trajectory file for appending; a file that exists
    and is not one raises ``ProtocolError``."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    f = p.open("ab")
    if f.tell() == 0:
        f.write(FILE_MAGIC)
        return f
    with p.open("rb") as check:
        if check.read(len(FILE_MAGIC)) != FILE_MAGIC:
            f.close()
            raise ProtocolError(f"{p} exists and is not a trajectory file")
    return f


def write_record(
    f: BinaryIO,
    traj: Trajectory,
    obs: np.ndarray,
    policy: Policy,
    outcome: np.ndarray,
    *targets: Policy,
) -> None:
    """Append one trajectory: obs ``[T,C,H,W]`` uint8, policy ``[T,A]`` (or sparse rows),
    outcome ``[T]``, then the targets ``traj.targets`` names."""
    frames = encode(traj, flatten(obs, policy, outcome, targets))
    parts: list[bytes | memoryview] = [struct.pack("<I", len(frames))]
    for frame in frames:
        parts += [struct.pack("<Q", len(frame)), frame]
    f.write(b"".join(parts))


Record = tuple[Trajectory, np.ndarray, Policy, np.ndarray, dict[str, Policy]]
"""(msg, obs ``[T,C,H,W]`` uint8, policy ``[T,A]`` float32 or ``SparseRows``, outcome ``[T]``
float32, the targets ``msg.targets`` names, by name: empty without)."""


def read_trajectory_file(path: str | os.PathLike[str]) -> Iterator[Record]:
    """Yield ``(traj, obs, policy, outcome, targets)``. A truncated last record (the writer
    died mid-append) ends the iteration; anything else malformed raises ``ProtocolError``."""
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
            if not isinstance(msg, Trajectory):
                raise ProtocolError(f"{path}: record is not a trajectory")
            try:
                obs, policy, outcome, targets = split(msg, arrays)
            except ProtocolError as exc:
                raise ProtocolError(f"{path}: record is not a trajectory: {exc}") from None
            yield msg, obs, policy, outcome, dict(zip(msg.targets or [], targets))
