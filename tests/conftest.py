"""Shared fixtures for the server tests: a tiny net and its reference outputs, per-test
endpoints (ipc in ``tmp_path``, tcp on a free loopback port), and factories for servers, clients
and raw ZeroMQ sockets that close everything at teardown (sockets with ``linger=0``), so that no
test can hang on teardown or leak into the next one."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import importlib.util
import json
import os
import socket
import sys
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import msgpack
import numpy as np
import pytest
import torch
import zmq
import zmq.asyncio

from azserve import ClientConfig, EvalClient, InferenceServer, InitialWeights, ServerConfig
from azserve.backends import BackendConfig, TorchConfig, make_backend
from azserve.backends.torch_backend import TorchBackend
from azserve.control import ControlClient
from azserve.model.network import build_net
from azserve.model.spec import NetConfig
from azserve.model.weights import state_dict_to_bytes

pytest_plugins = ["tests.triton_server", "tests.netns"]

NET = NetConfig(in_channels=2, height=3, width=3, num_actions=9, blocks=1, channels=8)
"""The tiny net every server test runs: obs ``[n, 2, 3, 3]``, logits ``[n, 9]``."""

RTOL, ATOL = 1e-4, 1e-5
"""Tolerance between a served row and a direct model call (batch composition changes the
order of float sums)."""


@pytest.fixture(scope="module")
def torch_one_thread() -> Iterator[None]:
    """Tiny nets gain nothing from torch's thread pool, and spinning threads crawl on a busy
    2-core machine (analysis and evaluation run with one thread too)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def free_tcp_port() -> int:
    """A loopback port that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def positions(rows: int, seed: int = 0) -> np.ndarray:
    """Random 0/1 uint8 planes ``[rows, 2, 3, 3]``."""
    return np.random.default_rng(seed).integers(0, 2, (rows, *NET.obs_shape), dtype=np.uint8)


def weights_blob(seed: int) -> bytes:
    """Safetensors bytes of the tiny net initialised with ``seed`` (the server's version 0 is
    seed 0, its default)."""
    return state_dict_to_bytes(build_net(NET, seed=seed).state_dict())


class Reference:
    """Direct model calls, the ground truth for served rows. Check many rows with one call
    (``rows_matching``): a forward pass costs about a millisecond whatever the batch size."""

    def __init__(self) -> None:
        self._nets: dict[int, torch.nn.Module] = {}

    def __call__(self, obs: np.ndarray, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
        """obs ``[n, C, H, W]`` -> (logits ``[n, A]``, values ``[n]``) of the net of ``seed``."""
        net = self._nets.get(seed)
        if net is None:
            net = self._nets[seed] = build_net(NET, seed=seed).eval()
        with torch.inference_mode():
            logits, value = net(torch.from_numpy(np.ascontiguousarray(obs)).float())
        return logits.numpy(), value.numpy()

    def rows_matching(
        self, obs: np.ndarray, logits: np.ndarray, values: np.ndarray, seed: int = 0
    ) -> np.ndarray:
        """bool ``[n]``: which served rows (logits ``[n, A]``, values ``[n]``) equal the model's."""
        want_l, want_v = self(obs, seed)
        return np.isclose(logits, want_l, rtol=RTOL, atol=ATOL).all(axis=1) & np.isclose(
            values, want_v, rtol=RTOL, atol=ATOL
        )

    def matches(self, obs: np.ndarray, logits: np.ndarray, value: Any, seed: int = 0) -> bool:
        """Whether a served result for ``obs`` (one position or a stack) equals the model's."""
        if obs.ndim == 3:
            obs, logits, value = obs[None], np.asarray(logits)[None], np.asarray([value])
        return bool(self.rows_matching(obs, logits, np.asarray(value), seed).all())


@pytest.fixture(scope="session")
def ref() -> Reference:
    return Reference()


@pytest.fixture
def ipc_endpoint(tmp_path: Path) -> Iterator[str]:
    """``ipc://`` in ``tmp_path``, or in a short temporary directory when that path would
    exceed the ~107 bytes a Unix socket path may have."""
    path = tmp_path / "server.ipc"
    if len(str(path)) < 100:
        yield f"ipc://{path}"
        return
    with tempfile.TemporaryDirectory(prefix="az") as d:
        yield f"ipc://{d}/server.ipc"


@pytest.fixture
def tcp_endpoint() -> str:
    return f"tcp://127.0.0.1:{free_tcp_port()}"


@pytest.fixture
def sock_dir(tmp_path: Path) -> Iterator[Path]:
    """A directory for ipc sockets: ``tmp_path``, or a short temporary directory where a socket
    path in it could exceed the ~107 bytes a Unix socket path may have."""
    if len(str(tmp_path)) < 80:
        yield tmp_path
        return
    with tempfile.TemporaryDirectory(prefix="az") as d:
        yield Path(d)


