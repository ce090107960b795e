"""The learner loop in-process with real sockets: trajectories in (TrajectorySender), training,
versions published to an InferenceServer (acked), checkpoints, resume without reusing a version,
and the publisher catching up a server that starts late or restarts."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np
import pytest
import torch

from actors.config import ActorsConfig
from actors.games import make_game
from actors.sender import TrajectorySender
from azserve import InferenceServer, InitialWeights, ServerConfig, SyncClient
from azserve import protocol as P
from azserve.backends import BackendConfig, TorchConfig, make_backend
from azserve.config.schema import Config, learner_settings, load_config
from azserve.model.network import build_net, initial_weights
from learner.checkpoint import list_checkpoints, load_checkpoint
from learner.learn import Learner
from learner.runlog import read_metrics

REPO = Path(__file__).resolve().parents[1]
GAME = make_game("tictactoe")
BATCH = 32
PUBLISH_EVERY = 5

pytestmark = pytest.mark.usefixtures("restore_torch_threads")


def make_config(sock_dir: Path, *extra: str) -> Config:
    server, learner = f"ipc://{sock_dir}/server", f"ipc://{sock_dir}/learner"
    return load_config(
        REPO / "configs" / "tictactoe.toml",
        [
            f"server.bind={server}",
            f"learner.bind={learner}",
            "learner.status_interval_s=0",
            "learner.log_every=5",
            "net.blocks=1",
            "net.channels=16",
            "net.value_hidden=16",
            f"trainer.batch_size={BATCH}",
            f"trainer.publish_every={PUBLISH_EVERY}",
            "trainer.device=cpu",
            "replay.min_size=64",
            *extra,
        ],
    )


def random_game(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """A legal game of random moves: obs uint8 [T,2,3,3], policy (uniform over the legal moves)
    float32 [T,9], outcome for the side to move float32 [T], and the first player's result."""
    s = GAME.initial_state()
    obs, policy, movers = [], [], []
    while not GAME.is_terminal(s):
        legal = GAME.legal_actions(s)
        p = np.zeros(9, np.float32)
        p[legal] = 1.0 / len(legal)
        obs.append(GAME.encode(s))
        policy.append(p)
        movers.append(GAME.to_play(s))
        s = GAME.apply(s, int(rng.choice(legal)))
    tv = GAME.terminal_value(s)
    first = tv if GAME.to_play(s) == 0 else -tv
    outcome = np.array([first if m == 0 else -first for m in movers], np.float32)
    return np.stack(obs), np.stack(policy), outcome, first


async def send_games(cfg: Config, n: int, version: int, first_id: int = 0, seed: int = 0) -> None:
    """Send ``n`` random games played by ``version`` to the learner and wait for every ack."""
    rng = np.random.default_rng(seed)
    sender = TrajectorySender(ActorsConfig(learner=cfg.learner.bind, resend_after_s=1.0))
    await sender.start()
    try:
        for i in range(first_id, first_id + n):
            obs, policy, outcome, result = random_game(rng)
            msg = P.Trajectory(
                actor="test",
                game_id=i,
                game="tictactoe",
                version=version,
                length=len(outcome),
                result=result,
                moves=2 * len(outcome),  # as if half the moves were fast, unrecorded searches
            )
            await sender.send(msg, obs, policy, outcome)
        await wait_for(lambda: sender.stats().acked == n, 30)
        assert sender.stats().rejected == 0, sender.last_error
    finally:
        await sender.aclose()


async def wait_for(predicate, timeout_s: float) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not predicate():
        assert loop.time() < deadline, "condition not met in time"
        await asyncio.sleep(0.02)


@contextlib.asynccontextmanager
async def serving(cfg: Config) -> AsyncIterator[InferenceServer]:
    server = InferenceServer(
        # Room for every version: these tests publish far faster than the eviction grace.
        ServerConfig(bind=cfg.server.bind, status_interval_s=0.0, max_versions=32),
        cfg.net.spec,
        make_backend(cfg.net, BackendConfig(device="cpu", torch=TorchConfig(compile="none"))),
    )
    await server.start(InitialWeights(0, initial_weights(cfg.net)))
    try:
        yield server
    finally:
        await server.aclose(drain_timeout_s=5.0)


