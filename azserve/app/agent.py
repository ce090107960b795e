"""A trained agent in-process: network + MCTS, for analysis, play and evaluation.

``LocalEvaluator`` gives MCTS the same coalescing the EvalClient gives actors, without a
server: every leaf pending in one event-loop tick goes through the network in one batch, so
thousands of concurrent searches run at batched speed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from actors.games import Game, State, make_game
from actors.search import MCTSConfig
from actors.searches import make_search
from azserve.app.config import apply_overrides, from_dict
from azserve.app.presets import resolve_config
from azserve.app.schema import Config, load_config
from azserve.batching import TickCoalescer
from azserve.errors import ConfigError, WeightsError
from azserve.model.network import build_net
from azserve.model.spec import NetConfig
from azserve.model.weights import load_strict, load_weights_file
from learner.checkpoint import load_checkpoint


class LocalEvaluator:
    """``await evaluate(obs [C,H,W] uint8) -> (logits [A], value)`` batched per loop tick."""

    def __init__(self, model: torch.nn.Module, max_batch: int = 1024) -> None:
        self.model = model.eval()
        self.max_batch = max_batch
        self._tick: TickCoalescer[None, tuple[np.ndarray, asyncio.Future[Any]]] = TickCoalescer(
            self._flush
        )
        self.evaluations = 0

    def __call__(self, obs: np.ndarray) -> asyncio.Future[Any]:
        fut = asyncio.get_running_loop().create_future()
        self._tick.add(None, (obs, fut))
        return fut

    def _flush(self, groups: dict[None, list[tuple[np.ndarray, asyncio.Future[Any]]]]) -> None:
        pending = groups[None]
        for i in range(0, len(pending), self.max_batch):
            chunk = pending[i : i + self.max_batch]
            logits, values = self.infer(np.stack([o for o, _ in chunk]))
            for (_, fut), lg, v in zip(chunk, logits, values):
                if not fut.done():
                    fut.set_result((lg, float(v)))

    def infer(self, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """obs uint8 ``[B,C,H,W]`` -> (logits ``[B,A]``, values ``[B]``)."""
        self.evaluations += len(obs)
        with torch.inference_mode():
            logits, values = self.model(torch.from_numpy(np.ascontiguousarray(obs)).float())
        return logits.numpy(), values.numpy()


@dataclass(frozen=True)
class Analysis:
    """One position's analysis. policy float32 ``[A]`` (masked softmax of the raw network),
    value for the side to move, the chosen move, and visits int ``[A]`` when sims > 0."""

    policy: np.ndarray
    value: float
    move: int
    visits: np.ndarray | None


class Agent:
    """Network + search over one game."""

    def __init__(
        self,
        game: Game,
        net: NetConfig,
        state: dict[str, torch.Tensor] | None,
        mcts: MCTSConfig,
        seed: int = 0,
    ) -> None:
        self.game = game
        model = build_net(net, seed=seed)
        if state is not None:
            load_strict(model, state, "checkpoint weights")
        self.evaluator = LocalEvaluator(model)
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

    def policy_value(self, states: list[State]) -> tuple[np.ndarray, np.ndarray]:
        """Raw network: masked-softmax policy ``[N,A]`` and values ``[N]`` for the side to move."""
        if not states:
            return np.zeros((0, self.game.num_actions), np.float32), np.zeros(0, np.float32)
        logits, values = self.evaluator.infer(self.game.encode_batch(states))
        masks = np.stack([self.game.legal_mask(s) for s in states])
        logits = np.where(masks, logits, -np.inf)
        logits = logits - logits.max(axis=1, keepdims=True)
        p = np.exp(logits)
        return (p / p.sum(axis=1, keepdims=True)).astype(np.float32), values.astype(np.float32)

    async def analyze(self, states: list[State], sims: int) -> list[Analysis]:
        """Analyse many positions at once (their searches share batches)."""
        policy, values = self.policy_value(states)
        if sims <= 0:
            return [Analysis(p, float(v), int(np.argmax(p)), None) for p, v in zip(policy, values)]
        # PUCT whatever self-play used: analysis reads the root's visit counts.
        cfg = replace(self.mcts_cfg, num_simulations=sims, algorithm="puct")

        async def one(i: int, s: State) -> np.ndarray:
            mcts = make_search(self.game, cfg, np.random.default_rng([self.seed, i]))
            return (await mcts.search(s, self.evaluator, add_noise=False)).visits

        visits = await asyncio.gather(*(one(i, s) for i, s in enumerate(states)))
        out = []
        for p, v, n, s in zip(policy, values, visits, states):
            # Most visited; ties go to the higher prior (a stable, legal choice).
            best = np.flatnonzero(n == n.max())
            move = int(best[np.argmax(p[best])])
            assert self.game.legal_mask(s)[move]
            out.append(Analysis(p, float(v), move, n))
        return out

    def analyze_sync(self, states: list[State], sims: int) -> list[Analysis]:
        return asyncio.run(self.analyze(states, sims))


def agent_from_checkpoint(
    path: str,
    config_path: str | None = None,
    overrides: Sequence[str] = (),
    game: str | None = None,  # type: ignore[assignment]
) -> tuple[Config, Agent]:
    """(Config, Agent) for a checkpoint. A learner checkpoint carries its config; plain weights
    need ``config_path`` or ``game`` (then the shipped config of that game is used)."""
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
    if game is not None and game != cfg.game:
        raise ConfigError(f"--game {game}: the checkpoint plays {cfg.game}")
    state = load_weights_file(path)
    return cfg, Agent(make_game(cfg.game), cfg.net, state, analysis_mcts(cfg))


def analysis_mcts(cfg: Config) -> MCTSConfig:
    """The search settings for analysis and evaluation: the ``mcts`` section with the ``eval``
    section's overrides (the Agent then drops noise, temperature and resignation)."""
    changes = {
        key: getattr(cfg.eval, key)
        for key in ("c_puct", "fpu_reduction")
        if getattr(cfg.eval, key) is not None
    }
    return replace(cfg.mcts, **changes)
