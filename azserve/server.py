"""The central dynamic-batching inference server.

One ROUTER socket, owned by the event loop: the receive task decodes and queues requests per
weights version; the scheduler task forms a batch whenever the backend has a free slot (so batch
k+1 fills while batch k computes), runs it off the loop, checks the row invariant and replies
per request. Control messages (load weights, status, ping, pins) are answered on the same socket.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from dataclasses import dataclass
from typing import Any

import numpy as np
import zmq
import zmq.asyncio

from azserve import protocol as P
from azserve.auth import AuthConfig, server_auth
from azserve.backends import Backend, BackendConfig, make_backend
from azserve.batching import BatchQueue
from azserve.errors import (
    AzserveError,
    Overloaded,
    RemoteError,
    RequestTimeout,
    ServerClosed,
    VersionUnavailable,
    WeightsError,
)
from azserve.metrics import serve_metrics
from azserve.server_metrics import ServerMetrics
from azserve.versions import VersionRegistry
from azserve.weights import checksum
from learner.network import NetConfig

log = logging.getLogger("azserve.server")

MAX_LEASE_S = 600.0
"""Longest lease a client may ask for: a dead client cannot pin a version for longer."""


@dataclass(frozen=True)
class ServerConfig:
    """The inference server's socket, batching, versions and metrics."""

    bind: str = "tcp://127.0.0.1:5555"
    """ZeroMQ endpoint of the ROUTER socket (``tcp://HOST:PORT`` or ``ipc://PATH``); loopback by default."""
    model: str = "default"
    """Model name clients must send."""
    max_batch_size: int = 256
    """Most rows in one batch; also the most rows one request may carry."""
    max_queue_delay_us: int = 2000
    """How long the oldest queued request may wait for the batch to fill."""
    max_queued_rows: int = 1 << 16
    """Rows queued over all versions before new requests get an ``Overloaded`` error."""
    max_versions: int = 8
    """Weight versions resident at once."""
    memory_budget_mb: float = 2048.0
    """Memory all resident versions may use; a load past it (nothing evictable) fails."""
    version_grace_s: float = 10.0
    """An unpinned old version stays this long after its last request."""
    metrics_port: int = 0
    """Prometheus text endpoint port on ``metrics_host`` (0 = off)."""
    metrics_host: str = "127.0.0.1"
    """Address of the metrics endpoint."""
    status_interval_s: float = 5.0
    """Seconds between status lines (0 = none)."""
    seed: int = 0
    """Seed of the random initial weights served as version 0 without a checkpoint."""


@dataclass
class _Pending:
    envelope: list[bytes]
    id: int | None
    obs: np.ndarray
    t_recv: float


