"""Checkpoints: safetensors layout, atomic writes, retention, and exact resume from a file."""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

import numpy as np
import pytest
import torch

import azserve.files
import azserve.model.weights
from azserve.errors import WeightsError
from azserve.model.spec import NetConfig
from azserve.model.weights import load_weights_file
from learner.checkpoint import (
    latest_checkpoint,
    list_checkpoints,
    load_checkpoint,
    save_checkpoint,
)
from learner.config import TrainerConfig
from learner.replay import Batch
from learner.trainer import Trainer

pytestmark = pytest.mark.usefixtures("torch_one_thread")

NET = NetConfig(in_channels=2, height=3, width=3, num_actions=9, blocks=1, channels=8)
CONFIG = {"trainer": {"lr": 0.01}, "game": "tictactoe"}


def batch(seed: int, n: int = 16) -> Batch:
    rng = np.random.default_rng(seed)
    obs = rng.integers(0, 2, size=(n, *NET.obs_shape), dtype=np.uint8)
    policy = rng.dirichlet(np.ones(NET.num_actions), size=n).astype(np.float32)
    outcome = rng.choice([-1.0, 1.0], size=n).astype(np.float32)
    return Batch(obs, policy, outcome, np.zeros(n, np.int64))


def trainer(optimizer: str = "sgd") -> Trainer:
    cfg = TrainerConfig(
        batch_size=16,
        device="cpu",
        optimizer=optimizer,
        lr=0.01,
        lr_schedule="step",
        lr_milestones=(4,),
        lr_gamma=0.5,
    )  # type: ignore[arg-type]
    return Trainer(NET, cfg)


def save(d: Path, t: Trainer, version: int = 1, **kw: int) -> Path:
    return save_checkpoint(d, t.step_count, version, t.state_dict(), CONFIG, **kw)


def test_layout_is_plain_safetensors_loadable_by_the_server(tmp_path: Path) -> None:
    t = trainer()
    t.step(batch(0))
    path = save(tmp_path, t)
    assert path.name == "ckpt-000000001.safetensors"
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])  # safetensors: u64 header length + JSON, no pickle
    meta = header.pop("__metadata__")
    assert meta["format"] == "azserve.checkpoint/1" and (meta["step"], meta["version"]) == (
        "1",
        "1",
    )
    assert json.loads(meta["config"]) == CONFIG
    assert {k.split(".")[0] for k in header} == {"model", "optim", "rng"}
    assert "optim.state.0.momentum_buffer" in header
    weights = load_weights_file(path)  # what `azserve serve --checkpoint` reads
    assert weights.keys() == t.model.state_dict().keys()
    for k, v in t.model.state_dict().items():
        assert torch.equal(weights[k], v), k


def test_round_trip(tmp_path: Path) -> None:
    t = trainer("adamw")
    t.step(batch(0))
    path = save(tmp_path, t)
    model, optim, meta = load_checkpoint(path)
    assert (meta.step, meta.version, meta.config) == (1, 1, CONFIG)
    assert meta.extra["step"] == 1 and meta.extra["rng"]["numpy"].dtype == torch.uint8
    ref = t.optimizer.state_dict()
    assert optim["param_groups"] == ref["param_groups"]  # tuples (betas) and ints survive
    assert optim["state"].keys() == ref["state"].keys()  # integer parameter ids survive
    for pid, st in ref["state"].items():
        for k, v in st.items():
            assert torch.equal(optim["state"][pid][k], v), (pid, k)
    assert model.keys() == t.model.state_dict().keys()


@pytest.mark.parametrize("optimizer", ["sgd", "adamw"])
def test_resume_from_file_continues_exactly(tmp_path: Path, optimizer: str) -> None:
    """N steps straight == k steps, checkpoint, fresh trainer from the file, N - k more."""
    batches = [batch(i) for i in range(7)]
    straight = trainer(optimizer)
    for b in batches:
        straight.step(b)

    first = trainer(optimizer)
    for b in batches[:3]:
        first.step(b)
    path = save(tmp_path, first)
    del first
    resumed = trainer(optimizer)
    ckpt = load_checkpoint(path)
    resumed.load_state_dict(ckpt.trainer_state())
    assert (resumed.step_count, ckpt.meta.version) == (3, 1)
    for b in batches[3:]:
        resumed.step(b)  # crosses the lr milestone at step 4

    for (name, x), y in zip(
        straight.model.state_dict().items(), resumed.model.state_dict().values(), strict=True
    ):
        assert torch.equal(x, y), name
    assert (
        resumed.optimizer.param_groups[0]["lr"] == straight.optimizer.param_groups[0]["lr"] == 0.005
    )


def test_failed_write_leaves_no_partial_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    t = trainer()
    good = save(tmp_path, t)
    t.step(batch(0))

    def boom(src: str, dst: str) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(azserve.files.os, "replace", boom)
    with pytest.raises(OSError, match="disk full"):
        save(tmp_path, t)
    monkeypatch.undo()
    assert sorted(os.listdir(tmp_path)) == [good.name]  # no temp file, no ckpt-1
    assert latest_checkpoint(tmp_path) == good
    assert load_checkpoint(good).meta.step == 0


def test_retention_keeps_last_n_and_every_mth(tmp_path: Path) -> None:
    t = trainer()
    state = t.state_dict()
    for step in range(1, 11):
        save_checkpoint(tmp_path, step, step, state, CONFIG, keep_last=2, keep_every=4)
    assert [s for s, _ in list_checkpoints(tmp_path)] == [4, 8, 9, 10]
    assert latest_checkpoint(tmp_path) == tmp_path / "ckpt-000000010.safetensors"


def test_latest_ignores_other_files_and_handles_empty(tmp_path: Path) -> None:
    assert latest_checkpoint(tmp_path / "missing") is None
    (tmp_path / "notes.txt").write_text("x")
    (tmp_path / ".ckpt-000000009.safetensors.tmp123").write_bytes(b"partial")
    assert latest_checkpoint(tmp_path) is None


def test_corrupt_or_foreign_files_raise_weights_error(tmp_path: Path) -> None:
    bad = tmp_path / "ckpt-000000001.safetensors"
    bad.write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00garbage!")
    with pytest.raises(WeightsError, match="cannot read"):
        load_checkpoint(bad)
    plain = tmp_path / "weights.safetensors"
    plain.write_bytes(azserve.model.weights.state_dict_to_bytes({"w": torch.zeros(2)}))
    with pytest.raises(WeightsError, match="not an azserve checkpoint"):
        load_checkpoint(plain)