@pytest.fixture
def restore_torch_threads() -> Iterator[None]:
    """Put torch's thread count back after a test that ran a learner in this process (the
    learner sets its own)."""
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


async def start_actors(
    config: Path, sets: list[str], log: Path, actor_id: str = "a"
) -> asyncio.subprocess.Process:
    """A real ``azserve actors`` process on ``config`` with each of ``sets`` as a ``--set``,
    its output in ``log``."""
    with log.open("wb") as out:
        return await asyncio.create_subprocess_exec(
            sys.executable, "-m", "azserve.cli.main", "actors", "--config", str(config),
            "--id", actor_id, *(a for kv in sets for a in ("--set", kv)),
            stdout=out, stderr=out, cwd=Path(__file__).resolve().parents[1],
        )  # fmt: skip


def server_config(bind: str, **overrides: Any) -> ServerConfig:
    """Test defaults: no status lines; everything else as given."""
    return replace(ServerConfig(bind=bind, status_interval_s=0.0), **overrides)


MakeServer = Callable[..., Awaitable[InferenceServer]]


@pytest.fixture
async def make_server() -> AsyncIterator[MakeServer]:
    """``await make_server(bind="tcp://127.0.0.1:*", backend=None, auth=None, initial=None,
    **ServerConfig fields)`` -> a started server on the tiny net; closed at teardown."""
    servers: list[InferenceServer] = []

    async def make(
        bind: str = "tcp://127.0.0.1:*",
        *,
        backend: Any = None,
        auth: Any = None,
        initial: InitialWeights | None = None,
        start: bool = True,
        **overrides: Any,
    ) -> InferenceServer:
        if backend is None:
            backend = BackendConfig(device="cpu", torch=TorchConfig(compile="none"))
        if isinstance(backend, BackendConfig):
            backend = make_backend(NET, backend)
        server = InferenceServer(server_config(bind, **overrides), NET.spec, backend, auth=auth)
        servers.append(server)
        if start:
            # Version 0 is the net's seeded initial weights, as ``azserve serve`` starts.
            await server.start(initial or InitialWeights(0, weights_blob(seed=NET.seed)))
        return server

    yield make
    for server in servers:
        await server.aclose(drain_timeout_s=5.0)


MakeControl = Callable[..., Awaitable[ControlClient]]


@pytest.fixture
async def make_control() -> AsyncIterator[MakeControl]:
    """``await make_control(endpoint, **ControlClient kwargs)`` -> a started ControlClient
    (weight loads, status); closed at teardown."""
    clients: list[ControlClient] = []

    async def make(endpoint: str, **kw: Any) -> ControlClient:
        client = ControlClient(endpoint, **kw)
        clients.append(client)
        await client.start()
        return client

    yield make
    for client in clients:
        await client.aclose()


MakeClient = Callable[..., Awaitable[EvalClient]]


@pytest.fixture
async def make_client() -> AsyncIterator[MakeClient]:
    """``await make_client(endpoint, auth=None, start=True, **ClientConfig fields)`` -> a
    started EvalClient; closed at teardown."""
    clients: list[EvalClient] = []

    async def make(
        endpoint: str, *, auth: Any = None, start: bool = True, timeout_s: float = 10.0, **cfg: Any
    ) -> EvalClient:
        client = EvalClient(ClientConfig(server=endpoint, **cfg), auth=auth)
        clients.append(client)
        if start:
            await client.start(timeout_s=timeout_s)
        return client

    yield make
    for client in clients:
        await client.aclose()


class RawDealer:
    """A bare asyncio DEALER socket speaking the wire format by hand: msgpack headers, raw
    buffers. Requests are built with ``msgpack`` and numpy only, never with azserve."""

    def __init__(self, sock: zmq.asyncio.Socket) -> None:
        self.sock = sock

    async def send(self, header: dict[str, Any] | bytes, *buffers: bytes) -> None:
        head = header if isinstance(header, bytes) else msgpack.packb(header)
        await self.sock.send_multipart([head, *buffers])

    async def send_frames(self, frames: list[bytes]) -> None:
        await self.sock.send_multipart(frames)

    async def recv_frames(self, timeout_s: float = 5.0) -> list[bytes]:
        return await asyncio.wait_for(self.sock.recv_multipart(), timeout_s)

    async def recv(self, timeout_s: float = 5.0) -> tuple[dict[str, Any], list[np.ndarray]]:
        """The next reply: (header map, arrays decoded from the header's specs)."""
        frames = await self.recv_frames(timeout_s)
        return unpack_reply(frames)

    async def call(
        self, header: dict[str, Any], *buffers: bytes, timeout_s: float = 5.0
    ) -> tuple[dict[str, Any], list[np.ndarray]]:
        """Send one request and return the reply that carries its ``id``."""
        await self.send(header, *buffers)
        while True:
            reply, arrays = await self.recv(timeout_s)
            if reply.get("id") == header.get("id"):
                return reply, arrays


