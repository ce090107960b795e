"""The autopilot's learner side (``azserve.run.autopilot_learner``, docs/autopilot.md): the reuse
controller's and the core split's rules on measures, the measure from two learner rows, the
replay taking a new target, the learner's files, the config checks, and the whole loop on real
processes: a real learner made slow on purpose makes the controller lower its reuse target (and
gives it a core while the server has room), a learner that idles makes it raise it, and the
running learner follows the files it writes."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from azserve import InitialWeights
from azserve.config.schema import AutopilotConfig, learner_settings, load_config
from azserve.errors import ConfigError
from azserve.model.network import initial_weights
from azserve.run.autopilot_learner import (
    EVENT,
    THREADS_EVENT,
    LearnerMeasure,
    LearnerPilot,
    ReuseController,
    ThreadsController,
    learner_measure,
    shared_cores,
)
from azserve.run.train import resolve_for_run
from learner.config import ReplayConfig
from learner.learn import Learner
from learner.livefile import read_number, write_number
from learner.replay import Batch, Replay
from learner.runlog import read_metrics
from tests.conftest import MakeServer, start_actors
from tests.test_autopilot import SlowSynthetic

REPO = Path(__file__).resolve().parents[1]
TTT = REPO / "configs" / "tictactoe.toml"

pytestmark = pytest.mark.usefixtures("restore_torch_threads")


def lm(
    busy: float, reuse: float, positions_per_s: float = 50.0, size: int = 5000, server: float = 0.5
) -> LearnerMeasure:
    return LearnerMeasure(seconds=30.0, busy=busy, reuse=reuse, positions_per_s=positions_per_s,
                          samples_per_s=reuse * positions_per_s, steps_per_s=1.0,
                          replay_size=size, inference_busy=server)  # fmt: skip


# --- the rule ---------------------------------------------------------------------------------


def test_the_rule_raises_when_the_learner_idles_for_credit() -> None:
    c = ReuseController(AutopilotConfig(), 4.0, min_size=1000)
    action, why = c.decide(lm(0.4, 4.0))  # could train 0.75 x 4 / 0.4 = 7.5: a step of 1.5x
    assert (action, c.target) == ("raise", 6.0) and "waiting for credit" in why, why
    assert c.decide(lm(0.7, 6.0)) == ("hold", "learner busy 70%, within the band")
    assert c.decide(lm(0.2, 6.0))[0] == "raise" and c.target == 8.0  # up to reuse_max
    assert c.decide(lm(0.2, 8.0)) == ("hold", "learner busy 20% < 60%, at reuse_max 8")
    # Idle but far below the target: not waiting for credit, so no raise.
    c = ReuseController(AutopilotConfig(), 4.0, min_size=1000)
    assert c.decide(lm(0.5, 0.5))[0] == "hold" and c.target == 4.0
    # No step at all while positions arrive past min_size: it waits for credit.
    assert c.decide(lm(0.0, 0.0))[0] == "raise" and c.target == 6.0


def test_no_raise_while_the_server_on_the_same_cores_is_the_bottleneck() -> None:
    # go9 on 2 cores (docs/autopilot.md, "On against off"): the learner idled while the server,
    # busy 96-99% on the same cores, made the games; each raise took cores from self-play.
    shared = ReuseController(AutopilotConfig(), 4.0, min_size=1000, shared_cores=True)
    action, why = shared.decide(lm(0.4, 4.0, server=0.98))
    assert (action, shared.target) == ("hold", 4.0), why
    assert "the server on the same cores is busy (98% >= 85%)" in why
    # busy from autopilot.busy_low: go9 raised to 8 at 93% and aged its positions past the lag
    assert shared.decide(lm(0.4, 4.0, server=0.93))[0] == "hold"
    assert shared.decide(lm(0.4, 4.0, server=0.8))[0] == "raise"  # the server waits for rows
    assert shared.decide(lm(1.0, 2.0, server=0.98))[0] == "lower"  # lowering as before
    # ... and back up to the configured target, no further, while the server is saturated
    # (shogi: lowered 4 -> 1.19 while a test suite held the cores, then held there for good)
    shared = ReuseController(AutopilotConfig(), 4.0, min_size=1000, shared_cores=True)
    for reuse in (3.2, 2.4, 1.0):
        assert shared.decide(lm(1.0, reuse, server=0.98))[0] == "lower"
    assert shared.target == 1.2
    targets = []
    for _ in range(4):
        action, why = shared.decide(lm(0.05, shared.target, server=0.98))
        targets.append(shared.target)
    assert targets == [1.8, 2.7, 4.0, 4.0], targets
    assert action == "hold" and "the server on the same cores is busy" in why, why
    apart = ReuseController(AutopilotConfig(), 4.0, min_size=1000)  # a server on its own GPU
    assert apart.decide(lm(0.4, 4.0, server=0.98))[0] == "raise"


def test_cores_are_shared_when_learner_and_torch_server_are_on_the_cpu() -> None:
    cpu = ["trainer.device=cpu", "backend.device=cpu"]
    assert shared_cores(load_config(TTT, cpu))
    assert not shared_cores(load_config(TTT, [*cpu, "backend.kind=synthetic"]))


def test_the_rule_lowers_when_the_learner_is_the_bottleneck_and_settles() -> None:
    c = ReuseController(AutopilotConfig(), 8.0, min_size=1000)
    targets = []
    for _ in range(5):  # it trains each position 2 times, at full busy: capacity 1.5 at 75%
        action, why = c.decide(lm(1.0, min(2.0, c.target)))
        targets.append(c.target)
    assert targets == [5.33, 3.55, 2.37, 1.58, 1.58], targets  # by 1/1.5, then its capacity
    assert action == "hold" and why == "learner busy 100% at its target: neither side idles"
    c = ReuseController(AutopilotConfig(), 4.0, min_size=1000)
    assert c.decide(lm(0.95, 3.7))[0] == "hold"  # within BOUND of the target: held by credit
    assert c.decide(lm(1.0, 4.6)) == (
        "hold",
        "learner busy 100%, spending the credit held (reuse 4.60 > 4)",
    )
    assert c.decide(lm(0.95, 1.0))[0] == "lower" and c.target == 2.67
    c = ReuseController(AutopilotConfig(reuse_min=2.0), 2.0, min_size=1000)
    assert c.decide(lm(1.0, 0.5)) == (
        "hold",
        "learner busy 100%, behind its target, at reuse_min 2",
    )


def test_the_rule_holds_without_data_or_below_min_size() -> None:
    c = ReuseController(AutopilotConfig(), 4.0, min_size=1000)
    assert c.decide(lm(0.1, 4.0, positions_per_s=0.0)) == (
        "hold",
        "learner busy 10%, no positions arrived",
    )
    assert c.decide(lm(0.1, 0.0, size=999))[1] == "learner busy 10%, replay 999 below min_size 1000"
    assert c.target == 4.0
    # A configured target outside the bounds starts at the nearest bound.
    assert ReuseController(AutopilotConfig(reuse_max=3.0), 4.0, 0).target == 3.0


def test_the_core_split_gives_the_bottleneck_a_core_one_at_a_time() -> None:
    c = ThreadsController(AutopilotConfig(), threads=1, most=3)
    action, why = c.decide(lm(0.97, 2.0, server=0.5))
    assert (action, c.threads) == ("raise", 2) and "a core to the learner" in why, why
    assert c.decide(lm(0.97, 2.0, server=0.5))[0] == "raise" and c.threads == 3
    assert c.decide(lm(0.97, 2.0, server=0.5)) == (
        "hold",
        "learner busy 97%, server busy 50%: the learner is the bottleneck, at its most, 3 threads",
    )
    assert c.decide(lm(0.97, 2.0, server=0.9))[0] == "hold"  # the server has no room
    assert c.decide(lm(0.7, 2.0, server=0.99))[0] == "hold"  # the learner does not idle
    action, why = c.decide(lm(0.3, 2.0, server=0.99))
    assert (action, c.threads) == ("lower", 2) and "a core back to the server" in why, why
    assert c.decide(lm(0.3, 2.0, server=0.99))[0] == "lower" and c.threads == 1
    assert c.decide(lm(0.3, 2.0, server=0.99))[0] == "hold" and c.threads == 1
    assert c.decide(lm(0.7, 2.0, server=0.9)) == ("hold", "learner busy 70%, server busy 90%")


def row(t: float, step: int, train_s: float, wait_s: float, sampled: int, inserted: int) -> dict:
    return {"time": t, "step": step, "train_s": train_s, "wait_s": wait_s,
            "replay_sampled": sampled, "replay_inserted": inserted, "replay_size": 4000,
            "inference_busy": 0.9, "bottleneck": "inference"}  # fmt: skip


def test_the_measure_is_the_difference_of_two_learner_rows() -> None:
    a = row(100.0, 10, 5.0, 5.0, 2560, 1000)
    b = row(130.0, 40, 14.0, 26.0, 10240, 4000)
    m = learner_measure(a, b)
    assert m == LearnerMeasure(30.0, 9 / 30, 7680 / 3000, 100.0, 256.0, 1.0, 4000, 0.9, "inference")
    assert learner_measure(b, a) is None  # time went back
    assert learner_measure(b, row(160.0, 2, 0.1, 0.2, 64, 50)) is None  # a restarted learner
    assert learner_measure({"time": 1.0}, b) is None  # a row without the counters


# --- the replay and the file ------------------------------------------------------------------


def test_a_new_target_reprices_the_credit_held_and_the_positions_to_come() -> None:
    r = Replay(ReplayConfig(capacity=64, reuse_target=4.0, min_size=0), (2, 3, 3), 9)

    def insert(n: int) -> None:
        obs = np.zeros((n, 2, 3, 3), np.uint8)
        r.insert(obs, np.full((n, 9), 1 / 9, np.float32), np.zeros(n, np.float32), 0)

    insert(10)
    assert r.metrics().credit == 40.0
    r.sample(20)  # 20 owed at 4 a position
    r.set_reuse_target(2.0)  # repriced: 10 owed at 2, no backlog earned at 4
    assert r.metrics().credit == 10.0 and r.metrics().reuse_target == 2.0
    r.set_reuse_target(6.0)
    assert r.metrics().credit == 30.0  # owed at 6
    insert(5)
    assert r.metrics().credit == 60.0  # the new ones earn 6 each
    r.set_reuse_target(1.0)
    assert r.metrics().credit == 10.0
    r.set_reuse_target(8.0)
    assert r.metrics().credit == 80.0
    r.sample(60)
    r.set_reuse_target(0.5)
    assert r.metrics().credit == 1.25  # 20 owed at 8
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="reuse target must be a positive number"):
            r.set_reuse_target(bad)


def test_the_reuse_file_is_one_number_written_atomically(tmp_path: Path) -> None:
    path = tmp_path / "reuse"
    assert read_number(path) is None
    write_number(path, 6.0)
    assert path.read_text() == "6\n" and read_number(path) == 6.0
    for junk in ("", "six", "0", "-2", "nan", "inf"):
        path.write_text(junk)
        assert read_number(path) is None, junk


# --- config -----------------------------------------------------------------------------------


def test_reuse_keys_are_checked_with_key_value_and_reason(tmp_path: Path) -> None:
    with pytest.raises(
        ConfigError,
        match=r"replay.reuse_target=12.0: must be within autopilot.reuse_min=1.0 and "
        r"autopilot.reuse_max=8.0, .* autopilot.reuse=false",
    ):
        load_config(TTT, ["replay.reuse_target=12"])
    load_config(TTT, ["replay.reuse_target=12", "autopilot.reuse=false"])  # fixed: no bounds
    load_config(TTT, ["replay.reuse_target=12", "autopilot.enabled=false"])
    with pytest.raises(ConfigError, match=r"autopilot.reuse_max=2.0: must be at least .*=3.0"):
        load_config(TTT, ["autopilot.reuse_min=3", "autopilot.reuse_max=2"])
    with pytest.raises(
        ConfigError, match=r"autopilot.learner_busy_low=0.95: must be below .*_high=0.9"
    ):
        load_config(TTT, ["autopilot.learner_busy_low=0.95"])
    with pytest.raises(ConfigError, match=r"autopilot.reuse_step=1.0: must be in \[1.05, 10"):
        load_config(TTT, ["autopilot.reuse_step=1"])


def test_the_learner_follows_its_files_only_with_their_controllers_on(tmp_path: Path) -> None:
    on = resolve_for_run(load_config(TTT), tmp_path)
    assert on.replay.reuse_file == str(tmp_path / "reuse") and on.replay.reuse_target == 6.0
    assert on.learner.threads_file == str(tmp_path / "learner-threads")
    for off in ("autopilot.enabled=false", "autopilot.reuse=false"):
        assert resolve_for_run(load_config(TTT, [off]), tmp_path).replay.reuse_file == ""
    # The core split needs a server that follows the idle cores, and a count to start from.
    for off in ("autopilot.enabled=false", "autopilot.threads=false", "train.server_threads=1",
                "train.learner_threads=0"):  # fmt: skip
        assert resolve_for_run(load_config(TTT, [off]), tmp_path).learner.threads_file == ""


def test_the_pilot_decides_once_an_interval_and_writes_file_log_and_row(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    reuse = tmp_path / "reuse"
    sets = ["replay.reuse_target=4", "replay.min_size=1000", f"replay.reuse_file={reuse}"]
    pilot = LearnerPilot(load_config(TTT, sets), tmp_path / "metrics.jsonl")
    assert pilot.tick(None) is None
    assert pilot.tick({**row(60.0, 0, 0.0, 0.0, 0, 0), "replay_size": 999}) is None
    # Waiting for min_size is not waiting for credit: the first interval starts past it.
    # The server on the same cores waits for rows (busy 50% < autopilot.busy_low): a raise
    # may pass the configured target.
    idle = {"inference_busy": 0.5}
    assert pilot.tick({**row(100.0, 0, 0.0, 40.0, 0, 0), **idle}) is None
    assert pilot.tick({**row(110.0, 5, 1.0, 49.0, 1280, 320), **idle}) is None  # 10 s of 30
    with caplog.at_level("INFO", "azserve.run.autopilot"):
        # 30 s: busy 4 s of 40, trained each position 4 times: it idles for credit.
        assert pilot.tick({**row(130.0, 20, 4.0, 76.0, 5120, 1280), **idle}) == "raise"
    assert pilot.target == 6.0 and read_number(reuse) == 6.0
    assert "autopilot: raise reuse 4 -> 6 (learner busy 10% < 60%, waiting for credit" in (
        caplog.text
    )
    [decision] = read_metrics(tmp_path / "metrics.jsonl", EVENT)
    assert decision["reuse_before"] == 4.0 and decision["reuse_target"] == 6.0
    assert decision["learner_busy"] == pytest.approx(0.1) and decision["learner_reuse"] == 4.0
    assert decision["bottleneck"] == "inference" and decision["capacity"] == pytest.approx(30.0)
    # A restarted learner's rows count from zero: the interval starts again, no decision.
    assert pilot.tick(row(170.0, 1, 0.1, 1.0, 64, 100)) is None
    assert pilot.tick(row(171.0, 2, 0.2, 1.0, 128, 100)) is None  # within the new interval
    assert pilot.summary() == {"learner_decisions": 1, "reuse_target": 6.0}


def test_a_thread_moved_holds_the_reuse_target_for_the_interval(tmp_path: Path) -> None:
    files = [f"replay.reuse_file={tmp_path / 'reuse'}",
             f"learner.threads_file={tmp_path / 'threads'}"]  # fmt: skip
    sets = ["replay.reuse_target=4", "autopilot.max_learner_threads=2", *files]
    pilot = LearnerPilot(load_config(TTT, sets), tmp_path / "metrics.jsonl")
    # Busy all the time at reuse 1 of 4 while the server idles (busy 0.3 in the rows).
    pilot.tick(row(100.0, 0, 0.0, 0.0, 0, 0))
    pilot.tick({**row(115.0, 10, 15.0, 0.0, 640, 640), "inference_busy": 0.3})
    assert pilot.tick({**row(130.0, 20, 30.0, 0.0, 1280, 1280), "inference_busy": 0.5}) == "raise"
    assert read_number(tmp_path / "threads") == 2 and read_number(tmp_path / "reuse") is None
    [split] = read_metrics(tmp_path / "metrics.jsonl", THREADS_EVENT)
    assert (split["threads_before"], split["threads"], split["most_threads"]) == (1, 2, 2)
    assert split["inference_busy"] == pytest.approx(0.4)  # the mean of the interval's rows
    assert not read_metrics(tmp_path / "metrics.jsonl", EVENT)  # the reuse target waited
    # At the most threads, still the bottleneck: now the reuse target comes down.
    assert pilot.tick({**row(160.0, 40, 60.0, 0.0, 2560, 2560), "inference_busy": 0.3}) == "lower"
    assert read_number(tmp_path / "reuse") == 2.67
    assert pilot.summary() == {"learner_decisions": 3, "reuse_target": 2.67, "learner_threads": 2}


# --- real processes ---------------------------------------------------------------------------


class SlowLearner(Learner):
    """A real learner whose every training step takes ``step_s`` more (on its step thread)."""

    def __init__(self, *args: Any, step_s: float, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.step_s = step_s

    def _step(self, batch: Batch) -> dict[str, float]:
        time.sleep(self.step_s)
        return super()._step(batch)


async def drive(
    tmp_path: Path,
    sock_dir: Path,
    make_server: MakeServer,
    step_s: float,
    sets: list[str],
    until: str,
    server_s: float = 0.02,
    timeout_s: float = 25.0,
) -> tuple[LearnerPilot, SlowLearner, list[str], str]:
    """A real learner in this process (its steps ``step_s`` slower), a real server (in this
    process; batches of 8 taking ``server_s``, so the games come at a modest pace) and a real
    ``azserve actors`` process sending it games, and the learner pilot on the learner's rows of
    metrics.jsonl, ticked every half second as ``azserve train`` does, until it took the action
    ``until``. Returns the pilot, the learner, the actions and the actor's log."""
    server_ep, learner_ep = f"ipc://{sock_dir}/server", f"ipc://{sock_dir}/learner"
    reuse_file = sock_dir / "reuse"
    overrides = [
        f"server.bind={server_ep}",
        f"learner.bind={learner_ep}",
        "server.max_batch_size=8",
        "client.max_rows=8",
        "backend.kind=synthetic",
        "mcts.num_simulations=8",
        "actors.games=8",
        "net.blocks=1",
        "net.channels=16",
        "net.value_hidden=16",
        "trainer.batch_size=16",
        "trainer.publish_every=100000",
        "trainer.device=cpu",
        "replay.min_size=32",
        f"replay.reuse_file={reuse_file}",
        "learner.status_interval_s=0.5",
        "learner.log_every=5",
        "autopilot.reuse_interval_s=3",
        *sets,
    ]
    cfg = load_config(TTT, overrides)
    initial = InitialWeights(0, initial_weights(cfg.net))
    await make_server(server_ep, backend=SlowSynthetic(server_s), max_batch_size=8, initial=initial)
    run_dir = tmp_path / "run"
    learner = SlowLearner(learner_settings(cfg), run_dir, step_s=step_s)
    pilot = LearnerPilot(cfg, run_dir / "metrics.jsonl")
    stop = asyncio.Event()
    task = asyncio.create_task(learner.run(stop), name="learner")
    log = tmp_path / "actor.log"
    actor_sets = [f"client.server={server_ep}", "actors.sink=learner", f"actors.learner={learner_ep}",
                  "actors.metrics_port=0", *overrides]  # fmt: skip
    proc = await start_actors(TTT, actor_sets, log)
    actions: list[str] = []
    try:
        deadline = time.monotonic() + timeout_s
        while until not in actions:
            assert proc.returncode is None and not task.done(), log.read_text()
            assert time.monotonic() < deadline, f"{actions}\n{log.read_text()}"
            await asyncio.sleep(0.5)
            metrics = run_dir / "metrics.jsonl"
            rows = read_metrics(metrics) if metrics.exists() else []
            action = pilot.tick(rows[-1] if rows else None)
            if action is not None:
                actions.append(action)
        await asyncio.sleep(1.5)  # the learner reads the file once a second
        assert learner.replay.reuse_target == pilot.target  # heard while running
        if cfg.learner.threads_file:  # taken by the step thread, before a step
            assert learner.threads == pilot.split.threads
            step_thread = learner._pool.submit(torch.get_num_threads).result()
            assert step_thread == learner.threads
    finally:
        proc.terminate()
        await asyncio.wait_for(proc.wait(), 30)
        stop.set()
        await asyncio.wait_for(task, 30)
    return pilot, learner, actions, log.read_text()


