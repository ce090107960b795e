"""``azserve bench``: the pure pieces (status deltas, weighted model rate, status-line parsing,
verdict), then the real CLI as a subprocess with tiny configs and durations, asserting JSON keys
and sane relations. No timing assertions: figures on a shared machine are noise."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from azserve.config.schema import load_config
from azserve.perf.common import ServerWindow, percentiles, weighted_rate
from azserve.perf.selfplay import SIDES, parse_status_lines, verdict

REPO = Path(__file__).resolve().parents[1]
TTT = str(REPO / "configs" / "tictactoe.toml")


def test_server_window_deltas_and_buckets() -> None:
    a = {
        "t": 10.0,
        "rows": 100,
        "requests": 10,
        "batches": 2,
        "busy_s": 1.0,
        "batch_hist": {"64": 2, "256": 0, "inf": 0},
    }
    b = {
        "t": 12.0,
        "rows": 612,
        "requests": 30,
        "batches": 5,
        "busy_s": 2.5,
        "batch_hist": {"64": 3, "256": 2, "inf": 0},
    }
    w = ServerWindow.between(a, b)
    assert (w.rows_per_s, w.mean_batch, w.busy_fraction) == (256.0, 512 / 3, 0.75)
    assert w.batch_hist == {"64": 1, "256": 2}
    assert w.bucket_sizes(max_batch_size=128) == {64: 1, 128: 2}


def test_weighted_rate_is_rows_over_compute_time() -> None:
    # 1 batch of 100 rows at 100 rows/s (1 s) + 1 batch of 300 at 300 rows/s (1 s): 400 rows / 2 s.
    assert weighted_rate({100: 1, 300: 1}, {100: 100.0, 300: 300.0}) == 200.0
    assert weighted_rate({}, {}) == 0.0


def test_percentiles() -> None:
    p = percentiles(list(range(1, 101)))
    assert p["p50"] == pytest.approx(50.5) and p["p99"] == pytest.approx(99.01)
    assert all(v != v for v in percentiles([]).values())  # NaN when empty


def test_parse_actor_status_lines() -> None:
    text = (
        "10:00:01 I actors.selfplay: games/s 2.50  positions/s 40.0  sims/s 2560  evals/s 2400  "
        "in flight 128  loop lag 1.5 ms  games 10  latest v0  W/D/L 1/2/3\n"
        "10:00:02 I azserve.client: something else\n"
    )
    assert parse_status_lines(text) == [
        {"games": 2.5, "positions": 40.0, "sims": 2560.0, "evals": 2400.0, "lag": 1.5}
    ]


def test_verdict_names_the_smallest_capacity() -> None:
    cfg = load_config(TTT, ["mcts.num_simulations=10", "replay.reuse_target=4.0"])
    point = {
        "positions_per_s": 100.0,
        "simulations_per_s": 1000.0,
        "evaluations_per_s": 800.0,
        "cpu_cores_used": {"actors": 0.5},
    }
    # actor: 1000 sims/s on 0.5 core = 2000 sims/cpu-s -> 200 pos/s; inference 8000/8 = 1000;
    # learner 400/4 = 100.
    v = verdict(point, cfg, sims_per_core=1e6, model_rate=8000.0, learner_samples=400.0)
    assert v["bottleneck"] == "learner"
    assert v["capacity_positions_per_s"] == {"actor": 200.0, "inference": 1000.0, "learner": 100.0}
    # Playout caps: a quarter of the moves get 10 simulations, the rest 2 (mean 4); the learner
    # trains on a quarter of the moves, so it keeps up with 4x the moves.
    capped = load_config(
        TTT,
        [
            "mcts.num_simulations=10",
            "mcts.full_search_fraction=0.25",
            "mcts.fast_simulations=2",
            "replay.reuse_target=4.0",
        ],
    )
    v = verdict(point, capped, sims_per_core=1e6, model_rate=8000.0, learner_samples=400.0)
    assert v["capacity_positions_per_s"] == {"actor": 500.0, "inference": 1000.0, "learner": 400.0}


# --- the real CLI --------------------------------------------------------------------------------


def run_bench(tmp_path: Path, *args: str, timeout: float = 110) -> dict[str, Any]:
    """``azserve bench ARGS --json OUT`` in a subprocess; SIGINT on timeout so that the bench
    stops its own children before it goes."""
    out = tmp_path / "bench.json"
    log = tmp_path / "bench.log"
    argv = [sys.executable, "-m", "azserve.cli.main", "bench", *args, "--json", str(out)]
    with log.open("wb") as f:
        proc = subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT, cwd=REPO)
    try:
        code = proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGINT)
        proc.wait(30)
        pytest.fail(f"bench timed out:\n{log.read_text()[-3000:]}")
    assert code == 0, log.read_text()[-3000:]
    return json.loads(out.read_text())


@pytest.mark.slow
def test_bench_serve(tmp_path: Path) -> None:
    r = run_bench(
        tmp_path,
        "serve",
        "--config",
        TTT,
        "--duration",
        "2",
        "--processes",
        "1",
        "--coroutines",
        "64",
        "--peers",
        "naive,nonesuch",
    )
    for key in (
        "positions_per_s",
        "model_positions_per_s",
        "efficiency",
        "latency_ms",
        "mean_batch",
        "peers",
    ):
        assert key in r, key
    assert r["positions_per_s"] > 0 and r["model_positions_per_s"] > 0 and r["efficiency"] > 0
    assert set(r["latency_ms"]) == {"p50", "p90", "p99"}
    assert 1 <= r["mean_batch"] <= 256
    assert sum(r["batch_hist"].values()) > 0
    naive = r["peers"]["naive"]
    assert naive["positions_per_s"] > 0 and set(naive["latency_ms"]) == {"p50", "p90", "p99"}
    assert "skipped" in r["peers"]["nonesuch"]


@pytest.mark.slow
def test_bench_selfplay(tmp_path: Path) -> None:
    r = run_bench(tmp_path, "selfplay", "--config", TTT, "--duration", "3")
    for key in (
        "games_per_s",
        "positions_per_s",
        "simulations_per_s",
        "evaluations_per_s",
        "mean_batch",
        "inference_busy_fraction",
        "bottleneck",
    ):
        assert key in r, key
    assert r["bottleneck"] in SIDES
    assert r["simulations_per_s"] > 0 and r["evaluations_per_s"] > 0
    assert 0 < r["inference_busy_fraction"] <= 1
    assert set(r["capacity_positions_per_s"]) == set(SIDES)


@pytest.mark.slow
def test_bench_swap(tmp_path: Path) -> None:
    r = run_bench(
        tmp_path,
        "swap",
        "--config",
        TTT,
        "--duration",
        "1",
        "--swaps",
        "2",
        "--processes",
        "1",
        "--coroutines",
        "64",
    )
    assert set(r["swap_ms"]) >= {"p50", "max"} and r["swaps_seen_served"] == 2
    assert 0 < r["swap_ms"]["p50"] <= r["swap_ms"]["max"]
    for key in ("latency_ms_steady", "latency_ms_during_swap"):
        assert set(r[key]) >= {"p50", "p99"} and r[key]["p50"] > 0
    # Publishing to two servers waits for both acks.
    assert set(r["publish_ms"]) == {"1", "2"}
    assert all(0 < r["publish_ms"][k]["p50"] <= r["publish_ms"][k]["max"] for k in ("1", "2"))


def test_the_learner_capacity_steps_a_config_that_trains_targets() -> None:
    """`bench selfplay` times the learner on random batches: Go 9x9's default trains ownership
    and score, so the batch must carry them (it did not, and the bench died on go9)."""
    from azserve.config.presets import resolve_config
    from azserve.perf.model import random_batch, time_training

    cfg = load_config(
        resolve_config("go9"),
        ["trainer.batch_size=8", "net.blocks=2", "net.channels=32", "trainer.device=cpu"],
    )
    assert {"ownership", "score"} <= set(cfg.trainer.targets())
    result = time_training(cfg, steps=1)
    assert result["batch_size"] == 8 and result["samples_per_s"] > 0
    batch = random_batch(cfg.net, ["ownership", "score"], 4)
    assert batch.targets["ownership"].shape == (4, 9, 9) and batch.target_mask["score"].all()
