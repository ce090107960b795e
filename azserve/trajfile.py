"""The trajectory file format: ``FILE_MAGIC``, then records, each the frames of one
``protocol.encode``-d ``Trajectory``: u32 frame count, and per frame a u64 length and the
frame's bytes (all little-endian). Written by the actors' ``FileSink`` and the learner's
journal; a truncated last record (a writer killed mid-append) is ignored on reading. A
trajectory's targets (``azserve.targets``) are frames of its record like its other arrays."""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

import numpy as np

from azserve.errors import ProtocolError
from azserve.protocol import Trajectory, decode, encode

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
    policy: np.ndarray,
    outcome: np.ndarray,
    *targets: np.ndarray,
) -> None:
    """Append one trajectory: obs ``[T,C,H,W]`` uint8, policy ``[T,A]``, outcome ``[T]``,
    then the arrays of the targets ``traj.targets`` names."""
    frames = encode(traj, [obs, policy, outcome, *targets])
    parts: list[bytes | memoryview] = [struct.pack("<I", len(frames))]
    for frame in frames:
        parts += [struct.pack("<Q", len(frame)), frame]
    f.write(b"".join(parts))


Record = tuple[Trajectory, np.ndarray, np.ndarray, np.ndarray, dict[str, np.ndarray]]
"""(msg, obs ``[T,C,H,W]`` uint8, policy ``[T,A]`` float32, outcome ``[T]`` float32, the
targets ``msg.targets`` names, by name: empty without)."""


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
            names = (msg.targets or []) if isinstance(msg, Trajectory) else []
            if not isinstance(msg, Trajectory) or len(arrays) != 3 + len(names):
                raise ProtocolError(f"{path}: record is not a trajectory")
            yield msg, arrays[0], arrays[1], arrays[2], dict(zip(names, arrays[3:]))
