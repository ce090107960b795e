"""The AlphaZero policy/value network: a residual tower with a policy head and a value head.

Input is float planes ``[B, C, H, W]`` (the server converts the uint8 wire planes on the device);
outputs are policy logits ``[B, A]`` and a value ``[B]`` in (-1, 1) for the side to move.
"""

from __future__ import annotations

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


class AlphaZeroNet(nn.Module):
    """Residual policy/value network. ``forward(x [B,C,H,W] float) -> (logits [B,A], value [B])``."""

    def __init__(self, cfg: NetConfig) -> None:
        super().__init__()
        self.cfg = cfg
        c = cfg.channels
        self.stem = nn.Sequential(
            nn.Conv2d(cfg.in_channels, c, 3, padding=1, bias=False), nn.BatchNorm2d(c), nn.ReLU()
        )
        self.tower = nn.Sequential(*[_ResBlock(c) for _ in range(cfg.blocks)])
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
        self.value_fc2 = nn.Linear(cfg.value_hidden, 1)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.tower(self.stem(x))
        logits = self.policy_fc(self.policy_conv(h).flatten(1))
        v = F.relu(self.value_fc1(self.value_conv(h).flatten(1)))
        value = torch.tanh(self.value_fc2(v)).squeeze(1)
        return logits, value


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
