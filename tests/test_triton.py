"""The Triton backend against a real tritonserver (nvidia-pytriton's, python backend on CPU).

One module-scoped server; each test loads its own model name, so tests stay independent. Every
load_model costs ~2-3 s here, which is what the time budget of this file is spent on.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from azserve import sparse
from azserve.backends import make_backend
from azserve.backends.base import BackendConfig, TorchConfig, TritonConfig
from azserve.backends.torch_backend import TorchBackend
from azserve.backends.triton import TritonBackend
from azserve.backends.triton_launch import TritonProcess, free_port
from azserve.backends.triton_repo import MODEL_PY, TORCHSCRIPT_FILE, WEIGHTS_FILE, ModelRepository
from azserve.errors import (
    ConfigError,
    Overloaded,
    RemoteError,
    RequestTimeout,
    ServerClosed,
    VersionUnavailable,
    WeightsError,
)
from azserve.model.network import build_net
from azserve.model.spec import NetConfig
from azserve.model.weights import state_dict_to_bytes
from tests.conftest import MakeClient, MakeServer
from tests.conftest import positions as server_positions

pytestmark = [pytest.mark.triton, pytest.mark.xdist_group("triton")]  # one server per module

NET = NetConfig(blocks=2, channels=16)
ATOL = 1e-5


def weights(seed: int, net: NetConfig = NET) -> bytes:
    """safetensors bytes of a freshly initialised network (BN stats randomised to matter)."""
    state = build_net(net, seed=seed).state_dict()
    gen = torch.Generator().manual_seed(seed)
    for key, t in state.items():
        if key.endswith("running_mean"):
            t.copy_(torch.randn(t.shape, generator=gen) * 0.1)
        elif key.endswith("running_var"):
            t.copy_(torch.rand(t.shape, generator=gen) + 0.5)
    return state_dict_to_bytes(state)


def positions(rows: int, seed: int = 0) -> np.ndarray:
    """Random binary planes, uint8 ``[rows, C, H, W]``."""
    return np.random.default_rng(seed).integers(0, 2, (rows, *NET.obs_shape), dtype=np.uint8)


async def torch_reference(blob: bytes, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    ref = TorchBackend(NET, BackendConfig(device="cpu", torch=TorchConfig(compile="none")))
    await ref.start()
    try:
        await ref.load(1, blob)
        return await ref.infer(1, obs)
    finally:
        await ref.aclose()


def assert_matches(got: tuple[np.ndarray, np.ndarray], want: tuple[np.ndarray, np.ndarray]) -> None:
    assert got[0].shape == want[0].shape and got[1].shape == want[1].shape
    assert got[0].dtype == np.float32 and got[1].dtype == np.float32
    np.testing.assert_allclose(got[0], want[0], atol=ATOL, rtol=0)
    np.testing.assert_allclose(got[1], want[1], atol=ATOL, rtol=0)


def backend_config(server: TritonProcess, name: str, **overrides: object) -> BackendConfig:
    """``overrides``: keys of ``[backend.triton]``."""
    triton = TritonConfig(
        url=server.grpc_url,
        repository=str(server.repo_dir),
        model_name=name,
        request_timeout_s=30.0,
    )
    return BackendConfig(kind="triton", device="cpu", triton=replace(triton, **overrides))  # type: ignore[arg-type]


@asynccontextmanager
async def triton_backend(
    server: TritonProcess, name: str, **overrides: object
) -> AsyncIterator[TritonBackend]:
    backend = make_backend(NET, backend_config(server, name, **overrides))
    assert isinstance(backend, TritonBackend)
    await backend.start()
    try:
        yield backend
    finally:
        await backend.aclose()


# --- repository files (no server) ------------------------------------------------------------


def test_python_repository_files(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    cfg = BackendConfig(
        kind="triton",
        device="cpu",
        triton=TritonConfig(repository=str(root), keep_versions=3, instance_count=2),
    )
    repo = ModelRepository(root, NET, cfg)
    (root / "azserve" / "7").mkdir(parents=True)  # a stale version of an earlier run
    (tmp_path / ".repo.azserve.staging-leftover").mkdir()
    repo.prepare()
    assert repo.versions() == [] and not (tmp_path / ".repo.azserve.staging-leftover").exists()

    text = (root / "azserve" / "config.pbtxt").read_text()
    for line in (
        'name: "azserve"',
        'backend: "python"',
        "max_batch_size: 4096",
        "version_policy: { latest: { num_versions: 3 } }",
        'input [ { name: "obs" data_type: TYPE_UINT8 dims: [ 2, 6, 7 ] } ]',
        '{ name: "logits" data_type: TYPE_FP32 dims: [ 7 ] },',
        '{ name: "value" data_type: TYPE_FP32 dims: [ 1 ] reshape: { shape: [ ] } }',
        "instance_group [ { count: 2 kind: KIND_CPU } ]",
    ):
        assert line in text
    assert "dynamic_batching" not in text
    assert 'key: "azserve_root"' in text and '\\"channels\\": 16' in text

    blob = weights(1)
    assert repo.write_version(1, blob) == len(blob)
    vdir = root / "azserve" / "1"
    assert sorted(p.name for p in vdir.iterdir()) == ["model.py", WEIGHTS_FILE]
    assert (vdir / "model.py").read_bytes() == MODEL_PY.read_bytes()
    assert (vdir / WEIGHTS_FILE).read_bytes() == blob
    assert not list(tmp_path.glob(".repo.*"))  # staging dir renamed away, nothing left behind

    repo.remove_version(1)
    assert repo.versions() == [] and not list(tmp_path.glob(".repo.*"))
    with pytest.raises(WeightsError):
        repo.write_version(-1, blob)
    with pytest.raises(ConfigError, match="backend.triton.repository"):
        ModelRepository("", NET, cfg)

    dyn = ModelRepository(
        root, NET, replace(cfg, device="cuda:1", triton=replace(cfg.triton, dynamic_batching=True))
    )
    dyn.prepare()
    text = (root / "azserve" / "config.pbtxt").read_text()
    assert "dynamic_batching { max_queue_delay_microseconds: 0 }" in text
    assert "instance_group [ { count: 2 kind: KIND_GPU gpus: [ 1 ] } ]" in text


def test_version_dir_appears_whole_or_not_at_all(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "repo"
    repo = ModelRepository(
        root, NET, BackendConfig(kind="triton", triton=TritonConfig(repository=str(root)))
    )
    repo.prepare()

    def disk_full(path: Path, data: bytes) -> None:
        path.write_bytes(data[:10])
        raise OSError("No space left on device")

    monkeypatch.setattr("azserve.backends.triton_repo._write_synced", disk_full)
    with pytest.raises(OSError, match="No space"):
        repo.write_version(1, weights(1))
    assert repo.versions() == [] and not list(tmp_path.glob(".repo.*"))


@pytest.mark.filterwarnings(r"ignore:`torch\.jit\.load` is deprecated:DeprecationWarning")
async def test_pytorch_repository_files(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    cfg = BackendConfig(
        kind="triton",
        triton=TritonConfig(repository=str(root), model_form="pytorch", model_name="az"),
    )
    repo = ModelRepository(root, NET, cfg)
    repo.prepare()
    text = (root / "az" / "config.pbtxt").read_text()
    assert 'platform: "pytorch_libtorch"' in text and "backend:" not in text
    assert 'input [ { name: "obs__0" data_type: TYPE_UINT8 dims: [ 2, 6, 7 ] } ]' in text
    assert '{ name: "logits__0" data_type: TYPE_FP32 dims: [ 7 ] },' in text
    assert '{ name: "value__1" data_type: TYPE_FP32 dims: [ 1 ] reshape: { shape: [ ] } }' in text
    assert 'key: "INFERENCE_MODE"' in text and "instance_group [ { count: 1 } ]" in text

    blob = weights(3)
    nbytes = repo.write_version(2, blob)
    vdir = root / "az" / "2"
    assert sorted(p.name for p in vdir.iterdir()) == [TORCHSCRIPT_FILE]
    assert (vdir / TORCHSCRIPT_FILE).stat().st_size == nbytes

    # What libtorch does: load the TorchScript, feed the uint8 batch, read the output tuple.
    scripted = torch.jit.load(str(vdir / TORCHSCRIPT_FILE), map_location="cpu")
    obs = positions(33, seed=3)
    with torch.inference_mode():
        logits, value = scripted(torch.from_numpy(obs))
    assert_matches((logits.numpy(), value.numpy()), await torch_reference(blob, obs))


# --- against a real server -------------------------------------------------------------------


async def test_outputs_match_torch_backend(triton_server: TritonProcess) -> None:
    blob = weights(1)
    async with triton_backend(triton_server, "match") as backend:
        await backend.load(0, blob)  # the server's initial weights are version 0
        assert backend.version_bytes(0) == len(blob)
        for rows in (1, 7, 256):
            obs = positions(rows, seed=rows)
            assert_matches(await backend.infer(0, obs), await torch_reference(blob, obs))
        # float planes holding 0/1 are accepted (sent as uint8); fractional ones are not
        obs = positions(3)
        assert_matches(
            await backend.infer(0, obs.astype(np.float32)), await torch_reference(blob, obs)
        )


async def test_swap_while_requests_flow_then_both_versions_serve(
    triton_server: TritonProcess,
) -> None:
    """Version 2 loads while requests on version 1 flow: none fails, none waits on the reload.
    Then both are served at once, each request getting its own version's outputs."""
    blobs = {1: weights(1), 2: weights(2)}
    obs = positions(8)
    want = {v: await torch_reference(b, obs) for v, b in blobs.items()}
    assert not np.allclose(want[1][0], want[2][0])  # the versions really differ
    async with triton_backend(triton_server, "swap", keep_versions=2) as backend:
        await backend.load(1, blobs[1])
        done = 0
        latencies: list[float] = []
        stop = asyncio.Event()

        async def flow() -> None:
            nonlocal done
            while not stop.is_set():
                t0 = time.perf_counter()
                assert_matches(await backend.infer(1, obs), want[1])
                latencies.append(time.perf_counter() - t0)
                done += 1

        flows = [asyncio.create_task(flow(), name=f"flow{i}") for i in range(backend.max_inflight)]
        try:
            await asyncio.sleep(0.2)
            before = done
            await backend.load(2, blobs[2])  # Triton restarts version 1 too, behind the scenes
            during = done - before
            await asyncio.sleep(0.2)
        finally:
            stop.set()
            await asyncio.gather(*flows)  # re-raises the first failed request, if any
        assert during > 20, f"only {during} requests served while version 2 loaded"
        assert max(latencies) < 1.0, "a request waited on the reload"

        assert backend.versions() == [1, 2]
        order = [1 + i % 2 for i in range(24)]
        got = await asyncio.gather(*(backend.infer(v, obs) for v in order))
        for v, out in zip(order, got, strict=True):
            assert_matches(out, want[v])
        with pytest.raises(VersionUnavailable, match="version 3"):
            await backend.infer(3, obs)
        with pytest.raises(Overloaded, match="keep_versions"):
            await backend.load(3, weights(3))
        assert backend.repo.versions() == [1, 2]

        await backend.unload(1)
        assert backend.repo.versions() == [2] and backend.version_bytes(1) == 0
        with pytest.raises(VersionUnavailable):
            await backend.infer(1, obs)
        assert_matches(await backend.infer(2, obs), want[2])


