"""The moves-left head (issue 49, Leela's): the plies from each position to where its game
stopped, learnt by a head on the value head's hidden layer with lc0's Huber loss, and a served
value discounted by it (``net.moves_left_discount``), so that the search prefers the shorter
win and the longer loss. Off, the net serves today's value bit for bit and the trajectories
carry no new array; on, ``azserve train`` trains it end to end."""

from __future__ import annotations

import asyncio
import dataclasses
import io
import math
import subprocess
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from actors import selfplay
from actors.games import make_game
from actors.search import MCTSConfig
from actors.selfplay import SelfPlayStats, play_game
from azserve.config.schema import actors_config, load_config
from azserve.errors import ConfigError
from azserve.model.network import AlphaZeroNet, build_net
from azserve.model.spec import MOVES_LEFT_SCALE, NetConfig
from azserve.targets import check_targets
from learner.config import TrainerConfig
from learner.loss import target_losses
from learner.replay import Batch
from learner.trainer import Trainer
from tests.conftest import free_tcp_port, quick_train_argv
from tests.test_gumbel import FakeClient

pytestmark = pytest.mark.usefixtures("torch_one_thread")

REPO = Path(__file__).resolve().parents[1]
TINY = NetConfig(in_channels=3, height=5, width=5, num_actions=26, blocks=1, channels=8)
HEAD = dataclasses.replace(TINY, heads=("moves_left",))
TTT = make_game("tictactoe")


def _obs(rows: int, seed: int = 0) -> torch.Tensor:
    rng = np.random.default_rng(seed)
    return torch.from_numpy(rng.integers(0, 2, (rows, *TINY.obs_shape), dtype=np.uint8)).float()


@pytest.mark.parametrize("value_head", ["scalar", "wdl"])
def test_the_head_adds_its_keys_and_leaves_forward_bit_for_bit(value_head: str) -> None:
    plain = dataclasses.replace(TINY, value_head=value_head)
    without, with_head = (
        build_net(plain, seed=3),
        build_net(dataclasses.replace(HEAD, value_head=value_head), seed=3),
    )
    added = set(with_head.state_dict()) - set(without.state_dict())
    assert added == {"moves_left_fc.weight", "moves_left_fc.bias"}
    assert set(without.state_dict()) <= set(with_head.state_dict())
    x = _obs(16)
    with torch.inference_mode():
        want, got = without.eval()(x), with_head.eval()(x)  # the head is made after the rest
        out = with_head.forward_all(x)
    assert torch.equal(want[0], got[0]) and torch.equal(want[1], got[1])
    assert torch.equal(got[1], out.value)
    assert out.moves_left is not None and out.moves_left.shape == (16,)
    assert (out.moves_left >= 0).all()
    assert without.forward_all(x).moves_left is None


def _hand_set(net: AlphaZeroNet, value: float, plies: float) -> None:
    """Every position's value head answers ``value`` and its moves-left head ``plies``."""
    with torch.no_grad():
        net.value_fc2.weight.zero_()
        net.value_fc2.bias.fill_(math.atanh(value))
        assert net.moves_left_fc is not None
        net.moves_left_fc.weight.zero_()
        m = plies / MOVES_LEFT_SCALE  # softplus(b) = m
        net.moves_left_fc.bias.fill_(math.log(math.expm1(m)))


def _served(cfg: NetConfig, value: float, plies: float) -> float:
    net = build_net(cfg, seed=0).eval()
    _hand_set(net, value, plies)
    with torch.inference_mode():
        served = net(_obs(4))[1]
        assert torch.allclose(net.forward_all(_obs(4)).value, torch.tensor(value))  # trained as is
    assert torch.allclose(served, served[0])
    return float(served[0])


def test_the_discount_prefers_the_shorter_win_and_the_longer_loss() -> None:
    alpha = 0.2
    on = dataclasses.replace(HEAD, moves_left_discount=alpha)
    assert _served(HEAD, 0.8, 10) == pytest.approx(0.8, abs=1e-6)  # off: the value as is
    near, far = _served(on, 0.8, 10), _served(on, 0.8, 60)
    assert near > far > 0
    assert near == pytest.approx(0.8 * (1 - alpha * 0.1), rel=1e-5)
    assert far == pytest.approx(0.8 * (1 - alpha * 0.6), rel=1e-5)
    soon, late = _served(on, -0.8, 10), _served(on, -0.8, 60)
    assert soon < late < 0  # a loss further off is less bad
    # Beyond MOVES_LEFT_SCALE plies the discount stays at alpha.
    assert _served(on, 0.8, 300) == pytest.approx(0.8 * (1 - alpha), rel=1e-5)


