"""The torch backend's execution paths: BatchNorm folding, TorchScript and inductor against
eager outputs, buckets and chunks, weight swaps on one compiled graph (no recompile, no stall of
the other versions), the resolved plan and config errors. Tiny nets and two buckets: an
inductor compile of the tiny net takes seconds."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

from azserve.backends.base import BackendConfig, TorchConfig
from azserve.backends.threads import IdleCores, next_threads, thread_steps
from azserve.backends.torch_backend import TorchBackend
from azserve.backends.torch_program import chunks, resolve_plan
from azserve.errors import ConfigError, WeightsError
from azserve.model.device import native_bf16
from azserve.model.fold import fold_batchnorm
from azserve.model.network import build_net
from tests.conftest import (
    NET,
    RTOL,
    MakeClient,
    MakeControl,
    MakeServer,
    Reference,
    positions,
    wait_for,
    weights_blob,
)

# One worker takes the module (make test's --dist loadgroup): the inductor fixture compiles once.
pytestmark = [pytest.mark.usefixtures("torch_one_thread"), pytest.mark.xdist_group("compiled")]


def randomise_batchnorm(net: nn.Module, seed: int) -> None:
    """Non-trivial running statistics, as after training (fresh ones make folding a no-op)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in net.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.copy_(torch.rand(m.num_features, generator=g) - 0.5)
                m.running_var.copy_(torch.rand(m.num_features, generator=g) + 0.5)
                m.weight.copy_(torch.rand(m.num_features, generator=g) + 0.5)
                m.bias.copy_(torch.rand(m.num_features, generator=g) - 0.5)


def trained_blob(seed: int) -> bytes:
    from azserve.model.weights import state_dict_to_bytes

    net = build_net(NET, seed=seed)
    randomise_batchnorm(net, seed)
    return state_dict_to_bytes(net.state_dict())


