"""Triton backend: forwards each formed batch to a Triton Inference Server over gRPC (asyncio).

azserve owns the model repository (``backend.triton.repository`` = tritonserver's
``--model-repository``; the server runs with ``--model-control-mode=explicit``). A weights
version is a directory ``N/`` written atomically by ``ModelRepository``; ``load`` then asks
Triton to reload the model and returns once Triton reports version N READY. Triton keeps serving
the older versions during the reload, so serving never waits on a load. Every request names its
pinned version.

Triton errors become azserve's typed errors: a version Triton does not hold ->
``VersionUnavailable``; no connection -> ``ServerClosed``; deadline -> ``RequestTimeout``;
anything else -> ``RemoteError``. A Triton that restarted (explicit mode: it comes back with
nothing loaded) is repaired on the first request that misses a version this backend loaded:
one reload, then the request is retried once.
"""

from __future__ import annotations

import asyncio
import time

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as grpcaio
from tritonclient.utils import InferenceServerException

from azserve.backends.base import Backend, BackendConfig
from azserve.backends.triton_repo import ModelRepository
from azserve.errors import (
    AzserveError,
    Overloaded,
    RemoteError,
    RequestTimeout,
    ServerClosed,
    VersionUnavailable,
    WeightsError,
)
from azserve.model.network import build_net
from azserve.model.spec import NetConfig
from azserve.model.weights import bytes_to_state_dict, load_strict

_CHANNEL_ARGS = [
    ("grpc.max_send_message_length", 2**31 - 1),
    ("grpc.max_receive_message_length", 2**31 - 1),
    # gRPC's default reconnect backoff grows to 120 s; a restarted Triton should be used at once.
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
]
_LOAD_TIMEOUT_S = 300.0
"""Longest one ``load_model`` may take (a reload restarts every kept version)."""
_READY_POLL_S = 0.05


def _status(exc: InferenceServerException) -> str:
    """``"StatusCode.NOT_FOUND"`` -> ``"NOT_FOUND"`` ("" when Triton gave none)."""
    return (exc.status() or "").removeprefix("StatusCode.")


def _is_missing_model(exc: InferenceServerException) -> bool:
    # Triton: NOT_FOUND "Request for unknown model: 'm' version 3 is not found" (version absent)
    # or UNAVAILABLE "... is not at ready state" (version still loading or unloading).
    msg = exc.message() or ""
    return _status(exc) == "NOT_FOUND" or "unknown model" in msg or "not at ready state" in msg


