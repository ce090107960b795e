"""Learning curves of several runs in one image: mistake rate per benchmark set against wall
time and against positions recorded, raw policy and MCTS, one colour per run. The rates are
the series of the game's benchmarks (actors/games/benchmark.py): an error rate as it is, a
success rate (optimal moves) as one minus it.

A run directory (``azserve train``'s) holds ``eval.jsonl`` (periodic raw-policy scores and the
final MCTS one), optionally ``curve.jsonl`` (MCTS scores of kept checkpoints, written after the
run by ``azserve compare``) and ``metrics.jsonl`` (the learner's rows: time, step, positions,
moves). An evaluation at learner step ``s`` is placed at the time and positions of the first
metrics row at or after ``s`` (else the last row): the learner writes a checkpoint on reaching
its step, so that row is the nearest record of when it was written. Time counts
from the run's start (``started`` in ``summary.json``), else from its first metrics row.
"""

from __future__ import annotations

import bisect
import json
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only; no display on these machines
import matplotlib.pyplot as plt  # noqa: E402

from actors.games import Benchmark, benchmarks_by_name  # noqa: E402
from actors.games.benchmark import OVERALL  # noqa: E402
from learner.runlog import read_metrics  # noqa: E402


@dataclass(frozen=True)
class CurvePoint:
    """One evaluated checkpoint of one run."""

    step: int
    """Learner step of the checkpoint."""
    minutes: float
    """Wall time from the run's start to the checkpoint's step."""
    positions: int
    """Positions recorded (trained on) by then."""
    moves: int
    """Moves played by then (more than ``positions`` with playout cap randomization)."""
    policy: dict[str, float]
    """Raw-policy mistake rate per set, and ``overall`` (tic-tac-toe: one set, ``overall``)."""
    mcts: dict[str, float] = field(default_factory=dict)
    """MCTS mistake rate per set at the eval setting; empty when not measured."""


def mistake_rates(
    result: dict[str, Any], label: str, benchmarks: dict[str, Benchmark] | None = None
) -> dict[str, float]:
    """Per-set mistake rates of one evaluation row (``evaluate_checkpoint``'s output) for
    ``label`` ``"policy"`` or ``"mcts"``, from the series of ``benchmarks`` (by name; every
    built-in game's when None); empty when that row did not measure it."""
    if benchmarks is None:
        benchmarks = benchmarks_by_name()
    rates: dict[str, float] = {}
    for name, bench in benchmarks.items():
        if isinstance(result.get(name), dict):
            for s in bench.series:
                if s.search == label:
                    rates.update(s.mistake_rates(result[name]))
    return rates


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


class Timeline:
    """Where a learner step falls in a run: minutes from its start, positions and moves
    recorded by then (the first metrics row at or after the step, else the last row). Minutes
    count from ``started`` (Unix time), else from the first metrics row."""

    def __init__(self, metrics: list[dict[str, Any]], started: float | None = None) -> None:
        self.rows = sorted(
            (r for r in metrics if "step" in r and "time" in r), key=lambda r: r["step"]
        )
        self.steps = [int(r["step"]) for r in self.rows]
        self.t0 = (self.rows[0]["time"] if self.rows else 0.0) if started is None else started

    @classmethod
    def of_run(cls, run_dir: str | Path) -> Timeline:
        d = Path(run_dir)
        metrics = read_metrics(d / "metrics.jsonl") if (d / "metrics.jsonl").exists() else []
        return cls(metrics, run_started(d))

    def at(self, step: int) -> tuple[float, int, int] | None:
        """(minutes, positions, moves) at ``step``; None when the run has no metrics rows."""
        if not self.rows:
            return None
        r = self.rows[min(bisect.bisect_left(self.steps, step), len(self.rows) - 1)]
        positions = int(r.get("positions", 0))
        return (r["time"] - self.t0) / 60, positions, int(r.get("moves", positions))