class InferenceServer:
    """``start()`` binds and serves; ``aclose()`` drains in-flight batches, fails queued requests
    with ``ServerClosed``, then closes the socket. Also usable as ``async with``."""

    def __init__(
        self,
        cfg: ServerConfig,
        net: NetConfig,
        backend: Backend | BackendConfig | None = None,
        auth: AuthConfig | None = None,
    ) -> None:
        self.cfg = cfg
        self.net = net
        self.auth = auth or AuthConfig()
        if backend is None or isinstance(backend, BackendConfig):
            backend = make_backend(net, backend or BackendConfig())
        self.backend: Backend = backend
        self.server_id = uuid.uuid4().hex[:12]
        self.versions = VersionRegistry(
            max_versions=cfg.max_versions,
            memory_budget_bytes=int(cfg.memory_budget_mb * 2**20),
            grace_s=cfg.version_grace_s,
        )
        self._queues: dict[int, BatchQueue[_Pending]] = {}
        self._queued_rows = 0
        self._arrived = asyncio.Event()
        self._state = "new"
        self._ctx: zmq.asyncio.Context | None = None
        self._sock: zmq.asyncio.Socket | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._batches: set[asyncio.Task[Any]] = set()
        self._loading: dict[int, asyncio.Event] = {}
        self._computing: dict[int, int] = {}  # version -> batches in flight
        self._metrics_server: asyncio.AbstractServer | None = None
        self._authenticator: Any = None
        self._buffers: list[np.ndarray] = []
        self.metrics = ServerMetrics(
            lambda: self._queued_rows,
            lambda: self.versions.latest,
            lambda: len(self.versions.resident()),
        )
        self.endpoint = cfg.bind

    def status(self) -> dict[str, Any]:
        """Versions, queue depths and counters (the ``status`` control reply)."""
        return {
            "server_id": self.server_id,
            "state": self._state,
            "model": self.cfg.model,
            "versions": self.versions.snapshot(),
            "queued_rows": self._queued_rows,
            "queues": {str(v): q.rows for v, q in self._queues.items() if q.rows},
            **self.metrics.counters(),
        }

    # --- lifecycle -----------------------------------------------------------------------------

    async def start(self, initial: dict[str, Any] | None = None) -> None:
        """Load the initial weights (a state dict, else seeded random) as version 0 unless
        ``initial`` carries ``version``; bind; start serving."""
        if self._state != "new":
            raise RuntimeError(f"InferenceServer cannot start: it is {self._state}")
        self._state = "starting"
        await self.backend.start()
        await self._load_initial(initial or {})
        self._ctx = zmq.asyncio.Context()
        sock = self._ctx.socket(zmq.ROUTER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.RCVHWM, 0)
        sock.setsockopt(zmq.SNDHWM, 0)
        try:
            self._authenticator = server_auth(self._ctx, sock, self.auth, self.cfg.bind)
            sock.bind(self.cfg.bind)
        except (zmq.ZMQError, AzserveError) as exc:
            sock.close()
            if self._authenticator is not None:  # its sockets would block term() for ever
                self._authenticator.stop()
            self._ctx.term()
            self._state = "closed"
            await self.backend.aclose()
            if isinstance(exc, AzserveError):
                raise
            raise AzserveError(f"server.bind={self.cfg.bind!r}: cannot bind: {exc}") from exc
        self.endpoint = sock.getsockopt_string(zmq.LAST_ENDPOINT)
        self._sock = sock
        self._spawn(self._recv_loop(), "azserve-recv")
        self._spawn(self._schedule_loop(), "azserve-schedule")
        self._spawn(self._housekeeping(), "azserve-housekeeping")
        if self.cfg.metrics_port:
            self._metrics_server = await serve_metrics(
                self.cfg.metrics_host, self.cfg.metrics_port, self.metrics.registry.render
            )
        self._state = "serving"
        log.info(
            "serving model %r on %s (latest version %d)",
            self.cfg.model,
            self.endpoint,
            self.versions.latest,
        )

    async def _load_initial(self, initial: dict[str, Any]) -> None:
        from azserve.weights import state_dict_to_bytes
        from learner.network import build_net

        version = int(initial.get("version", 0))
        state = initial.get("state") or build_net(self.net, seed=self.cfg.seed).state_dict()
        blob = state_dict_to_bytes(state)
        await self.backend.load(version, blob)
        self.versions.add(version, self.backend.version_bytes(version), time.monotonic())

    def _spawn(self, coro: Any, name: str) -> None:
        task = asyncio.create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("task %s died", task.get_name(), exc_info=task.exception())

    async def __aenter__(self) -> InferenceServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self, drain_timeout_s: float = 10.0) -> None:
        """Stop receiving, let running batches finish and reply, fail what is still queued."""
        if self._state in ("closing", "closed", "new"):
            self._state = "closed"
            return
        self._state = "closing"
        for t in list(self._tasks):
            if t.get_name() in ("azserve-recv", "azserve-schedule"):
                t.cancel()
        if self._batches:
            await asyncio.wait(self._batches, timeout=drain_timeout_s)
        for q in self._queues.values():
            for p in q.drain():
                self._send_error(p.envelope, p.id, "ServerClosed", "server is shutting down")
        self._queued_rows = 0
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
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
        self._state = "closed"
        log.info("server closed")

    # --- receive -------------------------------------------------------------------------------

    async def _recv_loop(self) -> None:
        assert self._sock is not None
        while True:
            frames = await self._sock.recv_multipart()
            self._handle(frames)

    def _handle(self, frames: list[bytes]) -> None:
        """Decode one message and act on it. Never raises: bad input becomes an error reply
        (or, when there is no one to answer, a counted drop)."""
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
            # Every request carries ``proto``; replies sent to the server do not (they fail below).
            proto = getattr(msg, "proto", P.PROTOCOL_VERSION)
            if proto != P.PROTOCOL_VERSION:
                raise _Bad(
                    "UnsupportedProtocol", f"proto {proto} (server speaks {P.PROTOCOL_VERSION})"
                )
            if isinstance(msg, P.EvalRequest):
                self._on_eval(envelope, msg, arrays)
            elif isinstance(msg, P.Ping):
                self._send(
                    envelope,
                    P.Pong(id=msg.id, latest=self.versions.latest, server_id=self.server_id),
                )
            elif isinstance(msg, P.PinUpdate):
                self._check_model(msg.model)
                if not 0.0 <= msg.lease_s <= MAX_LEASE_S:  # also refuses NaN
                    raise _Bad(
                        "BadRequest", f"lease_s must be in [0, {MAX_LEASE_S:g}], got {msg.lease_s}"
                    )
                self.versions.update_lease(msg.client, msg.pins, msg.lease_s, time.monotonic())
                self._send(envelope, P.PinAck(id=msg.id, versions=self.versions.resident()))
            elif isinstance(msg, P.StatusRequest):
                self._send(envelope, P.StatusReply(id=msg.id, status=self.status()))
            elif isinstance(msg, P.LoadWeights):
                self._on_load(envelope, msg, arrays)
            else:
                raise _Bad(
                    "BadRequest", f"op {type(msg).__name__} is not a request this server takes"
                )
        except (RemoteError, _Bad) as exc:
            self._send_error(envelope, msg.id, exc.type, exc.message)

    def _check_model(self, model: str) -> None:
        if model != self.cfg.model:
            raise _Bad(
                "UnknownModel", f"unknown model {model!r}; this server serves {self.cfg.model!r}"
            )

    def _on_eval(self, envelope: list[bytes], msg: P.EvalRequest, arrays: list[np.ndarray]) -> None:
        self._check_model(msg.model)
        if len(arrays) != 1:
            raise _Bad("BadRequest", f"eval takes exactly 1 array (obs), got {len(arrays)}")
        obs = arrays[0]
        want = self.net.obs_shape
        if obs.ndim != 4 or tuple(obs.shape[1:]) != want:
            raise _Bad(
                "BadShape",
                f"obs shape {list(obs.shape)} must be [rows, {', '.join(map(str, want))}]",
            )
        if obs.dtype not in (np.uint8, np.float32):
            raise _Bad("BadDtype", f"obs dtype {obs.dtype.name} must be uint8 or float32")
        rows = obs.shape[0]
        if rows < 1 or rows > self.cfg.max_batch_size:
            raise _Bad(
                "TooManyRows", f"{rows} rows; a request carries 1..{self.cfg.max_batch_size}"
            )
        if self._state != "serving":
            raise _Bad("ServerClosed", "server is shutting down")
        if self._queued_rows + rows > self.cfg.max_queued_rows:
            raise Overloaded(
                "Overloaded", f"{self._queued_rows} rows queued (limit {self.cfg.max_queued_rows})"
            )
        version = self.versions.resolve(msg.version)
        now = time.monotonic()
        q = self._queues.get(version)
        if q is None:
            q = self._queues[version] = BatchQueue(
                self.cfg.max_batch_size, self.cfg.max_queue_delay_us
            )
        q.put(_Pending(envelope, msg.id, obs, now), rows, now)
        self._queued_rows += rows
        self._arrived.set()

    # --- batching and compute ------------------------------------------------------------------

    async def _schedule_loop(self) -> None:
        slots = asyncio.Semaphore(self.backend.max_inflight)
        while True:
            await slots.acquire()
            version, q = await self._next_ready()
            items, rows = q.take()
            self._queued_rows -= rows
            self._computing[version] = self._computing.get(version, 0) + 1
            task = asyncio.create_task(
                self._run_batch(version, items, rows, slots), name=f"batch-v{version}"
            )
            self._batches.add(task)
            task.add_done_callback(self._batches.discard)

    async def _next_ready(self) -> tuple[int, BatchQueue[_Pending]]:
        """Wait for a queue that is full or whose oldest request has waited its delay; among
        several, the one whose oldest request arrived first."""
        while True:
            now = time.monotonic()
            ready = [(q.oldest() or now, v, q) for v, q in self._queues.items() if q.ready(now)]
            if ready:
                _, v, q = min(ready, key=lambda t: t[0])
                return v, q
            deadlines = [d for q in self._queues.values() if (d := q.deadline()) is not None]
            self._arrived.clear()
            timeout = max(0.0, min(deadlines) - now) if deadlines else None
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._arrived.wait(), timeout)

    async def _run_batch(
        self, version: int, items: list[_Pending], rows: int, slots: asyncio.Semaphore
    ) -> None:
        t_start = time.monotonic()
        buf = None
        try:
            buf = self._take_buffer(items)
            obs = (
                np.concatenate([p.obs for p in items], out=buf[:rows])
                if buf is not None
                else (np.concatenate([p.obs for p in items]))
            )
            for p in items:
                self.metrics.queue_delay.observe((t_start - p.t_recv) * 1e3)
            self.metrics.mark_busy(+1, t_start)
            try:
                logits, value = await self.backend.infer(version, obs)
            finally:
                self.metrics.mark_busy(-1, time.monotonic())
            if logits.shape != (rows, self.net.num_actions) or value.shape != (rows,):
                raise _Bad(
                    "InternalError",
                    f"backend returned logits {logits.shape} / value {value.shape} for {rows} rows",
                )
        except KeyError:
            self._fail(items, "VersionUnavailable", f"version {version} was unloaded")
            return
        except (RemoteError, _Bad) as exc:
            self._fail(items, exc.type, exc.message)
            return
        except (ServerClosed, RequestTimeout) as exc:  # a remote backend (Triton) is unreachable
            self._fail(items, "BackendUnavailable", str(exc))
            return
        except Exception as exc:  # noqa: BLE001 - the batch's requesters get the error as data
            log.exception("batch on version %d failed", version)
            self._fail(items, "InternalError", f"{type(exc).__name__}: {exc}")
            return
        finally:
            if buf is not None:
                self._buffers.append(buf)
            self._computing[version] -= 1
            slots.release()
        t_done = time.monotonic()
        self.metrics.batch_done(rows, len(items), t_done - t_start)
        self.versions.touch(version, rows, t_done)
        latest = self.versions.latest
        off = 0
        for p in items:
            n = p.obs.shape[0]
            self._send(
                p.envelope,
                P.EvalReply(id=p.id, version=version, latest=latest),
                (logits[off : off + n], value[off : off + n]),
            )
            off += n
            self.metrics.latency.observe((t_done - p.t_recv) * 1e3)

    def _take_buffer(self, items: list[_Pending]) -> np.ndarray | None:
        """A preallocated uint8 batch buffer (one per batch in flight), or None for float input."""
        if any(p.obs.dtype != np.uint8 for p in items):
            return None
        if self._buffers:
            return self._buffers.pop()
        return np.empty((self.cfg.max_batch_size, *self.net.obs_shape), np.uint8)

    def _fail(self, items: list[_Pending], type_: str, message: str) -> None:
        for p in items:
            self._send_error(p.envelope, p.id, type_, message)

    # --- weights -------------------------------------------------------------------------------

    def _on_load(self, envelope: list[bytes], msg: P.LoadWeights, arrays: list[np.ndarray]) -> None:
        self._check_model(msg.model)
        if len(arrays) != 1 or arrays[0].dtype != np.uint8 or arrays[0].ndim != 1:
            raise _Bad(
                "BadRequest", "load takes exactly 1 array: the safetensors blob as uint8 [nbytes]"
            )
        if msg.version < 0:
            raise _Bad("BadRequest", f"version must be >= 0, got {msg.version}")
        self._spawn(self._load(envelope, msg, arrays[0].tobytes()), f"load-v{msg.version}")

    async def _load(self, envelope: list[bytes], msg: P.LoadWeights, blob: bytes) -> None:
        t0 = time.monotonic()
        v = msg.version
        try:
            if checksum(blob) != msg.sha256:
                raise _Bad("BadWeights", f"sha256 mismatch for version {v}")
            # Loads are idempotent for a publisher that retries after a lost ack; a retry that
            # overtakes the first load is acked only once that load is live.
            if v in self._loading:
                await self._loading[v].wait()
                if v not in self.versions:
                    raise _Bad("BadWeights", f"the concurrent load of version {v} failed")
            elif v not in self.versions:
                if v < self.versions.latest:
                    raise _Bad(
                        "BadVersion", f"version {v} is older than the latest {self.versions.latest}"
                    )
                await self._load_new(v, blob)
        except WeightsError as exc:
            self._send_error(envelope, msg.id, "BadWeights", str(exc))
            return
        except (RemoteError, _Bad) as exc:
            self._send_error(envelope, msg.id, exc.type, exc.message)
            return
        load_ms = (time.monotonic() - t0) * 1e3
        self._send(
            envelope,
            P.Loaded(
                id=msg.id, model=msg.model, version=v, latest=self.versions.latest, load_ms=load_ms
            ),
        )

    async def _load_new(self, v: int, blob: bytes) -> None:
        t0 = time.monotonic()
        done = self._loading[v] = asyncio.Event()
        try:
            for old in self.versions.check_admit(
                len(blob), time.monotonic(), self._busy_versions()
            ):
                await self._unload(old)
            await self.backend.load(v, blob)
            self.versions.add(v, self.backend.version_bytes(v), time.monotonic())
            self.metrics.swaps.inc()
        finally:
            del self._loading[v]
            done.set()
        log.info(
            "version %d live in %.0f ms (resident %s)",
            v,
            (time.monotonic() - t0) * 1e3,
            self.versions.resident(),
        )

    def _busy_versions(self) -> set[int]:
        """Versions with queued requests or a batch computing: never evicted."""
        return {v for v, q in self._queues.items() if len(q)} | {
            v for v, n in self._computing.items() if n
        }

    async def _unload(self, version: int) -> None:
        self.versions.remove(version)
        q = self._queues.pop(version, None)
        if q is not None:
            self._queued_rows -= q.rows
            for p in q.drain():
                self._send_error(
                    p.envelope, p.id, "VersionUnavailable", f"version {version} was retired"
                )
        await self.backend.unload(version)
        log.info("version %d retired", version)

    # --- housekeeping --------------------------------------------------------------------------

    async def _housekeeping(self) -> None:
        last_status = time.monotonic()
        while True:
            await asyncio.sleep(0.5)
            now = time.monotonic()
            for client in self.versions.expire_leases(now):
                log.info("lease of client %s expired", client)
            for v in self.versions.evictable(now, self._busy_versions()):
                await self._unload(v)
            if self.cfg.status_interval_s and now - last_status >= self.cfg.status_interval_s:
                last_status = now
                log.info(self.status_line(now))

    def status_line(self, now: float | None = None) -> str:
        now = time.monotonic() if now is None else now
        return self.metrics.status_line(
            now, self._queued_rows, self.versions.resident(), self.versions.latest
        )

    # --- send ----------------------------------------------------------------------------------

    def _send(
        self, envelope: list[bytes], msg: P.Message, arrays: tuple[np.ndarray, ...] = ()
    ) -> None:
        if self._sock is None or self._sock.closed:
            return
        # ROUTER sends never block (an unroutable peer is dropped), so the future completes at once.
        self._sock.send_multipart(envelope + P.encode(msg, arrays), copy=False)

    def _send_error(self, envelope: list[bytes], rid: int | None, type_: str, message: str) -> None:
        self.metrics.errors.inc()
        self._send(envelope, P.ErrorReply(id=rid, type=type_, message=message))


class _Bad(Exception):
    """A request the server refuses; becomes an ``ErrorReply`` of ``type``."""

    def __init__(self, type_: str, message: str) -> None:
        super().__init__(message)
        self.type = type_
        self.message = message


__all__ = ["InferenceServer", "ServerConfig", "VersionUnavailable"]
