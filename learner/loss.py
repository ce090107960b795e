"""The AlphaZero loss and symmetry augmentation. Pure functions: tensors in, tensors out.

``l = -pi . log p + value_weight * (z - v)^2 + l2``; with a win/draw/loss value head the value
term is instead the cross-entropy of its logits against ``wdl_target(z)``. Weight decay is
applied by the optimizer by
default (``TrainerConfig.weight_decay_mode = "optimizer"``); with ``"loss"`` the trainer passes
``l2_penalty(...)`` in here instead, so that the reported total is the paper's objective.
``target_losses`` gives the terms of the game's targets (``azserve.targets``) that the trainer
adds, each times its ``trainer.*_weight``, when they are trained.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import NamedTuple

import numpy as np
import torch
from torch.nn import functional as F

from azserve.model.spec import MOVES_LEFT_SCALE
from learner.replay import Batch

Symmetries = Callable[[np.ndarray, np.ndarray], Sequence[tuple[np.ndarray, np.ndarray]]]
"""A game's ``symmetries(obs [N,C,H,W] uint8, policy [N,A]) -> [(obs, policy), ...]``: every
symmetric variant of the whole batch (identity included), each with the input's shapes."""


LEELA_PLIES = 20.0
"""What lc0 divides plies by in its moves-left loss, "to a similar range as other losses"."""


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
    wdl: torch.Tensor | None = None,
) -> LossParts:
    """Policy cross-entropy against soft targets plus value MSE, averaged over the batch.

    logits ``[B,A]``, value ``[B]`` (network outputs, any float dtype; computed in float32),
    target_policy ``[B,A]`` (rows sum to 1), target_value ``[B]`` in [-1, 1], legal ``[B,A]``
    bool (optional: illegal actions are removed from the softmax; targets must be 0 there),
    l2 a scalar penalty added as is (see ``l2_penalty``). With ``wdl``, the net's win/draw/loss
    logits ``[B,3]``, the value loss is their cross-entropy against ``wdl_target(target_value)``
    (``value`` is then not used); it keeps the name ``value``.
    """
    logits = logits.float()
    if legal is not None:
        # A finite floor, not -inf: 0 * -inf would turn the cross-entropy into NaN.
        logits = logits.masked_fill(~legal, torch.finfo(torch.float32).min)
    log_p = F.log_softmax(logits, dim=-1)
    policy_loss = -(target_policy.float() * log_p).sum(dim=-1).mean()
    if wdl is None:
        value_loss = F.mse_loss(value.float(), target_value.float())
    else:
        target = wdl_target(target_value.float())
        value_loss = -(target * F.log_softmax(wdl.float(), dim=-1)).sum(dim=-1).mean()
    l2_term = l2 if l2 is not None else policy_loss.new_zeros(())
    total = policy_loss + value_weight * value_loss + l2_term
    return LossParts(total=total, policy=policy_loss, value=value_loss, l2=l2_term)


def wdl_target(z: torch.Tensor) -> torch.Tensor:
    """The win/draw/loss distribution ``[B,3]`` of outcomes ``z`` ``[B]`` in [-1, 1] for the
    side to move: ``(z, 1 - z, 0)`` for ``z >= 0``, ``(0, 1 + z, -z)`` below. A win, a draw and
    a loss are pure; a fractional result (an adjudicated win, ``mcts.adjudicated_value``) is a
    mix of it and a draw, whose expected value ``P(win) - P(loss)`` is ``z`` again."""
    win, loss = z.clamp(min=0), (-z).clamp(min=0)
    return torch.stack([win, 1 - win - loss, loss], dim=-1)


