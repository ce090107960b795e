"""Inference form of the network: every BatchNorm folded into the convolution before it.

In eval mode a BatchNorm is an affine map per channel, so ``bn(conv(x))`` equals one biased
convolution with ``w' = w * s`` and ``b' = beta + (b - mean) * s`` (``s = gamma / sqrt(var +
eps)``). The folded net computes the same function (up to float rounding) with a third fewer
layers, and its weights are plain tensors that a compiled graph can take as inputs, so one
compiled graph serves every weights version.
"""

from __future__ import annotations

import copy

import torch
from torch import nn

from azserve.model.network import AlphaZeroNet


def _fold(conv: nn.Conv2d, bn: nn.BatchNorm2d) -> nn.Conv2d:
    assert bn.running_mean is not None and bn.running_var is not None, "BatchNorm without stats"
    mean, var = bn.running_mean, bn.running_var
    scale = bn.weight / torch.sqrt(var + bn.eps)
    bias = conv.bias if conv.bias is not None else torch.zeros_like(mean)
    folded = nn.Conv2d(
        conv.in_channels,
        conv.out_channels,
        conv.kernel_size,  # type: ignore[arg-type]
        stride=conv.stride,  # type: ignore[arg-type]
        padding=conv.padding,  # type: ignore[arg-type]
        dilation=conv.dilation,  # type: ignore[arg-type]
        groups=conv.groups,
        bias=True,
    )
    with torch.no_grad():
        folded.weight.copy_(conv.weight * scale.reshape(-1, 1, 1, 1))
        folded.bias.copy_(bn.bias + (bias - mean) * scale)  # type: ignore[union-attr]
    return folded


def fold_batchnorm(net: AlphaZeroNet) -> AlphaZeroNet:
    """A copy of ``net`` (eval mode) whose every ``Conv2d`` followed by a ``BatchNorm2d``
    (in a ``Sequential`` or as ``convN``/``bnN`` of a residual block) is one biased ``Conv2d``
    and the BatchNorm an ``Identity``. ``net`` itself is not changed."""
    out = copy.deepcopy(net).eval()
    for module in out.modules():
        children = list(module.named_children())
        pairs = list(zip(children, children[1:]))
        if not isinstance(module, nn.Sequential):  # residual blocks: conv1/bn1, conv2/bn2
            named = dict(children)
            pairs = [
                ((name, child), (f"bn{name[4:]}", named[f"bn{name[4:]}"]))
                for name, child in children
                if name.startswith("conv") and f"bn{name[4:]}" in named
            ]
        for (conv_name, conv), (bn_name, bn) in pairs:
            if isinstance(conv, nn.Conv2d) and isinstance(bn, nn.BatchNorm2d):
                setattr(module, conv_name, _fold(conv, bn))
                setattr(module, bn_name, nn.Identity())
    return out
