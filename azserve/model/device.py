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


def native_bf16(device: torch.device) -> bool:
    """Whether ``device`` computes bf16 natively: AVX512-BF16 or AMX on a CPU (without them
    bf16 is emulated and several times slower than fp32), bf16 support on a CUDA device."""
    if device.type == "cuda":
        return bool(torch.cuda.is_bf16_supported())
    caps = torch.cpu.get_capabilities() if hasattr(torch.cpu, "get_capabilities") else {}
    return bool(caps.get("avx512_bf16") or caps.get("amx_bf16"))


def resolve_dtype(name: str, device: torch.device) -> torch.dtype:
    """A config dtype name as a torch dtype; ``auto`` is bfloat16 where ``device`` has it
    natively (``native_bf16``), else float32."""
    if name == "auto":
        return torch.bfloat16 if native_bf16(device) else torch.float32
    return DTYPES[name]
