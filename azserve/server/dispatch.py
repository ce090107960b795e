"""The central dynamic-batching inference server: socket and dispatch.

One ROUTER socket, owned by the receive task: each message is decoded and checked here, then
handed to its owner: eval requests to the ``Scheduler`` (queues, batches, compute), weight loads
and pins to the ``Residency`` (versions, leases, eviction). Status and ping are answered here.
The receive, scheduler and housekeeping tasks are watched: if one dies the server fails (state
``failed``, queued requests get ``ServerClosed``, ``lifecycle.failed`` is set for the process
main) instead of reporting ``serving`` while deaf.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from dataclasses import dataclass
from typing import Any

import numpy as np
import zmq
import zmq.asyncio

from azserve import protocol as P
from azserve import sparse
from azserve.auth import AuthConfig, Gate, peer_key, server_auth
from azserve.backends.base import Backend
from azserve.errors import AzserveError, ConfigError, RemoteError, WeightsError
from azserve.lifecycle import Lifecycle, State
from azserve.model.spec import ModelSpec
from azserve.prom import start_endpoint
from azserve.server.config import ServerConfig
from azserve.server.metrics import ServerMetrics
from azserve.server.residency import Residency
from azserve.server.scheduler import Scheduler
from azserve.versions import VersionRegistry

log = logging.getLogger("azserve.server")

_WHY = {
    "full": "the peer's queue is full: it is not reading",
    "gone": "the peer has disconnected",
    "error": "",
}
"""Why a reply was dropped, by the reason counted (``error``: the send's own error)."""

_OBS_DTYPES = (np.dtype(np.uint8), np.dtype(np.float32))


@dataclass(frozen=True)
class InitialWeights:
    """Weights a server starts with: safetensors bytes served as ``version``."""

    version: int
    blob: bytes


class InferenceServer:
    """``start()`` binds and serves; ``aclose()`` drains in-flight batches, fails queued requests
    with ``ServerClosed``, then closes the socket. Also usable as ``async with``.

    ``spec`` is what requests are checked against; ``backend`` computes (``make_backend``).
    """

    def __init__(
        self,
        cfg: ServerConfig,
        spec: ModelSpec,
        backend: Backend,
        auth: AuthConfig | None = None,
    ) -> None:
        self.cfg = cfg
        self.spec = spec
        self.auth = auth or AuthConfig()
        self.backend = backend
        self.server_id = uuid.uuid4().hex[:12]
        self.lifecycle = Lifecycle("server", self._on_failure)
        self.metrics = ServerMetrics(
            lambda: self.scheduler.queued_rows,
            lambda: self.residency.latest,
            lambda: len(self.residency.resident()),
            model=cfg.model,
            cache=lambda: self.scheduler.cache.stats if self.scheduler.cache is not None else None,
        )
        # socket -> scheduler (eval) / residency (load, pins); each owns its state
        self.scheduler = Scheduler(
            cfg,
            spec,
            backend,
            self.metrics,
            reply=self._send,
            fail=self._send_error,
            served=lambda v, rows, now: self.residency.touch(v, rows, now),
            latest=lambda: self.residency.latest,
        )
        self.residency = Residency(
            cfg, backend, self.metrics, self.scheduler.busy_versions, self.scheduler.retire
        )
        self._ctx: zmq.asyncio.Context | None = None
        self._sock: zmq.asyncio.Socket | None = None
        self._metrics_server: asyncio.AbstractServer | None = None
        self._authenticator: Gate | None = None
        self.endpoint = cfg.bind

    @property
    def versions(self) -> VersionRegistry:
        """The resident versions and leases (read-only use; the residency owns them)."""
        return self.residency.registry

    @property
    def state(self) -> str:
        return "serving" if self.lifecycle.state is State.RUNNING else self.lifecycle.state.value

    def status(self) -> dict[str, Any]:
        """Versions, queue depths and counters (the ``status`` control reply)."""
        return {
            "server_id": self.server_id,
            "state": self.state,
            "model": self.cfg.model,
            # The contract a client needs: what one request may carry and what comes back.
            "max_batch_size": self.cfg.max_batch_size,
            "max_queued_rows": self.cfg.max_queued_rows,
            "obs_shape": list(self.spec.obs_shape),
            "obs_dtype": self.spec.obs_dtype,
            "num_actions": self.spec.num_actions,
            "versions": self.residency.registry.snapshot(),
            "queued_rows": self.scheduler.queued_rows,
            "queues": self.scheduler.queue_rows(),
            "paused_s": self.residency.paused_s,
            "backend": self.backend.status(),
            "auth": self._auth_status(),
            **self.metrics.counters(),
        }

    # --- lifecycle -----------------------------------------------------------------------------

    async def start(self, initial: InitialWeights | None = None) -> None:
        """Load ``initial`` (if any; else the server holds nothing until a ``load``), bind,
        start serving."""
        self.lifecycle.begin_start()
        await self.backend.start()
        if initial is not None:
            await self.residency.load_initial(initial.version, initial.blob)
        max_bytes = int(self.cfg.max_message_mb * 2**20)
        eval_bytes = self.cfg.max_batch_size * int(np.prod(self.spec.obs_shape)) * 4 + 65536
        if max_bytes < eval_bytes:
            await self.backend.aclose()
            self.lifecycle.state = State.CLOSED
            raise ConfigError(
                f"server.max_message_mb={self.cfg.max_message_mb}: an eval request of "
                f"server.max_batch_size={self.cfg.max_batch_size} float32 rows needs "
                f"{eval_bytes / 2**20:.2f} MiB"
            )
        self._ctx = zmq.asyncio.Context()
        sock = self._ctx.socket(zmq.ROUTER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.RCVHWM, 0)
        # Bounded per peer: replies to a peer that stopped reading are dropped past this, and
        # counted: ROUTER_MANDATORY makes such a send fail (EAGAIN) instead of vanishing, and
        # a send to a peer that has gone fail with EHOSTUNREACH (see _send).
        sock.setsockopt(zmq.SNDHWM, self.cfg.max_queued_replies)
        sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
        # Checked by ZeroMQ from the frame header, before the frame is allocated.
        sock.setsockopt(zmq.MAXMSGSIZE, max_bytes)
        try:
            self._authenticator = server_auth(
                self._ctx, sock, self.auth, self.cfg.bind, monitor=True, on_refused=self._refused
            )
            sock.bind(self.cfg.bind)
        except (zmq.ZMQError, AzserveError) as exc:
            sock.close()
            if self._authenticator is not None:  # its sockets would block term() for ever
                self._authenticator.stop()
            self._ctx.term()
            self.lifecycle.state = State.CLOSED
            await self.backend.aclose()
            if isinstance(exc, AzserveError):
                raise
            raise AzserveError(f"server.bind={self.cfg.bind!r}: cannot bind: {exc}") from exc
        self.endpoint = sock.getsockopt_string(zmq.LAST_ENDPOINT)
        self._sock = sock
        self.lifecycle.spawn(self._recv_loop(), "recv")
        self.lifecycle.spawn(self.scheduler.run(), "schedule")
        self.lifecycle.spawn(self._housekeeping(), "housekeeping")
        if self._authenticator is not None:
            self.lifecycle.spawn(self._authenticator.watch(), "auth")
        self._metrics_server = await start_endpoint(
            self.metrics.prom, self.cfg.metrics_host, self.cfg.metrics_port, "server"
        )
        self.lifecycle.started()
        log.info(
            "serving model %r on %s (latest version %d)",
            self.cfg.model,
            self.endpoint,
            self.residency.latest,
        )

    def _on_failure(self, exc: BaseException) -> None:
        self.scheduler.fail_queued("ServerClosed", str(exc))

    async def __aenter__(self) -> InferenceServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self, drain_timeout_s: float = 10.0) -> None:
        """Stop receiving, let running batches finish and reply, fail what is still queued."""
        if not self.lifecycle.begin_close():
            return
        await self.lifecycle.cancel(["recv", "schedule"])
        await self.scheduler.drain(drain_timeout_s)
        self.scheduler.fail_queued("ServerClosed", "server is shutting down")
        await self.lifecycle.cancel()
        if self._metrics_server is not None:
            self._metrics_server.close()
            await self._metrics_server.wait_closed()
        if self._sock is not None:
            self._sock.close(linger=100)  # let the ServerClosed replies go out
        if self._authenticator is not None:
            self._authenticator.stop()
        if self._ctx is not None:
            self._ctx.term()
        await self.backend.aclose()
        self.lifecycle.closed()
        log.info("server closed")

    # --- receive -------------------------------------------------------------------------------

    async def _recv_loop(self) -> None:
        assert self._sock is not None
        while True:
            if self._authenticator is None:
                self._handle(await self._sock.recv_multipart())
            else:  # CURVE: uncopied frames keep their sender's public key
                parts = await self._sock.recv_multipart(copy=False)
                self._handle([p.bytes for p in parts], peer_key(parts[-1]))

    def _handle(self, frames: list[bytes], peer: str | None = None) -> None:
        """Decode one message and act on it. Never raises for bad input: it becomes an error
        reply (or, when there is no one to answer, a counted drop). ``peer``: the sender's
        public key (z85) under CURVE."""
        if len(frames) < 2:
            self.metrics.dropped.inc()
            return
        envelope, body = frames[:1], frames[1:]
        if not body[0] and len(body) > 1:  # REQ-style envelope: identity, empty delimiter
            envelope, body = frames[:2], frames[2:]
        try:
            msg, arrays = P.decode(body)
        except AzserveError as exc:
            self._send_error(envelope, P.request_id_of(body[0]), "BadRequest", str(exc))
            return
        try:
            self._dispatch(envelope, msg, arrays, peer)
        except RemoteError as exc:
            self._send_error(envelope, msg.id, exc.type, exc.message)

    def _dispatch(
        self, envelope: list[bytes], msg: P.Message, arrays: list[np.ndarray], peer: str | None
    ) -> None:
        # Every request carries ``proto``; replies sent to the server do not (they fail below).
        proto = getattr(msg, "proto", P.PROTOCOL_VERSION)
        if proto != P.PROTOCOL_VERSION:
            raise RemoteError(
                "UnsupportedProtocol", f"proto {proto} (server speaks {P.PROTOCOL_VERSION})"
            )
        if isinstance(msg, P.EvalRequest):
            self._on_eval(envelope, msg, arrays)
        elif isinstance(msg, P.Ping):
            self._send(
                envelope, P.Pong(id=msg.id, latest=self.residency.latest, server_id=self.server_id)
            )
        elif isinstance(msg, P.PinUpdate):
            self._check_model(msg.model)
            self.residency.update_lease(msg.client, msg.pins, msg.lease_s, time.monotonic())
            self._send(envelope, P.PinAck(id=msg.id, versions=self.residency.resident()))
        elif isinstance(msg, P.StatusRequest):
            self._send(envelope, P.StatusReply(id=msg.id, status=self.status()))
        elif isinstance(msg, P.LoadWeights):
            self._check_loader(peer)
            self._on_load(envelope, msg, arrays)
        else:
            raise RemoteError(
                "BadRequest", f"op {type(msg).__name__} is not a request this server takes"
            )

    def _check_model(self, model: str) -> None:
        if model != self.cfg.model:
            raise RemoteError(
                "UnknownModel", f"unknown model {model!r}; this server serves {self.cfg.model!r}"
            )

    def _on_eval(self, envelope: list[bytes], msg: P.EvalRequest, arrays: list[np.ndarray]) -> None:
        self._check_model(msg.model)
        if len(arrays) not in (1, 3):
            raise RemoteError(
                "BadRequest",
                f"eval takes 1 array (obs) or 3 (obs, offsets, actions), got {len(arrays)}",
            )
        obs = arrays[0]
        want = self.spec.obs_shape
        if obs.ndim != 4 or tuple(obs.shape[1:]) != want:
            raise RemoteError(
                "BadShape",
                f"obs shape {list(obs.shape)} must be [rows, {', '.join(map(str, want))}]",
            )
        if obs.dtype not in _OBS_DTYPES:
            raise RemoteError("BadDtype", f"obs dtype {obs.dtype.name} must be uint8 or float32")
        rows = obs.shape[0]
        if rows < 1 or rows > self.cfg.max_batch_size:
            raise RemoteError(
                "TooManyRows", f"{rows} rows; a request carries 1..{self.cfg.max_batch_size}"
            )
        # Planes are 0/1: anything else (or NaN, which would come back as NaN) is a client bug.
        if obs.dtype == np.uint8 and obs.max() > 1:
            raise RemoteError("BadValue", f"uint8 obs must be 0 or 1, got {int(obs.max())}")
        if obs.dtype == np.float32 and not np.isfinite(obs).all():
            raise RemoteError("BadValue", "float32 obs must be finite (NaN or inf received)")
        legal = None
        if len(arrays) == 3:  # sparse: only these logits come back (azserve/sparse.py)
            offsets, actions = arrays[1], arrays[2]
            why = sparse.check(offsets, actions, rows, self.spec.num_actions)
            if why is not None:
                raise RemoteError("BadLegal", why)
            legal = (offsets, actions)
        # STARTING counts as open: the receive and schedule tasks run before ``start`` returns
        # (it still awaits the metrics endpoint), and a restarted server meets resent requests
        # in that window; refusing them gave up every game a client had in flight.
        if self.lifecycle.state not in (State.STARTING, State.RUNNING):
            raise RemoteError("ServerClosed", "server is shutting down")
        version = self.residency.resolve(msg.version)
        self.scheduler.submit(envelope, msg.id, version, obs, legal)

    # --- auth ----------------------------------------------------------------------------------

    def _check_loader(self, peer: str | None) -> None:
        """Under CURVE, weights are taken from the learner's key only."""
        gate = self._authenticator
        if gate is None or peer == gate.learner:
            return
        self.metrics.loads_refused.inc()
        raise RemoteError(
            "Unauthorized",
            f"load refused: key {peer} is not the learner's (auth.learner_public_key)",
        )

    def _refused(self, reason: str) -> None:
        self.metrics.auth_refused.inc()

    def _auth_status(self) -> dict[str, Any]:
        gate = self._authenticator
        return {
            "curve": gate is not None,
            "loads_refused": int(self.metrics.loads_refused.value),
            **(gate.status() if gate is not None else {}),
        }

    # --- weights -------------------------------------------------------------------------------

    def _on_load(self, envelope: list[bytes], msg: P.LoadWeights, arrays: list[np.ndarray]) -> None:
        self._check_model(msg.model)
        if len(arrays) != 1 or arrays[0].dtype != np.uint8 or arrays[0].ndim != 1:
            raise RemoteError(
                "BadRequest", "load takes exactly 1 array: the safetensors blob as uint8 [nbytes]"
            )
        if msg.version < 0:
            raise RemoteError("BadRequest", f"version must be >= 0, got {msg.version}")
        self.lifecycle.spawn(
            self._load(envelope, msg, arrays[0].tobytes()), f"load-v{msg.version}", owner=False
        )

    async def _load(self, envelope: list[bytes], msg: P.LoadWeights, blob: bytes) -> None:
        t0 = time.monotonic()
        try:
            await self.residency.load(msg.version, blob, msg.sha256)
        except WeightsError as exc:
            self._send_error(envelope, msg.id, "BadWeights", str(exc))
            return
        except RemoteError as exc:
            self._send_error(envelope, msg.id, exc.type, exc.message)
            return
        self._send(
            envelope,
            P.Loaded(
                id=msg.id,
                model=msg.model,
                version=msg.version,
                latest=self.residency.latest,
                load_ms=(time.monotonic() - t0) * 1e3,
            ),
        )

    # --- housekeeping --------------------------------------------------------------------------

    async def _housekeeping(self) -> None:
        last_status = time.monotonic()
        period = 0.5
        while True:
            await asyncio.sleep(period)
            now = time.monotonic()
            await self.residency.housekeep(now, period)
            if self.cfg.status_interval_s and now - last_status >= self.cfg.status_interval_s:
                last_status = now
                log.info(self.status_line(now))

    def status_line(self, now: float | None = None) -> str:
        now = time.monotonic() if now is None else now
        line = self.metrics.status_line(
            now, self.scheduler.queued_rows, self.residency.resident(), self.residency.latest
        )
        # The thread count in force, where the backend follows the idle cores: read from here
        # by scripts/threads_effect.py, so that its changes need no log line of their own.
        threads = self.backend.status().get("threads")
        return line + (f"  threads {threads}" if threads else "")

    # --- send ----------------------------------------------------------------------------------

    def _send(
        self, envelope: list[bytes], msg: P.Message, arrays: tuple[np.ndarray, ...] = ()
    ) -> None:
        if self._sock is None or self._sock.closed:
            return
        # DONTWAIT: the send completes or fails at once (never queued in Python), so the
        # future is done here; a reply that cannot go now is dropped and counted.
        sent: asyncio.Future[Any] = self._sock.send_multipart(  # type: ignore[assignment]
            envelope + P.encode(msg, arrays), copy=False, flags=zmq.DONTWAIT
        )
        exc = sent.exception() if sent.done() and not sent.cancelled() else None
        if exc is None:
            return
        if isinstance(exc, zmq.Again):
            reason = "full"
        elif isinstance(exc, zmq.ZMQError) and exc.errno == zmq.EHOSTUNREACH:
            reason = "gone"
        else:
            reason = "error"
        n = self.metrics.replies_dropped[reason]
        n.inc()
        if n.value in (1, 10, 100) or n.value % 1000 == 0:
            log.warning("reply dropped (%s: %s), %d so far", reason, _WHY[reason] or exc, n.value)

    def _send_error(self, envelope: list[bytes], rid: int | None, type_: str, message: str) -> None:
        self.metrics.error(type_)
        self._send(envelope, P.ErrorReply(id=rid, type=type_, message=message))
