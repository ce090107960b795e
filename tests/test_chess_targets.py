"""Two learning parts for chess and shogi (issue 49): the win/draw/loss value head (served as
``P(win) - P(loss)``, trained by cross-entropy against the outcome made a distribution) and the
material targets (``score``: the final balance; ``material_ahead``: the balance some plies on).
Off, the net and the config are today's; on, real chess self-play feeds a learner step that
moves the heads."""

from __future__ import annotations

import asyncio
import dataclasses
import io
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from actors.games import make_game
from actors.games.compiled import core
from actors.material import MaterialTrack, material_targets
from actors.selfplay import game_targets
from azserve.config.schema import actors_config, load_config
from azserve.errors import ConfigError
from azserve.model.network import build_net
from azserve.model.spec import NetConfig
from learner.config import TrainerConfig
from learner.loss import alphazero_loss, wdl_target
from learner.replay import Batch
from learner.trainer import Trainer
from tests.test_net_variants import TODAY, _today_keys

needs_core = pytest.mark.skipif(core is None, reason="chess and shogi need the compiled core")
pytestmark = pytest.mark.usefixtures("torch_one_thread")

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
TINY = NetConfig(in_channels=3, height=5, width=5, num_actions=26, blocks=1, channels=8)
WDL = dataclasses.replace(TINY, value_head="wdl")
WORTH = np.array([1, 3, 3, 5, 9], np.float32)  # the mover's P N B R Q planes, then the opponent's


def _obs(rows: int, channels: int = 3, seed: int = 0) -> torch.Tensor:
    rng = np.random.default_rng(seed)
    return torch.from_numpy(rng.integers(0, 2, (rows, channels, 5, 5), dtype=np.uint8)).float()


def test_the_wdl_head_serves_p_win_minus_p_loss_in_range() -> None:
    net = build_net(WDL, seed=3).eval()
    with torch.no_grad():  # strong logits too: the value stays in [-1, 1]
        net.value_fc2.weight.mul_(50)
    x = _obs(32)
    with torch.inference_mode():
        _, value = net(x)
        out = net.forward_all(x)
    assert out.wdl is not None and out.wdl.shape == (32, 3)
    p = torch.softmax(out.wdl, dim=1)
    torch.testing.assert_close(value, p[:, 0] - p[:, 2])
    assert torch.equal(value, out.value)
    assert value.min() >= -1 and value.max() <= 1 and value.abs().max() > 0.5
    # Triton's TorchScript export serves the same value.
    from azserve.backends.triton_repo import torchscript_bytes
    from azserve.model.weights import state_dict_to_bytes

    blob = torchscript_bytes(WDL, state_dict_to_bytes(net.state_dict()))
    with warnings.catch_warnings():  # torch deprecates TorchScript; libtorch still loads it
        warnings.filterwarnings("ignore", r"`torch\.jit\.\w+` is deprecated", DeprecationWarning)
        scripted = torch.jit.load(io.BytesIO(blob))
    with torch.inference_mode():
        torch.testing.assert_close(scripted(x.to(torch.uint8))[1], value)


def test_a_scalar_value_head_is_todays_net_key_for_key() -> None:
    for cfg in TODAY:
        assert (
            cfg.value_head == "scalar"
            and build_net(cfg).forward_all(torch.zeros(1, *cfg.obs_shape)).wdl is None
        )
        keys = set(build_net(cfg).state_dict())
        assert keys == _today_keys(cfg)
        # The WDL net has the same keys, only the last value layer is 3 wide.
        wdl = build_net(dataclasses.replace(cfg, value_head="wdl")).state_dict()
        assert set(wdl) == keys and wdl["value_fc2.weight"].shape[0] == 3