def unpack_reply(frames: list[bytes]) -> tuple[dict[str, Any], list[np.ndarray]]:
    """Decode a reply by the documented rules, with msgpack and numpy only."""
    header = msgpack.unpackb(frames[0], strict_map_key=False)
    specs = header.get("arrays", [])
    assert len(specs) == len(frames) - 1, (header, len(frames))
    arrays = []
    for spec, buf in zip(specs, frames[1:], strict=True):
        dtype = np.dtype(spec["dtype"]).newbyteorder("<")
        assert int(np.prod(spec["shape"])) * dtype.itemsize == len(buf)
        arrays.append(np.frombuffer(buf, dtype).reshape(spec["shape"]))
    return header, arrays


class ZmqSockets:
    """Tracks raw ZeroMQ contexts and sockets; ``close()`` closes every socket with
    ``linger=0`` and terminates every context."""

    def __init__(self) -> None:
        self._ctx: zmq.asyncio.Context | None = None
        self._sockets: list[zmq.Socket] = []

    def socket(self, kind: int = zmq.DEALER) -> zmq.asyncio.Socket:
        if self._ctx is None:
            self._ctx = zmq.asyncio.Context()
        sock = self._ctx.socket(kind)
        sock.setsockopt(zmq.LINGER, 0)
        self._sockets.append(sock)
        return sock

    def dealer(self, endpoint: str) -> RawDealer:
        sock = self.socket(zmq.DEALER)
        sock.connect(endpoint)
        return RawDealer(sock)

    def close(self) -> None:
        for sock in self._sockets:
            with contextlib.suppress(zmq.ZMQError):
                sock.close(linger=0)
        self._sockets.clear()
        if self._ctx is not None:
            self._ctx.term()
            self._ctx = None


@pytest.fixture
async def zmq_sockets() -> AsyncIterator[ZmqSockets]:
    """Raw sockets for the test, closed inside the test's event loop."""
    tracker = ZmqSockets()
    yield tracker
    tracker.close()


