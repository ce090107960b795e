"""The net's options (global pooling blocks, auxiliary heads, the WDL value head): off, the net
is today's key for key and bit for bit; on, BatchNorm folding still computes the same function,
and the compiled bf16 server serves it as the eager net computes it."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib

import numpy as np
import pytest
import torch
from torch import nn

from azserve.backends.base import BackendConfig, TorchConfig
from azserve.backends.torch_backend import TorchBackend
from azserve.errors import ConfigError
from azserve.model.fold import fold_batchnorm
from azserve.model.network import build_net, initial_weights
from azserve.model.spec import NetConfig
from azserve.model.weights import bytes_to_state_dict, state_dict_to_bytes
from tests.test_compiled import randomise_batchnorm

pytestmark = pytest.mark.usefixtures("torch_one_thread")

GO9 = NetConfig(in_channels=4, height=9, width=9, num_actions=82, blocks=6, channels=64)
TINY = NetConfig(in_channels=3, height=5, width=5, num_actions=26, blocks=3, channels=12)
POOLED = dataclasses.replace(
    TINY,
    global_pool_every=2,
    global_pool_channels=4,
    heads=("ownership", "score", "material_ahead", "moves_left", "reply"),
    value_head="wdl",
)

# sha256 of ``initial_weights`` as the net was before these options (commit 561a8eb).
TODAY = {
    NetConfig(): "7044b47122dfb1c9ef0122965595902f213cf7d3a575a3ca91a02eb24fdf3ab0",
    GO9: "4113c8151a3e6ea9669f0c435ad43010f42b1374fa7029dd9de4474cf0a63e8e",
}


def _today_keys(cfg: NetConfig) -> set[str]:
    bn = ("weight", "bias", "running_mean", "running_var", "num_batches_tracked")
    keys = {"stem.0.weight", *(f"stem.1.{k}" for k in bn)}
    for i in range(cfg.blocks):
        for j in (1, 2):
            keys |= {f"tower.{i}.conv{j}.weight", *(f"tower.{i}.bn{j}.{k}" for k in bn)}
    for head in ("policy", "value"):
        keys |= {f"{head}_conv.0.weight", *(f"{head}_conv.1.{k}" for k in bn)}
    for fc in ("policy_fc", "value_fc1", "value_fc2"):
        keys |= {f"{fc}.weight", f"{fc}.bias"}
    return keys


@pytest.mark.parametrize("cfg", list(TODAY))
def test_a_net_without_the_options_is_todays_bit_for_bit(cfg: NetConfig) -> None:
    assert set(build_net(cfg).state_dict()) == _today_keys(cfg)
    assert hashlib.sha256(initial_weights(cfg)).hexdigest() == TODAY[cfg]


def test_global_pooling_blocks_and_heads_add_their_keys_only() -> None:
    state = build_net(POOLED).state_dict()
    bn = ("weight", "bias", "running_mean", "running_var", "num_batches_tracked")
    added = {
        "tower.1.conv1g.weight",  # block 2 of 3 pools (global_pool_every = 2)
        *(f"tower.1.bn1g.{k}" for k in bn),
        "tower.1.pool_fc.weight",
        "tower.1.pool_fc.bias",
        "ownership_conv.weight",
        "ownership_conv.bias",
        "score_fc.weight",
        "score_fc.bias",
        "material_ahead_fc.weight",
        "material_ahead_fc.bias",
        "moves_left_fc.weight",
        "moves_left_fc.bias",
        "reply_conv.0.weight",
        *(f"reply_conv.1.{k}" for k in bn),
        "reply_fc.weight",
        "reply_fc.bias",
    }
    assert set(state) == _today_keys(TINY) | added
    # The pooling block's regular channels: channels - global_pool_channels.
    assert state["tower.1.conv1.weight"].shape == (8, 12, 3, 3)
    assert state["tower.1.conv1g.weight"].shape == (4, 12, 3, 3)
    assert state["tower.1.pool_fc.weight"].shape == (8, 8)
    assert state["tower.0.conv1.weight"].shape == (12, 12, 3, 3)
    assert state["value_fc2.weight"].shape == (3, 64)  # win, draw, loss


def _obs(rows: int, seed: int = 0) -> torch.Tensor:
    rng = np.random.default_rng(seed)
    return torch.from_numpy(rng.integers(0, 2, (rows, *TINY.obs_shape), dtype=np.uint8)).float()


def test_folding_a_pooled_net_with_heads_keeps_every_output() -> None:
    net = build_net(POOLED, seed=4).eval()
    randomise_batchnorm(net, 4)
    folded = fold_batchnorm(net)
    assert not any(isinstance(m, nn.BatchNorm2d) for m in folded.modules())
    x = _obs(16)
    with torch.inference_mode():
        want, got = net.forward_all(x), folded.forward_all(x)
    for name, a, b in zip(want._fields, want, got):
        assert a is not None and b is not None, name
        assert torch.allclose(a, b, rtol=1e-4, atol=1e-5), name
    # The pooled channels matter: a block's bias changes with the whole board.
    pooled_block = net.tower[1]
    with torch.inference_mode():
        h = torch.randn(2, TINY.channels, 5, 5)
        g = torch.relu(pooled_block.bn1g(pooled_block.conv1g(h)))
        bias = pooled_block.pool_fc(torch.cat([g.mean((2, 3)), g.amax((2, 3))], 1))
    assert not torch.allclose(bias[0], bias[1])


def test_forward_is_forward_all_without_heads() -> None:
    net = build_net(POOLED, seed=1).eval()
    x = _obs(8, seed=2)
    with torch.inference_mode():
        logits, value = net(x)
        out = net.forward_all(x)
    assert torch.equal(logits, out.logits) and torch.equal(value, out.value)
    assert out.ownership is not None and out.ownership.shape == (8, 5, 5)
    assert out.score is not None and out.score.shape == (8,)
    assert out.material_ahead is not None and out.material_ahead.shape == (8,)
    assert out.moves_left is not None and out.moves_left.shape == (8,)
    assert out.wdl is not None and out.wdl.shape == (8, 3)
    assert out.reply is not None and out.reply.shape == (8, 26)


@pytest.mark.timeout(300)  # one inductor compile, a minute or two on a busy 2-core machine
def test_the_compiled_server_serves_a_pooled_net_as_eager_computes_it() -> None:
    """As served by default: compiled (inductor), bf16, the BatchNorms folded."""
    net = build_net(POOLED, seed=7).eval()
    randomise_batchnorm(net, 7)
    with torch.no_grad():  # a pooled bias as strong as a trained one, not a fresh layer's
        net.tower[1].pool_fc.weight.mul_(10)
    blob = state_dict_to_bytes(net.state_dict())
    backend = TorchBackend(
        POOLED,
        BackendConfig(
            device="cpu",
            dtype="bfloat16",
            torch=TorchConfig(compile="inductor", batch_buckets=(8,)),
        ),
    )
    obs = _obs(8, seed=3)

    async def serve() -> tuple[np.ndarray, np.ndarray]:
        await backend.start()
        try:
            await backend.load(0, blob)
            logits, value = await backend.infer(0, obs.numpy().astype(np.uint8))
            return np.asarray(logits), np.asarray(value)
        finally:
            await backend.aclose()

    logits, value = asyncio.run(serve())
    ref = build_net(POOLED, seed=None).eval()
    ref.load_state_dict(bytes_to_state_dict(blob))
    with torch.inference_mode():
        want_l, want_v = ref(obs)
    # bf16 keeps 8 bits of mantissa: a looser bound than fp32's (the folded fp32 function is
    # checked to 1e-4 above), still well below what the pooled bias moves.
    np.testing.assert_allclose(logits, want_l.numpy(), rtol=0.05, atol=0.05)
    np.testing.assert_allclose(value, want_v.numpy(), rtol=0.05, atol=0.05)
    without = build_net(POOLED, seed=None).eval()
    without.load_state_dict(bytes_to_state_dict(blob))
    with torch.no_grad():
        without.tower[1].pool_fc.weight.zero_()
        off_l, _ = without(obs)
    served_error = np.abs(logits - want_l.numpy()).max()
    assert np.abs(off_l.numpy() - want_l.numpy()).max() > 5 * served_error


@pytest.mark.parametrize(
    ("change", "key"),
    [
        ({"global_pool_every": -1}, "net.global_pool_every"),
        ({"global_pool_every": 2, "global_pool_channels": 12}, "net.global_pool_channels"),
        ({"heads": ("ownership", "territory")}, "net.heads"),
    ],
)
def test_bad_options_name_their_key(change: dict[str, object], key: str) -> None:
    with pytest.raises(ConfigError, match=key):
        dataclasses.replace(TINY, **change)  # type: ignore[arg-type]
