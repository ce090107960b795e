"""configs/shogi.toml trains: its own net takes one step on shogi positions in process, and
(slow) ``azserve train --config shogi`` runs end to end for a few steps, real processes: the
actors play shogi on the compiled core, ask for sparse replies (11,259 actions) and send sparse
policies, the learner journals them sparse and trains on them (the config shrunk)."""

from __future__ import annotations

import json
import random
import subprocess
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from actors.games.compiled import core
from actors.main import SUMMARY_TAG
from azserve.config.schema import load_config
from azserve.sparse import SparseRows
from learner.checkpoint import latest_checkpoint, load_checkpoint
from learner.journal import Journal
from learner.replay import Batch
from learner.trainer import Trainer
from tests.conftest import free_tcp_port, quick_train_argv

A = 11_259
REPO = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(core is None, reason="shogi needs the compiled core")
@pytest.mark.usefixtures("torch_one_thread")
def test_the_configs_net_trains_a_step_on_shogi_positions() -> None:
    from actors.games import make_game

    cfg = load_config(REPO / "configs" / "shogi.toml")
    game = make_game(cfg.game)
    assert cfg.net.obs_shape == game.obs_shape == (92, 9, 9) and cfg.net.num_actions == A
    rng = random.Random(0)
    s, obs, policy, outcome, material = game.initial_state(), [], [], [], []
    while len(obs) < 16:  # positions of a random game, uniform targets over the legal moves
        legal = game.legal_actions(s)
        row = np.zeros(A, np.float32)
        row[legal] = 1.0 / len(legal)
        obs.append(game.encode(s))
        policy.append(row)
        outcome.append(1.0 if len(obs) % 2 else -1.0)
        material.append(game.material_balance(s))
        s = game.apply(s, rng.choice(legal))
    # The config trains the material heads: each position's own balance stands in for both.
    assert cfg.net.value_head == "wdl" and set(cfg.net.heads) == {"score", "material_ahead"}
    balance = np.array(material, np.float32)
    every = np.ones(len(obs), bool)
    targets = {"score": balance, "material_ahead": balance}
    trainer = Trainer(replace(cfg.net, seed=1), replace(cfg.trainer, device="cpu", amp="none"))
    before = [p.detach().clone() for p in trainer.model.parameters()]
    n = len(obs)
    out = trainer.step(
        Batch(
            np.stack(obs),
            np.stack(policy),
            np.array(outcome, np.float32),
            np.zeros(n, np.int64),
            targets,
            {k: every for k in targets},
        )
    )
    assert np.isfinite(out["loss"]) and out["step"] == 1
    after = list(trainer.model.parameters())
    assert any(not np.allclose(b.numpy(), a.detach().numpy()) for b, a in zip(before, after))


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.skipif(core is None, reason="shogi needs the compiled core")
def test_shogi_selfplay_and_learner_train_sparse(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    sets = (
        "game=shogi(max_plies=24,history=1)",
        "net.blocks=1",
        "net.channels=16",
        "net.policy_channels=2",
        "actors.games=16",
        "mcts.num_simulations=4",
        "mcts.num_sampled_actions=4",
        "replay.min_size=64",
        "trainer.batch_size=32",
        "trainer.publish_every=1",
        "backend.torch.compile=none",
        "learner.journal_keep_all=true",
        f"server.bind=tcp://127.0.0.1:{free_tcp_port()}",
        f"learner.bind=tcp://127.0.0.1:{free_tcp_port()}",
    )
    argv = [*quick_train_argv("shogi", run_dir, *sets), "--steps", "3"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=540)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    ckpt = latest_checkpoint(run_dir / "checkpoints")
    assert ckpt is not None and load_checkpoint(ckpt).meta.step >= 3
    records = [r for _, r in Journal(run_dir / "journal").read()]
    assert records
    for msg, obs, policy, outcome, _targets in records:
        assert msg.game.startswith("shogi") and obs.shape[1:] == (92, 9, 9)
        assert msg.sparse is True and isinstance(policy, SparseRows)
        assert policy.problem(len(outcome), A) is None
        assert policy.counts().min() >= 1 and policy.counts().max() <= 593
        np.testing.assert_allclose(policy.dense(A).sum(axis=1), 1.0, atol=2e-2)
    log = (run_dir / "logs" / "actor-0.log").read_text()
    summary = json.loads(log.split(SUMMARY_TAG, 1)[1].splitlines()[0])
    assert summary["evals"]["messages"] > 0
    assert summary["evals"]["sparse"] == summary["evals"]["messages"]
