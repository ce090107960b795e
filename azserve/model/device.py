"""Device and dtype names of the config turned into torch objects, in one place."""

from __future__ import annotations

import torch

from azserve.errors import ConfigError

DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
}
"""Config dtype names -> torch dtypes."""


def resolve_device(name: str, key: str = "device") -> torch.device:
    """``auto`` -> CUDA when available, else CPU; CUDA asked for without one is a
    ``ConfigError`` naming ``key``."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dev = torch.device(name)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"{key}={name!r}: CUDA is not available on this machine")
    return dev
