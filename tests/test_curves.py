"""Learning curves and ``azserve compare``: evaluations joined to the learner's rows, one image
for several runs, checkpoints scored after a run, and a finished comparison redrawn."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from azserve.arena.curves import OVERALL, draw_curves, join_points, mistake_rates, read_run
from azserve.config.schema import load_config
from azserve.errors import ConfigError
from azserve.run.compare import (
    Candidate,
    format_table,
    load_candidates,
    run_comparison,
    score_checkpoints,
)
from learner.checkpoint import save_checkpoint
from learner.trainer import Trainer

pytestmark = pytest.mark.timeout(120)

REPO = Path(__file__).resolve().parents[1]
TTT = REPO / "configs" / "tictactoe.toml"
TTT_GUMBEL = REPO / "configs" / "tictactoe-gumbel.toml"


def c4_row(step: int, policy: float, mcts: float | None = None) -> dict:
    scores = {"positions": 1000, "policy": {"overall": policy, "End-Easy": policy / 2}}
    if mcts is not None:
        scores["mcts"] = {"overall": mcts, "End-Easy": mcts / 2}
    return {"step": step, "full": mcts is not None, "connect4": scores}


def metrics_row(t: float, step: int, positions: int, moves: int | None = None) -> dict:
    row = {"time": t, "step": step, "positions": positions}
    if moves is not None:
        row["moves"] = moves
    return row


def test_points_take_the_learners_time_and_positions_at_their_step() -> None:
    metrics = [
        metrics_row(1000.0, 0, 0, 0),
        metrics_row(1060.0, 50, 4000, 16000),
        metrics_row(1120.0, 100, 9000, 36000),
        metrics_row(1180.0, 150, 15000, 60000),
    ]
    evals = [c4_row(50, 0.4), c4_row(120, 0.3), c4_row(120, 0.3, mcts=0.2)]
    points = join_points(evals, metrics)
    assert [p.step for p in points] == [50, 120]
    assert points[0].minutes == pytest.approx(1.0) and points[0].positions == 4000
    # Step 120 was reached between the rows of 100 and 150: the first row at or after it.
    assert points[1].minutes == pytest.approx(3.0) and points[1].moves == 60000
    late = join_points([c4_row(400, 0.1)], metrics)  # past the last row: the last row
    assert late[0].positions == 15000
    assert points[0].policy == {"overall": 0.4, "End-Easy": 0.2} and points[0].mcts == {}
    assert points[1].mcts == {"overall": 0.2, "End-Easy": 0.1}  # merged with the policy row
    # Rows without moves (runs before playout caps) count every position as a move.
    assert join_points(evals[:1], [metrics_row(0.0, 0, 7)])[0].moves == 7
    assert join_points(evals, []) == []


def test_tictactoe_mistake_rate_is_one_minus_optimal() -> None:
    row = {"step": 1, "tictactoe": {"policy_optimal": 0.75, "mcts_optimal": 1.0}}
    assert mistake_rates(row, "policy") == {OVERALL: 0.25}
    assert mistake_rates(row, "mcts") == {OVERALL: 0.0}
    assert mistake_rates({"step": 1, "tictactoe": {"policy_optimal": 0.5}}, "mcts") == {}


def test_one_image_for_several_runs(tmp_path: Path) -> None:
    metrics = [metrics_row(100.0 + 60 * i, 50 * i, 4000 * i) for i in range(4)]
    runs = {
        "puct": join_points([c4_row(50, 0.4), c4_row(150, 0.3, 0.2)], metrics),
        "gumbel": join_points([c4_row(50, 0.35), c4_row(100, 0.25, 0.15)], metrics),
    }
    out = draw_curves(runs, tmp_path / "curves.png", "test")
    with Image.open(out) as im:
        width, height = im.size
        pixels = np.asarray(im.convert("L"))
    # Two sets (overall first) -> two rows of two panels; lines drawn, not a blank canvas.
    assert width == 12 * 80 and height == int(2 * 2.6 * 80)
    assert (pixels < 128).mean() > 0.01
    with pytest.raises(ValueError, match="no evaluated checkpoints"):
        draw_curves({"empty": []}, tmp_path / "none.png")


def test_candidates_are_named_and_must_play_one_game() -> None:
    cands = load_candidates([str(TTT), str(TTT_GUMBEL), str(TTT)], [], ["eval.sims=4"])
    assert [c.label for c in cands] == ["tictactoe", "tictactoe-gumbel", "tictactoe-2"]
    assert cands[1].config.mcts.algorithm == "gumbel" and cands[0].config.eval.sims == 4
    with pytest.raises(ConfigError, match="--label given 1 times for 2"):
        load_candidates([str(TTT), str(TTT_GUMBEL)], ["a"], [])
    with pytest.raises(ConfigError, match="plays connect4"):
        load_candidates([str(TTT), str(REPO / "configs" / "connect4-puct.toml")], [], [])


def test_arms_of_one_config_take_their_own_overrides() -> None:
    """``--set-in LABEL KEY=VALUE``: one config, an arm per part, each arm's own values after
    the shared ``--set``; an encoding of the same rules may join (go9-features with go9),
    another game may not."""
    go9 = str(REPO / "configs" / "go9-alphazero.toml")
    cands = load_candidates(
        [go9, go9, go9],
        ["base", "features", "pooling"],
        ["eval.sims=8", "net.blocks=2"],
        [("features", "game=go9-features"), ("pooling", "net.global_pool_every=1"),
         ("pooling", "net.blocks=3")],
    )  # fmt: skip
    base, features, pooling = (c.config for c in cands)
    assert (base.game, features.game, pooling.game) == ("go9", "go9-features", "go9")
    assert features.net.in_channels == 11 and base.net.in_channels == 4
    assert (base.net.global_pool_every, pooling.net.global_pool_every) == (0, 1)
    assert (base.net.blocks, pooling.net.blocks) == (2, 3)  # the arm's value after --set
    assert all(c.config.eval.sims == 8 for c in cands)
    with pytest.raises(ConfigError, match=r"--set-in pool: no candidate .*labels: base, features"):
        load_candidates([go9, go9], ["base", "features"], [], [("pool", "net.blocks=1")])
    with pytest.raises(ConfigError, match="plays othello, .* plays go9 .other rules"):
        load_candidates([go9, go9], [], [], [("go9-alphazero-1", "game=othello")])


def fake_run(run_dir: Path, cfg, count: int) -> None:  # type: ignore[no-untyped-def]
    """A finished run's files: real checkpoints of the tiny-budget net at steps 10, 20, ...
    metrics rows, one periodic raw-policy evaluation, and ``summary.json``."""
    ckpt_dir = run_dir / cfg.checkpoint.dir
    for i in range(count):
        trainer = Trainer(cfg.net, cfg.trainer)
        trainer.step_count = 10 * (i + 1)
        state = {**trainer.state_dict(), "games": 5 * i, "positions": 40 * i, "moves": 80 * i}
        save_checkpoint(ckpt_dir, trainer.step_count, i + 1, state, {}, keep_last=10)
    rows = [metrics_row(1000.0 + 30 * i, 10 * i, 40 * i, 80 * i) for i in range(count + 1)]
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    periodic = {"step": 10, "full": False, **c4_row(10, 0.5)}
    (run_dir / "eval.jsonl").write_text(json.dumps(periodic) + "\n")
    (run_dir / "summary.json").write_text(json.dumps({"started": 970.0}) + "\n")


def test_checkpoints_scored_once_then_redrawn(tmp_path: Path) -> None:
    # Connect Four's benchmark cut to 30 positions keeps the real scoring quick.
    c4 = REPO / "configs" / "connect4.toml"
    cfg = load_config(
        c4, ["eval.sims=2", "eval.match_games=2", "eval.c4_limit=30", "backend.torch.compile=none"]
    )
    run_dir = tmp_path / "c4"
    fake_run(run_dir, cfg, 2)
    assert score_checkpoints(cfg, run_dir) == 2
    assert score_checkpoints(cfg, run_dir) == 0  # already scored: nothing new
    rows = [json.loads(line) for line in (run_dir / "curve.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [10, 20] and all(r["full"] for r in rows)
    assert all("mcts" in r["connect4"] and "vs_random" not in r for r in rows)
    assert rows[0]["connect4"]["positions"] == 30
    points = read_run(run_dir)
    assert [p.step for p in points] == [10, 20]
    # Step 10's periodic row (0.5) was overwritten by the later full scoring of that step.
    assert points[0].policy == rows[0]["connect4"]["policy"]
    assert points[1].mcts and points[1].positions == 80 and points[1].moves == 160
    assert points[1].minutes == pytest.approx((1060 - 970) / 60)  # from the run's start

    # A comparison whose runs are finished is not trained again: it scores and redraws.
    figures = run_comparison([Candidate("c4", cfg)], tmp_path, minutes=1.0)
    assert (tmp_path / "curves.png").is_file()
    assert json.loads((tmp_path / "compare.json").read_text()) == figures
    f = figures["c4"]
    assert f["learner_steps"] == 20 and f["positions"] == 80 and f["moves"] == 160
    assert f["positions_per_s"] == pytest.approx(80 / 90) and f["mcts_step"] == 20
    table = format_table(figures)
    assert table.splitlines()[1].startswith("c4") and "%" in table


def test_runs_without_evaluations_give_figures_and_no_image(tmp_path: Path) -> None:
    cfg = load_config(TTT)
    run_dir = tmp_path / "short"
    run_dir.mkdir()
    (run_dir / "metrics.jsonl").write_text(json.dumps(metrics_row(10.0, 0, 0)) + "\n")
    (run_dir / "summary.json").write_text(json.dumps({"started": 0.0}) + "\n")
    figures = run_comparison([Candidate("short", cfg)], tmp_path, minutes=0.5)
    assert figures["short"]["learner_steps"] == 0 and "policy" not in figures["short"]
    assert (tmp_path / "compare.json").is_file() and not (tmp_path / "curves.png").exists()
    assert "-" in format_table(figures).splitlines()[1]


def test_games_without_benchmark_sets_give_their_matches_and_no_image(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Othello has no mistake sets: its runs' evaluations are matches only. The comparison
    ends without an image, says so, and the figures carry each run's last matches."""
    cfg = load_config(REPO / "configs" / "othello.toml")
    for label, wins in (("aug", 19), ("none", 12)):
        run_dir = tmp_path / label
        run_dir.mkdir()
        rows = [metrics_row(1000.0 + 30 * i, 50 * i, 400 * i) for i in range(3)]
        (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        evals = [
            {"step": 50, "full": False, "vs_random": {"win": 10, "draw": 0, "loss": 10}},
            {
                "step": 100,
                "full": True,
                "vs_random": {"win": wins, "draw": 0, "loss": 20 - wins},
                "vs_previous": {"win": 11, "draw": 1, "loss": 8},
            },
        ]
        (run_dir / "eval.jsonl").write_text("".join(json.dumps(e) + "\n" for e in evals))
        (run_dir / "summary.json").write_text(json.dumps({"started": 970.0}) + "\n")
    cands = [Candidate("aug", cfg), Candidate("none", cfg)]
    figures = run_comparison(cands, tmp_path, minutes=1, score=False)
    assert not (tmp_path / "curves.png").exists()
    assert "no curves drawn" in capsys.readouterr().out
    assert figures["aug"]["vs_random"] == {"win": 19, "draw": 0, "loss": 1}
    assert figures["none"]["vs_random"]["win"] == 12 and figures["none"]["matches_step"] == 100
    assert figures["aug"]["vs_previous"]["draw"] == 1 and figures["aug"]["learner_steps"] == 100
    assert json.loads((tmp_path / "compare.json").read_text()) == figures


def test_compare_from_the_command_line_takes_names_and_files(tmp_path: Path) -> None:
    """The CLI path (several --config, a shipped name among them) on two finished runs: they
    are scored and drawn, not trained again."""
    from azserve.cli.main import main

    sets = ["eval.sims=2", "eval.match_games=2"]
    for label, path in (("tictactoe", TTT), ("tictactoe-gumbel", TTT_GUMBEL)):
        fake_run(tmp_path / label, load_config(path, sets), 1)
    argv = ["compare", "--config", "tictactoe", "--config", str(TTT_GUMBEL), "--minutes", "1"]
    argv += ["--run-dir", str(tmp_path), "--no-progress", "--ladder-games", "0"]
    for s in sets:
        argv += ["--set", s]
    assert main(argv) == 0
    figures = json.loads((tmp_path / "compare.json").read_text())
    assert sorted(figures) == ["tictactoe", "tictactoe-gumbel"]
    assert all(f["mcts_step"] == 10 for f in figures.values())


def test_compare_no_score_draws_finished_runs_as_they_are(tmp_path: Path) -> None:
    """``--no-score``: two finished runs (linked in under their labels) are drawn from their
    own evaluations; their kept checkpoints are not scored with MCTS. Their checkpoints play
    on one ladder (random at 0): Elo against time in ladder.png, each candidate's newest
    rating in compare.json; a rerun adds the games asked for to the same ladder."""
    from azserve.cli.main import main

    for label in ("a", "b"):
        fake_run(tmp_path / "runs" / label, load_config(TTT), 2)
    out = tmp_path / "ab"
    out.mkdir()
    for label in ("a", "b"):
        (out / label).symlink_to(tmp_path / "runs" / label)
    argv = ["compare", "--config", str(TTT), "--label", "a", "--config", str(TTT), "--label", "b"]
    argv += ["--minutes", "1", "--run-dir", str(out), "--no-progress", "--no-score"]
    argv += ["--ladder-games", "8", "--set", "eval.sims=2"]
    assert main(argv) == 0
    assert not (tmp_path / "runs" / "a" / "curve.jsonl").exists()  # nothing scored
    figures = json.loads((out / "compare.json").read_text())
    assert sorted(figures) == ["a", "b"]
    assert all(f["learner_steps"] == 20 and "mcts_step" not in f for f in figures.values())
    assert (out / "curves.png").is_file()
    assert (out / "ladder.png").is_file()
    assert all(f["elo"]["step"] == 20 and f["elo"]["lo"] <= f["elo"]["elo"] <= f["elo"]["hi"]
               for f in figures.values())  # fmt: skip
    games = (out / "ladder" / "games.jsonl").read_text().splitlines()
    assert len(games) == 8
    players = {n for g in map(json.loads, games) for n in (g["black"], g["white"])}
    assert players <= {"a@10", "a@20", "b@10", "b@20", "random"} and len(players) >= 3
    assert main(argv) == 0
    assert len((out / "ladder" / "games.jsonl").read_text().splitlines()) == 16


def test_compare_trains_unfinished_candidates_afresh_and_stops_on_a_config_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Interrupted (summary says so) or never trained (no summary): trained again, a run with
    checkpoints set aside first, one without removed; a child's config error stops the
    comparison before anything is scored or drawn."""
    import azserve.run.train as train

    cfg = load_config(TTT, ["eval.sims=0", "eval.match_games=0"])
    interrupted = tmp_path / "a"
    fake_run(interrupted, cfg, 1)
    (interrupted / "summary.json").write_text(json.dumps({"stop_reason": "interrupted (Ctrl-C)"}))
    never = tmp_path / "b"
    (never / "logs").mkdir(parents=True)
    (never / "config.toml").write_text("")
    trained: list[str] = []

    def run_training(cfg, run_dir: Path, progress: bool = False) -> int:  # type: ignore[no-untyped-def]
        assert not run_dir.exists()  # a fresh directory for a fresh start
        trained.append(run_dir.name)
        fake_run(run_dir, cfg, 1)
        return 0

    monkeypatch.setattr(train, "run_training", run_training)
    candidates = [Candidate("a", cfg), Candidate("b", cfg)]
    run_comparison(candidates, tmp_path, minutes=0.5, score=False)
    assert trained == ["a", "b"]
    assert (tmp_path / "a.unfinished-1" / "checkpoints").is_dir()  # kept, beside
    assert not (tmp_path / "b.unfinished-1").exists()  # nothing trained there: removed
    run_comparison(candidates, tmp_path, minutes=0.5, score=False)
    assert trained == ["a", "b"]  # both finished now: not trained again

    monkeypatch.setattr(train, "run_training", lambda *a, **k: train.CONFIG_ERROR_EXIT)
    with pytest.raises(ConfigError, match="c: a process of its run refused the config"):
        run_comparison([Candidate("c", cfg)], tmp_path / "bad", minutes=0.5)
    assert not (tmp_path / "bad" / "compare.json").exists()
