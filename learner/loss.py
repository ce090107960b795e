"""The AlphaZero loss and symmetry augmentation. Pure functions: tensors in, tensors out.

``l = -pi . log p + value_weight * (z - v)^2 + l2``. Weight decay is applied by the optimizer by
default (``TrainerConfig.weight_decay_mode = "optimizer"``); with ``"loss"`` the trainer passes
``l2_penalty(...)`` in here instead, so that the reported total is the paper's objective.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import NamedTuple

import numpy as np
import torch
from torch.nn import functional as F

from learner.replay import Batch

Symmetries = Callable[[np.ndarray, np.ndarray], Sequence[tuple[np.ndarray, np.ndarray]]]
"""A game's ``symmetries(obs [N,C,H,W] uint8, policy [N,A]) -> [(obs, policy), ...]``: every
symmetric variant of the whole batch (identity included), each with the input's shapes."""


class LossParts(NamedTuple):
    """Scalar loss tensors (float32, differentiable): ``total = policy + value_weight * value + l2``."""

    total: torch.Tensor
    policy: torch.Tensor
    value: torch.Tensor
    l2: torch.Tensor


def alphazero_loss(
    logits: torch.Tensor,
    value: torch.Tensor,
    target_policy: torch.Tensor,
    target_value: torch.Tensor,
    legal: torch.Tensor | None = None,
    *,
    value_weight: float = 1.0,
    l2: torch.Tensor | None = None,
) -> LossParts:
    """Policy cross-entropy against soft targets plus value MSE, averaged over the batch.

    logits ``[B,A]``, value ``[B]`` (network outputs, any float dtype; computed in float32),
    target_policy ``[B,A]`` (rows sum to 1), target_value ``[B]`` in [-1, 1], legal ``[B,A]``
    bool (optional: illegal actions are removed from the softmax; targets must be 0 there),
    l2 a scalar penalty added as is (see ``l2_penalty``).
    """
    logits = logits.float()
    if legal is not None:
        # A finite floor, not -inf: 0 * -inf would turn the cross-entropy into NaN.
        logits = logits.masked_fill(~legal, torch.finfo(torch.float32).min)
    log_p = F.log_softmax(logits, dim=-1)
    policy_loss = -(target_policy.float() * log_p).sum(dim=-1).mean()
    value_loss = F.mse_loss(value.float(), target_value.float())
    l2_term = l2 if l2 is not None else policy_loss.new_zeros(())
    total = policy_loss + value_weight * value_loss + l2_term
    return LossParts(total=total, policy=policy_loss, value=value_loss, l2=l2_term)


def l2_penalty(params: Iterable[torch.Tensor], weight_decay: float) -> torch.Tensor:
    """``weight_decay / 2 * sum ||w||^2``: the same gradient as SGD's coupled ``weight_decay``."""
    params = list(params)
    return 0.5 * weight_decay * torch.stack([p.float().pow(2).sum() for p in params]).sum()


def augment(batch: Batch, symmetries: Symmetries, rng: np.random.Generator) -> Batch:
    """Replace each position by one of its symmetric variants, chosen uniformly per sample.

    Outcome and version are unchanged (a symmetry does not change who wins).
    """
    variants = symmetries(batch.obs, batch.policy)
    if len(variants) == 1:
        return batch
    obs = np.stack([o for o, _ in variants])  # [K, N, C, H, W]
    policy = np.stack([p for _, p in variants])  # [K, N, A]
    n = len(batch)
    choice = rng.integers(0, len(variants), size=n)
    rows = np.arange(n)
    return Batch(
        obs=obs[choice, rows],
        policy=policy[choice, rows].astype(np.float32, copy=False),
        outcome=batch.outcome,
        version=batch.version,
    )
