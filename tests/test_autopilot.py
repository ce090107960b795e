"""The autopilot of games in flight (``azserve.run.autopilot``, docs/autopilot.md): its rule on
measures, a running ``SelfPlay`` that changes its games in flight without abandoning one, and
the whole loop on real processes: a real server made slow on purpose makes the autopilot cut
the games of a real actor process, a fast one makes it raise them; with
``autopilot.enabled=false`` ``azserve train`` keeps the configured count."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import numpy as np
import pytest

from actors.config import ActorsConfig
from actors.inflight import InFlight, read_inflight
from actors.search import MCTSConfig
from actors.selfplay import SelfPlay
from actors.sinks import NullSink
from azserve.backends import BackendConfig
from azserve.backends.synthetic import SyntheticBackend
from azserve.config.schema import AutopilotConfig, load_config
from azserve.errors import ConfigError
from azserve.run.autopilot import (
    EVENT,
    Autopilot,
    Controller,
    Measure,
    best_batch,
    lag_versions,
    measure,
    served_versions,
)
from azserve.run.train import resolve_for_run
from learner.runlog import append_event, read_metrics
from tests.conftest import NET, MakeClient, MakeServer, start_actors

REPO = Path(__file__).resolve().parents[1]
TTT = REPO / "configs" / "tictactoe.toml"


def m(
    busy: float,
    batch: float,
    rows_per_s: float = 1000.0,
    queued: float = 0.0,
    versions: float = 1.0,
) -> Measure:
    return Measure(seconds=10.0, busy=busy, batch=batch, rows_per_s=rows_per_s, latency_p50_ms=5,
                   queued_rows=queued, versions=versions)  # fmt: skip


# --- the rule ---------------------------------------------------------------------------------


def test_the_rule_raises_when_starved_lowers_when_saturated_and_holds_between() -> None:
    c = Controller(AutopilotConfig(start_batches=3.0), best=128, rows_per_game=1, low=4, high=512)
    assert c.games() == 384
    assert c.decide(m(0.99, 128))[0] == "lower" and c.games() == 269  # 3 x 0.7 batches
    assert c.decide(m(0.99, 128))[0] == "lower" and c.games() == 189
    assert c.decide(m(0.99, 128))[0] == "lower" and c.games() == 132
    assert c.decide(m(0.99, 128))[0] == "lower" and c.games() == 128  # never below one batch
    assert c.decide(m(0.99, 128))[0] == "hold" and c.games() == 128
    assert c.decide(m(0.90, 128))[0] == "hold"  # within the band
    assert c.decide(m(0.50, 128))[0] == "raise" and c.games() == 256  # a batch more
    # saturated on part-full batches, less than a batch waiting (padded up to the bucket, or
    # split by weights version): more rows fill them
    action, why = c.decide(m(0.99, 60, queued=40))
    assert action == "raise" and c.games() == 384 and "part-full batches (60.0 of 128" in why
    c = Controller(AutopilotConfig(), best=128, rows_per_game=1, low=4, high=128)
    assert c.decide(m(0.99, 60))[0] == "hold" and c.games() == 128  # at the most games
    c = Controller(AutopilotConfig(start_batches=2.0), best=128, rows_per_game=1, low=4, high=512)
    # part-full batches (one weights version each) with a batch's rows queued: rows only wait
    action, why = c.decide(m(0.99, 29, queued=130))
    assert action == "lower" and c.games() == 180 and "130 rows queued" in why, why
    c = Controller(AutopilotConfig(), best=128, rows_per_game=1, low=4, high=160)
    assert c.decide(m(0.10, 60))[0] == "raise" and c.games() == 160  # up to the most
    assert c.decide(m(0.10, 60))[0] == "hold" and c.games() == 160


def test_versions_split_the_batches_so_the_rule_keeps_a_batch_of_each() -> None:
    """go9's see-saw (docs/autopilot.md): 32 games over ~2.5 versions made batches of 13-27; the
    old rule raised on them, then lowered on the other versions' rows queued. Counting the
    versions, it climbs to a batch of each and stays there."""
    c = Controller(AutopilotConfig(), best=32, rows_per_game=1, low=4, high=256)
    assert c.decide(m(0.99, 20, queued=20, versions=2.5))[0] == "raise" and c.games() == 64
    # 64 rows over 2.5 versions: batches of 26, 40 rows of the other versions queued: under a
    # batch of each, so not "rows only wait" (the old rule lowered here, at 40 >= 32)
    action, why = c.decide(m(0.99, 26, queued=40, versions=2.5))
    assert action == "raise" and c.games() == 96 and "2.5 versions" in why, why
    # full batches of each version: lowered, but not below a best batch of each
    action, why = c.decide(m(0.99, 31, queued=60, versions=2.5))
    assert action == "lower" and c.games() == 80, (action, c.games())
    action, why = c.decide(m(0.99, 30, queued=50, versions=2.5))
    assert action == "hold" and c.games() == 80 and "each of 2.5 versions" in why, why
    # more than a batch of each version waiting, on part-full batches: rows only wait
    c = Controller(AutopilotConfig(start_batches=6.0), best=32, rows_per_game=1, low=4, high=256)
    action, why = c.decide(m(0.99, 20, queued=100, versions=2.5))
    assert action == "lower" and c.games() == 135 and "over 2.5 versions" in why, why
    # the floor never passes the most games
    c = Controller(AutopilotConfig(start_batches=3.0), best=32, rows_per_game=1, low=4, high=64)
    actions = [c.decide(m(0.99, 32, versions=4.0))[0] for _ in range(3)]
    assert actions == ["lower", "lower", "hold"] and c.batches == 2.0 and c.games() == 64


def test_games_over_too_many_versions_are_lowered_not_chased() -> None:
    """go9's A/B of 2026-12-07 (docs/autopilot.md): chasing the versions' split raised 68 ->
    256 games, a move took 3.4 s, games spanned 4.6 versions and their positions arrived past
    replay.max_policy_lag = 6: dropped, the learner starved at 0 steps/s. The versions grow
    with the games, so past half of the lag the rule holds, and further past it lowers."""
    assert lag_versions(6) == 3.0 and lag_versions(1) == 1.0 and lag_versions(0) == 1.0
    c = Controller(AutopilotConfig(start_batches=4.0), best=32, rows_per_game=1, low=4,
                   high=256, max_versions=lag_versions(6))  # fmt: skip
    # below the limit the split is chased as before
    action, why = c.decide(m(0.97, 26, queued=40, versions=2.5))
    assert action == "raise" and c.games() == 160, why
    # at the limit (3 of lag 6) and within the band above it: held, part-full or not
    action, why = c.decide(m(0.97, 26, queued=40, versions=3.2))
    assert action == "hold" and c.games() == 160 and "half of replay.max_policy_lag" in why, why
    # past the band: lowered, part-full batches and all
    action, why = c.decide(m(0.97, 27, queued=114, versions=4.6))
    assert action == "lower" and c.games() == 112 and "4.6 versions" in why, why
    # full batches over many versions: the floor is a batch of each of 3 versions, not of 4.6
    actions = [c.decide(m(0.97, 31, queued=150, versions=4.6))[0] for _ in range(3)]
    assert actions == ["lower", "hold", "hold"] and c.games() == 96, (actions, c.games())
    # without a lag limit (the default) nothing changes: the split is chased
    c = Controller(AutopilotConfig(start_batches=4.0), best=32, rows_per_game=1, low=4, high=256)
    assert c.decide(m(0.97, 27, queued=114, versions=4.6))[0] == "raise"


def test_served_versions_count_the_versions_by_their_share_of_the_rows() -> None:
    def reply(rows: dict[str, int]) -> dict[str, object]:
        return {"rows": sum(rows.values()), "batches": sum(rows.values()) // 10, "busy_s": 0.0,
                "versions": {"served_rows": rows}}  # fmt: skip

    a = reply({"3": 1000, "4": 500})
    assert served_versions(a, reply({"3": 1000, "4": 1500, "5": 1000})) == pytest.approx(2.0)
    assert served_versions(a, reply({"3": 1900, "4": 600})) == pytest.approx(1.0 / 0.82)
    assert served_versions(a, a) == 1.0  # nothing served
    assert served_versions({}, {"rows": 5}) == 1.0  # a reply without versions (Triton)
    got = measure(a, reply({"3": 2000, "4": 1500, "5": 0}), 10.0)
    assert got is not None and got.versions == pytest.approx(2.0)


def test_games_follow_processes_leaves_and_bounds() -> None:
    cfg = AutopilotConfig()
    assert Controller(cfg, best=128, rows_per_game=2, low=4, high=256).games() == 64
    assert Controller(cfg, best=128, rows_per_game=4 * 2, low=4, high=256).games() == 16
    assert Controller(cfg, best=8, rows_per_game=4, low=4, high=256).games() == 4  # the fewest
    assert Controller(cfg, best=256, rows_per_game=1, low=4, high=128).games() == 128  # the most
    assert best_batch(128, [8, 32, 128]) == 128
    assert best_batch(100, [8, 32, 128]) == 32  # a batch never reaches 128: 32 is filled
    assert best_batch(256, []) == 256
    # Timed buckets: 32 computes a row at 95% of 128's rate, so 32 rows fill the best batch.
    assert best_batch(128, [8, 32, 128], [4.0, 9.5, 36.0], efficiency=0.9) == 32
    assert best_batch(128, [8, 32, 128], [4.0, 9.5, 36.0], efficiency=0.97) == 128
    assert best_batch(128, [8, 32, 128], [4.0, 9.5], efficiency=0.9) == 128  # not all timed


def test_the_first_status_reply_sizes_the_first_games_from_the_bucket_timings(
    tmp_path: Path,
) -> None:
    sets = ["server.max_batch_size=128", "client.max_rows=128", "actors.games=256",
            "backend.torch.batch_buckets=[8, 32, 128]", "autopilot.start_batches=4"]  # fmt: skip
    pilot = Autopilot(load_config(TTT, sets), tmp_path / "games", tmp_path / "metrics.jsonl")
    backend = {"buckets": [8, 32, 128], "bucket_ms": [25.0, 28.0, 110.0]}
    status = {"max_batch_size": 128, "backend": backend, "rows": 0, "batches": 0, "busy_s": 0.0}
    assert pilot.tick(100.0, status, 0) == "start"
    # 4 batches of 32 in flight, in lanes of 32: four full batches, not one of 128 padded.
    assert pilot.games == 128 and read_inflight(tmp_path / "games") == InFlight(128, 32)
    assert pilot.tick(130.0, status, 0) is None  # nothing served yet: no interval begins
    served = {**status, "rows": 3200, "batches": 100, "busy_s": 9.9}
    assert pilot.tick(131.0, served, 0) is None  # the first interval starts here
    more = {**status, "rows": 6400, "batches": 200, "busy_s": 19.8}
    assert pilot.tick(141.0, more, 3) == "lower" and pilot.games == 90
    [start, lower] = read_metrics(tmp_path / "metrics.jsonl", EVENT)
    assert (start["games_before"], start["games"], start["best_batch"]) == (256, 128, 32)
    assert lower["server_busy"] == pytest.approx(0.99) and lower["games_stored"] == 3


def test_measure_is_the_difference_of_two_status_replies() -> None:
    a = {"rows": 1000, "batches": 10, "busy_s": 2.0, "latency_ms": {"p50": 3.0}}
    b = {"rows": 3560, "batches": 30, "busy_s": 11.5, "latency_ms": {"p50": 9.0}}
    got = measure(a, b, 10.0)
    assert got == Measure(10.0, 0.95, 128.0, 256.0, 9.0, 0.0)
    queued = measure({**a, "queued_rows": 40}, {**b, "queued_rows": 120}, 10.0)
    assert queued is not None and queued.queued_rows == 80.0  # the mean of the two
    assert measure(a, a, 10.0) is None  # no batch ran: nothing to decide on


def test_autopilot_section_is_checked_with_key_value_and_reason() -> None:
    with pytest.raises(
        ConfigError, match=r"autopilot.busy_low=0.97: must be below autopilot.busy_high"
    ):
        load_config(TTT, ["autopilot.busy_low=0.97"])
    with pytest.raises(
        ConfigError, match=r"autopilot.max_games=500: must not exceed actors.games=128"
    ):
        load_config(TTT, ["autopilot.max_games=500"])
    with pytest.raises(ConfigError, match=r"autopilot.min_games=0: must be in \[1, "):
        load_config(TTT, ["autopilot.min_games=0"])
    with pytest.raises(ConfigError, match=r"autopilot.max_games=2: must be 0 .* at least"):
        load_config(TTT, ["autopilot.max_games=2", "autopilot.min_games=8"])


def test_event_rows_stay_out_of_the_learner_rows(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    path.write_text(json.dumps({"step": 5, "loss": 1.0}) + "\n")
    append_event(path, EVENT, {"action": "lower", "games": 10})
    path.write_text(path.read_text() + json.dumps({"step": 6, "loss": 0.9}) + "\n")
    assert [r["step"] for r in read_metrics(path)] == [5, 6]
    assert [r["games"] for r in read_metrics(path, EVENT)] == [10]


def test_enabled_false_leaves_the_actors_their_configured_count(tmp_path: Path) -> None:
    off = resolve_for_run(load_config(TTT, ["autopilot.enabled=false"]), tmp_path)
    assert off.actors.games_file == "" and off.actors.games == 128
    on = resolve_for_run(load_config(TTT), tmp_path)
    assert on.actors.games_file == str(tmp_path / "games") and on.actors.games == 128


# --- a running SelfPlay -----------------------------------------------------------------------


async def test_set_games_lowers_without_abandoning_and_raises_at_once(
    make_server: MakeServer, make_client: MakeClient
) -> None:
    server = await make_server(backend=BackendConfig(kind="synthetic"))
    client = await make_client(server.endpoint)
    cfg = ActorsConfig(games=12, sink="null", status_interval_s=0)
    sink = NullSink()
    await sink.start()
    sp = SelfPlay("tictactoe", cfg, MCTSConfig(num_simulations=8), client, sink, "t")
    stop = asyncio.Event()
    run = asyncio.create_task(sp.run(stop))
    await asyncio.sleep(0.3)
    assert sp.playing == 12
    sp.set_games(3)
    deadline = time.monotonic() + 20
    while sp.playing > 3:  # the nine above 3 end after their game, one by one
        assert time.monotonic() < deadline and not run.done()
        await asyncio.sleep(0.05)
    finished = sp.stats.games
    await asyncio.sleep(0.3)
    assert sp.stats.games > finished  # the three go on playing
    sp.set_games(20, lane_rows=4)
    assert sp.playing == 20  # started at once
    assert sp.pool is not None and sp.pool.max_rows == 4
    await asyncio.sleep(0.5)
    assert sp.pool.lanes >= 5  # 20 searches in lanes of 4: each round a message of 4 rows
    stop.set()
    stats = await run
    await sink.aclose()
    assert not stats.abandoned


# --- real processes ---------------------------------------------------------------------------


class SlowSynthetic(SyntheticBackend):
    """The synthetic backend made slow on purpose: every batch takes ``seconds``."""

    def __init__(self, seconds: float) -> None:
        super().__init__(NET, BackendConfig(kind="synthetic"))
        self.seconds = seconds

    async def infer(self, version: int, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        await asyncio.sleep(self.seconds)
        return await super().infer(version, obs)


async def drive(
    tmp_path: Path,
    make_server: MakeServer,
    backend: object,
    batch: int,
    sets: list[str],
    until: str,
    timeout_s: float = 25.0,
) -> tuple[Autopilot, list[str], str]:
    """A real server (in this process) on ``backend``, a real ``azserve actors`` process
    following the games file, and an autopilot on the server's status replies, ticked every
    half second as ``azserve train`` does, until it took the action ``until``. Returns the
    autopilot, its actions and the actor's log."""
    endpoint = f"ipc://{tmp_path}/server"
    server = await make_server(endpoint, backend=backend, max_batch_size=batch)
    games_file = tmp_path / "games"
    overrides = [
        f"server.max_batch_size={batch}",
        f"client.max_rows={batch}",
        "backend.kind=synthetic",
        "mcts.num_simulations=8",
        "autopilot.interval_s=1.5",
        *sets,
    ]
    cfg = load_config(TTT, overrides)
    pilot = Autopilot(cfg, games_file, tmp_path / "metrics.jsonl")
    log = tmp_path / "actor.log"
    actor_sets = [
        f"client.server={endpoint}",
        "actors.sink=null",
        "actors.metrics_port=0",
        "actors.status_interval_s=1",
        f"actors.games_file={games_file}",
        *overrides,
    ]
    proc = await start_actors(TTT, actor_sets, log)
    actions: list[str] = []
    try:
        deadline = time.monotonic() + timeout_s
        while until not in actions:
            assert proc.returncode is None, log.read_text()
            assert time.monotonic() < deadline, f"{actions}\n{log.read_text()}"
            await asyncio.sleep(0.5)
            action = pilot.tick(time.monotonic(), server.status(), 0)
            if action is not None:
                actions.append(action)
        await asyncio.sleep(1.5)  # the actor reads the file once a second
    finally:
        proc.terminate()
        await asyncio.wait_for(proc.wait(), 30)
    return pilot, actions, log.read_text()


