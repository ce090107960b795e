"""Trainer: schedules, a step that learns, and exact resume from an in-memory state."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch

from azserve.errors import ConfigError
from azserve.model.spec import NetConfig
from learner.config import TrainerConfig
from learner.replay import Batch
from learner.trainer import Trainer, lr_at
from learner.versions import VersionCounter

pytestmark = pytest.mark.usefixtures("torch_one_thread")

NET = NetConfig(in_channels=2, height=3, width=3, num_actions=9, blocks=1, channels=8)


def fixed_batch(seed: int, n: int = 32) -> Batch:
    rng = np.random.default_rng(seed)
    obs = rng.integers(0, 2, size=(n, *NET.obs_shape), dtype=np.uint8)
    policy = rng.dirichlet(np.ones(NET.num_actions), size=n).astype(np.float32)
    outcome = rng.choice([-1.0, 0.0, 1.0], size=n).astype(np.float32)
    return Batch(obs, policy, outcome, np.zeros(n, np.int64))


def mirror(obs: np.ndarray, policy: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """Identity and a left-right mirror of the 3x3 board (actions are row-major cells)."""
    p = policy.reshape(-1, 3, 3)[:, :, ::-1].reshape(-1, 9)
    return [(obs, policy), (obs[..., ::-1].copy(), p.copy())]


def cfg(**kw: object) -> TrainerConfig:
    return TrainerConfig(**{"batch_size": 32, "device": "cpu", "lr": 0.05, **kw})  # type: ignore[arg-type]


def test_lr_schedules() -> None:
    c = cfg(lr=1.0, warmup_steps=4)
    assert [lr_at(c, s) for s in range(6)] == [0.25, 0.5, 0.75, 1.0, 1.0, 1.0]
    c = cfg(lr=1.0, lr_schedule="cosine", total_steps=10, lr_final_ratio=0.1)
    assert lr_at(c, 0) == 1.0
    assert lr_at(c, 5) == pytest.approx(0.1 + 0.9 * 0.5)
    assert lr_at(c, 10) == pytest.approx(0.1) and lr_at(c, 50) == pytest.approx(0.1)
    c = cfg(lr=1.0, lr_schedule="step", lr_milestones=(3, 6), lr_gamma=0.5)
    assert [lr_at(c, s) for s in (0, 2, 3, 5, 6, 100)] == [1.0, 1.0, 0.5, 0.5, 0.25, 0.25]


def test_run_schedule_anneals_by_the_clock_over_the_budgets_end() -> None:
    # A 100 s budget from t=1000, annealing over its last quarter: constant to t=1075, then a
    # cosine to lr_final_ratio at t=1100, held there after; warmup still comes first.
    c = cfg(
        lr=1.0,
        lr_schedule="run",
        lr_anneal_fraction=0.25,
        lr_final_ratio=0.1,
        run_start_unix=1000.0,
        run_end_unix=1100.0,
        warmup_steps=2,
    )
    assert lr_at(c, 0, now=1000.0) == 0.5  # warmup
    assert [lr_at(c, 9, now=t) for t in (1000.0, 1050.0, 1075.0)] == [1.0, 1.0, 1.0]
    assert lr_at(c, 9, now=1087.5) == pytest.approx(0.1 + 0.9 * 0.5)
    assert lr_at(c, 9, now=1100.0) == pytest.approx(0.1)
    assert lr_at(c, 9, now=2000.0) == pytest.approx(0.1)
    lrs = [lr_at(c, 9, now=1075.0 + i) for i in range(26)]
    assert lrs == sorted(lrs, reverse=True) and lrs[0] > lrs[-1]


def test_run_schedule_without_a_budget_is_refused_with_the_fix() -> None:
    c = cfg(lr_schedule="run")
    with pytest.raises(ConfigError, match=r"trainer.run_end_unix is unset.*azserve train"):
        lr_at(c, 0)
    with pytest.raises(ConfigError, match="trainer.lr_schedule: 'run'"):
        Trainer(NET, c)
    with pytest.raises(ConfigError, match="trainer.lr_anneal_fraction"):
        TrainerConfig(lr_anneal_fraction=0.0)
    with pytest.raises(ConfigError, match="trainer.run_end_unix: must be after"):
        TrainerConfig(run_start_unix=10.0, run_end_unix=5.0)


def test_config_checks() -> None:
    with pytest.raises(ConfigError, match="trainer.lr"):
        TrainerConfig(lr=0.0)
    with pytest.raises(ConfigError, match="lr_milestones"):
        TrainerConfig(lr_milestones=(5, 2))


@pytest.mark.parametrize("optimizer", ["sgd", "adamw"])
@pytest.mark.parametrize("wd_mode", ["optimizer", "loss"])
def test_steps_reduce_the_loss_on_a_fixed_batch(optimizer: str, wd_mode: str) -> None:
    t = Trainer(
        NET,
        cfg(
            optimizer=optimizer,
            weight_decay_mode=wd_mode,
            lr=0.01 if optimizer == "adamw" else 0.05,
        ),
    )
    batch = fixed_batch(0)
    first = t.step(batch)
    for _ in range(20):
        last = t.step(batch)
    assert last["loss"] < 0.7 * first["loss"]
    assert t.step_count == 21 and last["step"] == 21.0
    assert (last["l2"] > 0) == (wd_mode == "loss")
    assert math.isfinite(last["grad_norm"]) and last["lr"] == t.cfg.lr


def test_grad_clip_bounds_the_update() -> None:
    batch = fixed_batch(1)
    a, b = Trainer(NET, cfg(grad_clip=1e-3, weight_decay=0.0)), Trainer(NET, cfg(weight_decay=0.0))
    before = [p.detach().clone() for p in a.model.parameters()]
    out = a.step(batch)
    b.step(batch)
    assert out["grad_norm"] > 1e-3  # reported before clipping
    moved_a = (
        sum((p - q).norm() ** 2 for p, q in zip(a.model.parameters(), before, strict=True)) ** 0.5
    )
    moved_b = (
        sum((p - q).norm() ** 2 for p, q in zip(b.model.parameters(), before, strict=True)) ** 0.5
    )
    assert moved_a < 0.05 * 1e-3 * 1.01 + 1e-9  # lr x clipped norm (no momentum yet)
    assert moved_b > moved_a


def test_fp16_is_ignored_on_cpu() -> None:
    t = Trainer(NET, cfg(amp="fp16"))
    assert t._amp_dtype is None and t.step(fixed_batch(0))["loss"] > 0


def _conv_dtypes(t: Trainer) -> list[torch.dtype]:
    """The dtypes the convolutions of ``t``'s next step compute in."""
    seen: list[torch.dtype] = []
    for m in t.model.modules():
        if isinstance(m, torch.nn.Conv2d):
            m.register_forward_hook(lambda _m, _i, out: seen.append(out.dtype))
    return seen


