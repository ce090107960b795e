"""azserve: AlphaZero-style self-play at high throughput."""

from azserve.client import ClientConfig, EvalClient
from azserve.errors import (
    AzserveError,
    ConfigError,
    Overloaded,
    ProtocolError,
    RemoteError,
    RequestTimeout,
    ServerClosed,
    VersionUnavailable,
    WeightsError,
)
from azserve.server import InferenceServer, ServerConfig
from azserve.sync_client import SyncClient

__all__ = [
    "AzserveError",
    "ClientConfig",
    "ConfigError",
    "EvalClient",
    "InferenceServer",
    "Overloaded",
    "ProtocolError",
    "RemoteError",
    "RequestTimeout",
    "ServerClosed",
    "ServerConfig",
    "SyncClient",
    "VersionUnavailable",
    "WeightsError",
]
