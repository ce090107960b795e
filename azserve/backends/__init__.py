"""Compute backends behind one small interface: ``torch`` (embedded default), ``triton`` and
``synthetic`` (no network: the actor side at full load)."""

from __future__ import annotations

from collections.abc import Callable

from azserve.backends.base import Backend, BackendConfig, TorchConfig, TritonConfig
from azserve.errors import ConfigError
from azserve.model.spec import NetConfig

__all__ = ["BACKENDS", "Backend", "BackendConfig", "TorchConfig", "TritonConfig", "make_backend"]


def _torch(net: NetConfig, cfg: BackendConfig) -> Backend:
    from azserve.backends.torch_backend import TorchBackend

    return TorchBackend(net, cfg)


def _triton(net: NetConfig, cfg: BackendConfig) -> Backend:
    # Triton's client is imported only when a Triton backend is asked for.
    from azserve.backends.triton import TritonBackend

    return TritonBackend(net, cfg)


def _synthetic(net: NetConfig, cfg: BackendConfig) -> Backend:
    from azserve.backends.synthetic import SyntheticBackend

    return SyntheticBackend(net, cfg)


BACKENDS: dict[str, Callable[[NetConfig, BackendConfig], Backend]] = {
    "torch": _torch,
    "triton": _triton,
    "synthetic": _synthetic,
}
"""``backend.kind`` -> the constructor of that backend."""


def make_backend(net: NetConfig, cfg: BackendConfig) -> Backend:
    """The backend ``cfg.kind`` names; ``ConfigError`` listing the kinds for another."""
    build = BACKENDS.get(cfg.kind)
    if build is None:
        raise ConfigError(
            f"backend.kind={cfg.kind!r}: unknown backend (the kinds are {', '.join(BACKENDS)})"
        )
    return build(net, cfg)
