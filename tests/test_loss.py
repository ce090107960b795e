"""The AlphaZero loss against hand-computed values, and symmetry augmentation."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from learner.loss import alphazero_loss, augment, l2_penalty
from learner.replay import Batch


def test_policy_cross_entropy_and_value_mse_by_hand() -> None:
    logits = torch.tensor([[0.0, 0.0], [math.log(3.0), 0.0]])
    target = torch.tensor([[1.0, 0.0], [0.5, 0.5]])
    value = torch.tensor([0.5, -1.0])
    z = torch.tensor([1.0, 0.0])
    parts = alphazero_loss(logits, value, target, z, value_weight=2.0)
    # Row 0: -log(1/2). Row 1: p = (3/4, 1/4): -(log(3/4) + log(1/4)) / 2.
    ce = (math.log(2.0) - 0.5 * (math.log(0.75) + math.log(0.25))) / 2
    mse = (0.25 + 1.0) / 2
    assert parts.policy.item() == pytest.approx(ce, rel=1e-6)
    assert parts.value.item() == pytest.approx(mse, rel=1e-6)
    assert parts.l2.item() == 0.0
    assert parts.total.item() == pytest.approx(ce + 2.0 * mse, rel=1e-6)


def test_legal_mask_removes_illegal_actions_from_the_softmax() -> None:
    logits = torch.tensor([[0.0, 0.0, 100.0]], requires_grad=True)
    target = torch.tensor([[0.5, 0.5, 0.0]])
    legal = torch.tensor([[True, True, False]])
    parts = alphazero_loss(logits, torch.zeros(1), target, torch.zeros(1), legal)
    assert parts.policy.item() == pytest.approx(math.log(2.0), rel=1e-6)
    parts.total.backward()
    assert logits.grad is not None and torch.isfinite(logits.grad).all()
    assert logits.grad[0, 2].item() == 0.0


def test_half_precision_outputs_are_scored_in_float32() -> None:
    logits = torch.tensor([[1.0, 2.0, 3.0]], dtype=torch.bfloat16)
    parts = alphazero_loss(
        logits, torch.zeros(1, dtype=torch.bfloat16), torch.tensor([[0.0, 0.0, 1.0]]), torch.ones(1)
    )
    assert parts.total.dtype == torch.float32
    expected = -math.log(math.exp(3) / (math.exp(1) + math.exp(2) + math.exp(3))) + 1.0
    assert parts.total.item() == pytest.approx(expected, rel=1e-5)


def test_l2_penalty_matches_sgd_weight_decay_gradient() -> None:
    w = torch.tensor([[1.0, -2.0], [3.0, 0.5]], requires_grad=True)
    pen = l2_penalty([w], weight_decay=0.1)
    assert pen.item() == pytest.approx(0.05 * (1 + 4 + 9 + 0.25))
    pen.backward()
    assert torch.allclose(w.grad, 0.1 * w.detach())  # what SGD(weight_decay=0.1) adds
    parts = alphazero_loss(
        torch.zeros(1, 2),
        torch.zeros(1),
        torch.tensor([[0.5, 0.5]]),
        torch.zeros(1),
        l2=pen.detach(),
    )
    assert parts.total.item() == pytest.approx(math.log(2.0) + pen.item(), rel=1e-6)


def flip_symmetries(obs: np.ndarray, policy: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """Identity and a left-right mirror of a [N, C, 1, W] board with A = W."""
    return [(obs, policy), (obs[..., ::-1].copy(), policy[:, ::-1].copy())]


def test_augment_picks_one_variant_per_sample() -> None:
    n, w = 64, 4
    obs = np.zeros((n, 1, 1, w), np.uint8)
    obs[:, 0, 0, 0] = 1  # a stone on the left edge
    policy = np.zeros((n, w), np.float32)
    policy[:, 0] = 1.0  # ...and the move there
    batch = Batch(obs, policy, np.arange(n, dtype=np.float32), np.zeros(n, np.int64))
    out = augment(batch, flip_symmetries, np.random.default_rng(0))
    flipped = out.obs[:, 0, 0, -1] == 1
    assert 10 < flipped.sum() < n - 10  # both variants used
    # Board and policy always move together.
    assert (out.policy[:, -1] == flipped).all() and (out.policy[:, 0] == ~flipped).all()
    assert (out.outcome == batch.outcome).all() and out.obs.dtype == np.uint8
    assert out.policy.dtype == np.float32


def test_augment_with_identity_only_is_a_no_op() -> None:
    batch = Batch(
        np.zeros((3, 1, 1, 2), np.uint8),
        np.full((3, 2), 0.5, np.float32),
        np.zeros(3, np.float32),
        np.zeros(3, np.int64),
    )
    assert augment(batch, lambda o, p: [(o, p)], np.random.default_rng(0)) is batch