@pytest.mark.timeout(90)
async def test_a_learner_that_idles_makes_the_controller_raise_its_reuse(
    tmp_path: Path, sock_dir: Path, make_server: MakeServer
) -> None:
    # A step of a tiny net takes milliseconds; at reuse 2 it waits for credit most of the time.
    pilot, learner, actions, _ = await drive(
        tmp_path, sock_dir, make_server, 0.0, ["replay.reuse_target=2"], until="raise"
    )
    assert pilot.target > 2.0 and learner.replay.reuse_target == pilot.target
    raised = read_metrics(tmp_path / "run" / "metrics.jsonl", EVENT)[-1]
    assert raised["action"] == "raise" and raised["reuse_before"] == 2.0
    assert raised["learner_busy"] < 0.6 and raised["learner_reuse"] >= 1.8
    assert raised["learner_positions_per_s"] > 0


@pytest.mark.timeout(90)
async def test_a_slow_learner_makes_the_controller_lower_its_reuse(
    tmp_path: Path, sock_dir: Path, make_server: MakeServer
) -> None:
    # Steps of 0.25 s train at most 64 samples/s: far fewer than reuse 6 asks of the games made.
    pilot, learner, actions, _ = await drive(
        tmp_path, sock_dir, make_server, 0.25, ["replay.reuse_target=6"], until="lower"
    )
    assert pilot.target < 6.0 and learner.replay.reuse_target == pilot.target
    lowered = read_metrics(tmp_path / "run" / "metrics.jsonl", EVENT)[-1]
    assert lowered["action"] == "lower" and lowered["learner_busy"] >= 0.9
    assert lowered["learner_reuse"] < 0.9 * 6.0
    rows = read_metrics(tmp_path / "run" / "metrics.jsonl")
    assert rows[-1]["reuse_target"] == pilot.target  # the learner's own rows say so
    assert json.dumps(lowered)  # a plain JSON row


@pytest.mark.timeout(90)
async def test_a_slow_learner_beside_a_server_with_room_gets_a_core(
    tmp_path: Path, sock_dir: Path, make_server: MakeServer
) -> None:
    # The learner is the bottleneck as above; batches of 5 ms leave the server room.
    sets = ["replay.reuse_target=6", "learner.threads=1", "autopilot.max_learner_threads=2",
            f"learner.threads_file={sock_dir / 'threads'}"]  # fmt: skip
    pilot, learner, actions, _ = await drive(
        tmp_path, sock_dir, make_server, 0.25, sets, until="raise", server_s=0.005
    )
    assert actions[-1] == "raise" and learner.threads == 2 == pilot.split.threads
    [split] = read_metrics(tmp_path / "run" / "metrics.jsonl", THREADS_EVENT)
    assert (split["threads_before"], split["threads"]) == (1, 2)
    assert split["learner_busy"] >= 0.9 and split["inference_busy"] < 0.85
    assert not read_metrics(tmp_path / "run" / "metrics.jsonl", EVENT)  # the reuse waited
    assert read_metrics(tmp_path / "run" / "metrics.jsonl")[-1]["learner_threads"] == 2
