"""The targets a game can give (azserve.targets): their values at known final positions (Go,
Othello), each position's view of them in a played game, their way through the wire, the
journal and the replay, their augmentation and loss; and a game without them unchanged bit
for bit (the same record bytes, the same loss)."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import io
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from actors.finished import FinishedGame, game_targets, to_message
from actors.games.go.rules import BLACK, WHITE, Go, GoState
from actors.games.othello import Othello, OthelloState
from actors.games.tictactoe import TicTacToe
from azserve.errors import ConfigError
from azserve.model.spec import NetConfig
from azserve.protocol import decode
from azserve.targets import check_targets
from azserve.trajfile import read_trajectory_file, write_record
from learner.config import ReplayConfig, TrainerConfig
from learner.journal import Journal
from learner.loss import augment
from learner.replay import Batch, Replay
from learner.trainer import Trainer

NET5 = NetConfig(in_channels=4, height=5, width=5, num_actions=26, blocks=2, channels=8)


def _go_board(n: int, stones: dict[tuple[int, int], int]) -> bytes:
    board = bytearray(n * n)
    for (row, col), colour in stones.items():
        board[row * n + col] = colour
    return bytes(board)


def test_go_ownership_and_score_are_tromp_taylor_at_the_end() -> None:
    go = Go(5, komi=0.5)
    # Black walls column B, white column D; a white stone sits in black's area at a1 (Tromp-
    # Taylor removes nothing: it stays white, and the region it touches is no one's).
    stones = {(r, 1): BLACK for r in range(5)} | {(r, 3): WHITE for r in range(5)}
    stones[(0, 0)] = WHITE
    state = GoState(_go_board(5, stones), 0, 2, 30, frozenset())
    assert go.is_terminal(state)
    owner, margin = go.final_targets(state)
    assert owner.dtype == np.int8 and owner.shape == (5, 5)
    # Planes' layout: the top row (row 5) first; a1 is the bottom-left corner.
    want = np.array([[0, 1, 0, -1, -1]] * 4 + [[-1, 1, 0, -1, -1]], np.int8)
    np.testing.assert_array_equal(owner, want)
    black, white = 5, 5 + 1 + 5  # stones; white's stones and its column E
    assert margin == black - white - 0.5 == go.score(state)


def test_go_targets_of_a_played_game_turn_with_the_side_to_move() -> None:
    go = Go(5, komi=0.5)
    # Black c3, white passes, black passes: black owns every point.
    final = go.from_moves([12, 25, 25])
    assert go.is_terminal(final)
    movers = np.array([0, 1, 0])
    replies = [np.eye(26, dtype=np.float32)[25]] * 2 + [None]
    got = game_targets(go, final, movers, replies, played_out=True)
    assert list(got) == ["ownership", "score", "reply"]
    assert (got["ownership"][0] == 1).all() and (got["ownership"][1] == -1).all()
    np.testing.assert_array_equal(got["score"], [24.5, -24.5, 24.5])
    assert got["reply"][0, 25] == 1 and not got["reply"][2].any()
    # The same planes: a black stone is the side to move's (plane 0) when black moves.
    obs = go.encode(go.from_moves([12]))  # white to move: plane 1 holds black's stone
    assert obs[1, 2, 2] == 1 and got["ownership"][1, 2, 2] == -1
    resigned = game_targets(go, final, movers, replies, played_out=False)
    assert list(resigned) == ["reply"]


def test_othello_ownership_is_each_squares_final_disc() -> None:
    othello = Othello()
    top = (1 << 32) - 1  # rows 1-4 (row 0 at the top, as the planes)
    full = OthelloState(black=top, white=((1 << 64) - 1) ^ top, color=0, ply=60)
    assert othello.is_terminal(full)
    owner, margin = othello.final_targets(full)
    np.testing.assert_array_equal(owner, np.array([[1] * 8] * 4 + [[-1] * 8] * 4, np.int8))
    assert margin == 0.0
    wiped = OthelloState(black=0b111 | (1 << 63), white=0, color=1, ply=20)
    assert othello.is_terminal(wiped)
    owner, margin = othello.final_targets(wiped)
    assert owner.sum() == 4 and owner[0, :3].tolist() == [1, 1, 1] and owner[7, 7] == 1
    assert margin == 4.0
    assert (othello.encode(wiped)[1].astype(np.int8) == owner).all()  # white to move
    assert TicTacToe().final_targets(TicTacToe().initial_state()) is None


def _game_with_targets(t: int = 3) -> FinishedGame:
    go = Go(5, komi=0.5)
    rng = np.random.default_rng(t)
    final = go.from_moves([12, 25, 25])
    movers = np.arange(t) % 2
    replies = [rng.dirichlet(np.ones(26)).astype(np.float32) for _ in range(t - 1)] + [None]
    return FinishedGame(
        obs=rng.integers(0, 2, (t, 4, 5, 5), dtype=np.uint8),
        policy=rng.dirichlet(np.ones(26), t).astype(np.float32),
        outcome=np.where(movers == 0, 1.0, -1.0).astype(np.float32),
        version=2,
        result=1.0,
        resigned=False,
        moves=t + 1,
        targets=game_targets(go, final, movers, replies, played_out=True),
    )


def test_targets_travel_through_the_wire_and_the_journal(tmp_path: Path) -> None:
    game = _game_with_targets()
    msg, arrays = to_message(game, "actor-0", 5, "go5")
    assert msg.targets == ["ownership", "score", "reply"] and len(arrays) == 6
    journal = Journal(tmp_path / "journal", sync_ms=None)
    journal.rotate(0)
    journal.append(msg, *arrays)
    journal.close()
    [(_, (got, obs, policy, outcome, targets))] = list(journal.read())
    assert got.targets == msg.targets and got.game_id == 5
    np.testing.assert_array_equal(obs, game.obs)
    for name, want in game.targets.items():
        assert targets[name].dtype == want.dtype
        np.testing.assert_array_equal(targets[name], want)


def test_a_trajectory_without_targets_keeps_its_bytes() -> None:
    """The record of a game without targets is byte for byte what it was before targets
    existed (the sha256 below was written by commit 561a8eb's code from the same game)."""
    t = 4
    rng = np.random.default_rng(3)
    game = FinishedGame(
        obs=rng.integers(0, 2, (t, 4, 9, 9), dtype=np.uint8),
        policy=rng.dirichlet(np.ones(82), t).astype(np.float32),
        outcome=np.array([1, -1, 1, -1], np.float32),
        version=7,
        result=1.0,
        resigned=False,
        moves=9,
    )
    msg, arrays = to_message(game, "actor-0", 12, "go9")
    f = io.BytesIO()
    write_record(f, msg, *arrays)
    digest = hashlib.sha256(f.getvalue()).hexdigest()
    assert digest == "a9e716ea9ee1888846c45ff505a7702f2e18a9a4ab99426079c8a4f3d0480790"


def test_a_file_of_games_with_and_without_targets_reads_back(tmp_path: Path) -> None:
    path = tmp_path / "games.azt"
    with_targets = _game_with_targets()
    without = dataclasses.replace(with_targets, targets={})
    from azserve.trajfile import open_for_append

    with open_for_append(path) as f:
        for i, g in enumerate([with_targets, without]):
            msg, arrays = to_message(g, "a", i, "go5")
            write_record(f, msg, *arrays)
    (m0, *_, t0), (m1, *_, t1) = read_trajectory_file(path)
    assert list(t0) == ["ownership", "score", "reply"] and t1 == {}
    assert not m1.targets


def test_bad_targets_are_refused_with_their_name() -> None:
    game = _game_with_targets()
    names, arrays = list(game.targets), list(game.targets.values())
    assert check_targets(names, arrays, 3, (4, 5, 5), 26) is None
    bad = [arrays[0].astype(np.float32), *arrays[1:]]
    assert "target ownership must be int8[3, 5, 5]" in str(
        check_targets(names, bad, 3, (4, 5, 5), 26)
    )
    assert "out of the order" in str(check_targets(names[::-1], arrays[::-1], 3, (4, 5, 5), 26))
    assert "unknown target 'territory'" in str(check_targets(["territory"], [], 3, (4, 5, 5), 26))
    nan = arrays[:1] + [np.full(3, np.nan, np.float32)] + arrays[2:]
    assert "score is not finite" in str(check_targets(names, nan, 3, (4, 5, 5), 26))


def _replay(targets: tuple[str, ...]) -> Replay:
    cfg = ReplayConfig(capacity=16, max_policy_lag=10, reuse_target=100.0, min_size=1)
    return Replay(cfg, (4, 5, 5), 26, targets=targets)


def test_the_replay_keeps_the_targets_asked_for_and_masks_what_a_game_lacks() -> None:
    replay = _replay(("ownership", "score", "reply"))
    game = _game_with_targets()
    replay.insert(game.obs, game.policy, game.outcome, 2, game.targets)
    resigned = {"reply": game.targets["reply"][:2]}  # no final ownership or score
    replay.insert(game.obs[:2] + 1, game.policy[:2], game.outcome[:2], 2, resigned)
    batch = replay.sample(64, np.random.default_rng(0))
    played = np.array([any((o == g).all() for g in game.obs) for o in batch.obs])
    np.testing.assert_array_equal(batch.target_mask["ownership"], played)
    np.testing.assert_array_equal(batch.target_mask["score"], played)
    for row in np.flatnonzero(played):
        i = next(i for i, g in enumerate(game.obs) if (g == batch.obs[row]).all())
        np.testing.assert_array_equal(batch.targets["ownership"][row], game.targets["ownership"][i])
        assert batch.targets["score"][row] == game.targets["score"][i]
        # The last position has no reply (a row of zeros): masked.
        assert batch.target_mask["reply"][row] == (i < 2)
    assert played.any() and not played.all()
    plain = _replay(())
    plain.insert(game.obs, game.policy, game.outcome, 2, game.targets)  # not kept
    b = plain.sample(4, np.random.default_rng(0))
    assert dict(b.targets) == {} and dict(b.target_mask) == {}


def test_augmentation_moves_ownership_and_replies_with_the_board() -> None:
    go = Go(5)
    rng = np.random.default_rng(1)
    n = 64
    obs = rng.integers(0, 2, (n, 4, 5, 5), dtype=np.uint8)
    policy = rng.dirichlet(np.ones(26), n).astype(np.float32)
    # Targets that are functions of the board: the owner is plane 0 minus plane 1, the reply
    # the policy itself; a symmetry must keep both relations.
    own = (obs[:, 0].astype(np.int8) - obs[:, 1].astype(np.int8)).astype(np.int8)
    batch = Batch(
        obs=obs,
        policy=policy,
        outcome=np.zeros(n, np.float32),
        version=np.zeros(n, np.int64),
        targets={"ownership": own, "reply": policy.copy()},
        target_mask={"ownership": np.ones(n, bool), "reply": np.ones(n, bool)},
    )
    out = augment(batch, go.symmetries, np.random.default_rng(2))
    assert out.obs.shape == obs.shape and out.targets["ownership"].dtype == np.int8
    assert not (out.obs == obs).all(), "some rows moved"
    want = out.obs[:, 0].astype(np.int8) - out.obs[:, 1].astype(np.int8)
    np.testing.assert_array_equal(out.targets["ownership"], want)
    np.testing.assert_array_equal(out.targets["reply"], out.policy)


def _batch(n: int = 8, seed: int = 0) -> Batch:
    rng = np.random.default_rng(seed)
    return Batch(
        obs=rng.integers(0, 2, (n, 4, 5, 5), dtype=np.uint8),
        policy=rng.dirichlet(np.ones(26), n).astype(np.float32),
        outcome=rng.choice([-1.0, 1.0], n).astype(np.float32),
        version=np.zeros(n, np.int64),
    )


@pytest.fixture
def one_thread() -> object:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield None
    torch.set_num_threads(threads)


@pytest.mark.usefixtures("one_thread")
def test_without_targets_the_loss_is_todays_and_unused_heads_change_nothing() -> None:
    """Three steps on one batch give the losses commit 561a8eb's trainer gave; a net that has
    the heads but trains none of them makes the same updates (the heads are built last, so
    the tower's initial weights are the same)."""
    cfg = TrainerConfig(batch_size=8, amp="none", device="cpu", augment=False, lr=0.1)
    plain = Trainer(NET5, cfg)
    heads = Trainer(dataclasses.replace(NET5, heads=("ownership", "score", "reply")), cfg)
    batch = _batch()
    for _ in range(3):
        a, b = plain.step(batch), heads.step(batch)
    assert a["loss"] == pytest.approx(3.3970439434051514, rel=1e-5)
    assert a["policy_loss"] == pytest.approx(3.213345527648926, rel=1e-5)
    assert a["value_loss"] == pytest.approx(0.18369831144809723, rel=1e-5)
    assert {k: v for k, v in a.items() if k != "step_ms"} == {
        k: v for k, v in b.items() if k != "step_ms"
    }
    want = plain.model.state_dict()
    for key, value in heads.model.state_dict().items():
        if key in want:
            assert torch.equal(value, want[key]), key


@pytest.mark.usefixtures("one_thread")
def test_the_trainer_learns_the_targets_it_is_given() -> None:
    net = dataclasses.replace(NET5, heads=("ownership", "score", "reply"))
    cfg = TrainerConfig(
        batch_size=16,
        amp="none",
        device="cpu",
        augment=False,
        lr=0.05,
        ownership_weight=1.0,
        score_weight=1.0,
        reply_weight=1.0,
    )
    trainer = Trainer(net, cfg)
    base = _batch(16, seed=4)
    rng = np.random.default_rng(5)
    own = (base.obs[:, 0].astype(np.int8) - base.obs[:, 1].astype(np.int8)).astype(np.int8)
    mask = np.ones(16, bool)
    mask[::4] = False  # a quarter of the positions lack each target
    batch = dataclasses.replace(
        base,
        targets={
            "ownership": own,
            "score": own.reshape(16, -1).sum(axis=1).astype(np.float32),
            "reply": np.eye(26, dtype=np.float32)[rng.integers(0, 26, 16)],
        },
        target_mask={"ownership": mask, "score": mask, "reply": mask},
    )
    first = trainer.step(batch)
    for _ in range(60):
        last = trainer.step(batch)
    for name in ("ownership", "score", "reply"):
        assert last[f"{name}_loss"] < 0.8 * first[f"{name}_loss"], name
    weighted = last["policy_loss"] + last["value_loss"]
    weighted += last["ownership_loss"] + last["score_loss"] + last["reply_loss"]
    assert last["loss"] == pytest.approx(weighted, rel=1e-5)
    # Masked rows count for nothing: changing their targets leaves the loss as it was.
    other = dict(batch.targets)
    other["ownership"] = other["ownership"].copy()
    other["ownership"][~mask] *= -1
    with torch.no_grad():
        out = trainer.model.eval().forward_all(torch.from_numpy(batch.obs).float())
    from learner.loss import target_losses

    def loss_of(targets: dict[str, np.ndarray]) -> float:
        t = {"ownership": torch.from_numpy(targets["ownership"])}
        m = {"ownership": torch.from_numpy(mask)}
        return float(target_losses(out._asdict(), t, m, 25)["ownership"])

    assert loss_of(dict(batch.targets)) == loss_of(other)


def test_trained_targets_need_their_heads_and_a_game_that_gives_them() -> None:
    with pytest.raises(ConfigError, match="add 'ownership' to net.heads"):
        Trainer(NET5, TrainerConfig(device="cpu", ownership_weight=1.0))
    from azserve.config.schema import load_config

    with pytest.raises(ConfigError, match="trainer.score_weight=1.0 needs the score head"):
        load_config(None, ["game=go9", "trainer.score_weight=1.0"])
    with pytest.raises(ConfigError, match="tictactoe gives no final ownership"):
        load_config(
            None,
            ["game=tictactoe", "trainer.ownership_weight=1", 'net.heads=["ownership"]'],
        )
    # The reply needs nothing of the game.
    cfg = load_config(None, ["game=tictactoe", "trainer.reply_weight=1", 'net.heads=["reply"]'])
    from azserve.config.schema import actors_config

    assert actors_config(cfg).targets and not load_config(None, ["game=go9"]).actors.targets
    with pytest.raises(ConfigError, match="trainer.reply_weight: must be >= 0"):
        TrainerConfig(reply_weight=-1.0)


def test_go9_with_every_part_off_is_the_plain_alphazero_config() -> None:
    """configs/go9.toml (the default since issue 36's A/B) is configs/go9-alphazero.toml plus
    the features, pooling and targets: switched off key by key, the two configs are equal."""
    from azserve.config.schema import actors_config, load_config

    repo = Path(__file__).resolve().parents[1] / "configs"
    default, plain = load_config(repo / "go9.toml"), load_config(repo / "go9-alphazero.toml")
    assert (default.game, default.net.global_pool_every, default.net.in_channels) == (
        "go9-features", 3, 11)  # fmt: skip
    assert actors_config(default).targets and not actors_config(plain).targets
    off = ["game=go9", "net.global_pool_every=0", "net.heads=[]", "trainer.ownership_weight=0",
           "trainer.score_weight=0", "trainer.reply_weight=0"]  # fmt: skip
    assert dataclasses.asdict(load_config(repo / "go9.toml", off)) == dataclasses.asdict(plain)


def test_the_trajectory_header_names_its_targets_only_when_it_has_some() -> None:
    game = _game_with_targets()
    plain = dataclasses.replace(game, targets={})
    msg, arrays = to_message(plain, "a", 0, "go5")
    from azserve.protocol import encode

    frames = encode(msg, arrays)
    assert b"targets" not in bytes(frames[0]) and len(frames) == 4
    msg, arrays = to_message(game, "a", 0, "go5")
    got, back = decode([bytes(f) for f in encode(msg, arrays)])
    assert got.targets == ["ownership", "score", "reply"] and len(back) == 6  # type: ignore[attr-defined]


class _Sink:
    """Keeps each game's message and arrays (the sink is not what this test is about)."""

    def __init__(self) -> None:
        self.items: list[tuple[Any, list[np.ndarray]]] = []

    async def send(self, traj: Any, *arrays: np.ndarray) -> None:
        self.items.append((traj, [a.copy() for a in arrays]))


@pytest.mark.timeout(180)
@pytest.mark.parametrize("game_name", ["othello", "go9"])
async def test_self_play_sends_true_targets(game_name: str) -> None:
    """Real games through a real server (a tiny net): each position's ownership and score
    agree with each other and with the outcome, and its reply is the next position's policy."""
    from actors.config import ActorsConfig
    from actors.games import make_game
    from actors.search import MCTSConfig
    from actors.selfplay import SelfPlay
    from azserve import ClientConfig, EvalClient, InferenceServer, InitialWeights
    from azserve.backends import BackendConfig, TorchConfig, make_backend
    from azserve.model.network import initial_weights
    from tests.conftest import server_config

    game = make_game(game_name)
    c, h, w = game.obs_shape
    net = NetConfig(
        in_channels=c, height=h, width=w, num_actions=game.num_actions, blocks=1, channels=8
    )
    backend = make_backend(net, BackendConfig(device="cpu", torch=TorchConfig(compile="none")))
    server = InferenceServer(server_config("tcp://127.0.0.1:*"), net.spec, backend)
    await server.start(InitialWeights(0, initial_weights(net)))
    try:
        async with EvalClient(ClientConfig(server=server.endpoint)) as client:
            sink = _Sink()
            mcts = MCTSConfig(num_simulations=4, resign_threshold=-2.0)  # never resigns
            actors = ActorsConfig(games=2, max_games=2, status_interval_s=0, targets=True)
            sp = SelfPlay(game_name, actors, mcts, client, sink, "a0")  # type: ignore[arg-type]
            await asyncio.wait_for(sp.run(asyncio.Event()), 150)
    finally:
        await server.aclose(drain_timeout_s=5.0)
    assert len(sink.items) == 2
    komi = getattr(game, "komi", 0.0)
    for traj, arrays in sink.items:
        assert traj.targets == ["ownership", "score", "reply"]
        obs, policy, outcome, owner, score, reply = arrays
        t = traj.length
        assert (
            owner.shape == (t, h, w)
            and score.shape == (t,)
            and reply.shape == (t, game.num_actions)
        )
        if game_name == "go9":  # komi goes to white: from each side's view, its sign
            black_to_move = obs[:, 2, 0, 0] == 1
            komi_for_mover = np.where(black_to_move, -komi, komi)
        else:
            komi_for_mover = np.zeros(t)
        np.testing.assert_allclose(score, owner.reshape(t, -1).sum(axis=1) + komi_for_mover)
        assert (np.sign(score) == outcome).all()
        np.testing.assert_array_equal(reply[:-1], policy[1:])
        assert not reply[-1].any()


async def test_targets_cross_real_sockets_and_bad_ones_are_refused(tmp_path: Path) -> None:
    """Sender to receiver over ZeroMQ: the learner's callback gets the targets after the
    three arrays; a trajectory whose ownership is out of range is refused, not resent."""
    import zmq
    import zmq.asyncio

    from azserve.protocol import ErrorReply, Trajectory, encode
    from tests.test_trajectory import OBS, A, receiver, sender, until

    got: list[tuple[Any, tuple[np.ndarray, ...]]] = []

    def learner(msg: Any, *arrays: np.ndarray) -> None:
        got.append((msg, arrays))

    t = 3
    msg = Trajectory(actor="a", game_id=0, game="tictactoe", version=0, length=t, result=1.0)
    msg.targets = ["ownership", "reply"]
    obs = np.zeros((t, *OBS), np.uint8)
    policy = np.full((t, A), 1 / A, np.float32)
    outcome = np.ones(t, np.float32)
    owner = np.ones((t, 3, 3), np.int8)
    reply = np.zeros((t, A), np.float32)
    ctx = zmq.asyncio.Context()
    try:
        async with receiver(ctx, f"ipc://{tmp_path}/t.sock", learner) as rx:  # type: ignore[arg-type]
            assert rx.endpoint is not None
            async with sender(ctx, rx.endpoint) as tx:
                await tx.send(msg, obs, policy, outcome, owner, reply)
                await until(lambda: tx.stats().acked == 1)
                bad = Trajectory(
                    actor="a", game_id=1, game="tictactoe", version=0, length=t, result=1.0
                )
                bad.targets = ["ownership"]
                # The sink checks what it is given ...
                with pytest.raises(ValueError, match="ownership outside"):
                    await tx.send(bad, obs, policy, outcome, owner * 2)
            # ... and the receiver what a peer that does not check sends.
            peer = ctx.socket(zmq.DEALER)
            peer.connect(rx.endpoint)
            await peer.send_multipart(encode(bad, [obs, policy, outcome, owner * 2]))
            reply_msg, _ = decode(await asyncio.wait_for(peer.recv_multipart(), 10))
            assert isinstance(reply_msg, ErrorReply) and reply_msg.type == "BadRequest"
            assert "target ownership outside" in reply_msg.message
            peer.close(linger=0)
            assert rx.stats().rejected == 1
    finally:
        ctx.destroy(linger=0)
    [(m, arrays)] = got
    assert m.targets == ["ownership", "reply"] and len(arrays) == 5
    np.testing.assert_array_equal(arrays[3], owner)