@contextlib.asynccontextmanager
async def learning(learner: Learner) -> AsyncIterator[tuple[asyncio.Task[None], asyncio.Event]]:
    """Run ``learner`` in a task; at exit stop it and wait for it (and its sockets) to close."""
    stop = asyncio.Event()
    task = asyncio.create_task(learner.run(stop), name="learner")
    await wait_for(lambda: learner.receiver.endpoint is not None or task.done(), 30)
    try:
        yield task, stop
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)


def checkpoint_versions(run_dir: Path) -> dict[int, int]:
    """step -> version of every checkpoint in the run."""
    return {
        step: load_checkpoint(p).meta.version
        for step, p in list_checkpoints(run_dir / "checkpoints")
    }


def assert_versions_name_one_step_each(seen: dict[int, int]) -> None:
    """Versions grow with steps and no version names weights of two different steps."""
    steps = sorted(seen)
    versions = [seen[s] for s in steps]
    assert versions == sorted(versions) and len(set(versions)) == len(versions), seen


@pytest.mark.timeout(120)
async def test_learner_trains_publishes_checkpoints_and_resumes(
    sock_dir: Path, tmp_path: Path
) -> None:
    run_dir = tmp_path / "run"
    cfg = make_config(sock_dir, "learner.max_steps=20", "checkpoint.keep_last=10")
    async with serving(cfg) as server:
        # Run 1: from scratch to 20 steps; versions 1..4 published every 5 steps.
        learner = Learner(learner_settings(cfg), run_dir)
        async with learning(learner) as (task, _):
            await wait_for(
                lambda: server.versions.latest >= 0 and learner.publisher.version == 0, 30
            )
            await send_games(cfg, 60, version=0)
            await asyncio.wait_for(asyncio.shield(task), 60)  # max_steps ends the run
        assert learner.trainer.step_count == 20 and learner.versions.current == 4
        assert server.versions.latest == 4
        assert set(server.versions.resident()) >= {4}
        assert learner.publisher.last_result is not None
        assert learner.publisher.last_result.acked_ms.keys() == {cfg.server.bind}  # acked
        assert learner.checkpoint_now().name == "ckpt-000000020.safetensors"  # a clean stop
        first = checkpoint_versions(run_dir)
        assert first == {5: 1, 10: 2, 15: 3, 20: 4}
        rows = read_metrics(run_dir / "metrics.jsonl")
        assert [r["step"] for r in rows] == [5, 10, 15, 20]
        for r in rows:
            assert {
                "time",
                "step",
                "version",
                "games",
                "positions",
                "loss",
                "reuse",
                "mean_lag",
            } <= set(r)
        assert rows[-1]["games"] == 60 and rows[-1]["positions"] == learner.positions > 0
        assert rows[-1]["moves"] == learner.moves == 2 * learner.positions
        games_1, positions_1 = learner.games, learner.positions

        # Run 2: resumed, to 40 steps; it continues the step, version and counters.
        cfg2 = make_config(sock_dir, "learner.max_steps=40", "checkpoint.keep_last=10")
        resumed = Learner(learner_settings(cfg2), run_dir, resume=True)
        assert (resumed.trainer.step_count, resumed.versions.current) == (20, 4)
        assert (resumed.games, resumed.positions) == (games_1, positions_1)
        assert resumed.moves == 2 * positions_1  # moves played continue too
        assert resumed.replay.current_version == 4
        async with learning(resumed) as (task, _):
            await send_games(cfg2, 60, version=4, first_id=1000, seed=1)
            await asyncio.wait_for(asyncio.shield(task), 60)
        assert resumed.trainer.step_count == 40 and resumed.versions.current == 8
        assert server.versions.latest == 8
        both = {**first, **checkpoint_versions(run_dir)}
        assert {s: v for s, v in both.items() if s > 20} == {25: 5, 30: 6, 35: 7, 40: 8}
        assert_versions_name_one_step_each(both)
        rows = read_metrics(run_dir / "metrics.jsonl")
        assert [r["step"] for r in rows] == [5, 10, 15, 20, 25, 30, 35, 40]
        assert rows[-1]["games"] == games_1 + 60  # totals continue across the restart


