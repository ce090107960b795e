"""Batch formation and compute: one ``BatchQueue`` per weights version, batches run off the loop.

The scheduler task forms a batch whenever the backend has a free slot (so batch k+1 fills while
batch k computes): among the queues that are full or whose oldest request has waited its delay,
the one whose oldest request arrived first. A batch is concatenated once into a preallocated
buffer, run once, checked (the row invariant) and split into one reply per request. With
``server.cache_mb`` the rows already computed on that version are taken from the cache and only
the rest is run (``azserve/server/rowcache.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from azserve import protocol as P
from azserve import sparse
from azserve.backends.base import Backend
from azserve.batching import BatchQueue
from azserve.errors import Overloaded, RemoteError, RequestTimeout, ServerClosed
from azserve.model.spec import ModelSpec
from azserve.server.config import ServerConfig
from azserve.server.metrics import ServerMetrics
from azserve.server.rowcache import RowCache

log = logging.getLogger("azserve.server")

Reply = Callable[[list[bytes], P.Message, tuple[np.ndarray, ...]], None]
"""``reply(envelope, message, arrays)`` sends one message to the peer behind ``envelope``."""
Fail = Callable[[list[bytes], "int | None", str, str], None]
"""``fail(envelope, request_id, error_type, message)`` sends one error reply."""


@dataclass
class Pending:
    """One eval request waiting in a queue: obs ``[rows, C, H, W]``; ``legal`` (offsets
    ``[rows + 1]``, actions ``[n]``) for a sparse request, answered with those logits only."""

    envelope: list[bytes]
    id: int | None
    obs: np.ndarray
    t_recv: float
    legal: tuple[np.ndarray, np.ndarray] | None = None


class Scheduler:
    """Queues, batch formation and compute for one server."""

    def __init__(
        self,
        cfg: ServerConfig,
        spec: ModelSpec,
        backend: Backend,
        metrics: ServerMetrics,
        reply: Reply,
        fail: Fail,
        served: Callable[[int, int, float], None],
        latest: Callable[[], int],
    ) -> None:
        """``served(version, rows, now)`` is told of every batch done; ``latest()`` is the
        version each reply advertises."""
        self.cfg = cfg
        self.spec = spec
        self.backend = backend
        self.metrics = metrics
        self._reply = reply
        self._fail_one = fail
        self._served = served
        self._latest = latest
        self._queues: dict[int, BatchQueue[Pending]] = {}
        self.queued_rows = 0
        self._arrived = asyncio.Event()
        self._batches: set[asyncio.Task[None]] = set()
        self._computing: dict[int, int] = {}  # version -> batches in flight
        self._buffers: list[np.ndarray] = []
        self.cache = RowCache(int(cfg.cache_mb * 2**20)) if cfg.cache_mb > 0 else None

    # --- queueing --------------------------------------------------------------------------

    def submit(
        self,
        envelope: list[bytes],
        rid: int | None,
        version: int,
        obs: np.ndarray,
        legal: tuple[np.ndarray, np.ndarray] | None = None,
    ) -> None:
        """Queue a checked request for ``version`` (``legal``: a sparse one's checked offsets
        and actions); ``Overloaded`` when the queues are full."""
        rows = obs.shape[0]
        if self.queued_rows + rows > self.cfg.max_queued_rows:
            raise Overloaded(
                "Overloaded", f"{self.queued_rows} rows queued (limit {self.cfg.max_queued_rows})"
            )
        now = time.monotonic()
        q = self._queues.get(version)
        if q is None:
            q = self._queues[version] = BatchQueue(
                self.cfg.max_batch_size, self.cfg.max_queue_delay_us
            )
        q.put(Pending(envelope, rid, obs, now, legal), rows, now)
        self.queued_rows += rows
        self._arrived.set()

    def busy_versions(self) -> set[int]:
        """Versions with queued requests or a batch computing: never evicted."""
        return {v for v, q in self._queues.items() if len(q)} | {
            v for v, n in self._computing.items() if n
        }

    def queue_rows(self) -> dict[str, int]:
        return {str(v): q.rows for v, q in self._queues.items() if q.rows}

    def retire(self, version: int, for_good: bool = False) -> None:
        """Fail what is queued for a version being unloaded: ``VersionRetired`` when it is
        gone for good (no lease pinned it), else ``VersionUnavailable`` (it may be restored)."""
        q = self._queues.pop(version, None)
        if q is not None:
            self.queued_rows -= q.rows
            kind = "VersionRetired" if for_good else "VersionUnavailable"
            self._fail(q.drain(), kind, f"version {version} was retired")

    def fail_queued(self, type_: str, message: str) -> None:
        """Fail every queued request (shutdown, or the server failed)."""
        for q in self._queues.values():
            self._fail(q.drain(), type_, message)
        self.queued_rows = 0

    async def drain(self, timeout_s: float) -> None:
        """Wait (bounded) for the batches computing now to finish and reply."""
        if self._batches:
            await asyncio.wait(self._batches, timeout=timeout_s)

    # --- the scheduler task ----------------------------------------------------------------

    async def run(self) -> None:
        """Form and start batches for ever (the server's owner task)."""
        slots = asyncio.Semaphore(self.backend.max_inflight)
        while True:
            await slots.acquire()
            version, q = await self._next_ready()
            items, rows = q.take()
            self.queued_rows -= rows
            self._computing[version] = self._computing.get(version, 0) + 1
            task = asyncio.create_task(
                self._run_batch(version, items, rows, slots), name=f"batch-v{version}"
            )
            self._batches.add(task)
            task.add_done_callback(self._batches.discard)

    async def _next_ready(self) -> tuple[int, BatchQueue[Pending]]:
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
        self, version: int, items: list[Pending], rows: int, slots: asyncio.Semaphore
    ) -> None:
        t_start = time.monotonic()
        buf = None
        try:
            buf = self._take_buffer(items)
            obs = (
                np.concatenate([p.obs for p in items], out=buf[:rows])
                if buf is not None
                else np.concatenate([p.obs for p in items])
            )
            for p in items:
                self.metrics.queue_delay.observe((t_start - p.t_recv) * 1e3)
            split = self.cache.split(version, obs) if self.cache is not None else None
            run = obs if split is None or split.all_computed else obs[split.compute]
            computed = len(run)
            logits = value = None
            if computed:
                self.metrics.mark_busy(+1, t_start)
                try:
                    logits, value = await self.backend.infer(version, run)
                finally:
                    self.metrics.mark_busy(-1, time.monotonic())
                if logits.shape != (computed, self.spec.num_actions) or value.shape != (computed,):
                    raise RemoteError(
                        "InternalError",
                        f"backend returned logits {logits.shape} / value {value.shape} "
                        f"for {computed} rows",
                    )
            if split is not None:
                assert self.cache is not None
                logits, value = self.cache.join(split, logits, value)
            assert logits is not None and value is not None
        except RemoteError as exc:  # VersionUnavailable (unloaded meanwhile) included
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
        self.metrics.batch_done(computed, len(items), t_done - t_start)
        self._served(version, rows, t_done)
        latest = self._latest()
        off = 0
        for p in items:
            n = p.obs.shape[0]
            rows_l = logits[off : off + n]
            if p.legal is not None:  # sparse: the legal logits only, float16, ragged
                rows_l = sparse.gather(rows_l, *p.legal)
            self._reply(
                p.envelope,
                P.EvalReply(id=p.id, version=version, latest=latest),
                (rows_l, value[off : off + n]),
            )
            off += n
            self.metrics.latency.observe((t_done - p.t_recv) * 1e3)

    def _take_buffer(self, items: list[Pending]) -> np.ndarray | None:
        """A preallocated uint8 batch buffer (one per batch in flight), or None for float input."""
        if any(p.obs.dtype != np.uint8 for p in items):
            return None
        if self._buffers:
            return self._buffers.pop()
        return np.empty((self.cfg.max_batch_size, *self.spec.obs_shape), np.uint8)

    def _fail(self, items: list[Pending], type_: str, message: str) -> None:
        for p in items:
            self._fail_one(p.envelope, p.id, type_, message)