def test_the_discounted_net_scripts_for_triton_and_serves_the_same() -> None:
    from azserve.backends.triton_repo import torchscript_bytes
    from azserve.model.weights import state_dict_to_bytes

    for cfg in (HEAD, dataclasses.replace(HEAD, moves_left_discount=0.3, value_head="wdl")):
        net = build_net(cfg, seed=5).eval()
        with torch.no_grad():  # a head that varies with the position
            assert net.moves_left_fc is not None
            net.moves_left_fc.weight.normal_(0, 1)
        x = _obs(8, seed=1)
        with warnings.catch_warnings():  # torch deprecates TorchScript; libtorch still loads it
            warnings.filterwarnings(
                "ignore", r"`torch\.jit\.\w+` is deprecated", DeprecationWarning
            )
            scripted = torch.jit.script(net)
            loaded = torch.jit.load(
                io.BytesIO(torchscript_bytes(cfg, state_dict_to_bytes(net.state_dict())))
            )
        with torch.inference_mode():
            want = net(x)
            torch.testing.assert_close(scripted(x)[1], want[1])
            torch.testing.assert_close(loaded(x.to(torch.uint8))[1], want[1])


@pytest.mark.parametrize("compile", ["none", "jit"])
def test_the_server_serves_the_discounted_value(compile: str) -> None:
    from azserve.backends.base import BackendConfig, TorchConfig
    from azserve.backends.torch_backend import TorchBackend
    from azserve.model.weights import state_dict_to_bytes

    cfg = dataclasses.replace(HEAD, moves_left_discount=0.5)
    net = build_net(cfg, seed=2).eval()
    _hand_set(net, 0.6, 30)
    blob = state_dict_to_bytes(net.state_dict())
    # fp32: ``dtype = "auto"`` serves bf16 on a CPU that has it natively (0.51 comes back
    # 0.5078125), and this is about the discount, not the precision
    backend = TorchBackend(
        cfg,
        BackendConfig(device="cpu", dtype="float32", torch=TorchConfig(compile=compile)),
    )
    obs = _obs(4).numpy().astype(np.uint8)

    async def serve() -> np.ndarray:
        await backend.start()
        try:
            await backend.load(0, blob)
            return np.asarray((await backend.infer(0, obs))[1])
        finally:
            await backend.aclose()

    np.testing.assert_allclose(asyncio.run(serve()), 0.6 * (1 - 0.5 * 0.3), rtol=1e-5)


class _Resigns:
    """A search whose side to move resigns at move ``at``, and at no other."""

    def __init__(self, inner: Any, at: int) -> None:
        self.inner, self.at = inner, at

    def should_resign(self, root_value: float, move: int, allowed: bool) -> bool:
        return move == self.at

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


async def _games(n: int, fraction: float, seed: int, moves_left: bool = True) -> list[Any]:
    cfg = MCTSConfig(
        num_simulations=4, fast_simulations=2, full_search_fraction=fraction, resign_threshold=-2
    )
    rng = np.random.default_rng(seed)
    client: Any = FakeClient(TTT)  # the two calls play_game makes
    stats = SelfPlayStats()
    return [
        await play_game(TTT, cfg, client, rng, stats, targets=True, moves_left=moves_left)
        for _ in range(n)
    ]


async def test_the_target_is_the_plies_to_where_each_game_stopped() -> None:
    # Every move recorded: T, T - 1, ..., 1 (the last position's move ended the game).
    for g in await _games(3, 1.0, seed=1):
        t = len(g.outcome)
        assert g.moves == t and list(g.targets) == ["moves_left", "reply"]
        np.testing.assert_array_equal(g.targets["moves_left"], np.arange(t, 0, -1))
        assert g.targets["moves_left"].dtype == np.float32
        assert check_targets(list(g.targets), list(g.targets.values()), t, TTT.obs_shape, 9) is None
    # Playout cap randomization: the fast searches' plies count too. A tic-tac-toe position's
    # ply is its stones.
    seen = 0
    for g in await _games(6, 0.5, seed=2):
        if not len(g.outcome):
            continue
        ply = g.obs.sum(axis=(1, 2, 3))
        np.testing.assert_array_equal(g.targets["moves_left"], g.moves - ply)
        seen += len(g.outcome) < g.moves
    assert seen  # some game skipped a position
    # Off: the trajectory of before.
    assert [list(g.targets) for g in await _games(1, 1.0, seed=1, moves_left=False)] == [["reply"]]


async def test_a_resigned_game_counts_to_its_resignation(monkeypatch: pytest.MonkeyPatch) -> None:
    real = selfplay.make_search
    monkeypatch.setattr(selfplay, "make_search", lambda *a: _Resigns(real(*a), at=4))
    (g,) = await _games(1, 1.0, seed=3)
    assert g.resigned and g.moves == 4
    np.testing.assert_array_equal(g.targets["moves_left"], [4, 3, 2, 1])


def test_check_targets_refuses_negative_plies() -> None:
    bad = np.array([2, -1], np.float32)
    assert "moves_left" in str(check_targets(["moves_left"], [bad], 2, TTT.obs_shape, 9))


