"""``report.png``: losses, evaluation scores and throughput of a run, from its JSON-lines logs."""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only; no display on these machines
import matplotlib.pyplot as plt  # noqa: E402

from learner.runlog import read_metrics  # noqa: E402


def write_report(run_dir: str | Path) -> Path:
    run_dir = Path(run_dir)
    rows = read_metrics(run_dir / "metrics.jsonl") if (run_dir / "metrics.jsonl").exists() else []
    evals = []
    if (run_dir / "eval.jsonl").exists():
        evals = [
            json.loads(line)
            for line in (run_dir / "eval.jsonl").read_text().splitlines()
            if line.strip()
        ]
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.5))
    ax = axes[0]
    if rows:
        steps = [r["step"] for r in rows]
        for key in ("loss", "policy_loss", "value_loss"):
            ax.plot(steps, [r.get(key, float("nan")) for r in rows], label=key)
    ax.set(title="training loss", xlabel="learner step")
    ax = axes[1]
    for label, series in _eval_series(evals).items():
        ax.plot([p[0] for p in series], [p[1] for p in series], marker="o", label=label)
    ax.set(title="evaluation", xlabel="learner step", ylim=(-0.02, 1.02))
    ax = axes[2]
    if len(rows) > 1:
        t0 = rows[0]["time"]
        ts = [(r["time"] - t0) / 60 for r in rows]
        pos_rate = [0.0] + [
            (b["positions"] - a["positions"]) / max(b["time"] - a["time"], 1e-9)
            for a, b in zip(rows, rows[1:])
        ]
        samples = [r.get("sample_rate", 0.0) for r in rows]
        ax.plot(ts, pos_rate, label="self-play positions/s")
        ax.plot(ts, samples, label="learner samples/s")
    ax.set(title="throughput", xlabel="minutes")
    for ax in axes:
        if ax.get_legend_handles_labels()[0]:  # an empty legend only warns
            ax.legend(fontsize=8)
    fig.tight_layout()
    out = run_dir / "report.png"
    fig.savefig(out, dpi=90)
    plt.close(fig)
    return out


def _eval_series(evals: list[dict]) -> dict[str, list[tuple[int, float]]]:
    series: dict[str, list[tuple[int, float]]] = {}

    def add(name: str, step: int, value: float) -> None:
        series.setdefault(name, []).append((step, value))

    for e in evals:
        step = e["step"]
        if "tictactoe" in e:
            add("ttt policy optimal", step, e["tictactoe"]["policy_optimal"])
            if "mcts_optimal" in e["tictactoe"]:
                add("ttt MCTS optimal", step, e["tictactoe"]["mcts_optimal"])
        if "connect4" in e:
            add("c4 policy mistakes", step, e["connect4"]["policy"]["overall"])
            if "mcts" in e["connect4"]:
                add("c4 MCTS mistakes", step, e["connect4"]["mcts"]["overall"])
        for key in ("vs_random", "vs_previous"):
            if key in e:
                r = e[key]
                n = max(1, r["win"] + r["draw"] + r["loss"])
                add(f"{key} score", step, (r["win"] + 0.5 * r["draw"]) / n)
    return series