def summary(log: str) -> dict:
    line = next(x for x in log.splitlines() if "actor summary:" in x)
    return json.loads(line.split("actor summary:", 1)[1])


async def test_a_slow_server_makes_the_autopilot_cut_the_games_of_a_real_actor(
    tmp_path: Path, make_server: MakeServer
) -> None:
    # Batches of 8 that take 40 ms each: 200 rows/s, far fewer than 4 batches of rows in
    # flight ask for. The server is busy all the time with full batches: rows only queue.
    pilot, actions, log = await drive(
        tmp_path,
        make_server,
        SlowSynthetic(0.04),
        batch=8,
        sets=["actors.games=64", "autopilot.start_batches=4"],
        until="lower",
    )
    assert "games in flight from " in log and ": 32, lanes of 8\n" in log  # 4 batches of 8
    assert read_inflight(tmp_path / "games") == (pilot.games, 8)
    assert summary(log)["abandoned"] == {}  # games in play finished: none was given up
    rows = read_metrics(tmp_path / "metrics.jsonl", EVENT)
    assert [r["action"] for r in rows] == actions and actions[0] == "start"
    assert (rows[0]["games_before"], rows[0]["games"]) == (64, 32)  # configured -> sized
    # On a loaded machine the actor may first fill part of each batch, which raises the games
    # (the server computes a padded batch anyway); the lower comes once the batches are full.
    lower = rows[-1]
    assert lower["games"] < lower["games_before"] and lower["games"] == pilot.games
    assert f"games in flight: {lower['games_before']} -> {pilot.games}" in log  # applied live
    assert lower["server_busy"] >= 0.95 and lower["server_batch"] >= 7.2


