"""A trained agent in-process: network + MCTS, for analysis, play, matches and the ladder.

The network runs on the same ``Backend`` as the inference server (``backend.*`` of the
checkpoint's config: compiled, bf16 where the hardware has it natively, the same batch
buckets), so evaluation runs at self-play's speed, and a new backend serves both.
``BatchedEvaluator`` gives MCTS the coalescing the EvalClient gives actors, without a
server: every leaf pending in one event-loop tick goes to the backend in one batch, so
thousands of concurrent searches run at batched speed. ``ServedNet`` keeps one started
backend per net shape and backend config in a process; each agent's weights are a version on
it, so its compiled graphs are made once and shared, as the server shares them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Coroutine, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import numpy as np
import torch

from actors.games import Game, State, make_game
from actors.search import PLAY_ALGORITHM, MCTSConfig, Proof, SearchResult
from actors.searches import make_search
from azserve.backends import make_backend
from azserve.backends.base import Backend, BackendConfig, TorchConfig
from azserve.batching import TickCoalescer
from azserve.config.load import apply_overrides, from_dict
from azserve.config.presets import resolve_config
from azserve.config.schema import Config, load_config
from azserve.errors import ConfigError, WeightsError
from azserve.model.network import build_net
from azserve.model.spec import NetConfig
from azserve.model.weights import load_weights_file, state_dict_to_bytes
from learner.checkpoint import load_checkpoint

T = TypeVar("T")

EAGER = BackendConfig(
    kind="torch", device="cpu", dtype="float32", threads=0, torch=TorchConfig(compile="none")
)
"""The backend of an Agent built without one (tests, tiny nets): eager fp32 on the CPU with
torch's own thread count."""


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine to its end from synchronous code: on a fresh event loop, or on a
    helper thread's when this thread already runs one."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with ThreadPoolExecutor(1, thread_name_prefix="azserve-run-sync") as pool:
        return pool.submit(asyncio.run, coro).result()


@contextlib.contextmanager
def _quiet_backend() -> Iterator[None]:
    """The backend's start and warm-up lines (the server operator's) kept off the stderr of
    the tools that run an agent (a GTP console, ``eval``'s one line); warnings still show."""
    logger = logging.getLogger("azserve.backends")
    level = logger.level
    logger.setLevel(max(level, logging.WARNING))
    try:
        yield
    finally:
        logger.setLevel(level)


class ServedNet:
    """A started ``Backend`` for one net shape and backend config, shared by every agent of
    this process that has them; each agent's weights are a version on it."""

    _all: ClassVar[dict[tuple[NetConfig, BackendConfig], ServedNet]] = {}
    _lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, net: NetConfig, cfg: BackendConfig) -> None:
        self.backend: Backend = make_backend(net, cfg)
        with _quiet_backend():
            run_sync(self.backend.start())
        self._next = 0
        self._versions_lock = threading.Lock()

    @classmethod
    def shared(cls, net: NetConfig, cfg: BackendConfig) -> ServedNet:
        with cls._lock:
            key = (net, cfg)
            if key not in cls._all:
                cls._all[key] = ServedNet(net, cfg)
            return cls._all[key]

    def load(self, state: dict[str, torch.Tensor]) -> int:
        """A new version serving ``state`` (the first compiles the backend's graphs)."""
        with self._versions_lock:
            version = self._next
            self._next += 1
        with _quiet_backend():
            run_sync(self.backend.load(version, state_dict_to_bytes(state)))
        return version

    def unload(self, version: int) -> None:
        run_sync(self.backend.unload(version))


