"""The evaluation client of the inference server (one per process, asyncio).

Every coroutine awaits ``evaluate``; all leaves pending in one event-loop tick travel in one
message per weights version (bounded by ``max_rows``), and replies are routed back to the
waiting futures. A caller that batches its own rows (a search pool's lane) sends them with
``evaluate_rows``: one message, as they are. Heartbeats renew the process's version pins,
detect a restarted server, and resend what it lost. Its receive and heartbeat tasks are watched: if one dies, every pending
future fails at once with a clear error (not a timeout 30 s later) and the client is ``failed``.

The blocking ``SyncClient`` lives in ``azserve.sync_client``; weight loads and status, the
publisher's business, in ``azserve.control``.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import logging
import os
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import zmq
import zmq.asyncio

from azserve import protocol as P
from azserve import sparse
from azserve.auth import AuthConfig, connect_dealer
from azserve.batching import TickCoalescer
from azserve.errors import ConfigError, RequestTimeout, ServerClosed, remote_error
from azserve.lifecycle import Lifecycle, State

log = logging.getLogger("azserve.client")


@dataclass(frozen=True)
class ClientConfig:
    """How a process reaches the inference server."""

    server: str = ""
    """Endpoint of the server's ROUTER socket (empty: ``server.bind``)."""
    model: str = "default"
    """Model name to request."""
    max_rows: int = 256
    """Most rows per message (keep <= the server's max_batch_size)."""
    retry_after_s: float = 2.0
    """Heartbeats unanswered this long make the link suspect; when the server answers again,
    every request still waiting is resent (the link may have dropped it). A live server that
    answers heartbeats is never sent a request twice, however long its queue."""
    request_timeout_s: float = 30.0
    """Give up on a request (RequestTimeout) after this long in total."""
    heartbeat_s: float = 1.0
    """Ping period; also renews version pins."""
    lease_s: float = 5.0
    """How long the server keeps this client's pins without a heartbeat."""
    sparse_policy: sparse.SparsePolicy = "auto"
    """Ask for the legal moves' logits only, float16 (``azserve.sparse``): ``auto`` for games
    wider than 512 actions (chess), ``on``, ``off`` (dense float32 rows, as before). The actors
    and the search pool decide by it; a request is sparse when it carries legal actions."""
    catch_up_s: float = 30.0
    """When the server restarts on a version older than the newest this client has seen, new
    games keep starting on that newest one (they wait, as for a lost version, while the
    learner catches the server up) for up to this long; past it the server's own latest is
    taken (a server replaced by one with other weights). 0: take the server's at once."""


_Leaf = tuple[np.ndarray, "asyncio.Future[Any]", bool, Any]
"""(obs, future, single, legal actions or None): one ``evaluate`` call waiting for this tick's
flush."""

Legal = tuple[np.ndarray, np.ndarray]
"""A stack's legal actions, ragged: offsets int32 ``[n + 1]``, actions ``[k]`` (azserve.sparse)."""


@dataclass
class _InFlight:
    frames: list[Any]
    futures: list[tuple[asyncio.Future[Any], int, int]]  # (future, first row, rows or -1 = single)
    sent_at: float
    first_sent: float
    attempts: int = 1
    offsets: np.ndarray | None = None  # a sparse request's: splits the reply's logits into rows


@dataclass
class ClientStats:
    """Counters of one EvalClient."""

    messages: int = 0
    rows: int = 0
    replies: int = 0
    resent: int = 0
    errors: int = 0
    server_restarts: int = 0
    sparse_messages: int = 0
    """Evaluations sent sparse (legal actions in, float16 logits back)."""
    rtt_ms: list[float] = field(default_factory=list)
    longest_wait_s: float = 0.0
    """The longest any request waited, from its first send to its reply, its error or its
    timeout (resends included): at most ``request_timeout_s`` and a heartbeat."""