def eager(blob: bytes, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    from azserve.model.weights import bytes_to_state_dict

    net = build_net(NET, seed=None)
    net.load_state_dict(bytes_to_state_dict(blob))
    with torch.inference_mode():
        logits, value = net.eval()(torch.from_numpy(obs).float())
    return logits.numpy(), value.numpy()


def test_fold_batchnorm_computes_the_same_function_without_batchnorm() -> None:
    net = build_net(NET, seed=3).eval()
    randomise_batchnorm(net, 3)
    folded = fold_batchnorm(net)
    assert not any(isinstance(m, nn.BatchNorm2d) for m in folded.modules())
    assert any(isinstance(m, nn.BatchNorm2d) for m in net.modules()), "the original is kept"
    x = torch.from_numpy(positions(16, seed=1)).float()
    with torch.inference_mode():
        (l0, v0), (l1, v1) = net(x), folded(x)
    assert torch.allclose(l0, l1, rtol=RTOL, atol=1e-5)
    assert torch.allclose(v0, v1, rtol=RTOL, atol=1e-5)


def test_chunks_pad_to_buckets_and_split_above_the_largest() -> None:
    assert chunks((), 5) == [(0, 5, 5)]
    assert chunks((4, 8), 3) == [(0, 3, 4)]
    assert chunks((4, 8), 8) == [(0, 8, 8)]
    assert chunks((4, 8), 19) == [(0, 8, 8), (8, 16, 8), (16, 19, 4)]


def test_auto_plan_follows_the_cpu() -> None:
    plan = resolve_plan(BackendConfig(device="cpu"), torch.device("cpu"))
    want = torch.bfloat16 if native_bf16(torch.device("cpu")) else torch.float32
    assert (plan.compile, plan.dtype) == ("inductor", want)
    explicit = resolve_plan(
        BackendConfig(device="cpu", dtype="float32", torch=TorchConfig(compile="inductor")),
        torch.device("cpu"),
    )
    assert explicit.buckets and explicit.compile == "inductor"


def test_config_errors_name_the_key() -> None:
    with pytest.raises(ConfigError, match="backend.torch.batch_buckets"):
        BackendConfig(torch=TorchConfig(batch_buckets=(0, 8)))
    with pytest.raises(ConfigError, match="backend.dtype='float16'"):
        resolve_plan(
            BackendConfig(dtype="float16", torch=TorchConfig(compile="jit")), torch.device("cpu")
        )
    with pytest.raises(ConfigError, match="backend.torch.compile='none'"):
        resolve_plan(
            BackendConfig(dtype="bfloat16", torch=TorchConfig(compile="none")), torch.device("cpu")
        )


def test_next_threads_grows_into_idle_cores_and_gives_them_back() -> None:
    two = thread_steps(2)
    assert two == (1, 2) and thread_steps(1) == (1,)
    assert thread_steps(16) == (1, 2, 4, 8, 16) and thread_steps(12) == (1, 2, 4, 8, 12)
    assert next_threads(1, idle_cores=1.0, steps=two) == 2
    assert next_threads(2, idle_cores=1.0, steps=two) == 2  # capped
    assert next_threads(2, idle_cores=0.1, steps=two) == 1
    assert next_threads(1, idle_cores=0.0, steps=two) == 1  # never below one
    many = thread_steps(16)
    assert next_threads(2, idle_cores=0.5, steps=many) == 2  # in between: stay
    assert next_threads(2, idle_cores=1.0, steps=many) == 2  # 2 -> 4 needs about two cores
    assert next_threads(2, idle_cores=1.8, steps=many) == 4
    assert next_threads(8, idle_cores=0.1, steps=many) == 4
    assert next_threads(3, idle_cores=0.5, steps=many) == 2  # off the steps: the one below


def test_idle_cores_reads_idle_and_iowait_ticks(tmp_path: Path) -> None:
    import os
    import time

    stat = tmp_path / "stat"
    hz = os.sysconf("SC_CLK_TCK")
    stat.write_text("cpu  100 0 50 1000 10 0 0 0 0 0\ncpu0 1 2 3\n")
    idle = IdleCores(stat)
    time.sleep(0.2)
    # 0.3 s of idle + iowait ticks over the >= 0.2 s (and, on any machine, < 5 s) since.
    stat.write_text(f"cpu  100 0 50 {1000 + 0.2 * hz:.0f} {10 + 0.1 * hz:.0f} 0 0 0 0 0\n")
    got = idle.sample()
    assert got is not None and 0.3 / 5 < got <= 0.3 / 0.2
    assert IdleCores(tmp_path / "missing").sample() is None


@pytest.fixture(scope="module")
def inductor(torch_one_thread: None) -> Iterator[TorchBackend]:
    """One inductor backend (buckets 4 and 8) with version 0 of ``trained_blob(10)`` loaded:
    compiled once for the module (a compile of the tiny net takes seconds to a minute)."""
    backend = TorchBackend(
        NET,
        BackendConfig(
            device="cpu",
            dtype="float32",
            torch=TorchConfig(compile="inductor", batch_buckets=(4, 8)),
        ),
    )
    asyncio.run(backend.start())
    asyncio.run(backend.load(0, trained_blob(10)))
    yield backend
    asyncio.run(backend.aclose())


async def check_sizes(backend: TorchBackend, version: int, blob: bytes) -> None:
    for rows in (1, 3, 4, 7, 8, 19):  # exact, padded, and chunked above the last bucket
        obs = positions(rows, seed=rows)
        logits, value = await backend.infer(version, obs)
        want_l, want_v = eager(blob, obs)
        assert logits.shape == (rows, NET.num_actions) and value.shape == (rows,)
        np.testing.assert_allclose(logits, want_l, rtol=RTOL, atol=1e-5)
        np.testing.assert_allclose(value, want_v, rtol=RTOL, atol=1e-5)


@pytest.mark.parametrize(("compile_", "buckets"), [("none", ()), ("jit", ()), ("jit", (4, 8))])
async def test_paths_match_eager_on_every_batch_size(
    compile_: str, buckets: tuple[int, ...]
) -> None:
    backend = TorchBackend(
        NET,
        BackendConfig(
            device="cpu",
            dtype="float32",
            torch=TorchConfig(compile=compile_, batch_buckets=buckets),  # type: ignore[arg-type]
        ),
    )
    await backend.start()
    try:
        blob = trained_blob(5)
        await backend.load(0, blob)
        await check_sizes(backend, 0, blob)
    finally:
        await backend.aclose()


async def test_inductor_matches_eager_on_every_batch_size(inductor: TorchBackend) -> None:
    await check_sizes(inductor, 0, trained_blob(10))


async def test_inductor_swaps_weights_on_one_graph_without_recompiling(
    inductor: TorchBackend,
) -> None:
    """Versions after the first reuse the compiled graph: a new version's batches give that
    version's outputs, the old version keeps serving its own meanwhile, and nothing compiles
    (the graph's ``fail_on_recompile`` stance would raise)."""
    from torch._dynamo.utils import counters

    compiled = counters["stats"]["unique_graphs"]
    blobs = {v: trained_blob(10 + v) for v in range(3)}
    obs = positions(8, seed=2)
    # Loads of versions 1 and 2 run while version 0 keeps computing batches.
    serving = asyncio.gather(*[inductor.infer(0, obs) for _ in range(20)])
    await inductor.load(1, blobs[1])
    await inductor.load(2, blobs[2])
    for logits, _ in await serving:
        np.testing.assert_allclose(logits, eager(blobs[0], obs)[0], rtol=RTOL, atol=1e-5)
    for v in (1, 2):
        await check_sizes(inductor, v, blobs[v])
    assert counters["stats"]["unique_graphs"] == compiled, "a later version recompiled"
    assert inductor.version_bytes(1) > 0
    await inductor.unload(1)
    await inductor.unload(2)


async def test_once_serving_only_the_compute_thread_calls_the_compiled_graph(
    inductor: TorchBackend,
) -> None:
    """A load's check and the batches it meets run on one thread: dynamo's guards evaluated
    from two threads at once can fail spuriously, and under ``fail_on_recompile`` that is an
    error for the batch (it was, once, in a 2-hour Go run)."""
    program = inductor._program
    fn = program._fn  # type: ignore[attr-defined]
    threads: list[str] = []

    def recorded(*a: Any) -> Any:
        threads.append(threading.current_thread().name)
        return fn(*a)

    program._fn = recorded  # type: ignore[attr-defined]
    try:
        obs = positions(8, seed=3)
        serving = asyncio.gather(*[inductor.infer(0, obs) for _ in range(20)])
        await inductor.load(5, trained_blob(15))
        await serving
        await check_sizes(inductor, 5, trained_blob(15))
    finally:
        program._fn = fn  # type: ignore[attr-defined]
        await inductor.unload(5)
    assert len(threads) > 20 and {t.split("_")[0] for t in threads} == {"azserve-compute"}


class ScriptedIdle:
    """Idle-core readings in a given order (the test is about the graphs, not /proc/stat)."""

    def __init__(self, readings: list[float]) -> None:
        self.readings = readings

    def sample(self) -> float:
        return self.readings.pop(0)


async def test_following_idle_cores_switches_threads_on_compiled_graphs(
    torch_one_thread: None,
) -> None:
    """A compiled graph is specialised to its thread count: a backend that follows the idle
    cores makes one set per count before serving, and then moves between them (1 -> 2 -> 1 ->
    2) with the same outputs and no compile on the hot path (``fail_on_recompile`` would
    raise)."""
    from torch._dynamo.utils import counters

    backend = TorchBackend(
        NET,
        BackendConfig(
            device="cpu",
            dtype="float32",
            torch=TorchConfig(
                compile="inductor", batch_buckets=(4, 8), auto_threads=True, max_threads=2
            ),
        ),
    )
    await backend.start()
    try:
        blob = trained_blob(7)
        await backend.load(0, blob)
        compiled = counters["stats"]["unique_graphs"]
        backend._idle = ScriptedIdle([1.0, 0.0, 1.0])  # type: ignore[assignment]
        seen = []
        for _ in range(3):
            backend._next_look = 0.0  # look at every batch
            await check_sizes(backend, 0, blob)
            seen.append(backend.status()["threads"])
        assert seen == [2, 1, 2]
        assert counters["stats"]["unique_graphs"] == compiled, "a thread switch recompiled"
    finally:
        await backend.aclose()


async def test_bad_weights_are_refused_and_the_backend_keeps_serving(
    inductor: TorchBackend,
) -> None:
    from azserve.model.spec import NetConfig
    from azserve.model.weights import state_dict_to_bytes

    other = build_net(NetConfig(in_channels=2, height=3, width=3, num_actions=9, channels=4))
    with pytest.raises(WeightsError):
        await inductor.load(1, state_dict_to_bytes(other.state_dict()))
    logits, _ = await inductor.infer(0, positions(4))
    assert logits.shape == (4, NET.num_actions)
    assert inductor.versions() == [0]


async def test_server_swaps_a_compiled_model_under_load(
    make_server: MakeServer, make_client: MakeClient, make_control: MakeControl, ref: Reference
) -> None:
    """Through the real server and sockets: a compiled backend serves version 0 while version 1
    loads; after the ack, version 1's rows are its own net's and pinned version 0 keeps its
    own; the status reports the compiled plan. (The same graph as the module's backend: the
    compile is answered from inductor's cache.)"""
    backend = TorchBackend(
        NET,
        BackendConfig(
            device="cpu",
            dtype="float32",
            torch=TorchConfig(compile="inductor", batch_buckets=(4, 8)),
        ),
    )
    server = await make_server(backend=backend, max_queue_delay_us=500)
    ctl = await make_control(server.endpoint)
    client = await make_client(server.endpoint)
    obs = positions(32, seed=4)
    stop = asyncio.Event()
    served: dict[int, list[tuple[int, np.ndarray, float]]] = {0: [], 1: []}

    async def game(i: int, version: int) -> None:
        k = i
        while not stop.is_set():
            row = k % len(obs)
            k += 5
            logits, value = await client.evaluate(obs[row], version=version)
            served[version].append((row, logits, value))

    client.pin(0)
    games = [asyncio.create_task(game(i, 0)) for i in range(8)]
    await wait_for(lambda: len(served[0]) >= 50)
    loaded = await ctl.load_weights(1, weights_blob(seed=1))
    assert loaded.latest == 1
    games += [asyncio.create_task(game(i, 1)) for i in range(8)]
    await wait_for(lambda: len(served[1]) >= 50 and len(served[0]) >= 150)
    stop.set()
    await asyncio.gather(*games)  # any failed request raises here
    for version, rows in served.items():
        idx = np.array([r for r, _, _ in rows])
        logits = np.stack([lg for _, lg, _ in rows])
        values = np.array([v for _, _, v in rows], np.float32)
        assert ref.rows_matching(obs[idx], logits, values, seed=version).all()
    status = await ctl.status()
    assert status["backend"]["compile"] == "inductor" and status["backend"]["buckets"] == [4, 8]
    client.unpin(0)


def test_train_chooses_following_threads_by_default() -> None:
    from azserve.config.schema import TrainConfig
    from azserve.run.train import server_threads

    assert TrainConfig().server_threads == 0
    assert server_threads(0) == {"threads": 1, "torch": {"auto_threads": True}}
    assert server_threads(2) == {"threads": 2, "torch": {"auto_threads": False}}


def test_warm_graphs_called_from_many_threads_leave_later_compiles_possible() -> None:
    """torch's compile stance is one per process: warm graphs run under ``fail_on_recompile``
    from several threads at once (two backends, a compute and a loader thread), and afterwards
    the process compiles as before. A stance left behind would make the next backend's warm-up,
    or a trainer's ``compile = true``, raise (as it once did in this suite)."""
    import threading

    from azserve.backends.torch_program import make_program
    from azserve.model.weights import bytes_to_state_dict

    plan = resolve_plan(
        BackendConfig(
            device="cpu", dtype="float32", torch=TorchConfig(compile="inductor", batch_buckets=(4,))
        ),
        torch.device("cpu"),
    )
    program = make_program(NET, plan, torch.device("cpu"))
    weights = program.prepare(bytes_to_state_dict(trained_blob(4)))
    x = torch.from_numpy(positions(4, seed=4)).float()
    with torch.inference_mode():
        want, _ = program(weights, x)  # compiles
    program.warmed()
    errors: list[BaseException] = []

    def serve() -> None:
        try:
            with torch.inference_mode():
                for _ in range(100):
                    logits, _ = program(weights, x)
                    assert torch.equal(logits, want)
        except BaseException as e:  # noqa: BLE001 - reported by the assert below
            errors.append(e)

    threads = [threading.Thread(target=serve) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    later = torch.compile(lambda t: torch.tanh(t) * 3)
    assert torch.allclose(later(torch.ones(3)), torch.tanh(torch.ones(3)) * 3)


async def test_nets_of_several_shapes_in_one_process_all_stay_compiled(
    torch_one_thread: None,
) -> None:
    """A ladder or a match holds nets of several shapes in one process (Go with and without
    its feature planes). Their compiled forwards share one code object, so one graph cache and
    its recompile limit: each backend's graphs must fit beside the others', or torch falls
    back to eager for the later shapes without a word of error (seen in a ladder: every
    checkpoint of the second config ran eager). Each backend here makes four graphs (two
    buckets, one and two threads); the limit starts low, as torch's 8 does for three Go
    nets."""
    import torch._dynamo.config as dynamo_config
    from torch._dynamo.utils import counters

    from azserve.model.weights import state_dict_to_bytes

    # Set by hand: monkeypatch's undo deletes the key from dynamo's config module. Put back
    # no lower than the backends raised it (the process's other compiled nets need it).
    before_limit = dynamo_config.recompile_limit
    dynamo_config.recompile_limit = 2
    try:
        cfg = BackendConfig(
            device="cpu",
            dtype="float32",
            torch=TorchConfig(
                compile="inductor", batch_buckets=(4, 8), auto_threads=True, max_threads=2
            ),
        )
        for shape in (
            replace(NET, channels=6),
            replace(NET, channels=8, blocks=2, global_pool_every=2, global_pool_channels=4),
            replace(NET, in_channels=3),
        ):
            net = build_net(shape, seed=3)
            randomise_batchnorm(net, 3)
            backend = TorchBackend(shape, cfg)
            before = counters["stats"]["unique_graphs"]
            await backend.start()
            try:
                await backend.load(0, state_dict_to_bytes(net.state_dict()))
                assert counters["stats"]["unique_graphs"] - before == 4, "a graph ran eager"
                obs = np.random.default_rng(1).integers(
                    0, 2, (7, shape.in_channels, 3, 3), np.uint8
                )
                logits, value = await backend.infer(0, obs)  # hot: fail_on_recompile holds
                with torch.inference_mode():
                    want_l, want_v = net.eval()(torch.from_numpy(obs).float())
                np.testing.assert_allclose(logits, want_l.numpy(), rtol=RTOL, atol=1e-5)
                np.testing.assert_allclose(value, want_v.numpy(), rtol=RTOL, atol=1e-5)
            finally:
                await backend.aclose()
    finally:
        dynamo_config.recompile_limit = max(before_limit, dynamo_config.recompile_limit)