def test_the_wdl_target_of_each_outcome() -> None:
    z = torch.tensor([1.0, 0.0, -1.0, 0.5, -0.25])
    want = torch.tensor(
        [[1, 0, 0], [0, 1, 0], [0, 0, 1], [0.5, 0.5, 0], [0, 0.75, 0.25]], dtype=torch.float32
    )
    target = wdl_target(z)
    torch.testing.assert_close(target, want)
    torch.testing.assert_close(target[:, 0] - target[:, 2], z)  # the expected result is z
    # The value loss is the cross-entropy of the logits against it, under the same name.
    logits = torch.randn(5, 3)
    parts = alphazero_loss(
        torch.zeros(5, 4), torch.zeros(5), torch.full((5, 4), 0.25), z, value_weight=2.0, wdl=logits
    )
    ce = -(want * torch.log_softmax(logits, dim=1)).sum(dim=1).mean()
    torch.testing.assert_close(parts.value, ce)
    torch.testing.assert_close(parts.total, parts.policy + 2.0 * ce)


@needs_core
def test_chess_material_on_known_positions() -> None:
    chess = make_game("chess")
    assert chess.material_balance(chess.initial_state()) == 0
    queen_up_w = chess.from_fen("4k3/8/8/8/8/8/8/3QK3 w - - 0 1")
    queen_up_b = chess.from_fen("4k3/8/8/8/8/8/8/3QK3 b - - 0 1")
    assert chess.material_balance(queen_up_w) == chess.material_balance(queen_up_b) == 9
    # For the side to move: +9 for White to move, -9 for Black to move.
    for s, want in ((queen_up_w, 9.0), (queen_up_b, -9.0)):
        got = material_targets(np.array([9.0]), np.array([0]), np.array([chess.to_play(s)]), 8)
        assert got["score"][0] == got["material_ahead"][0] == want
        planes = chess.encode(s).astype(np.float32)  # the same from the planes
        assert WORTH @ planes[0:5].sum(axis=(1, 2)) - WORTH @ planes[6:11].sum(axis=(1, 2)) == want
    lopsided = chess.from_fen("r3k3/8/8/8/8/8/PPPP4/RNB1K3 w - - 0 1")  # 4 + 5 + 3 + 3 vs 5
    assert chess.material_balance(lopsided) == 10


@needs_core
def test_shogi_material_counts_pieces_in_hand() -> None:
    shogi = make_game("shogi")
    assert shogi.material_balance(shogi.initial_state()) == 0
    # Sente took gote's rook and holds it (10 off gote's board, 10 in sente's hand) and a pawn
    # (its own nine pawns, gote's eight on the board).
    took = shogi.from_sfen("lnsgkgsnl/7b1/pppppppp1/9/9/9/PPPPPPPPP/1B5R1/LNSGKGSNL w RP 1")
    assert shogi.material_balance(took) == 22
    # A promoted bishop (+B 10) of gote's against sente's bishop (8): 2 for gote.
    horse = shogi.from_sfen("lnsgkgsnl/1r5+b1/ppppppppp/9/9/9/PPPPPPPPP/1B5R1/LNSGKGSNL b - 1")
    assert shogi.material_balance(horse) == -2
    assert shogi.score_scale == 20.0 and make_game("chess").score_scale == 10.0


def test_material_ahead_counts_plies_not_recorded_positions() -> None:
    # 6 plies: the balance after each (the first player's), the last the final position's.
    balances = np.array([0, 0, 1, 1, 3, 3, -2], np.float64)
    plies = np.array([0, 2, 3, 5])  # plies 1 and 4 were fast searches, not recorded
    movers = np.array([0, 0, 1, 1])
    got = material_targets(balances, plies, movers, ahead=2)
    # Plies 2, 4, 5 and 6 (the end: 5 + 2 is past it), each from its mover's view.
    np.testing.assert_array_equal(got["material_ahead"], [1, 3, -3, 2])
    np.testing.assert_array_equal(got["score"], [-2, -2, 2, 2])
    assert all(a.dtype == np.float32 for a in got.values())


