"""``azserve tune``: bad flags refused in one line before anything starts (no Ray), the search
parsed into trials, and one real tune of tic-tac-toe through Ray Tune: each trial a real
``azserve train``, rated on one ladder at its rungs, ASHA's verdicts, ``best.toml`` loadable,
and ``--resume`` of a finished tune training nothing again."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from azserve.cli.main import main
from azserve.config.schema import load_config
from azserve.errors import ConfigError
from azserve.run.tune_search import grid_points, parse_search, split_values
from azserve.run.tune_setup import QUARTERS, RUNGS, TRIAL_SETS, TuneSetup
from tests.conftest import QUICK_TRAIN_SETS

REPO = Path(__file__).resolve().parents[1]


# -- the search ------------------------------------------------------------------------------


def test_values_split_on_commas_outside_brackets_and_quotes() -> None:
    assert split_values("8,16, 32") == ["8", "16", "32"]
    assert split_values('["ownership","score"],[]') == ['["ownership","score"]', "[]"]
    assert split_values('"a,b",c') == ['"a,b"', "c"]


def test_the_search_parses_in_order() -> None:
    space = parse_search(["mcts.num_simulations=8,16", "trainer.lr=0.1, 0.05"])
    assert space == {"mcts.num_simulations": ["8", "16"], "trainer.lr": ["0.1", "0.05"]}


@pytest.mark.parametrize(
    ("flag", "says"),
    [
        ("mcts.num_simulations", "expected KEY=V1,V2"),
        ("=8,16", "expected KEY=V1,V2"),
        ("mcts.num_simulations=", "mcts.num_simulations=: no values"),
        ("mcts.num_simulations=8,,16", "mcts.num_simulations=8,,16: an empty value"),
        ("mcts.num_simulations=8, 8", "mcts.num_simulations=8: the value is given twice"),
        ("game=connect4", "game=connect4: game cannot be searched"),
        ("train.minutes=1,2", "train.minutes cannot be searched"),
        ("eval.sims=1,2", "eval.sims cannot be searched"),
    ],
)
def test_a_bad_search_is_refused_naming_key_and_value(flag: str, says: str) -> None:
    with pytest.raises(ConfigError, match="--search") as info:
        parse_search([flag])
    assert says in str(info.value) and "\n" not in str(info.value)


def test_a_key_searched_twice_is_refused() -> None:
    with pytest.raises(ConfigError, match="mcts.num_simulations: given twice"):
        parse_search(["mcts.num_simulations=8", "mcts.num_simulations=16"])


def test_points_are_every_combination_or_a_seeded_draw() -> None:
    space = {"a.x": ["1", "2", "3"], "b.y": ["p", "q"]}
    grid = grid_points(space, None, 0)
    assert grid[:3] == [
        {"a.x": "1", "b.y": "p"},
        {"a.x": "1", "b.y": "q"},
        {"a.x": "2", "b.y": "p"},
    ]
    assert len(grid) == 6 and grid_points(space, 6, 0) == grid
    drawn = grid_points(space, 3, 7)
    assert len(drawn) == 3 and drawn == grid_points(space, 3, 7)
    assert all(p in grid for p in drawn) and drawn == sorted(drawn, key=grid.index)
    with pytest.raises(ConfigError, match="--trials 7: the search has 6 point"):
        grid_points(space, 7, 0)


def test_each_trial_gets_its_values_its_share_and_the_tune_settings() -> None:
    setup = TuneSetup(
        search={"mcts.num_simulations": ["8", "16"]},
        points=[{"mcts.num_simulations": "8"}, {"mcts.num_simulations": "16"}],
        hours=1.0,
        concurrent=1,
        seed=0,
        ladder_games=4,
        ladder_anchors=["random"],
        ladder_sims=8,
        ladder_jobs=1,
        game="tictactoe",
        workdir=".",
    )
    assert setup.trial_minutes == 30.0
    sets = setup.overrides(1)
    assert sets[0] == "mcts.num_simulations=16" and "train.minutes=30.0" in sets
    assert sets[-len(TRIAL_SETS) :] == list(TRIAL_SETS)
    cfg = load_config(REPO / "configs" / "tictactoe.toml", sets)  # they all load
    assert cfg.mcts.num_simulations == 16 and cfg.train.minutes == 30.0
    assert cfg.ladder.games == 0 and cfg.server.metrics_port == 0
    assert TuneSetup.from_json(json.loads(json.dumps(setup.to_json()))) == setup


# -- the command's refusals: one line, nothing started, nothing written -----------------------


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (["--search", "mcts.num_simulationz=8,16", "--hours", "1"],
         "--search mcts.num_simulationz=8: mcts.num_simulationz: unknown key; did you mean"),
        (["--search", "mcts.num_simulations=8,abc", "--hours", "1"],
         "--search mcts.num_simulations=abc: mcts.num_simulations: expected an integer"),
        (["--search", "mcts.num_simulations=8,0", "--hours", "1"],
         "--search mcts.num_simulations=0: mcts.num_simulations=0: must be in"),
        (["--search", "mcts.num_simulations=", "--hours", "1"],
         "--search mcts.num_simulations=: no values"),
        (["--search", "mcts=8,16", "--hours", "1"], "--search mcts=8: mcts: expected a table"),
        (["--search", "actors.games=4,8", "--set", "autopilot.max_games=6", "--hours", "1"],
         "--search actors.games=4: autopilot.max_games=6: must not exceed actors.games=4"),
        (["--search", "mcts.num_simulations=8,16", "--hours", "1", "--trials", "3"],
         "--trials 3: the search has 2 point(s)"),
        (["--search", "mcts.num_simulations=8,16"], "--hours is required"),
    ],
)  # fmt: skip
def test_bad_flags_are_refused_in_one_line_before_anything_starts(
    flags: list[str], says: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "tune"
    code = main(["tune", "--config", "tictactoe", "--run-dir", str(out), *flags])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.startswith("azserve tune: config error: ") and err.count("\n") == 1, err
    assert says in err, err
    assert not out.exists()


def test_resume_needs_a_tune_and_a_new_tune_needs_an_empty_dir(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "tune"
    assert main(["tune", "--run-dir", str(out), "--resume"]) == 1
    assert "--resume: no tune in" in capsys.readouterr().err
    out.mkdir()
    (out / "setup.json").write_text("{}")
    argv = ["tune", "--config", "tictactoe", "--run-dir", str(out)]
    argv += ["--search", "mcts.num_simulations=8,16", "--hours", "1"]
    assert main(argv) == 1
    assert "holds a tune already: pass --resume" in capsys.readouterr().err


# -- one real tune ---------------------------------------------------------------------------

TRIAL_S = 24.0
"""Each trial's training time: enough for a few checkpoints of tic-tac-toe at 2 simulations."""


