"""azserve: AlphaZero-style self-play at high throughput.

The library floor: wire protocol, batching, versions, lifecycle, metrics, auth, the clients,
the inference server, its backends and the model group. Names are re-exported lazily, so that
``import azserve`` (or ``from azserve import EvalClient`` in an actor) never loads torch or the
server.
"""

from __future__ import annotations

from azserve.errors import (
    AzserveError,
    ConfigError,
    Overloaded,
    ProtocolError,
    RemoteError,
    RequestTimeout,
    ServerClosed,
    VersionRetired,
    VersionUnavailable,
    WeightsError,
)
from azserve.lazy import lazy_getattr

_LAZY = {
    "ClientConfig": "azserve.client",
    "EvalClient": "azserve.client",
    "SyncClient": "azserve.sync_client",
    "ControlClient": "azserve.control",
    "InferenceServer": "azserve.server",
    "InitialWeights": "azserve.server",
    "ServerConfig": "azserve.server",
    "ModelSpec": "azserve.model",
    "NetConfig": "azserve.model",
}

__all__ = [
    "AzserveError",
    "ConfigError",
    "Overloaded",
    "ProtocolError",
    "RemoteError",
    "RequestTimeout",
    "ServerClosed",
    "VersionRetired",
    "VersionUnavailable",
    "WeightsError",
    *_LAZY,
]


__getattr__ = lazy_getattr(__name__, _LAZY)
