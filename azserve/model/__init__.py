"""The model group: the only place torch is imported on the library floor.

``NetConfig`` and ``ModelSpec`` are torch-free and imported eagerly; the network, weights and
device helpers load torch on first use, so ``import azserve.model`` stays cheap for actors.
"""

from __future__ import annotations

from azserve.lazy import lazy_getattr
from azserve.model.spec import ModelSpec, NetConfig

_LAZY = {
    "AlphaZeroNet": "azserve.model.network",
    "NetOutputs": "azserve.model.network",
    "build_net": "azserve.model.network",
    "initial_weights": "azserve.model.network",
    "param_bytes": "azserve.model.network",
    "state_dict_to_bytes": "azserve.model.weights",
    "bytes_to_state_dict": "azserve.model.weights",
    "load_weights_file": "azserve.model.weights",
    "load_strict": "azserve.model.weights",
    "DTYPES": "azserve.model.device",
    "native_bf16": "azserve.model.device",
    "resolve_dtype": "azserve.model.device",
    "fold_batchnorm": "azserve.model.fold",
    "resolve_device": "azserve.model.device",
}

__all__ = ["ModelSpec", "NetConfig", *_LAZY]


__getattr__ = lazy_getattr(__name__, _LAZY)
