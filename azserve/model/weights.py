"""Weights as bytes: safetensors serialisation and one strict loader. Nothing is pickled."""

from __future__ import annotations

import os
from pathlib import Path

import torch
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save
from torch import nn

from azserve.errors import WeightsError


def state_dict_to_bytes(
    state: dict[str, torch.Tensor], metadata: dict[str, str] | None = None
) -> bytes:
    """Serialise a state dict (CPU copies, contiguous) to safetensors bytes."""
    flat = {k: v.detach().to("cpu").contiguous() for k, v in state.items()}
    return st_save(flat, metadata=metadata)


def bytes_to_state_dict(data: bytes, source: str = "weights") -> dict[str, torch.Tensor]:
    """Parse safetensors bytes; a corrupt blob raises ``WeightsError`` naming ``source``."""
    try:
        return st_load(bytes(data))
    except Exception as exc:  # safetensors raises its own SafetensorError and others
        raise WeightsError(f"{source}: not readable safetensors weights: {exc}") from exc


def load_weights_file(path: str | os.PathLike[str]) -> dict[str, torch.Tensor]:
    """Read a ``.safetensors`` file into a state dict (the network's keys only)."""
    p = Path(path)
    if not p.is_file():
        raise WeightsError(f"weights file not found: {p}")
    state = bytes_to_state_dict(p.read_bytes(), source=str(p))
    return {k[len("model.") :]: v for k, v in state.items() if k.startswith("model.")} or state


def load_strict(module: nn.Module, state: dict[str, torch.Tensor], what: str = "weights") -> None:
    """Load ``state`` into ``module``, every key and shape exactly; otherwise one
    ``WeightsError`` line that says what differs (not torch's page of mismatches)."""
    want = module.state_dict()
    missing = sorted(set(want) - set(state))
    unexpected = sorted(set(state) - set(want))
    resized = [
        f"{k} {list(state[k].shape)} != {list(v.shape)}"
        for k, v in want.items()
        if k in state and tuple(state[k].shape) != tuple(v.shape)
    ]
    if missing or unexpected or resized:
        parts = []
        if missing:
            parts.append(f"{len(missing)} missing (e.g. {missing[0]})")
        if unexpected:
            parts.append(f"{len(unexpected)} unexpected (e.g. {unexpected[0]})")
        if resized:
            parts.append(f"{len(resized)} of another shape (e.g. {resized[0]})")
        raise WeightsError(
            f"{what} do not fit the configured net: {'; '.join(parts)} "
            "(another game or [net] section?)"
        )
    module.load_state_dict(state, strict=True)