async def test_bad_input_and_bad_weights(triton_server: TritonProcess) -> None:
    async with triton_backend(triton_server, "bad") as backend:
        with pytest.raises(WeightsError):
            await backend.load(1, b"not safetensors")
        with pytest.raises(WeightsError, match="do not fit"):
            await backend.load(1, weights(1, replace(NET, channels=8)))
        assert backend.repo.versions() == []
        with pytest.raises(VersionUnavailable):  # nothing loaded at all
            await backend.infer(1, positions(1))

        await backend.load(1, weights(1))
        with pytest.raises(RemoteError) as info:
            await backend.infer(1, np.zeros((2, 3, 6, 7), np.uint8))  # wrong plane count
        assert type(info.value) is RemoteError and "INVALID_ARG" in str(info.value)
        with pytest.raises(ValueError, match="uint8"):
            await backend.infer(1, positions(2).astype(np.float32) / 2)
        backend.cfg = replace(
            backend.cfg, triton=replace(backend.cfg.triton, request_timeout_s=1e-3)
        )
        with pytest.raises(RequestTimeout):  # 4096 rows take longer than 1 ms
            await backend.infer(1, positions(4096))


async def test_lifecycle(triton_server: TritonProcess, tmp_path: Path) -> None:
    async with triton_backend(triton_server, "life") as backend:
        with pytest.raises(RuntimeError, match="already started"):
            await backend.start()
    with pytest.raises(ServerClosed, match="closed"):
        await backend.infer(1, positions(1))
    with pytest.raises(RuntimeError, match="already started"):
        await backend.start()  # a closed backend is not restartable

    nowhere = BackendConfig(
        kind="triton",
        triton=TritonConfig(
            url=f"127.0.0.1:{free_port()}", repository=str(tmp_path), request_timeout_s=0.3
        ),
    )
    with pytest.raises(ServerClosed, match="not reachable"):
        await TritonBackend(NET, nowhere).start()