class BatchedEvaluator:
    """``await evaluate(obs [C,H,W] uint8) -> (logits [A], value)``, batched per loop tick
    and run on a ``ServedNet``'s backend as one version."""

    def __init__(self, net: ServedNet, version: int, max_batch: int = 1024) -> None:
        self.net = net
        self.version = version
        self.max_batch = max_batch
        self._tick: TickCoalescer[None, tuple[np.ndarray, asyncio.Future[Any]]] = TickCoalescer(
            self._flush
        )
        self._tasks: set[asyncio.Task[None]] = set()
        self.evaluations = 0

    def __call__(self, obs: np.ndarray) -> asyncio.Future[Any]:
        fut = asyncio.get_running_loop().create_future()
        self._tick.add(None, (obs, fut))
        return fut

    def _flush(self, groups: dict[None, list[tuple[np.ndarray, asyncio.Future[Any]]]]) -> None:
        pending = groups[None]
        for i in range(0, len(pending), self.max_batch):
            task = asyncio.ensure_future(self._run(pending[i : i + self.max_batch]))
            self._tasks.add(task)  # held until done: the loop keeps only weak references
            task.add_done_callback(self._tasks.discard)

    async def _run(self, chunk: list[tuple[np.ndarray, asyncio.Future[Any]]]) -> None:
        try:
            logits, values = await self.infer_async(np.stack([o for o, _ in chunk]))
        except Exception as exc:  # every waiting search hears of it
            for _, fut in chunk:
                if not fut.done():
                    fut.set_exception(exc)
            return
        for (_, fut), lg, v in zip(chunk, logits, values):
            if not fut.done():
                fut.set_result((lg, float(v)))

    async def infer_async(self, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """obs uint8 ``[B,C,H,W]`` -> (logits ``[B,A]``, values ``[B]``)."""
        self.evaluations += len(obs)
        return await self.net.backend.infer(self.version, np.ascontiguousarray(obs))

    def infer(self, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``infer_async`` from synchronous code."""
        return run_sync(self.infer_async(obs))


@dataclass(frozen=True)
class Analysis:
    """One position's analysis. policy float32 ``[A]`` (masked softmax of the raw network),
    value for the side to move, the chosen move, and visits int ``[A]`` when sims > 0."""

    policy: np.ndarray
    value: float
    move: int
    visits: np.ndarray | None
    proof: Proof | None = None
    """With ``mcts.solver`` and sims > 0: what the search proved at the root (per action,
    ``[A]``); the move is then the proof's (``PuctMoves.choose``'s rule)."""


class Agent:
    """Network + search over one game."""

    def __init__(
        self,
        game: Game,
        net: NetConfig,
        state: dict[str, torch.Tensor] | None,
        mcts: MCTSConfig,
        seed: int = 0,
        backend: BackendConfig | None = None,
    ) -> None:
        """``state`` None: the net's seeded initial weights. ``backend`` None: eager fp32
        (``EAGER``); a checkpoint's agent (``agent_from_checkpoint``) runs on its config's."""
        self.game = game
        if state is None:
            state = build_net(net, seed=seed).state_dict()
        # The backend loads ``state`` strictly (WeightsError naming what differs).
        self.served = ServedNet.shared(net, backend or EAGER)
        self.evaluator = BatchedEvaluator(self.served, self.served.load(state))
        # Analysis is deterministic: no noise, no temperature, no resignation; every search
        # is a full one (playout caps are a self-play setting).
        self.mcts_cfg = replace(
            mcts,
            temperature=0.0,
            temperature_moves=0,
            resign_threshold=-2.0,
            dirichlet_fraction=0.0,
            full_search_fraction=1.0,
        )
        self.seed = seed

    def close(self) -> None:
        """Release this agent's weights on the shared backend."""
        self.served.unload(self.evaluator.version)

    def policy_value(self, states: list[State]) -> tuple[np.ndarray, np.ndarray]:
        """Raw network: masked-softmax policy ``[N,A]`` and values ``[N]`` for the side to move."""
        return run_sync(self.policy_value_async(states))

    async def policy_value_async(self, states: list[State]) -> tuple[np.ndarray, np.ndarray]:
        if not states:
            return np.zeros((0, self.game.num_actions), np.float32), np.zeros(0, np.float32)
        logits, values = await self.evaluator.infer_async(self.game.encode_batch(states))
        masks = np.stack([self.game.legal_mask(s) for s in states])
        logits = np.where(masks, logits, -np.inf)
        logits = logits - logits.max(axis=1, keepdims=True)
        p = np.exp(logits)
        return (p / p.sum(axis=1, keepdims=True)).astype(np.float32), values.astype(np.float32)

    async def analyze(self, states: list[State], sims: int) -> list[Analysis]:
        """Analyse many positions at once (their searches share batches)."""
        policy, values = await self.policy_value_async(states)
        if sims <= 0:
            return [Analysis(p, float(v), int(np.argmax(p)), None) for p, v in zip(policy, values)]
        cfg = replace(self.mcts_cfg, num_simulations=sims, algorithm=PLAY_ALGORITHM)

        async def one(i: int, s: State) -> SearchResult:
            mcts = make_search(self.game, cfg, np.random.default_rng([self.seed, i]))
            return await mcts.search(s, self.evaluator, add_noise=False)

        results = await asyncio.gather(*(one(i, s) for i, s in enumerate(states)))
        out = []
        for p, v, r, s in zip(policy, values, results, states):
            n, proof = r.visits, r.proof
            # Most visited; ties go to the higher prior (a stable, legal choice). With the
            # solver: a proven win's or loss's own move, else never a proven loss.
            forced = -1 if proof is None else proof.forced()
            weights = n if proof is None else proof.allowed(n, r.root_prior)
            best = np.flatnonzero(weights == weights.max())
            move = forced if forced >= 0 else int(best[np.argmax(p[best])])
            assert self.game.legal_mask(s)[move]
            out.append(Analysis(p, float(v), move, n, proof))
        return out

    def analyze_sync(self, states: list[State], sims: int) -> list[Analysis]:
        return run_sync(self.analyze(states, sims))


def agent_from_checkpoint(
    path: str,
    config_path: str | None = None,
    overrides: Sequence[str] = (),
    game: str | None = None,  # type: ignore[assignment]
) -> tuple[Config, Agent]:
    """(Config, Agent) for a checkpoint. A learner checkpoint carries its config; plain weights
    need ``config_path`` or ``game`` (then the shipped config of that game is used). The
    agent plays the checkpoint's own game, which may encode ``game``'s rules otherwise."""
    if not Path(path).is_file():  # else the fallback below would blame a missing config
        raise WeightsError(f"checkpoint not found: {path}")
    try:
        data = load_checkpoint(path).meta.config
    except WeightsError:
        data = None  # plain safetensors weights: no config inside
    if config_path or data is None:
        if not config_path and game is None:
            raise ConfigError(f"{path} carries no config: pass --config or --game")
        # A config file leaves the net's shape to its game: load_config fills it in.
        cfg = load_config(config_path or resolve_config(str(game)), list(overrides))
    else:
        cfg = from_dict(Config, apply_overrides(data, list(overrides)), "")
    if game is not None and game != cfg.game and make_game(game).rules != make_game(cfg.game).rules:
        # Another encoding of the same rules (go9-features for go9) plays the same games.
        raise ConfigError(f"--game {game}: the checkpoint plays {cfg.game}")
    state = load_weights_file(path)
    return cfg, Agent(
        make_game(cfg.game), cfg.net, state, analysis_mcts(cfg), backend=eval_backend(cfg)
    )


def eval_backend(cfg: Config) -> BackendConfig:
    """The run's backend with ``eval.compile`` (``backend``: unchanged): how evaluation,
    analysis and the engines run the net (an engine's net compiled took 49 s before ``readyok``
    for shogi's 4x64 net, for no gain at one position at a time)."""
    if cfg.eval.compile == "backend":
        return cfg.backend
    return replace(cfg.backend, torch=replace(cfg.backend.torch, compile=cfg.eval.compile))


def analysis_mcts(cfg: Config) -> MCTSConfig:
    """The search settings for analysis and evaluation: the ``mcts`` section with the ``eval``
    section's overrides (the Agent then drops noise, temperature and resignation)."""
    changes = {
        key: getattr(cfg.eval, key)
        for key in ("c_puct", "fpu_reduction")
        if getattr(cfg.eval, key) is not None
    }
    return replace(cfg.mcts, **changes)


def identity(path: str, game: str) -> str:
    """The ``version`` of a checkpoint: the package's, the game, the training step (when the
    file is a learner checkpoint) and the first 8 hex digits of a SHA-256 over its weights."""
    import hashlib

    import torch

    from azserve.config.argtypes import package_version
    from azserve.errors import WeightsError
    from azserve.model.weights import load_weights_file
    from learner.checkpoint import load_checkpoint

    digest = hashlib.sha256()
    for key, tensor in sorted(load_weights_file(path).items()):
        digest.update(key.encode())
        flat = tensor.detach().cpu().contiguous().reshape(-1)
        digest.update(flat.view(torch.uint8).numpy().tobytes())
    try:
        step = f"-step{load_checkpoint(path).meta.step}"
    except WeightsError:
        step = ""  # plain weights: no step
    return f"{package_version()}-{game}{step}-w{digest.hexdigest()[:8]}"