class EvalClient:
    """Async evaluation client; ``async with EvalClient(cfg) as c: logits, v = await c.evaluate(obs)``."""

    def __init__(self, cfg: ClientConfig, auth: AuthConfig | None = None) -> None:
        self.cfg = cfg
        self.auth = auth or AuthConfig()
        self.client_id = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.latest_version = -1
        """The version a game started now pins: the newest seen, never lowered by a server
        restart unless the server has not caught up in ``catch_up_s``
        (see ``_on_restart_latest``)."""
        self.server_latest = -1
        """The server's own latest version, as of its last reply."""
        self._behind_until: float | None = None
        """While a restarted server is behind ``latest_version``: when to stop waiting."""
        self.server_id: str | None = None
        self.stats = ClientStats()
        self._ids = itertools.count(1)
        # Leaves of this tick, by (version, position shape, dtype): only alike arrays share a
        # message, so one caller's malformed input cannot break its neighbours' requests.
        self._tick: TickCoalescer[tuple[int, tuple[int, ...], np.dtype, bool], _Leaf] = (
            TickCoalescer(self._flush)
        )
        self._inflight: dict[int, _InFlight] = {}
        self._control: dict[int, asyncio.Future[Any]] = {}
        self._pins: dict[int, int] = {}
        self._pins_dirty = False
        self._last_pong = time.monotonic()
        self._suspect_since: float | None = None
        self.lifecycle = Lifecycle("EvalClient", self._fail_all)
        self._ctx: zmq.asyncio.Context | None = None
        self._sock: zmq.asyncio.Socket | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    # --- lifecycle -----------------------------------------------------------------------------

    async def start(self, wait_ready: bool = True, timeout_s: float = 30.0) -> None:
        """Connect; with ``wait_ready``, wait until the server answers a ping (learns latest)."""
        if not self.cfg.server:
            raise ConfigError("client.server: no endpoint (the app derives it from server.bind)")
        self.lifecycle.begin_start()
        self._loop = asyncio.get_running_loop()
        self._last_pong = time.monotonic()  # silence is counted from the start
        self._ctx = zmq.asyncio.Context()
        try:
            sock = connect_dealer(self._ctx, self.cfg.server, self.auth, SNDHWM=0, RCVHWM=0)
        except (ConfigError, zmq.ZMQError):
            self._ctx.term()
            self.lifecycle.state = State.CLOSED
            raise
        self._sock = sock
        self.lifecycle.spawn(self._recv_loop(), "recv")
        self.lifecycle.spawn(self._heartbeat_loop(), "heartbeat")
        self.lifecycle.started()
        if wait_ready:
            deadline = time.monotonic() + timeout_s
            while True:
                try:
                    await self.ping(timeout_s=min(1.0, max(0.05, deadline - time.monotonic())))
                    break
                except RequestTimeout:
                    if time.monotonic() >= deadline:
                        await self.aclose()
                        raise RequestTimeout(
                            f"no server answered at {self.cfg.server} in {timeout_s:.0f} s"
                        ) from None

    async def __aenter__(self) -> EvalClient:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Fail everything pending with ServerClosed, release pins, close the socket."""
        if not self.lifecycle.begin_close():
            return
        if self._pins and self._sock is not None:
            with contextlib.suppress(zmq.ZMQError):
                self._send_nowait(
                    P.PinUpdate(
                        id=0, model=self.cfg.model, client=self.client_id, pins={}, lease_s=0.0
                    )
                )
        await self.lifecycle.cancel()
        self._fail_all(ServerClosed("EvalClient closed"))
        if self._sock is not None:
            self._sock.close(linger=50)
        if self._ctx is not None:
            self._ctx.term()
        self.lifecycle.closed()

    def _fail_all(self, err: BaseException) -> None:
        """Fail every pending future with ``err`` (close, or an owner task died)."""
        for _, fut, _, _ in self._tick.drain():
            _fail(fut, err)
        for inf in self._inflight.values():
            for fut, _, _ in inf.futures:
                _fail(fut, err)
        for fut in self._control.values():
            _fail(fut, err)
        self._inflight.clear()
        self._control.clear()

    # --- evaluation ----------------------------------------------------------------------------

    def evaluate(
        self, obs: np.ndarray, version: int = -1, legal: np.ndarray | None = None
    ) -> asyncio.Future[tuple[Any, Any]]:
        """Evaluate one position ``[C,H,W]`` -> (logits ``[A]``, value float), or a stack
        ``[n,C,H,W]`` -> (logits ``[n,A]``, values ``[n]``), on weights ``version`` (-1 = latest).
        With ``legal`` (one position's legal actions, int ``[k]``) the request is sparse and
        the logits are float16 ``[k]``, aligned with ``legal``. Returns an awaitable future;
        the work leaves in this tick's coalesced message."""
        if self.lifecycle.state is not State.RUNNING:
            self.lifecycle.check_running(ServerClosed)
        ndim = obs.ndim
        if ndim != 3 and (ndim != 4 or legal is not None):
            raise ValueError(
                f"obs must be [C,H,W] or [n,C,H,W] ([C,H,W] with legal), got shape "
                f"{list(obs.shape)}"
            )
        assert self._loop is not None
        fut: asyncio.Future[Any] = self._loop.create_future()
        # The key holds the dtype itself: ``dtype.str`` would build a string per call.
        shape = obs.shape
        self._tick.add(
            (version, shape if ndim == 3 else shape[1:], obs.dtype, legal is not None),
            (obs, fut, ndim == 3, legal),
        )
        return fut

    def evaluate_rows(
        self, obs: np.ndarray, version: int = -1, legal: Legal | None = None
    ) -> asyncio.Future[Any]:
        """A stack ``[n,C,H,W]`` its caller has batched already (a search pool's lane, at most
        ``max_rows``), sent now as a message of its own, not regrouped with this tick's leaves:
        its buffer is framed as it is (the client copies none of its rows; do not write to it
        until the future is done). -> (logits ``[n,A]``, values ``[n]``); with ``legal``
        (offsets, actions), sparse: (logits float16 ``[k]`` aligned with the actions, values)."""
        if self.lifecycle.state is not State.RUNNING:
            self.lifecycle.check_running(ServerClosed)
        n = obs.shape[0] if obs.ndim == 4 else 0
        if obs.ndim != 4 or not 0 < n <= self.cfg.max_rows:
            raise ValueError(
                f"evaluate_rows takes [n,C,H,W] with 1 <= n <= client.max_rows "
                f"({self.cfg.max_rows}), got shape {list(obs.shape)}"
            )
        assert self._loop is not None
        fut: asyncio.Future[Any] = self._loop.create_future()
        self._send_request(version, obs, [(fut, 0, n)], time.monotonic(), legal)
        return fut

    def _flush(
        self, pending: dict[tuple[int, tuple[int, ...], np.dtype, bool], list[_Leaf]]
    ) -> None:
        """Send everything queued this tick: one message per version (and position shape and
        dtype), split at ``max_rows``."""
        now = time.monotonic()
        for (version, _, _, _), items in pending.items():
            chunk: list[_Leaf] = []
            rows = 0
            for item in items:
                n = 1 if item[2] else item[0].shape[0]
                if chunk and rows + n > self.cfg.max_rows:
                    self._send_chunk(version, chunk, now)
                    chunk, rows = [], 0
                chunk.append(item)
                rows += n
            if chunk:
                self._send_chunk(version, chunk, now)

    def _send_chunk(self, version: int, chunk: list[_Leaf], now: float) -> None:
        futures = []
        row = 0
        for o, fut, single, _ in chunk:
            n = 1 if single else o.shape[0]
            futures.append((fut, row, -1 if single else n))
            row += n
        first = chunk[0][0]
        try:
            # One copy of every leaf's bytes, no per-leaf arrays: the leaves share dtype and
            # position shape (the coalescer's key), so their buffers concatenate.
            joined = b"".join([o for o, _, _, _ in chunk])  # type: ignore[misc]
            obs = np.frombuffer(joined, first.dtype).reshape(row, *first.shape[-3:])
        except (BufferError, TypeError):  # a caller's array that is not C-contiguous
            obs = np.concatenate([o[None] if single else o for o, _, single, _ in chunk])
        legal = sparse.ragged([x[3] for x in chunk]) if chunk[0][3] is not None else None
        self._send_request(version, obs, futures, now, legal)

    def _send_request(
        self,
        version: int,
        obs: np.ndarray,
        futures: list[tuple[asyncio.Future[Any], int, int]],
        now: float,
        legal: Legal | None = None,
    ) -> None:
        rid = next(self._ids)
        arrays = [obs] if legal is None else [obs, *legal]
        frames = P.encode(P.EvalRequest(id=rid, model=self.cfg.model, version=version), arrays)
        offsets = None if legal is None else legal[0]
        self.stats.sparse_messages += legal is not None
        self._inflight[rid] = _InFlight(frames, futures, now, now, offsets=offsets)
        self.stats.messages += 1
        self.stats.rows += obs.shape[0]
        self._send_frames(frames)

    # --- control ops ---------------------------------------------------------------------------

    async def ping(self, timeout_s: float = 5.0) -> P.Pong:
        return await self._call(P.Ping(), timeout_s)

    async def status(self, timeout_s: float = 5.0) -> dict[str, Any]:
        """The server's status reply (versions, queues, counters)."""
        reply = await self._call(P.StatusRequest(), timeout_s)
        return reply.status

    async def _call(self, msg: P.Message, timeout_s: float) -> Any:
        self.lifecycle.check_running(ServerClosed)
        assert self._loop is not None
        rid = next(self._ids)
        msg.id = rid
        fut: asyncio.Future[Any] = self._loop.create_future()
        self._control[rid] = fut
        self._send_frames(P.encode(msg))
        try:
            return await asyncio.wait_for(fut, timeout_s)
        except TimeoutError:
            raise RequestTimeout(
                f"{type(msg).__name__} got no reply from {self.cfg.server} in {timeout_s:g} s"
            ) from None
        finally:
            self._control.pop(rid, None)

    # --- pins ----------------------------------------------------------------------------------

    @contextlib.contextmanager
    def pin_latest(self) -> Iterator[int]:
        """Pin the latest known version for the duration of a game: ``with c.pin_latest() as v``."""
        v = self.latest_version
        self.pin(v)
        try:
            yield v
        finally:
            self.unpin(v)

    def pin(self, version: int) -> None:
        new = version not in self._pins
        self._pins[version] = self._pins.get(version, 0) + 1
        if new:  # tell the server now, not at the next heartbeat
            self._send_pins()

    def unpin(self, version: int) -> None:
        n = self._pins.get(version, 0) - 1
        if n > 0:
            self._pins[version] = n
        else:
            self._pins.pop(version, None)
            self._pins_dirty = True

    def _send_pins(self) -> None:
        self._pins_dirty = False
        if self.lifecycle.running:
            self._send_nowait(
                P.PinUpdate(
                    id=0,
                    model=self.cfg.model,
                    client=self.client_id,
                    pins=dict(self._pins),
                    lease_s=self.cfg.lease_s,
                )
            )

    # --- socket --------------------------------------------------------------------------------

    def _send_nowait(self, msg: P.Message) -> None:
        self._send_frames(P.encode(msg))

    def _send_frames(self, frames: list[Any]) -> None:
        assert self._sock is not None
        fut = self._sock.send_multipart(frames, copy=False)
        fut.add_done_callback(_log_send_error)  # type: ignore[attr-defined]

    async def _recv_loop(self) -> None:
        assert self._sock is not None
        while True:
            frames = await self._sock.recv_multipart()
            try:
                msg, arrays = P.decode(frames)
            except P.ProtocolError as exc:
                log.error("undecodable reply from server: %s", exc)
                continue
            self._on_reply(msg, arrays)

    def _on_reply(self, msg: P.Message, arrays: list[np.ndarray]) -> None:
        rid = msg.id
        if isinstance(msg, P.EvalReply):
            self._heard_latest(msg.latest)
            inf = self._inflight.pop(rid, None) if rid is not None else None
            if inf is None:
                return  # a late duplicate of a request already answered
            self.stats.replies += 1
            now = time.monotonic()
            self.stats.rtt_ms.append((now - inf.sent_at) * 1e3)
            self._waited(now - inf.first_sent)
            if len(self.stats.rtt_ms) > 4096:
                del self.stats.rtt_ms[:2048]
            logits, value = arrays
            if len(inf.futures) == 1 and inf.futures[0][2] > 0:  # one stack (evaluate_rows)
                fut, row, n = inf.futures[0]
                if not fut.done():
                    if inf.offsets is not None:  # sparse: the caller holds the offsets
                        fut.set_result((logits, value))
                    else:
                        fut.set_result((logits[row : row + n], value[row : row + n]))
                return
            if inf.offsets is not None:  # sparse single leaves: row i's logits, float16 [k]
                o = inf.offsets.tolist()
                values = value.tolist()
                for fut, row, _ in inf.futures:
                    if not fut.done():
                        fut.set_result((logits[o[row] : o[row + 1]], values[row]))
                return
            rows = list(logits)  # row views, made in one C loop
            values = value.tolist()  # the same floats as float(value[row]), made at once
            for fut, row, n in inf.futures:
                if fut.done():
                    continue
                if n < 0:
                    fut.set_result((rows[row], values[row]))
                else:
                    fut.set_result((logits[row : row + n], value[row : row + n]))
            return
        if isinstance(msg, P.ErrorReply):
            self.stats.errors += 1
            err = remote_error(msg.type, msg.message)
            inf = self._inflight.pop(rid, None) if rid is not None else None
            if inf is not None:
                self._waited(time.monotonic() - inf.first_sent)
                for fut, _, _ in inf.futures:
                    _fail(fut, err)
            elif rid is not None and rid in self._control:
                _fail(self._control[rid], err)
            else:
                log.warning("server error not tied to a request: %s", err)
            return
        if isinstance(msg, P.Pong):
            restarted = self.server_id is not None and msg.server_id != self.server_id
            now = time.monotonic()
            if restarted:
                self._on_restart_latest(msg.latest, now)
            else:
                self._heard_latest(msg.latest)
            self._on_server_id(msg.server_id)
            if self._suspect_since is not None and not restarted:
                # The same server answers again after a silence: anything sent before or
                # during it may have been lost with the link (a restart resent it already).
                self._resend_all(now)
            self._suspect_since = None
            self._last_pong = now
        waiter = self._control.get(rid) if rid is not None else None
        if waiter is not None and not waiter.done():
            waiter.set_result(msg)

    def _heard_latest(self, latest: int) -> None:
        self.server_latest = latest
        self.latest_version = max(self.latest_version, latest)
        if self._behind_until is not None and latest >= self.latest_version:
            log.info("server caught up to v%d", latest)
            self._behind_until = None

    def _on_restart_latest(self, latest: int, now: float) -> None:
        """A restarted server says it is at ``latest``. Behind what this client has seen (it
        came back on its initial weights, and the learner has not caught it up yet), new games
        keep the newest version rather than start on old weights: self-play data spoils."""
        self.server_latest = latest
        if latest >= self.latest_version or self.cfg.catch_up_s <= 0:
            self.latest_version = latest
            self._behind_until = None
            return
        log.info(
            "server restarted at v%d, behind v%d seen here: new games keep v%d while it "
            "catches up (up to %g s)",
            latest,
            self.latest_version,
            self.latest_version,
            self.cfg.catch_up_s,
        )
        self._behind_until = now + self.cfg.catch_up_s

    def _check_behind(self, now: float) -> None:
        """Past ``catch_up_s`` behind: take the server's own latest version."""
        if self._behind_until is not None and now >= self._behind_until:
            log.warning(
                "server still at v%d, behind v%d, after %g s: new games start on v%d",
                self.server_latest,
                self.latest_version,
                self.cfg.catch_up_s,
                self.server_latest,
            )
            self.latest_version = self.server_latest
            self._behind_until = None

    def _on_server_id(self, server_id: str) -> None:
        if self.server_id is not None and server_id != self.server_id:
            # The server restarted: whatever it had queued is gone. Resend now, and re-pin.
            self.stats.server_restarts += 1
            log.warning(
                "server restarted (%s -> %s); resending %d requests",
                self.server_id,
                server_id,
                len(self._inflight),
            )
            self._resend_all(time.monotonic())
            self._send_pins()
        self.server_id = server_id

    async def _heartbeat_loop(self) -> None:
        last_pins = 0.0
        while True:
            await asyncio.sleep(self.cfg.heartbeat_s)
            now = time.monotonic()
            if self._pins_dirty or (self._pins and now - last_pins >= self.cfg.lease_s / 3):
                self._send_pins()
                last_pins = now
            if self._suspect_since is None and now - self._last_pong >= self.cfg.retry_after_s:
                self._suspect_since = now  # no answer for a while: down, hung or cut off
            self._expire(now)
            self._check_behind(now)
            rid = next(self._ids)
            self._control[rid] = fut = asyncio.get_running_loop().create_future()
            fut.add_done_callback(functools.partial(self._heartbeat_done, rid))
            self._send_frames(P.encode(P.Ping(id=rid)))
            self._loop.call_later(self.cfg.heartbeat_s * 3, _cancel, fut)  # type: ignore[union-attr]

    def _heartbeat_done(self, rid: int, fut: asyncio.Future[Any]) -> None:
        self._control.pop(rid, None)
        if not fut.cancelled():
            fut.exception()  # no one awaits a heartbeat: its error (e.g. closed) is not news

    def _expire(self, now: float) -> None:
        """Fail the requests that have waited ``request_timeout_s`` in total."""
        for rid, inf in list(self._inflight.items()):
            if now - inf.first_sent >= self.cfg.request_timeout_s:
                del self._inflight[rid]
                self._waited(now - inf.first_sent)
                err = RequestTimeout(
                    f"no reply from {self.cfg.server} in {self.cfg.request_timeout_s:g} s after {inf.attempts} attempt(s)"
                )
                for fut, _, _ in inf.futures:
                    _fail(fut, err)

    def _waited(self, seconds: float) -> None:
        if seconds > self.stats.longest_wait_s:
            self.stats.longest_wait_s = seconds

    def _resend_all(self, now: float) -> None:
        """Send again every request still waiting (the link or the server may have lost it)."""
        self._expire(now)
        for inf in self._inflight.values():
            inf.attempts += 1
            inf.sent_at = now
            self.stats.resent += 1
            self._send_frames(inf.frames)

    def pending_rows(self) -> int:
        """Rows sent and not yet answered."""
        return sum(
            sum(1 if n < 0 else n for _, _, n in inf.futures) for inf in self._inflight.values()
        )


def _fail(fut: asyncio.Future[Any], err: BaseException) -> None:
    if not fut.done():
        fut.set_exception(err)
        # A caller that gave up on this leaf (its search already failed on a sibling) never
        # awaits it: its error is not news, so asyncio must not log it as never retrieved.
        fut.exception()


def _cancel(fut: asyncio.Future[Any]) -> None:
    if not fut.done():
        fut.cancel()


def _log_send_error(fut: asyncio.Future[Any]) -> None:
    if not fut.cancelled() and fut.exception() is not None:
        log.error("send failed: %s", fut.exception())
