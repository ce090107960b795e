"""``SyncClient``: the inference server's protocol, blocking, for standalone users and tools
(``azserve train``'s status table, the benchmarks)."""

from __future__ import annotations

import itertools
import time
from typing import Any

import numpy as np
import zmq

from azserve import protocol as P
from azserve.auth import AuthConfig, connect_dealer
from azserve.errors import ConfigError, RequestTimeout, remote_error
from azserve.files import checksum


class SyncClient:
    """Blocking client for standalone use: ``SyncClient("tcp://127.0.0.1:5555").evaluate(obs)``."""

    def __init__(
        self,
        server: str,
        model: str = "default",
        timeout_s: float = 30.0,
        auth: AuthConfig | None = None,
    ) -> None:
        self.model = model
        self.timeout_ms = int(timeout_s * 1000)
        self._ids = itertools.count(1)
        self._ctx = zmq.Context()
        try:
            self._sock = connect_dealer(self._ctx, server, auth or AuthConfig())
        except (ConfigError, zmq.ZMQError):
            self._ctx.term()
            raise
        self.server = server

    def evaluate(self, obs: np.ndarray, version: int = -1) -> tuple[np.ndarray, np.ndarray, int]:
        """obs ``[n,C,H,W]`` -> (logits ``[n,A]``, values ``[n]``, version that served them)."""
        reply, arrays = self._call(P.EvalRequest(model=self.model, version=version), [obs])
        return arrays[0], arrays[1], reply.version

    def ping(self) -> P.Pong:
        return self._call(P.Ping())[0]

    def status(self) -> dict[str, Any]:
        return self._call(P.StatusRequest())[0].status

    def load_weights(self, version: int, blob: bytes) -> P.Loaded:
        msg = P.LoadWeights(model=self.model, version=version, sha256=checksum(blob))
        return self._call(msg, [np.frombuffer(blob, np.uint8)])[0]

    def _call(
        self, msg: P.Message, arrays: list[np.ndarray] | None = None
    ) -> tuple[Any, list[np.ndarray]]:
        rid = next(self._ids)
        msg.id = rid
        self._sock.send_multipart(P.encode(msg, arrays or []), copy=False)
        deadline = time.monotonic() + self.timeout_ms / 1000
        while True:
            left = int((deadline - time.monotonic()) * 1000)
            if left <= 0 or not self._sock.poll(left):
                raise RequestTimeout(
                    f"{type(msg).__name__} got no reply from {self.server} in {self.timeout_ms} ms"
                )
            reply, out = P.decode(self._sock.recv_multipart())
            if reply.id != rid:
                continue  # a late reply to an earlier, timed-out call
            if isinstance(reply, P.ErrorReply):
                raise remote_error(reply.type, reply.message)
            return reply, out

    def close(self) -> None:
        self._sock.close(linger=0)
        self._ctx.term()

    def __enter__(self) -> SyncClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
