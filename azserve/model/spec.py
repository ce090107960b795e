"""What a network looks like from outside: torch-free, so servers, clients and actors can
describe a model without importing torch."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from azserve.errors import ConfigError

HEADS = ("ownership", "score", "material_ahead", "moves_left", "reply")
"""The auxiliary heads a net may have beside policy and value (``NetConfig.heads``)."""

MOVES_LEFT_SCALE = 100.0
"""Plies that the ``moves_left`` head's output counts in (it predicts the plies left divided by
this), and the horizon of ``NetConfig.moves_left_discount``: a fixed constant, not the game's
ply cap, so that a ply is worth the same discount in every game (over chess's cap of 256 plies,
a win in 3 plies and one in 13 would differ by 4% of the discount, not 10%); the last 100 plies
of a chess game, where it is decided, stay apart, and longer ones count alike."""


@dataclass(frozen=True)
class ModelSpec:
    """The contract a server checks requests against: one position is ``obs_shape`` planes of
    ``obs_dtype``; the network answers ``num_actions`` policy logits and one value."""

    obs_shape: tuple[int, int, int]
    """(C, H, W) of one position."""
    num_actions: int
    """A: length of the policy logits."""
    obs_dtype: str = "uint8"
    """Wire dtype of observations (float32 is accepted too, for clients that send floats)."""


@dataclass(frozen=True)
class NetConfig:
    """Shape of the network; the same section configures server, learner and analysis."""

    in_channels: int = 2
    """C: input planes per position."""
    height: int = 6
    """H: board rows."""
    width: int = 7
    """W: board columns."""
    num_actions: int = 7
    """A: size of the policy head."""
    blocks: int = 5
    """Residual blocks in the tower."""
    channels: int = 64
    """Convolution channels in the tower."""
    policy_channels: int = 2
    """Channels of the 1x1 convolution before the policy head's linear layer."""
    value_channels: int = 1
    """Channels of the 1x1 convolution before the value head."""
    value_hidden: int = 64
    """Hidden units of the value head."""
    seed: int = 0
    """Seed of the initial random weights: version 0 of every run, the one origin the learner
    and a server started without a checkpoint share (``model.initial_weights``)."""
    global_pool_every: int = 0
    """Every k-th residual block (the k-th, 2k-th, ...) is a global pooling block (KataGo's
    global pooling bias: the means and maxima of ``global_pool_channels`` channels, through a
    linear layer, bias the block's other channels); 0 = none, today's net exactly."""
    global_pool_channels: int = 16
    """Channels pooled in a global pooling block (the block keeps ``channels`` minus these as
    its regular channels, so it costs about what a plain block does)."""
    heads: tuple[str, ...] = ()
    """Auxiliary heads trained on the game's targets (``ownership``, ``score``,
    ``material_ahead``, ``moves_left``, ``reply``); empty = none. Only the learner computes
    them: serving answers policy and value (the value discounted by ``moves_left`` where
    ``moves_left_discount`` is above 0)."""
    value_head: Literal["scalar", "wdl"] = "scalar"
    """``scalar``: one tanh output, trained by squared error against the outcome (today's
    net); ``wdl``: three logits, win/draw/loss for the side to move (Leela's), trained by
    cross-entropy against the outcome made a distribution, so a draw is learnt as a draw and
    not as the mean of a win and a loss. Served either way as one value, ``P(win) - P(loss)``
    for ``wdl``: the wire, the server and the search do not change."""
    moves_left_discount: float = 0.0
    """alpha: the value served (``forward``: what the server runs, exports and compiles) is
    ``v * (1 - alpha * min(M / 100, 1))``, M the ``moves_left`` head's plies left
    (``MOVES_LEFT_SCALE``), so that the search, through its leaf values, prefers the shorter
    win and the longer loss (a simplification of Leela's moves-left utility, docs/learner.md).
    Needs the ``moves_left`` head; 0 = off, the value served bit for bit as without it. The
    learner trains the undiscounted value."""

    def __post_init__(self) -> None:
        if self.global_pool_every < 0:
            raise ConfigError(f"net.global_pool_every={self.global_pool_every}: must be >= 0")
        if self.global_pool_every and not 0 < self.global_pool_channels < self.channels:
            raise ConfigError(
                f"net.global_pool_channels={self.global_pool_channels}: must be in "
                f"1..{self.channels - 1} (net.channels - 1)"
            )
        unknown = [h for h in self.heads if h not in HEADS]
        if unknown or len(set(self.heads)) != len(self.heads):
            raise ConfigError(
                f"net.heads={list(self.heads)}: each at most once, from {list(HEADS)}"
            )
        if not 0.0 <= self.moves_left_discount <= 1.0:
            raise ConfigError(
                f"net.moves_left_discount={self.moves_left_discount}: must be in [0, 1]"
            )
        if self.moves_left_discount > 0 and "moves_left" not in self.heads:
            raise ConfigError(
                f"net.moves_left_discount={self.moves_left_discount} needs the moves_left "
                "head: add 'moves_left' to net.heads"
            )

    @property
    def obs_shape(self) -> tuple[int, int, int]:
        return (self.in_channels, self.height, self.width)

    @property
    def spec(self) -> ModelSpec:
        return ModelSpec(obs_shape=self.obs_shape, num_actions=self.num_actions)