@needs_core
def test_a_played_chess_game_carries_its_material_unless_resigned() -> None:
    chess = make_game("chess")
    track = MaterialTrack(chess, ahead=2)
    s = chess.initial_state()
    movers = []
    for i, uci in enumerate(["e2e4", "d7d5", "e4d5", "d8d5", "b1c3", "d5a2"]):
        track.play(s, recorded=i != 1)  # the second move was a fast search
        if i != 1:
            movers.append(chess.to_play(s))
        s = chess.apply(s, chess.parse_uci(s, uci))
    movers_a = np.array(movers)
    replies: list[np.ndarray | None] = [None] * len(movers)
    got = game_targets(chess, s, movers_a, replies, played_out=True, material=track)
    assert list(got) == ["score", "material_ahead", "reply"]
    # White's balance after each ply: 0 0 0 +1 (exd5) 0 (Qxd5) 0 -1 (Qxa2). Recorded plies
    # 0, 2, 3, 4, 5 (movers w w b w b); two plies on: 2, 4, 5, 6, 6 (the end).
    np.testing.assert_array_equal(got["score"], [-1, -1, 1, -1, 1])
    np.testing.assert_array_equal(got["material_ahead"], [0, 0, 0, -1, 1])
    assert list(game_targets(chess, s, movers_a, replies, False, track)) == ["reply"]
    assert list(game_targets(chess, s, movers_a, replies, True)) == ["reply"]  # untracked: today's


def test_the_config_keys_and_their_errors() -> None:
    on = load_config(CONFIGS / "chess-wdl.toml")
    assert on.net.value_head == "wdl" and {"score", "material_ahead"} <= set(on.net.heads)
    assert on.trainer.score_weight > 0 and on.trainer.material_ahead_weight > 0
    actors = actors_config(on)
    assert actors.targets and actors.material_ahead_plies == on.trainer.material_ahead_plies
    # Switched off key by key, it is configs/chess.toml.
    off = ["net.value_head=scalar", "net.heads=[]", "trainer.score_weight=0",
           "trainer.material_ahead_weight=0", "trainer.material_ahead_plies=16"]  # fmt: skip
    plain = load_config(CONFIGS / "chess.toml")
    assert dataclasses.asdict(load_config(CONFIGS / "chess-wdl.toml", off)) == dataclasses.asdict(
        plain
    )
    assert actors_config(plain).material_ahead_plies == 0 and not actors_config(plain).targets
    with pytest.raises(ConfigError, match=r"net.value_head: must be one of \['scalar', 'wdl'\]"):
        load_config(None, ["net.value_head=tanh"])
    with pytest.raises(ConfigError, match="trainer.material_ahead_plies=0: must be"):
        load_config(None, ["trainer.material_ahead_plies=0"])
    with pytest.raises(ConfigError, match="connect4 gives no material"):
        load_config(None, ["trainer.material_ahead_weight=1", 'net.heads=["material_ahead"]'])
    shogi = ["game=shogi", 'net.heads=["score", "material_ahead"]', "trainer.score_weight=1",
             "trainer.material_ahead_weight=0.5", "trainer.material_ahead_plies=8"]  # fmt: skip
    assert actors_config(load_config(None, shogi)).material_ahead_plies == 8
    with pytest.raises(ConfigError, match="needs the material_ahead head"):
        load_config(None, ["game=chess", "trainer.material_ahead_weight=1"])


class _Sink:
    def __init__(self) -> None:
        self.items: list[tuple[Any, list[Any]]] = []

    async def send(self, traj: Any, *arrays: Any) -> None:
        self.items.append((traj, list(arrays)))


def _dense(a: Any, width: int) -> np.ndarray:
    return a.dense(width) if hasattr(a, "dense") else np.asarray(a)