async def test_server_death_gives_typed_errors_and_recovers(
    start_triton_server: Callable[[], TritonProcess],
) -> None:
    server = start_triton_server()
    blob = weights(5)
    obs = positions(4)
    want = await torch_reference(blob, obs)
    async with triton_backend(server, "phoenix") as backend:
        await backend.load(1, blob)
        assert_matches(await backend.infer(1, obs), want)

        server.stop()
        with pytest.raises(ServerClosed, match=server.grpc_url):
            await backend.infer(1, obs)
        with pytest.raises(ServerClosed):
            await backend.load(2, weights(6))
        assert backend.repo.versions() == [1]  # the failed version left nothing behind

        server.restart()  # same port, nothing loaded (explicit model control)
        deadline = time.monotonic() + 10.0
        while True:
            try:
                got = await backend.infer(1, obs)  # reloads version 1 on Triton, then retries
                break
            except ServerClosed:
                # gRPC reconnects with a backoff of at most 1 s (see triton.py _CHANNEL_ARGS)
                assert time.monotonic() < deadline, "backend did not reconnect"
                await asyncio.sleep(0.1)
        assert_matches(got, want)


async def test_inference_server_on_triton_matches_torch_server(
    triton_server: TritonProcess, make_server: MakeServer, make_client: MakeClient
) -> None:
    """End to end: EvalClient -> InferenceServer(backend.kind=triton) -> Triton, against the
    same server on the torch backend (both serve their seeded version 0)."""
    on_triton = await make_server(backend=backend_config(triton_server, "e2e"))
    on_torch = await make_server()
    clients = [await make_client(s.endpoint) for s in (on_triton, on_torch)]
    obs = server_positions(48, seed=5)
    # 40 single positions (coalesced by the client, batched by the server) and one stack of 8
    got, want = [
        await asyncio.gather(*(c.evaluate(o, 0) for o in obs[:40]), c.evaluate(obs[40:], 0))
        for c in clients
    ]
    for (gl, gv), (wl, wv) in zip(got, want, strict=True):
        np.testing.assert_allclose(gl, wl, atol=ATOL, rtol=0)
        np.testing.assert_allclose(gv, wv, atol=ATOL, rtol=0)
    status = await clients[0].status()
    assert status["errors"] == 0


async def test_inference_server_on_triton_answers_sparse_requests(
    triton_server: TritonProcess, make_server: MakeServer, make_client: MakeClient
) -> None:
    """A sparse eval through a Triton-backed server: the legal logits of the dense row Triton
    computed, gathered after the model, float16 (docs/protocol.md, "Sparse requests")."""
    on_triton = await make_server(backend=backend_config(triton_server, "sparse"))
    client = await make_client(on_triton.endpoint)
    obs = server_positions(16, seed=6)
    dense, values = await client.evaluate(obs, 0)
    legal = [np.flatnonzero(np.random.default_rng(i).random(9) < 0.5) for i in range(16)]
    offsets, actions = sparse.ragged(legal)
    flat, vals = await client.evaluate_rows(obs, 0, (offsets, actions))
    assert flat.dtype == np.float16 and len(flat) == len(actions)
    want = dense[sparse.rows_of(offsets), actions]
    np.testing.assert_allclose(flat, want, rtol=1e-3, atol=1e-3)
    np.testing.assert_array_equal(vals, values)