class TritonBackend(Backend):
    """``infer(version, obs uint8 [B,C,H,W]) -> (logits [B,A] f32, value [B] f32)`` on Triton.

    Up to ``cfg.triton.max_inflight`` batches are in flight at once (Triton queues them per instance;
    with ``triton.dynamic_batching`` it also merges the queued ones). Loads and unloads are
    serialised: each one reloads the whole model on Triton.
    """

    def __init__(self, net: NetConfig, cfg: BackendConfig) -> None:
        self.net_cfg = net
        self.cfg = cfg
        self.max_inflight = cfg.triton.max_inflight
        self.repo = ModelRepository(cfg.triton.repository, net, cfg)
        self.names = self.repo.names
        self._model = cfg.triton.model_name
        self._client: grpcaio.InferenceServerClient | None = None
        self._closed = False
        self._versions: dict[int, int] = {}
        """Versions READY on Triton (as far as this backend made them) -> weights file bytes."""
        self._lock = asyncio.Lock()
        self._restore_task: asyncio.Task[None] | None = None

    # --- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        """Write config.pbtxt (clearing stale versions) and wait until Triton is live.

        Waits up to ``request_timeout_s`` so that azserve and tritonserver may start together;
        raises ``ServerClosed`` if Triton is not reachable by then.
        """
        if self._client is not None or self._closed:
            raise RuntimeError("TritonBackend already started")
        await asyncio.to_thread(self.repo.prepare)
        self._client = grpcaio.InferenceServerClient(
            self.cfg.triton.url, channel_args=_CHANNEL_ARGS
        )
        deadline = time.monotonic() + self.cfg.triton.request_timeout_s
        while True:
            try:
                if await self._client.is_server_live(client_timeout=1.0):
                    return
                why = "not live"
            except InferenceServerException as exc:
                why = exc.message() or str(exc)
            if time.monotonic() > deadline:
                await self.aclose()
                raise ServerClosed(f"Triton at {self.cfg.triton.url} is not reachable: {why}")
            await asyncio.sleep(0.1)

    async def aclose(self) -> None:
        """Close the connection; in-flight calls fail with ``ServerClosed``.

        Triton's state is left as it is: the next ``start`` clears stale versions.
        """
        self._closed = True
        if self._restore_task is not None:
            self._restore_task.cancel()
            self._restore_task = None
        client, self._client = self._client, None
        if client is not None:
            await client.close()
        self._versions.clear()

    def _require_client(self) -> grpcaio.InferenceServerClient:
        if self._client is None:
            raise ServerClosed("Triton backend is closed" if self._closed else "start() first")
        return self._client

    # --- errors ------------------------------------------------------------------------------

    def _error(self, exc: InferenceServerException, version: int | None = None) -> AzserveError:
        """A Triton/gRPC error as azserve's typed error."""
        status, msg = _status(exc), exc.message() or str(exc)
        if _is_missing_model(exc):
            what = f"version {version}" if version is not None else f"model {self._model!r}"
            return VersionUnavailable("VersionUnavailable", f"{what} not loaded on Triton: {msg}")
        if status == "UNAVAILABLE":
            return ServerClosed(f"Triton at {self.cfg.triton.url} unavailable: {msg}")
        if status == "CANCELLED":
            return ServerClosed(f"Triton call cancelled (backend closing?): {msg}")
        if status == "DEADLINE_EXCEEDED":
            return RequestTimeout(f"Triton at {self.cfg.triton.url}: no reply in time: {msg}")
        return RemoteError("TritonError", f"[{status or 'unknown'}] {msg}")

    # --- compute -----------------------------------------------------------------------------

    async def infer(self, version: int, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """obs uint8 ``[B, C, H, W]`` -> (logits ``[B, A]`` f32, value ``[B]`` f32).

        Float planes are accepted when they hold whole numbers 0..255 (they travel as uint8).
        """
        if obs.dtype != np.uint8:
            planes = obs.astype(np.uint8)
            if not np.array_equal(planes, obs):
                raise ValueError(
                    "triton backend: obs must be uint8 planes (Triton input obs is UINT8)"
                )
            obs = planes
        try:
            return await self._infer_once(version, obs)
        except VersionUnavailable:
            if version not in self._versions or self._closed:
                raise
        # Triton lost a version this backend made ready: it restarted. Reload, retry once.
        await self._restore()
        return await self._infer_once(version, obs)

    async def _infer_once(self, version: int, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        client = self._require_client()
        inp = grpcclient.InferInput(self.names.obs, list(obs.shape), "UINT8")
        inp.set_data_from_numpy(np.ascontiguousarray(obs))
        outputs = [
            grpcclient.InferRequestedOutput(n) for n in (self.names.logits, self.names.value)
        ]
        try:
            res = await client.infer(
                self._model,
                [inp],
                model_version=str(version),
                outputs=outputs,
                client_timeout=self.cfg.triton.request_timeout_s,
            )
        except InferenceServerException as exc:
            raise self._error(exc, version) from exc
        logits = res.as_numpy(self.names.logits)
        value = res.as_numpy(self.names.value)
        if logits is None or value is None or logits.shape[0] != len(obs) or value.size != len(obs):
            raise RemoteError(
                "TritonError", f"bad reply for {len(obs)} rows from version {version}"
            )
        return logits, value.reshape(-1)  # Triton reports value as [B, 1]

    # --- versions ----------------------------------------------------------------------------

    async def load(self, version: int, blob: bytes) -> None:
        """Write version ``version`` and return once Triton reports it READY.

        Bad weights raise ``WeightsError`` before Triton is touched. Refuses (``Overloaded``) a
        new version when ``keep_versions`` are resident: Triton's ``latest`` policy would drop
        the oldest, which may still be pinned.
        """
        client = self._require_client()
        await asyncio.to_thread(self._check_weights, blob)
        async with self._lock:
            if (
                version not in self._versions
                and len(self._versions) >= self.cfg.triton.keep_versions
            ):
                raise Overloaded(
                    "Overloaded",
                    f"{len(self._versions)} versions resident = backend.triton.keep_versions; unload one first",
                )
            nbytes = await asyncio.to_thread(self.repo.write_version, version, blob)
            try:
                await self._reload(client)
                await self._wait_ready(client, version)
            except BaseException:
                # Disk must match what is served: a restart-repair would otherwise load it.
                self._versions.pop(version, None)
                await asyncio.to_thread(self.repo.remove_version, version)
                raise
            self._versions[version] = nbytes

    def _check_weights(self, blob: bytes) -> None:
        """The same strict check the torch backend does, so bad weights fail here, not on Triton."""
        load_strict(build_net(self.net_cfg, seed=None), bytes_to_state_dict(blob))

    async def unload(self, version: int) -> None:
        """Drop the version directory and reload the model with the remaining versions.

        Requests for ``version`` then get ``VersionUnavailable``; the others keep serving.
        """
        client = self._require_client()
        async with self._lock:
            known = self._versions.pop(version, None) is not None
            await asyncio.to_thread(self.repo.remove_version, version)
            if not known:
                return
            if self._versions:
                await self._reload(client)
            else:
                # load_model with no version directory left is an error; unload the model.
                try:
                    await client.unload_model(self._model, client_timeout=_LOAD_TIMEOUT_S)
                except InferenceServerException as exc:
                    raise self._error(exc) from exc

    def version_bytes(self, version: int) -> int:
        """Size of the version's weights file (0 if not resident)."""
        return self._versions.get(version, 0)

    def versions(self) -> list[int]:
        return sorted(self._versions)

    async def _reload(self, client: grpcaio.InferenceServerClient) -> None:
        """``load_model``: Triton re-reads config.pbtxt and the version directories."""
        try:
            await client.load_model(self._model, client_timeout=_LOAD_TIMEOUT_S)
        except InferenceServerException as exc:
            status = _status(exc)
            if status in ("UNAVAILABLE", "CANCELLED", "DEADLINE_EXCEEDED"):
                raise self._error(exc) from exc
            raise WeightsError(f"Triton failed to load {self._model!r}: {exc.message()}") from exc

    async def _wait_ready(self, client: grpcaio.InferenceServerClient, version: int) -> None:
        deadline = time.monotonic() + _LOAD_TIMEOUT_S
        while True:
            try:
                if await client.is_model_ready(self._model, str(version), client_timeout=5.0):
                    return
            except InferenceServerException as exc:
                raise self._error(exc, version) from exc
            if time.monotonic() > deadline:
                raise WeightsError(f"Triton did not report version {version} READY")
            await asyncio.sleep(_READY_POLL_S)

    async def _restore(self) -> None:
        """Reload the resident versions once, however many requests noticed they were gone."""
        task = self._restore_task
        if task is None or task.done():
            task = asyncio.create_task(self._restore_now(), name="azserve-triton-restore")
            # Callers may all be cancelled; read the result so a failure is never unretrieved.
            task.add_done_callback(lambda t: t.cancelled() or t.exception())
            self._restore_task = task
        await asyncio.shield(task)

    async def _restore_now(self) -> None:
        client = self._require_client()
        async with self._lock:
            for v in sorted(self._versions):
                try:
                    ready = await client.is_model_ready(self._model, str(v), client_timeout=5.0)
                except InferenceServerException as exc:
                    raise self._error(exc, v) from exc
                if not ready:
                    break
            else:
                return  # all ready: a load or another restore got there first
            await self._reload(client)
            for v in sorted(self._versions):
                await self._wait_ready(client, v)
