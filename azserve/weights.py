"""Weights as bytes: safetensors serialisation, checksums and atomic files. Nothing is pickled."""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

import torch
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save

from azserve.errors import WeightsError


def state_dict_to_bytes(
    state: dict[str, torch.Tensor], metadata: dict[str, str] | None = None
) -> bytes:
    """Serialise a state dict (CPU copies, contiguous) to safetensors bytes."""
    flat = {k: v.detach().to("cpu").contiguous() for k, v in state.items()}
    return st_save(flat, metadata=metadata)


def bytes_to_state_dict(data: bytes) -> dict[str, torch.Tensor]:
    """Parse safetensors bytes; a corrupt blob raises ``WeightsError``."""
    try:
        return st_load(bytes(data))
    except Exception as exc:  # safetensors raises its own SafetensorError and others
        raise WeightsError(f"cannot parse safetensors weights: {exc}") from exc


def checksum(data: bytes | memoryview) -> str:
    """Hex SHA-256 of the weights blob, carried next to it on the wire."""
    return hashlib.sha256(data).hexdigest()


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to a temp file in the same directory, fsync, then rename over ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def load_weights_file(path: str | os.PathLike[str]) -> dict[str, torch.Tensor]:
    """Read a ``.safetensors`` file into a state dict (the network's keys only)."""
    p = Path(path)
    if not p.is_file():
        raise WeightsError(f"weights file not found: {p}")
    state = bytes_to_state_dict(p.read_bytes())
    return {k[len("model.") :]: v for k, v in state.items() if k.startswith("model.")} or state