def test_bf16_on_cpu_computes_in_bf16_and_learns() -> None:
    """``amp = "bf16"`` on a CPU: the convolutions run in bf16 under autocast, the weights stay
    float32, and the steps still reduce the loss."""
    t = Trainer(NET, cfg(amp="bf16"))
    seen = _conv_dtypes(t)
    batch = fixed_batch(0)
    first = t.step(batch)
    assert seen and set(seen) == {torch.bfloat16}
    assert all(p.dtype == torch.float32 for p in t.model.parameters())
    for _ in range(20):
        last = t.step(batch)
    assert last["loss"] < 0.7 * first["loss"]
    assert set(_conv_dtypes(Trainer(NET, cfg()))) <= {torch.float32}


def test_channels_last_trains_the_same_net() -> None:
    """Channels-last memory order changes the kernels, not the maths: the same losses (to
    float32 rounding), and the weights it saves load into a trainer that does not use it."""
    a, b = Trainer(NET, cfg()), Trainer(NET, cfg(channels_last=True))
    assert any(
        p.dim() == 4
        and p.is_contiguous(memory_format=torch.channels_last)
        and not p.is_contiguous()
        for p in b.model.parameters()
    )
    for i in range(5):
        la, lb = a.step(fixed_batch(i))["loss"], b.step(fixed_batch(i))["loss"]
        assert lb == pytest.approx(la, rel=1e-4)
    c = Trainer(NET, cfg())
    c.load_state_dict(copy.deepcopy(b.state_dict()))
    for (name, x), y in zip(
        b.model.state_dict().items(), c.model.state_dict().values(), strict=True
    ):
        assert torch.equal(x, y), name
    assert c.step(fixed_batch(9))["loss"] == pytest.approx(b.step(fixed_batch(9))["loss"], rel=1e-4)


@pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated:DeprecationWarning")
def test_compiled_step_trains_the_same_net_and_saves_plain_weights() -> None:
    """``compile = true`` runs the step through inductor's generated kernels: the same losses
    as eager (to float32 rounding), and the state it saves is the plain module's (no
    ``_orig_mod.`` prefixes), loadable by a trainer that does not compile."""
    a, b = Trainer(NET, cfg()), Trainer(NET, cfg(compile=True))
    for i in range(4):
        la, lb = a.step(fixed_batch(i))["loss"], b.step(fixed_batch(i))["loss"]
        assert lb == pytest.approx(la, rel=1e-4)
    state = b.state_dict()
    assert not any("_orig_mod" in k for k in state["model"])
    c = Trainer(NET, cfg())
    c.load_state_dict(copy.deepcopy(state))
    assert c.step(fixed_batch(9))["loss"] == pytest.approx(b.step(fixed_batch(9))["loss"], rel=1e-4)


def test_amp_auto_is_bf16_exactly_where_the_cpu_runs_it_natively(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import learner.trainer as trainer_module

    for native, want in ((True, torch.bfloat16), (False, None)):
        monkeypatch.setattr(trainer_module, "native_bf16", lambda _dev, n=native: n)
        assert Trainer(NET, cfg(amp="auto"))._amp_dtype == want


def test_version_counter_bumps_once_per_publish_and_settles_a_stop() -> None:
    v = VersionCounter(publish_every=2)
    assert [v.due(s) for s in (0, 1, 2, 3, 4)] == [False, False, True, False, True]
    assert v.bump(2) == 1 and not v.due(2)  # one number per step, however often asked
    assert v.settle(2) == 1  # a stop right after a publish keeps its number
    assert v.settle(3) == 2 and v.named_step == 3  # weights trained past it take the next
    assert v.settle(3) == 2


@pytest.mark.parametrize("channels_last", [False, True])
@pytest.mark.parametrize("optimizer", ["sgd", "adamw"])
def test_resume_from_state_dict_is_exact(optimizer: str, channels_last: bool) -> None:
    """N steps straight == k steps, state_dict, fresh trainer, N - k steps (augmentation on)."""
    c = cfg(
        optimizer=optimizer,
        lr_schedule="cosine",
        total_steps=6,
        warmup_steps=2,
        lr=0.01,
        channels_last=channels_last,
    )
    batches = [fixed_batch(i) for i in range(6)]
    straight = Trainer(NET, c, symmetries=mirror)
    for b in batches:
        straight.step(b)

    first = Trainer(NET, c, symmetries=mirror)
    for b in batches[:3]:
        first.step(b)
    state = copy.deepcopy(first.state_dict())
    resumed = Trainer(NET, c, symmetries=mirror)
    resumed.load_state_dict(state)
    assert resumed.step_count == 3
    for b in batches[3:]:
        resumed.step(b)

    for (name, x), y in zip(
        straight.model.state_dict().items(), resumed.model.state_dict().values(), strict=True
    ):
        assert torch.equal(x, y), name
    assert straight.rng.integers(1 << 62) == resumed.rng.integers(1 << 62)