@needs_core
@pytest.mark.timeout(120)
async def test_chess_self_play_trains_the_wdl_and_material_heads() -> None:
    """Two real chess games through a real server (a tiny WDL net with the material heads,
    every move recorded): the material targets agree with the planes, and a learner step on
    them gives finite losses and moves the heads."""
    from actors.config import ActorsConfig
    from actors.search import MCTSConfig
    from actors.selfplay import SelfPlay
    from azserve import ClientConfig, EvalClient, InferenceServer, InitialWeights
    from azserve.backends import BackendConfig, TorchConfig, make_backend
    from azserve.model.network import initial_weights
    from tests.conftest import server_config

    name = "chess(max_plies=30,history=1)"
    game = make_game(name)
    c, h, w = game.obs_shape
    a = game.num_actions
    net = NetConfig(
        in_channels=c, height=h, width=w, num_actions=a, blocks=1, channels=8,
        policy_channels=2, heads=("score", "material_ahead"), value_head="wdl",
    )  # fmt: skip
    backend = make_backend(net, BackendConfig(device="cpu", torch=TorchConfig(compile="none")))
    server = InferenceServer(server_config("tcp://127.0.0.1:*"), net.spec, backend)
    await server.start(InitialWeights(0, initial_weights(net)))
    ahead = 4
    try:
        async with EvalClient(ClientConfig(server=server.endpoint)) as client:
            sink = _Sink()
            mcts = MCTSConfig(num_simulations=2, resign_threshold=-2.0)  # never resigns
            actors = ActorsConfig(
                games=2, max_games=2, status_interval_s=0, targets=True,
                material_ahead_plies=ahead, seed=5,
            )  # fmt: skip
            sp = SelfPlay(name, actors, mcts, client, sink, "a0")  # type: ignore[arg-type]
            await asyncio.wait_for(sp.run(asyncio.Event()), 90)
    finally:
        await server.aclose(drain_timeout_s=5.0)
    assert len(sink.items) == 2
    obs, policy, outcome, score, later = [], [], [], [], []
    for traj, arrays in sink.items:
        assert traj.targets == ["score", "material_ahead", "reply"]
        o, p, z, sc, ma, _reply = arrays
        t = traj.length
        planes = o.astype(np.float32)
        mine = planes[:, 0:5].sum(axis=(2, 3)) @ WORTH - planes[:, 6:11].sum(axis=(2, 3)) @ WORTH
        # Every move is recorded, so position i is ply i and ply i + 4 has the same mover.
        np.testing.assert_array_equal(ma[: t - ahead], mine[ahead:])
        np.testing.assert_array_equal(ma[t - ahead :], sc[t - ahead :])
        assert len(set(np.abs(sc))) == 1  # one final balance, each side's sign
        obs.append(o)
        policy.append(_dense(p, a))
        outcome.append(z)
        score.append(sc)
        later.append(ma)
    assert max(np.abs(m).max() for m in later) > 0  # material changed hands: not all zeros
    n = sum(len(z) for z in outcome)
    batch = Batch(
        obs=np.concatenate(obs),
        policy=np.concatenate(policy).astype(np.float32),
        outcome=np.concatenate(outcome),
        version=np.zeros(n, np.int64),
        targets={"score": np.concatenate(score), "material_ahead": np.concatenate(later)},
        target_mask={"score": np.ones(n, bool), "material_ahead": np.ones(n, bool)},
    )
    cfg = TrainerConfig(
        batch_size=n, device="cpu", amp="none", augment=False, lr=0.1,
        score_weight=1.0, material_ahead_weight=1.0,
    )  # fmt: skip
    trainer = Trainer(net, cfg, score_scale=game.score_scale)
    heads = ("value_fc2.weight", "score_fc.weight", "material_ahead_fc.weight")
    before = {k: trainer.model.state_dict()[k].clone() for k in heads}
    out = trainer.step(batch)
    for key in ("loss", "policy_loss", "value_loss", "score_loss", "material_ahead_loss"):
        assert np.isfinite(out[key]), key
    after = trainer.model.state_dict()
    for key in heads:
        assert not torch.equal(before[key], after[key]), key
