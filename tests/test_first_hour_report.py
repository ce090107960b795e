"""report.png worth reading: every panel's axes labelled, the evaluation axis scaled to the
data, learning rate / freshness / inference panels, a stop-and-resume gap drawn as a gap, the
run and its config named in the title, no constant ``vs_previous`` line."""

from __future__ import annotations

import json
import math
from pathlib import Path

import matplotlib.pyplot as plt

from azserve.config.schema import load_config, save_config
from azserve.run.report import build_figure, with_gaps, write_report

REPO = Path(__file__).resolve().parents[1]


def fake_run(run_dir: Path) -> None:
    """Rows every 5 s for steps 0..190, a 10-minute stop after step 100, and evaluations at
    0.97-0.99 (which a 0-1 axis would draw flat)."""
    save_config(load_config(REPO / "configs" / "tictactoe.toml"), run_dir / "config.toml")
    rows, t = [], 1000.0
    for i in range(20):
        step = 10 * i
        t += 5.0 if step != 110 else 600.0
        rows.append(
            {
                "time": t, "step": step, "version": step // 40, "positions": 300 * i,
                "loss": 2.0 - 0.05 * i, "policy_loss": 1.5 - 0.04 * i, "value_loss": 0.5,
                "lr": 0.05 * (1 - i / 40), "mean_lag": 2.0, "bottleneck": "learner" if i % 4 else "inference", "reuse": 5.0, "sample_rate": 400.0,
                "server_batch": 90.0, "inference_busy": 0.8, "learner_busy": 0.4,
            }
        )  # fmt: skip
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    evals = [
        {"step": s, "tictactoe": {"policy_optimal": p, "mcts_optimal": 0.99},
         "vs_random": {"win": 19, "draw": 1, "loss": 0},
         "vs_previous": {"win": 7, "draw": 6, "loss": 7}}
        for s, p in ((40, 0.97), (80, 0.975), (120, 0.985))
    ]  # fmt: skip
    (run_dir / "eval.jsonl").write_text("".join(json.dumps(e) + "\n" for e in evals))


def test_report_panels_axes_and_title(tmp_path: Path) -> None:
    fake_run(tmp_path)
    fig = build_figure(tmp_path)
    try:
        title = fig._suptitle.get_text()  # type: ignore[union-attr]
        assert str(tmp_path) in title and "tictactoe" in title and "config.toml" in title
        axes = {ax.get_title(): ax for ax in fig.axes if ax.get_title()}
        assert set(axes) == {
            "training loss", "evaluation", "throughput", "learning rate",
            "freshness of training data", "inference server and learner",
        }  # fmt: skip
        for ax in fig.axes:
            assert ax.get_ylabel(), ax.get_title()
        for name, ax in axes.items():
            assert ax.get_xlabel(), name
            assert ax.lines, f"{name}: nothing drawn"
        lo, hi = axes["evaluation"].get_ylim()
        assert lo > 0.9 and hi <= 1.0  # scaled to the 0.97-1.0 data, not 0-1
        labels = [line.get_label() for line in axes["evaluation"].lines]
        assert not [label for label in labels if "previous" in label]
        # The 10-minute stop breaks the throughput and learning-rate lines.
        for name in ("throughput", "learning rate"):
            assert any(math.isnan(y) for y in axes[name].lines[0].get_ydata()), name
    finally:
        plt.close(fig)
    out = write_report(tmp_path)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 20_000


def test_panels_without_information_go_and_the_rating_and_bottleneck_come(tmp_path: Path) -> None:
    """A constant learning rate and a score against random pinned at 1.0 draw no panel; a
    ladder kept by the run draws its rating with intervals; the title names the bottleneck."""
    fake_run(tmp_path)
    rows = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    for r in rows:
        r["lr"] = 0.02
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    evals = [{"step": s, "vs_random": {"win": 20, "draw": 0, "loss": 0}} for s in (40, 80)]
    (tmp_path / "eval.jsonl").write_text("".join(json.dumps(e) + "\n" for e in evals))
    (tmp_path / "ladder").mkdir()
    players = [
        {"player": "random", "elo": 0.0, "lo": 0.0, "hi": 0.0, "games": 9, "step": None},
        {"player": "run@40", "elo": 120.0, "lo": 20.0, "hi": 220.0, "games": 5, "step": 40},
        {"player": "run@80", "elo": 340.0, "lo": 200.0, "hi": 480.0, "games": 6, "step": 80},
        {"player": "run@120", "elo": 0.0, "lo": None, "hi": None, "games": 0, "step": 120},
    ]
    (tmp_path / "ladder" / "ratings.json").write_text(json.dumps({"games": 10, "players": players}))
    fig = build_figure(tmp_path)
    try:
        titles = {ax.get_title() for ax in fig.axes if ax.get_visible() and ax.get_title()}
        assert "learning rate" not in titles and "evaluation" not in titles
        (rating,) = [t for t in titles if t.startswith("rating")]
        assert rating == "rating: 340 Elo (200..480) at step 80"
        title = fig._suptitle.get_text()  # type: ignore[union-attr]
        assert "bottleneck: learner in 75% of status rows, inference in 25%" in title
    finally:
        plt.close(fig)


def test_gaps_only_where_the_run_stopped() -> None:
    xs, ys = with_gaps([1, 2, 3, 4, 5], [1, 1, 1, 1, 1], [0, 5, 10, 500, 505])
    assert xs[:3] == [1, 2, 3] and math.isnan(xs[3]) and xs[4:] == [4, 5]
    assert with_gaps([1, 2, 3], [0, 0, 0], [0, 5, 10]) == ([1, 2, 3], [0, 0, 0])