async def test_a_fast_server_makes_the_autopilot_raise_the_games_of_a_real_actor(
    tmp_path: Path, make_server: MakeServer
) -> None:
    # The synthetic backend answers at once: the server waits for rows.
    pilot, actions, log = await drive(
        tmp_path,
        make_server,
        BackendConfig(kind="synthetic"),
        batch=32,
        sets=["actors.games=64", "autopilot.start_batches=0.25"],
        until="raise",
    )
    assert "games in flight from " in log and ": 8, lanes of 32\n" in log
    assert pilot.games > 8 and read_inflight(tmp_path / "games") == (pilot.games, 32)
    assert f"games in flight: 8 -> {pilot.games}" in log
    rows = read_metrics(tmp_path / "metrics.jsonl", EVENT)
    assert rows[-1]["action"] == "raise" and rows[-1]["server_busy"] < 0.85
    assert summary(log)["abandoned"] == {}


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_train_with_the_autopilot_off_keeps_the_configured_games(tmp_path: Path) -> None:
    from tests.test_train import Run, train_cmd

    run_dir = tmp_path / "run"
    off = ["autopilot.enabled=false", "eval.sims=0", "eval.match_games=0"]
    run = Run(
        train_cmd(run_dir, "--steps", "5", *(a for s in off for a in ("--set", s))),
        tmp_path / "train",
    )
    try:
        assert run.wait(timeout=180) == 0, run.output
    finally:
        run.kill()
    actor_log = (run_dir / "logs" / "actor-0.log").read_text()
    assert ", 32 game coroutines" in actor_log and "games in flight:" not in actor_log
    assert not read_metrics(run_dir / "metrics.jsonl", EVENT)
    assert "autopilot" not in json.loads((run_dir / "summary.json").read_text())
