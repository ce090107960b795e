"""Compute backends behind one small interface: ``torch`` (embedded default), ``triton`` and
``synthetic`` (no network: the actor side at full load)."""

from __future__ import annotations

from azserve.backends.base import Backend, BackendConfig
from azserve.model.spec import NetConfig

__all__ = ["Backend", "BackendConfig", "make_backend"]


def make_backend(net: NetConfig, cfg: BackendConfig) -> Backend:
    """The backend ``cfg.kind`` names (Triton's client is imported only when asked for)."""
    if cfg.kind == "torch":
        from azserve.backends.torch_backend import TorchBackend

        return TorchBackend(net, cfg)
    if cfg.kind == "triton":
        from azserve.backends.triton import TritonBackend

        return TritonBackend(net, cfg)
    if cfg.kind == "synthetic":
        from azserve.backends.synthetic import SyntheticBackend

        return SyntheticBackend(net, cfg)
    raise ValueError(f"backend.kind: unknown backend {cfg.kind!r}")