def _tune(argv: list[str], ray_tmp: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "AZSERVE_SET"}
    env.update(RAY_TMPDIR=str(ray_tmp), RAY_USAGE_STATS_ENABLED="0")
    script = Path(sys.executable).with_name("azserve")
    head = [str(script)] if script.exists() else [sys.executable, "-m", "azserve.cli.main"]
    return subprocess.run(
        [*head, "tune", *argv], capture_output=True, text=True, timeout=timeout, env=env
    )


@pytest.mark.slow
@pytest.mark.timeout(900)
# On the cluster tests' worker, in turn with them: beside another Ray cluster starting on the
# same two cores (tests/test_cluster_ray*.py) its 20-second trials made no checkpoint at all.
@pytest.mark.xdist_group("cluster")
def test_a_tune_of_tictactoe_through_ray_tune(tmp_path: Path) -> None:
    pytest.importorskip("ray.tune")
    # Ray's sockets must fit AF_UNIX's 107 bytes: its session directory lies under tmp_path,
    # reached through a short link in /tmp.
    (tmp_path / "ray").mkdir()
    ray_tmp = Path(f"/tmp/azt-{os.getpid()}-{time.monotonic_ns() % 10**6}")
    ray_tmp.symlink_to(tmp_path / "ray")
    out = tmp_path / "tune"
    # A checkpoint (with each publish) every 2 steps: a loaded machine's 20 s make few.
    sets = [*QUICK_TRAIN_SETS, "replay.min_size=64", "ladder.sims=2", "actors.games=32",
            "trainer.publish_every=2"]  # fmt: skip
    argv = ["--config", "tictactoe", "--run-dir", str(out), "--ladder-games", "4"]
    argv += ["--search", "mcts.num_simulations=2,6", "--hours", f"{2 * TRIAL_S / 3600:.6f}"]
    argv += [a for s in sets for a in ("--set", s)]
    try:
        done = _tune(argv, ray_tmp, timeout=800)
        log = done.stdout[-4000:] + done.stderr[-4000:]
        assert done.returncode == 0, log
        figures = json.loads((out / "tune.json").read_text())
        trials = figures["trials"]
        assert [t["label"] for t in trials] == ["t0", "t1"]

        for t in trials:
            # a real azserve train each, in its own run directory, to its end or ASHA's stop
            run = Path(t["run_dir"])
            assert run.parent == out / "trials" and run.name == t["label"], t
            assert "azserve train: tictactoe" in (run / "train.log").read_text()
            assert (run / "summary.json").is_file() and (run / "logs" / "learner.log").is_file()
            assert t["status"] in ("finished", "stopped"), (t, log)
            # a rating recorded at every rung it reached, read again on the final fit
            quarters = [r["quarters"] for r in t["rungs"]]
            assert quarters == list(RUNGS[: len(quarters)]) and quarters, t
            assert (t["status"] == "finished") == (quarters[-1] == QUARTERS), t
            for r in t["rungs"]:
                if r["player"] is not None:
                    assert r["player"].startswith(f"{t['label']}@"), r
                    assert (run / "rated" / f"ckpt-{r['step']:09d}.safetensors").exists(), r
        rated = [r for t in trials for r in t["rungs"] if r["final"] is not None]
        assert rated, trials
        assert (
            figures["ladder"]["games"] >= 4 and figures["ladder"]["anchors"]["random"]["elo"] == 0
        )

        # ASHA's verdicts: a stopped trial was below the one before it at the same rung; the
        # best is the finished trial rated highest at its end
        # (a trial that had no checkpoint by its end is finished but unrated: never the best)
        finished = [t for t in trials if t["status"] == "finished" and t["rungs"][-1]["final"]]
        assert finished, trials
        best = max(finished, key=lambda t: t["rungs"][-1]["final"]["elo"])
        assert figures["best"] == best["label"] and best["best"]
        assert f"tune: best {best['label']}" in done.stdout
        for t in trials:
            assert f"tune: {t['label']} (mcts.num_simulations=" in done.stdout
            if t["status"] == "stopped":
                assert "stopped by ASHA" in done.stdout

        cfg = load_config(out / "best.toml")
        assert cfg.mcts.num_simulations == int(best["values"]["mcts.num_simulations"])
        assert cfg.game == "tictactoe" and cfg.train.minutes == 8.0  # the base's, not a trial's
        assert "| t0 |" in (out / "tune.md").read_text() and "| t0 |" in done.stdout
        assert (out / "tune.png").stat().st_size > 10_000

        # --resume of a finished tune: Ray Tune restores it and trains nothing again
        rungs = {t["label"]: (Path(t["run_dir"]) / "rungs.jsonl").read_text() for t in trials}
        again = _tune(["--run-dir", str(out), "--resume"], ray_tmp, timeout=300)
        assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
        assert "): started" not in again.stdout and "(resumed)" in again.stdout
        assert sorted(p.name for p in (out / "trials").iterdir()) == ["t0", "t1"]
        for t in trials:
            assert (Path(t["run_dir"]) / "rungs.jsonl").read_text() == rungs[t["label"]]
        assert json.loads((out / "tune.json").read_text())["best"] == best["label"]
    finally:
        ray_tmp.unlink()