async def test_stop_between_publishes_checkpoints_a_new_version(
    sock_dir: Path, tmp_path: Path
) -> None:
    # Weights trained past the last published version are not that version: a stop checkpoint
    # takes the next number, which the resumed run then serves.
    cfg = make_config(sock_dir, "checkpoint.keep_last=10")
    learner = Learner(learner_settings(cfg), tmp_path)
    rng = np.random.default_rng(0)
    for _ in range(20):
        obs, policy, outcome, _ = random_game(rng)
        learner.replay.insert(obs, policy, outcome, 0)
    for _ in range(3):
        learner.trainer.step(learner.replay.sample(BATCH, learner.trainer.rng))
    path = learner.checkpoint_now()
    meta = load_checkpoint(path).meta
    assert (meta.step, meta.version) == (3, 1)
    # No steps since: the same checkpoint and version again.
    assert learner.checkpoint_now() == path
    assert load_checkpoint(path).meta.version == 1
    resumed = Learner(learner_settings(cfg), tmp_path, resume=True)
    assert (resumed.trainer.step_count, resumed.versions.current) == (3, 1)
    assert resumed.checkpoint_now() == path and load_checkpoint(path).meta.version == 1
    learner.runlog.close()
    resumed.runlog.close()


@pytest.mark.timeout(120)
async def test_publisher_catches_up_late_and_restarted_servers(
    sock_dir: Path, tmp_path: Path
) -> None:
    cfg = make_config(sock_dir, "learner.publish_timeout_s=0.3")
    learner = Learner(learner_settings(cfg), tmp_path)
    async with learning(learner) as (task, _):
        # No server yet: the learner trains anyway; its publishes time out.
        await send_games(cfg, 20, version=0)
        await wait_for(
            lambda: learner.versions.current >= 2 and not learner.replay.can_sample(BATCH), 60
        )
        await wait_for(lambda: learner.publisher.version == learner.versions.current, 10)
        assert not task.done()
        latest = learner.versions.current
        assert learner.publisher.last_result is not None
        assert learner.publisher.last_result.acked_ms == {}  # nothing acked

        # A server that starts late gets the latest version.
        async with serving(cfg) as late:
            await wait_for(lambda: late.versions.latest == latest, 30)
        # Its replacement starts on its own initial weights (version 0) and is caught up,
        # with no new publish from the (idle) learner in between.
        async with serving(cfg) as restarted:
            assert restarted.versions.latest == 0
            await wait_for(lambda: restarted.versions.latest == latest, 30)
            assert learner.versions.current == latest
            # It serves that version's weights: those checkpointed when it was published.
            obs = GAME.encode_batch([GAME.initial_state(), GAME.from_moves([4])])

            def evaluate() -> tuple[np.ndarray, np.ndarray, int]:
                with SyncClient(cfg.server.bind, timeout_s=10) as c:
                    return c.evaluate(obs)

            logits, values, version = await asyncio.get_running_loop().run_in_executor(
                None, evaluate
            )
            assert version == latest
            (path,) = [
                p
                for _, p in list_checkpoints(tmp_path / "checkpoints")
                if load_checkpoint(p).meta.version == latest
            ]
            net = build_net(cfg.net)
            net.load_state_dict(load_checkpoint(path).model)
            with torch.inference_mode():
                want_logits, want_values = net.eval()(torch.from_numpy(obs).float())
            np.testing.assert_allclose(logits, want_logits.numpy(), rtol=1e-4, atol=1e-5)
            np.testing.assert_allclose(values, want_values.numpy(), rtol=1e-4, atol=1e-5)