def target_losses(
    outputs: Mapping[str, torch.Tensor | None],
    targets: Mapping[str, torch.Tensor],
    masks: Mapping[str, torch.Tensor],
    score_scale: float,
    denominators: Mapping[str, torch.Tensor] | None = None,
) -> dict[str, torch.Tensor]:
    """The loss of each target in ``targets`` (float32 scalars), each the mean over the
    positions its bool ``[B]`` mask keeps (0 when it keeps none), or the sum over them divided
    by ``denominators[name]`` where given (a data-parallel rank: the ranks' mean count, so that
    the ranks' mean gradient is the global batch's):

    - ``ownership``: outputs ``[B,H,W]`` logits ``o`` (``tanh(o)`` the expected owner), targets
      ``[B,H,W]`` in {-1, 0, 1}; the binary cross-entropy of ``sigmoid(2 o)`` against
      ``(1 + t) / 2``, averaged over the points (KataGo's ownership loss);
    - ``score``: outputs ``[B]`` the margin divided by ``score_scale`` (``Game.score_scale``:
      the board's cells unless the game says otherwise), targets ``[B]`` the margin in points;
      the squared error of the scaled margin;
    - ``material_ahead``: as ``score``, the material balance some plies ahead;
    - ``moves_left``: outputs ``[B]`` the plies left over ``MOVES_LEFT_SCALE``, targets ``[B]``
      the plies left; Leela's loss (lc0's tfprocess): the Huber loss, delta 10 plies, of the
      prediction in plies over 20 against the target over 20 (so a weight means what lc0's
      ``moves_left_loss_weight`` does);
    - ``reply``: outputs ``[B,A]`` logits, targets ``[B,A]`` a policy; the cross-entropy.
    """
    out: dict[str, torch.Tensor] = {}
    for name, target in targets.items():
        pred = outputs[name]
        if pred is None:
            raise ValueError(f"target {name!r} is trained but the net has no {name} head")
        pred, target = pred.float(), target.float()
        if name == "ownership":
            per = F.binary_cross_entropy_with_logits(
                2 * pred, (1 + target) / 2, reduction="none"
            ).mean(dim=(1, 2))
        elif name in ("score", "material_ahead"):
            per = (pred - target / score_scale).pow(2)
        elif name == "moves_left":
            plies = pred * MOVES_LEFT_SCALE
            per = F.huber_loss(
                plies / LEELA_PLIES, target / LEELA_PLIES, reduction="none", delta=10 / LEELA_PLIES
            )
        elif name == "reply":
            per = -(target * F.log_softmax(pred, dim=-1)).sum(dim=-1)
        else:
            raise ValueError(f"unknown target {name!r}")
        keep = masks[name].float()
        count = keep.sum().clamp(min=1.0) if denominators is None else denominators[name]
        out[name] = (per * keep).sum() / count
    return out


def l2_penalty(params: Iterable[torch.Tensor], weight_decay: float) -> torch.Tensor:
    """``weight_decay / 2 * sum ||w||^2``: the same gradient as SGD's coupled ``weight_decay``."""
    params = list(params)
    return 0.5 * weight_decay * torch.stack([p.float().pow(2).sum() for p in params]).sum()


def augment(batch: Batch, symmetries: Symmetries, rng: np.random.Generator) -> Batch:
    """Replace each position by one of its symmetric variants, chosen uniformly per sample.

    Outcome and version are unchanged (a symmetry does not change who wins).
    """
    own = batch.targets.get("ownership")
    planes = batch.obs
    if own is not None:  # the owner of each point moves with the planes: one more plane
        planes = np.concatenate([planes, own.view(np.uint8)[:, None]], axis=1)
    variants = symmetries(planes, batch.policy)
    if len(variants) == 1:
        return batch
    obs = np.stack([o for o, _ in variants])  # [K, N, C (+1), H, W]
    policy = np.stack([p for _, p in variants])  # [K, N, A]
    n = len(batch)
    choice = rng.integers(0, len(variants), size=n)
    rows = np.arange(n)
    targets = dict(batch.targets)
    if own is not None:
        targets["ownership"] = np.ascontiguousarray(obs[choice, rows, -1]).view(np.int8)
        obs = obs[:, :, :-1]
    if "reply" in targets:  # the reply's moves are on the same board
        replies = symmetries(batch.obs[:, :1], targets["reply"])
        targets["reply"] = np.stack([p for _, p in replies])[choice, rows].astype(np.float32)
    return Batch(
        obs=obs[choice, rows],
        policy=policy[choice, rows].astype(np.float32, copy=False),
        outcome=batch.outcome,
        version=batch.version,
        targets=targets,
        target_mask=batch.target_mask,
    )
