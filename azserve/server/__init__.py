"""The inference server, split by responsibility: ``dispatch`` (socket, decoding, replies),
``scheduler`` (queues, batch formation, compute), ``residency`` (versions, loads, leases)."""

from azserve.server.config import ServerConfig
from azserve.server.dispatch import InferenceServer, InitialWeights

__all__ = ["InferenceServer", "InitialWeights", "ServerConfig"]
