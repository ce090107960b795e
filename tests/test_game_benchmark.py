"""A game's own benchmark, scored and drawn with no app code knowing the game: the Nim file of
docs/games.md (its ``WinningMoves`` benchmark) through ``azserve eval``, training's
``evaluate_checkpoint``, the run's report and the learning curves; and the series' contract."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import matplotlib.pyplot as plt
import pytest

from actors.games import benchmarks_by_name, make_game
from actors.games.benchmark import OVERALL, Series
from azserve.arena.curves import draw_curves, read_run
from azserve.arena.evaluate import evaluate_checkpoint
from azserve.cli.main import main
from azserve.config.schema import load_config, save_config, to_dict
from azserve.run.report import build_figure
from learner.checkpoint import save_checkpoint
from learner.trainer import Trainer
from tests.test_game_in_one_file import doc_block

pytestmark = pytest.mark.usefixtures("torch_one_thread")


@pytest.fixture
def nim_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The doc's Nim file and config in a fresh working directory."""
    (tmp_path / "nim.py").write_text(doc_block("# nim.py"))
    (tmp_path / "nim.toml").write_text(doc_block("# nim.toml"))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def nim_checkpoint(directory: Path, sets: list[str]) -> Path:
    cfg = load_config("nim.toml", sets)
    trainer = Trainer(replace(cfg.net, seed=3), replace(cfg.trainer, device="cpu"))
    return save_checkpoint(directory, 40, 5, trainer.state_dict(), to_dict(cfg))


def test_the_games_own_benchmark_is_scored(
    nim_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ckpt = nim_checkpoint(nim_dir / "run" / "checkpoints", [])
    assert main(["eval", "--checkpoint", str(ckpt), "--sims", "8"]) == 0
    captured = capsys.readouterr()
    result = json.loads(captured.out)
    nim = result["nim"]
    assert nim["positions"] == 9  # piles 1..12 that are not multiples of 4
    assert 0.0 <= nim["policy"] <= 1.0 and 0.0 <= nim["mcts"] <= 1.0
    assert "vs_random" not in result  # a game with a benchmark plays no match unless asked
    assert "policy: winning moves" in captured.err and "MCTS: winning moves" in captured.err
    # Its benchmark reads no positions file: the flags for one are refused, naming who has one.
    assert main(["eval", "--checkpoint", str(ckpt), "--limit", "3"]) == 2
    assert (
        "--limit: benchmark positions are for connect4, not nim.py:Nim" in capsys.readouterr().err
    )

    # Training's evaluation runs it too: raw policy always, the search when full.
    cfg = load_config("nim.toml", ["eval.sims=8", "eval.match_games=2", "eval.match_sims=2"])
    full = evaluate_checkpoint(cfg, ckpt, full=True)
    assert (
        set(full["nim"]) == {"positions", "policy", "mcts"} and sum(full["vs_random"].values()) == 2
    )
    assert "mcts" not in evaluate_checkpoint(cfg, ckpt, full=False)["nim"]


def test_the_games_own_benchmark_is_drawn(nim_dir: Path) -> None:
    """A run of the Nim game, its evaluations written as training writes them: the report's
    evaluation panel draws the benchmark's series, the learning curves its mistake rates."""
    run = nim_dir / "run"
    run.mkdir()
    save_config(load_config("nim.toml"), run / "config.toml")
    metrics = [{"time": 1000.0 + 30 * i, "step": 10 * i, "positions": 50 * i} for i in range(5)]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in metrics))
    evals = [
        {"step": 10, "full": False, "nim": {"positions": 9, "policy": 0.25}},
        {"step": 30, "full": True, "nim": {"positions": 9, "policy": 0.5, "mcts": 0.75}},
    ]
    (run / "eval.jsonl").write_text("".join(json.dumps(e) + "\n" for e in evals))

    fig = build_figure(run)
    try:
        (panel,) = [ax for ax in fig.axes if ax.get_title() == "evaluation"]
        lines = {line.get_label(): list(line.get_ydata()) for line in panel.lines}
        assert lines == {"policy: winning moves": [0.25, 0.5], "MCTS: winning moves": [0.75]}
    finally:
        plt.close(fig)

    points = read_run(run)  # a success rate drawn as one minus it: a mistake rate
    assert [(p.step, p.policy, p.mcts) for p in points] == [
        (10, {OVERALL: 0.75}, {}),
        (30, {OVERALL: 0.5}, {OVERALL: 0.25}),
    ]
    assert draw_curves({"nim": points}, nim_dir / "curves.png").is_file()


def test_series_read_numbers_and_per_set_rates() -> None:
    plain = Series("s", ("a", "b"), "policy", lower_is_better=False)
    assert plain.value({"a": {"b": 0.25}}) == 0.25 and plain.headline({"a": {"b": 1}}) == 1.0
    assert plain.value({"a": {}}) is None and plain.mistake_rates({"a": 0.3}) == {}
    assert plain.mistake_rates({"a": {"b": 0.25}}) == {OVERALL: 0.75}
    per_set = Series("m", ("mcts",), "mcts", lower_is_better=True)
    rates = {"mcts": {OVERALL: 0.2, "End-Easy": 0.1}}
    assert per_set.headline(rates) == 0.2 and per_set.mistake_rates(rates) == rates["mcts"]


def test_runs_are_read_with_their_games_benchmarks(nim_dir: Path) -> None:
    assert set(benchmarks_by_name()) == {"tictactoe", "connect4", "chess"}  # the built-in games'
    assert set(benchmarks_by_name("nim.py:Nim")) == {"nim"}
    assert benchmarks_by_name("othello") == {}
    # A game file gone since the run: read as the built-in games are.
    assert set(benchmarks_by_name("gone.py:Nim")) == {"tictactoe", "connect4", "chess"}
    assert make_game("nim.py:Nim").benchmarks()[0].name == "nim"