class GatedBackend(TorchBackend):
    """The torch backend with gates: each batch signals ``entered`` and waits for ``gate``
    (closed unless ``hold_infer`` is false); each weight load signals ``load_entered`` and waits
    for ``load_gate`` (open; a test clears it to hold loads). Lets a test keep a batch in flight
    while it closes the server, or a load in progress while it sends a duplicate."""

    def __init__(self, hold_infer: bool = True) -> None:
        super().__init__(NET, BackendConfig(device="cpu", torch=TorchConfig(compile="none")))
        self.gate, self.entered = asyncio.Event(), asyncio.Event()
        self.load_gate, self.load_entered = asyncio.Event(), asyncio.Event()
        self.load_gate.set()
        if not hold_infer:
            self.gate.set()
        self.batches: list[tuple[int, int]] = []
        """(version, rows) of every batch, in order."""

    async def infer(self, version: int, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        self.batches.append((version, obs.shape[0]))
        self.entered.set()
        await self.gate.wait()
        return await super().infer(version, obs)

    async def load(self, version: int, blob: bytes) -> None:
        self.load_entered.set()
        await self.load_gate.wait()
        await super().load(version, blob)


def eval_header(rid: int, obs: np.ndarray, **fields: Any) -> dict[str, Any]:
    """A hand-built eval request header for ``obs`` (override any field)."""
    header = {
        "op": "eval",
        "id": rid,
        "proto": 1,
        "model": "default",
        "version": -1,
        "arrays": [{"dtype": obs.dtype.name, "shape": list(obs.shape)}],
    }
    header.update(fields)
    return header


async def wait_for(predicate: Callable[[], bool], timeout_s: float = 10.0) -> None:
    """Poll ``predicate`` every few ms until it holds; fail the test after ``timeout_s``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not predicate():
        if loop.time() > deadline:
            raise AssertionError(f"condition not met in {timeout_s} s")
        await asyncio.sleep(0.005)


@pytest.fixture(autouse=True)
def one_cluster_test_at_a_time(request: pytest.FixtureRequest) -> Iterator[None]:
    """A ``cluster`` test holds a machine-wide lock while it runs: under pytest-xdist (``make
    test`` runs two workers) two of them would share the network namespaces' addresses, Ray's
    and Slurm's daemons, and the process names they look for. Taken before the test's other
    function fixtures (an autouse fixture comes first in its scope)."""
    if request.node.get_closest_marker("cluster") is None:
        yield
        return
    with open(Path(tempfile.gettempdir()) / "azserve-cluster-tests.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


LOCK_WAIT_S = 600
"""What a ``cluster`` test's timeout grows by: the longest wait for the lock above, while the
other worker runs the other cluster tests (about 250 s together here), with room to spare."""


FIRST = (
    "test_chaos", "test_cluster_ray_netns", "test_cluster_slurm", "test_cluster_ranks",
    "test_cluster_ray", "test_cluster_launch", "test_soak", "test_first_hour_readme",
    "test_ladder", "test_openspiel_rules", "test_train", "test_learner_ranks",
    "test_sparse_trajectories", "test_fault_processes", "test_first_hour_wheel", "test_web",
    "test_compiled_gumbel", "test_bench", "test_shogi_train", "test_faults", "test_tune",
    "test_game_in_one_file",
)  # fmt: skip
"""Modules whose tests take longest (the slowest 30 of a clean clone's ``make test``), longest
first: they start first, so that the two workers do not end on one long test each in turn
(longest first is the classic bound on a schedule's makespan). The cluster modules lead: their
group is one unit of ~400 s on one worker."""


def _longest_first(items: list[pytest.Item]) -> None:
    """Sort ``items`` by ``FIRST`` (the rest after, as collected), module by module, so that a
    module's tests stay together and its module fixtures are made once per worker."""
    rank = {name: i for i, name in enumerate(FIRST)}
    items.sort(key=lambda item: rank.get(Path(str(item.fspath)).stem, len(FIRST)))


@pytest.hookimpl(tryfirst=True)  # before xdist's, which reads the xdist_group marks added here
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A cluster test's own timeout (its marker, else the ini's) plus ``LOCK_WAIT_S``: pytest-
    timeout counts the fixture that waits for the lock, and a test should fail by name for its
    own hang, not for the queue (``-m cluster`` alone on two workers queued one for 120 s).
    And the longest modules first (``FIRST``)."""
    _longest_first(items)
    default = float(config.getini("timeout") or 0)
    for item in items:
        if item.get_closest_marker("cluster") is None:
            continue
        # One worker takes them all in turn (make test's ``--dist loadgroup``) while the other
        # runs the rest: under plain ``load`` a worker could sit idle on the lock above.
        item.add_marker(pytest.mark.xdist_group("cluster"))
        own = item.get_closest_marker("timeout")
        seconds = float(own.args[0]) if own is not None and own.args else default
        if seconds:
            item.add_marker(pytest.mark.timeout(seconds + LOCK_WAIT_S), append=False)


def pytest_sessionstart(session: pytest.Session) -> None:
    """``make test`` sets AZSERVE_REQUIRE_COMPILED=1: the compiled MCTS tests must run, not be
    skipped because the optional C extension failed to build or is stale."""
    if os.environ.get("AZSERVE_REQUIRE_COMPILED") == "1":
        from actors.games import compiled

        if compiled._mcts_core is None:
            raise pytest.UsageError(
                "AZSERVE_REQUIRE_COMPILED=1 but the compiled MCTS core is unavailable: "
                f"{compiled._UNAVAILABLE}"
            )


def load_script(name: str) -> Any:
    """``scripts/<name>.py`` as a module (the scripts are not a package), registered in
    ``sys.modules`` so that its dataclasses resolve their module."""
    import sys

    path = Path(__file__).resolve().parents[1] / "scripts" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader, path
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


QUICK_TRAIN_SETS = (
    "trainer.publish_every=10",
    "trainer.batch_size=64",
    "eval.match_games=2",
    "eval.match_sims=4",
    "train.eval_every_s=0",
    "server.metrics_port=0",
    "learner.metrics_port=0",
    "actors.metrics_port=0",
)
"""A short `azserve train` for tests: small batches, frequent versions, a token evaluation,
no metrics ports."""


def quick_train_argv(config: str, run_dir: Path, *sets: str) -> list[str]:
    """``azserve train --config CONFIG --run-dir RUN_DIR --no-progress`` with
    ``QUICK_TRAIN_SETS`` and ``sets`` (later ones win); budgets are the caller's to add."""
    script = Path(sys.executable).with_name("azserve")
    head = [str(script)] if script.exists() else [sys.executable, "-m", "azserve.cli.main"]
    argv = [*head, "train", "--config", config, "--run-dir", str(run_dir), "--no-progress"]
    return argv + [a for s in (*QUICK_TRAIN_SETS, *sets) for a in ("--set", s)]


def run_metrics(run_dir: Path) -> list[dict[str, Any]]:
    """The learner's metrics rows of a run so far (none before the first; a torn last line,
    being written, is skipped)."""
    path = run_dir / "metrics.jsonl"
    rows = []
    for line in path.read_text().splitlines() if path.exists() else []:
        with contextlib.suppress(json.JSONDecodeError):
            rows.append(json.loads(line))
    return rows