def test_the_loss_is_leelas_huber_and_it_learns() -> None:
    # Leela's: Huber with delta 10 plies, on plies over 20.
    pred = torch.tensor([0.3, 0.3, 0.3])  # 30 plies
    target = torch.tensor([30.0, 40.0, 100.0])
    masks = {"moves_left": torch.ones(3, dtype=torch.bool)}
    got = target_losses({"moves_left": pred}, {"moves_left": target}, masks, 1.0)["moves_left"]
    want = (0.0 + 0.5 * 0.5**2 + 0.5 * (3.5 - 0.25)) / 3
    assert float(got) == pytest.approx(want, rel=1e-5)
    # A few steps on a tiny batch: finite, and falling.
    rng = np.random.default_rng(0)
    n = 32
    plies = rng.integers(1, 80, n).astype(np.float32)
    policy = np.full((n, TINY.num_actions), 1 / TINY.num_actions, np.float32)
    batch = Batch(
        obs=_obs(n).numpy().astype(np.uint8), policy=policy,
        outcome=rng.choice([-1.0, 1.0], n).astype(np.float32), version=np.zeros(n, np.int64),
        targets={"moves_left": plies}, target_mask={"moves_left": np.ones(n, bool)},
    )  # fmt: skip
    cfg = TrainerConfig(batch_size=n, device="cpu", amp="none", augment=False, lr=0.05,
                        moves_left_weight=1.0)  # fmt: skip
    trainer = Trainer(HEAD, cfg)
    losses = [trainer.step(batch)["moves_left_loss"] for _ in range(8)]
    assert all(np.isfinite(losses)) and losses[-1] < 0.5 * losses[0], losses


def test_the_config_wires_the_actors_and_refuses_what_does_not_fit() -> None:
    on = load_config(REPO / "configs" / "chess-movesleft.toml")
    assert "moves_left" in on.net.heads and on.net.moves_left_discount > 0
    assert on.trainer.moves_left_weight > 0
    assert actors_config(on).targets and actors_config(on).moves_left
    plain = load_config(REPO / "configs" / "chess.toml")
    assert not actors_config(plain).moves_left and not actors_config(plain).targets
    # Switched off key by key, it is configs/chess.toml.
    off = ["net.heads=[]", "net.moves_left_discount=0", "trainer.moves_left_weight=0"]
    on_off = load_config(REPO / "configs" / "chess-movesleft.toml", off)
    assert dataclasses.asdict(on_off) == dataclasses.asdict(plain)
    bad = {
        "trainer.moves_left_weight=0.5": "trainer.moves_left_weight=0.5 needs the moves_left head",
        "net.moves_left_discount=0.1": "net.moves_left_discount=0.1 needs the moves_left head",
        'net.heads=["moves_left"]|net.moves_left_discount=0.1':
            "net.moves_left_discount=0.1 discounts the served value by the moves_left head, "
            "which trainer.moves_left_weight=0 leaves untrained",
        'net.heads=["moves_left"]|net.moves_left_discount=1.5|trainer.moves_left_weight=1':
            "net.moves_left_discount=1.5: must be in [0",
        "trainer.moves_left_weight=-1": "trainer.moves_left_weight=-1.0: must be in [0",
    }  # fmt: skip
    for sets, message in bad.items():
        with pytest.raises(ConfigError) as err:
            load_config(None, sets.split("|"))
        assert message in str(err.value) and "\n" not in str(err.value), str(err.value)


@pytest.mark.slow
@pytest.mark.timeout(600)  # about 30 s on a quiet machine; 12 min on a busy 2-core one
def test_azserve_train_trains_the_head_and_stores_its_games(tmp_path: Path) -> None:
    from learner.checkpoint import latest_checkpoint, load_checkpoint
    from learner.journal import Journal
    from tests.conftest import run_metrics

    run_dir = tmp_path / "run"
    sets = (
        'net.heads=["moves_left"]',
        "trainer.moves_left_weight=0.5",
        "net.moves_left_discount=0.1",
        "actors.games=32",
        "mcts.num_simulations=8",
        "replay.min_size=200",
        "learner.journal_keep_all=true",
        "learner.log_every=1",  # a metrics row for each step
        "eval.sims=0",  # the final evaluation: the raw policy only, no matches
        "eval.match_games=0",
        f"server.bind=tcp://127.0.0.1:{free_tcp_port()}",
        f"learner.bind=tcp://127.0.0.1:{free_tcp_port()}",
    )
    argv = [*quick_train_argv("tictactoe", run_dir, *sets), "--steps", "5"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=540)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    ckpt = latest_checkpoint(run_dir / "checkpoints")
    assert ckpt is not None and load_checkpoint(ckpt).meta.step >= 5
    rows = [r for r in run_metrics(run_dir) if "moves_left_loss" in r]
    assert rows and all(np.isfinite(r["moves_left_loss"]) for r in rows)
    records = [r for _, r in Journal(run_dir / "journal").read()]
    assert records
    for msg, obs, _policy, outcome, targets in records:
        assert msg.targets == ["moves_left", "reply"]
        left = targets["moves_left"]
        np.testing.assert_array_equal(left, msg.moves - obs.sum(axis=(1, 2, 3)))
        assert len(left) == len(outcome) and left.min() >= 1
