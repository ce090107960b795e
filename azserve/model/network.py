"""The AlphaZero policy/value network: a residual tower with a policy head and a value head.

Input is float planes ``[B, C, H, W]`` (the server converts the uint8 wire planes on the device);
outputs are policy logits ``[B, A]`` and a value ``[B]`` in [-1, 1] for the side to move.

Four options change the tower and the heads (all off by default, and then the net is today's,
key for key and bit for bit): global pooling blocks (``NetConfig.global_pool_every``, KataGo's
global pooling bias, arXiv 1902.10565 section 4.3), auxiliary heads (``NetConfig.heads``:
final ownership, score margin, material some plies ahead, plies left in the game, the
opponent's reply policy) that only ``forward_all``, the learner's forward, computes, a
win/draw/loss value head (``NetConfig.value_head = "wdl"``, Leela's): its three logits go to
the learner through ``forward_all``, while ``forward`` (what is served, exported and compiled)
still answers one value, ``P(win) - P(loss)``; and the moves-left discount
(``NetConfig.moves_left_discount``): ``forward`` serves the value times
``1 - alpha * min(M / MOVES_LEFT_SCALE, 1)``, M the ``moves_left`` head's plies left, while
``forward_all`` gives the learner the undiscounted value.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import nn
from torch.nn import functional as F

from azserve.model.spec import NetConfig
from azserve.model.weights import state_dict_to_bytes


class _ResBlock(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return F.relu(x + y)


class _GlobalPoolBlock(nn.Module):
    """A residual block whose first convolution is split (KataGo's global pooling bias): the
    ``pooled`` channels, after BatchNorm and ReLU, are reduced to their mean and maximum over
    the board, and a linear layer of those ``2 * pooled`` numbers biases each of the other
    (regular) channels before their ReLU. The whole board's state thus reaches every point in
    one block (a ko fight, the score, which side leads), which 3x3 convolutions see only after
    many. KataGo also pools a board-size-scaled mean; on one board size it is a fixed multiple
    of the mean, so it is left out. Every convolution is followed by a BatchNorm named after it
    (``conv1``/``bn1``, ``conv1g``/``bn1g``, ``conv2``/``bn2``), so ``fold_batchnorm`` folds
    them all, and the bias enters after ``bn1``, where folding leaves it unchanged."""

    def __init__(self, channels: int, pooled: int) -> None:
        super().__init__()
        regular = channels - pooled
        self.conv1 = nn.Conv2d(channels, regular, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(regular)
        self.conv1g = nn.Conv2d(channels, pooled, 3, padding=1, bias=False)
        self.bn1g = nn.BatchNorm2d(pooled)
        self.pool_fc = nn.Linear(2 * pooled, regular)
        self.conv2 = nn.Conv2d(regular, channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        g = F.relu(self.bn1g(self.conv1g(x)))
        pooled = torch.cat([g.mean(dim=(2, 3)), g.amax(dim=(2, 3))], dim=1)  # [B, 2 * pooled]
        bias = self.pool_fc(pooled)[:, :, None, None]
        y = F.relu(self.bn1(self.conv1(x)) + bias)
        y = self.bn2(self.conv2(y))
        return F.relu(x + y)


class NetOutputs(NamedTuple):
    """What ``forward_all`` computes; a head the net lacks is None."""

    logits: torch.Tensor
    """Policy logits ``[B, A]``."""
    value: torch.Tensor
    """Value ``[B]`` in [-1, 1] for the side to move (with a WDL head ``P(win) - P(loss)``)."""
    wdl: torch.Tensor | None
    """Win/draw/loss logits ``[B, 3]`` for the side to move (``value_head = "wdl"``)."""
    ownership: torch.Tensor | None
    """Ownership logits ``[B, H, W]`` (planes' layout): ``tanh`` of them is the expected final
    owner of each point, +1 the side to move, -1 the opponent."""
    score: torch.Tensor | None
    """Final score margin for the side to move ``[B]``, divided by the game's score scale
    (``Game.score_scale``: the board's cells by default)."""
    material_ahead: torch.Tensor | None
    """Material balance for the side to move some plies ahead ``[B]``, divided by the same
    scale."""
    moves_left: torch.Tensor | None
    """Plies left in the game ``[B]`` (>= 0, a softplus), divided by ``MOVES_LEFT_SCALE``."""
    reply: torch.Tensor | None
    """Logits ``[B, A]`` of the opponent's reply policy (the next position's search policy)."""


class AlphaZeroNet(nn.Module):
    """Residual policy/value network. ``forward(x [B,C,H,W] float) -> (logits [B,A], value [B])``;
    ``forward_all(x) -> NetOutputs`` adds the auxiliary heads."""

    def __init__(self, cfg: NetConfig) -> None:
        super().__init__()
        self.cfg = cfg
        c = cfg.channels
        self.stem = nn.Sequential(
            nn.Conv2d(cfg.in_channels, c, 3, padding=1, bias=False), nn.BatchNorm2d(c), nn.ReLU()
        )
        every = cfg.global_pool_every
        self.tower = nn.Sequential(
            *[
                _GlobalPoolBlock(c, cfg.global_pool_channels)
                if every and (i + 1) % every == 0
                else _ResBlock(c)
                for i in range(cfg.blocks)
            ]
        )
        hw = cfg.height * cfg.width
        self.policy_conv = nn.Sequential(
            nn.Conv2d(c, cfg.policy_channels, 1, bias=False),
            nn.BatchNorm2d(cfg.policy_channels),
            nn.ReLU(),
        )
        self.policy_fc = nn.Linear(cfg.policy_channels * hw, cfg.num_actions)
        self.value_conv = nn.Sequential(
            nn.Conv2d(c, cfg.value_channels, 1, bias=False),
            nn.BatchNorm2d(cfg.value_channels),
            nn.ReLU(),
        )
        self.value_fc1 = nn.Linear(cfg.value_channels * hw, cfg.value_hidden)
        self.wdl = cfg.value_head == "wdl"
        self.value_fc2 = nn.Linear(cfg.value_hidden, 3 if self.wdl else 1)
        # Auxiliary heads, created only when asked for (a net without them keeps its keys).
        if "ownership" in cfg.heads:
            self.ownership_conv = nn.Conv2d(c, 1, 1)
        if "score" in cfg.heads:  # beside the value, from the value head's hidden layer
            self.score_fc = nn.Linear(cfg.value_hidden, 1)
        if "material_ahead" in cfg.heads:  # as the score
            self.material_ahead_fc = nn.Linear(cfg.value_hidden, 1)
        # As the score; an attribute either way (None: no key), so that ``forward`` scripts.
        self.moves_left_fc: nn.Linear | None = (
            nn.Linear(cfg.value_hidden, 1) if "moves_left" in cfg.heads else None
        )
        self.moves_left_discount = float(cfg.moves_left_discount)
        if "reply" in cfg.heads:  # a second policy head
            self.reply_conv = nn.Sequential(
                nn.Conv2d(c, cfg.policy_channels, 1, bias=False),
                nn.BatchNorm2d(cfg.policy_channels),
                nn.ReLU(),
            )
            self.reply_fc = nn.Linear(cfg.policy_channels * hw, cfg.num_actions)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        _, logits, v, out = self._trunk(x)
        value = self._value(out)
        m = self._moves_left(v) if self.moves_left_discount > 0.0 else None
        if m is not None:  # a win nearer its end is worth more, a loss further off less
            value = value * (1.0 - self.moves_left_discount * m.clamp(max=1.0))
        return logits, value

    def _trunk(
        self, x: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """The tower's output, the policy logits, the value head's hidden layer and its output
        (``[B, 1]``, or ``[B, 3]`` WDL logits): plain tensors, so that ``forward`` stays
        scriptable (Triton's TorchScript export)."""
        h = self.tower(self.stem(x))
        logits = self.policy_fc(self.policy_conv(h).flatten(1))
        v = F.relu(self.value_fc1(self.value_conv(h).flatten(1)))
        return h, logits, v, self.value_fc2(v)

    def _moves_left(self, v: torch.Tensor) -> torch.Tensor | None:
        """Plies left ``[B]`` over ``MOVES_LEFT_SCALE`` from the value head's hidden layer
        ``v``, or None without the head."""
        if self.moves_left_fc is None:
            return None
        return F.softplus(self.moves_left_fc(v)).squeeze(1)

    def _value(self, out: torch.Tensor) -> torch.Tensor:
        """The value ``[B]`` of the value head's output: ``tanh``, or from WDL logits the
        expected result ``P(win) - P(loss)``."""
        if self.wdl:
            p = torch.softmax(out, dim=1)
            return p[:, 0] - p[:, 2]
        return torch.tanh(out).squeeze(1)

    def forward_all(self, x: torch.Tensor, heads: bool = True) -> NetOutputs:
        """Policy, value and (``heads``) the auxiliary heads the net has (the learner's
        forward; serving uses ``forward``)."""
        h, logits, v, out = self._trunk(x)
        value, wdl = self._value(out), out if self.wdl else None
        if not heads:
            return NetOutputs(logits, value, wdl, None, None, None, None, None)
        has = self.cfg.heads
        return NetOutputs(
            logits,
            value,
            wdl,
            self.ownership_conv(h).squeeze(1) if "ownership" in has else None,
            self.score_fc(v).squeeze(1) if "score" in has else None,
            self.material_ahead_fc(v).squeeze(1) if "material_ahead" in has else None,
            self._moves_left(v),
            self.reply_fc(self.reply_conv(h).flatten(1)) if "reply" in has else None,
        )


def build_net(cfg: NetConfig, seed: int | None = 0) -> AlphaZeroNet:
    """A freshly initialised network; with a seed, the same weights on every machine."""
    if seed is None:
        return AlphaZeroNet(cfg)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return AlphaZeroNet(cfg)


def initial_weights(cfg: NetConfig) -> bytes:
    """Version 0: the seeded random weights as safetensors bytes (``cfg.seed``). The learner
    and a server started without a checkpoint both take them from here, so a version 0 load
    of the learner's bytes matches what such a server already holds."""
    return state_dict_to_bytes(build_net(cfg, seed=cfg.seed).state_dict())


def param_bytes(net: nn.Module) -> int:
    """Bytes held by the network's parameters and buffers."""
    tensors = list(net.parameters()) + list(net.buffers())
    return sum(t.numel() * t.element_size() for t in tensors)