def join_points(
    evals: list[dict[str, Any]],
    metrics: list[dict[str, Any]],
    started: float | None = None,
    benchmarks: dict[str, Benchmark] | None = None,
) -> list[CurvePoint]:
    """Curve points from evaluation rows and metrics rows, sorted by step; rows of the same
    step merge (a periodic raw-policy row and a later MCTS row of that checkpoint). Minutes
    count from ``started`` (Unix time), else from the first metrics row. ``benchmarks``: the
    run's game's, by name (every built-in game's when None)."""
    if benchmarks is None:
        benchmarks = benchmarks_by_name()
    return _points(evals, Timeline(metrics, started), benchmarks)


def _points(
    evals: list[dict[str, Any]], timeline: Timeline, benchmarks: dict[str, Benchmark]
) -> list[CurvePoint]:
    merged: dict[int, dict[str, dict[str, float]]] = {}
    for e in evals:
        m = merged.setdefault(int(e["step"]), {"policy": {}, "mcts": {}})
        for label in ("policy", "mcts"):
            m[label].update(mistake_rates(e, label, benchmarks))
    out = []
    for step, m in sorted(merged.items()):
        place = timeline.at(step)
        if place is None:
            return []
        minutes, positions, moves = place
        out.append(CurvePoint(step, minutes, positions, moves, m["policy"], m["mcts"]))
    return out


def read_run(run_dir: str | Path) -> list[CurvePoint]:
    """The curve points of one ``azserve train`` run directory."""
    d = Path(run_dir)
    evals = _read_jsonl(d / "eval.jsonl") + _read_jsonl(d / "curve.jsonl")
    return _points(evals, Timeline.of_run(d), benchmarks_by_name(run_game(d)))


def run_game(run_dir: str | Path) -> str | None:
    """The game a run played (``game`` in its ``config.toml``), if it says."""
    try:
        game = tomllib.loads((Path(run_dir) / "config.toml").read_text()).get("game")
    except (OSError, tomllib.TOMLDecodeError):
        return None
    return game if isinstance(game, str) else None


def run_started(run_dir: str | Path) -> float | None:
    """When the run in ``run_dir`` started (Unix time), if its ``summary.json`` says."""
    path = Path(run_dir) / "summary.json"
    if not path.exists():
        return None
    started = json.loads(path.read_text()).get("started")
    return float(started) if started is not None else None


def set_names(runs: dict[str, list[CurvePoint]]) -> list[str]:
    """The sets measured in any run, ``overall`` first, then in the benchmark's order."""
    names: list[str] = []
    for points in runs.values():
        for p in points:
            for name in [*p.policy, *p.mcts]:
                if name not in names:
                    names.append(name)
    return sorted(names, key=lambda n: (n != OVERALL, names.index(n)))


def draw_curves(runs: dict[str, list[CurvePoint]], out: str | Path, title: str = "") -> Path:
    """One PNG: a row per set, columns against minutes and against positions; solid lines
    with dots are MCTS at the eval setting, dashed lines the raw policy."""
    names = set_names(runs)
    if not names:
        raise ValueError("no evaluated checkpoints in any run")
    fig, axes = plt.subplots(len(names), 2, figsize=(12, 2.6 * len(names)), squeeze=False)
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for row, name in enumerate(names):
        for col, (xkey, xlabel) in enumerate((("minutes", "minutes"), ("positions", "positions"))):
            ax = axes[row][col]
            for i, (label, points) in enumerate(runs.items()):
                c = colours[i % len(colours)]
                for kind, style in (("policy", "--"), ("mcts", "-o")):
                    xs = [getattr(p, xkey) for p in points if name in getattr(p, kind)]
                    ys = [getattr(p, kind)[name] for p in points if name in getattr(p, kind)]
                    if xs:
                        ax.plot(xs, ys, style, color=c, markersize=3, label=f"{label} {kind}")
            ax.set(title=f"{name}: mistake rate", xlabel=xlabel, ylim=(-0.01, None))
            ax.grid(alpha=0.3)
            if ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize=7)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    path = Path(out)
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return path
