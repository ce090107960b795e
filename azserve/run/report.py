"""``report.png``: a run on one page, from its JSON-lines logs (``metrics.jsonl``,
``eval.jsonl``) and its ``config.toml``.

Up to seven panels, each with labelled axes and units: training loss, evaluation scores (the
axis scaled to the data), throughput, learning rate, freshness (policy lag, reuse), the
inference server (batch, busy fractions) and, where the run keeps a ladder, its rating
against learner steps with 95% intervals. A panel that would carry no information is left
out: a constant learning rate, an evaluation whose every score is pinned at 1.0. The title
names the run, its config and what bounded it (the ``bottleneck`` of its status rows). Time
series break where the run was not running (a stop and a resume): a gap is drawn as a gap,
not a straight line.
"""

from __future__ import annotations

import json
import math
import tomllib
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only; no display on these machines
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from actors.games import Benchmark, benchmarks_by_name  # noqa: E402
from azserve.arena.curves import run_game  # noqa: E402
from learner.runlog import read_metrics  # noqa: E402

GAP_FACTOR = 5.0
"""Two rows further apart in time than this many typical intervals have a gap between them."""


def write_report(run_dir: str | Path) -> Path:
    """Draw ``RUN/report.png``; returns its path."""
    run_dir = Path(run_dir)
    fig = build_figure(run_dir)
    out = run_dir / "report.png"
    fig.savefig(out, dpi=90)
    plt.close(fig)
    return out


def build_figure(run_dir: Path) -> Figure:
    """The report's figure (``write_report`` saves it)."""
    rows = read_metrics(run_dir / "metrics.jsonl") if (run_dir / "metrics.jsonl").exists() else []
    evals = _read_jsonl(run_dir / "eval.jsonl")
    series = informative(eval_series(evals, benchmarks_by_name(run_game(run_dir))))
    lr = [y for y in _series(rows, "lr")[1] if not math.isnan(y)]
    rating = _rating_points(run_dir / "ladder" / "ratings.json")
    panels: list[Any] = [_loss]
    if series or not evals:
        panels.append(lambda ax, rows: _evaluation(ax, series))
    panels.append(_throughput)
    if len(set(lr)) > 1 or not lr:
        panels.append(_learning_rate)
    panels += [_freshness, _inference]
    if rating:
        panels.append(lambda ax, rows: _rating(ax, rating))
    cols = math.ceil(len(panels) / 2)
    fig, axes = plt.subplots(2, cols, figsize=(5.4 * cols, 8.5), squeeze=False)
    fig.suptitle(_title(run_dir) + bottleneck_line(rows), fontsize=11)
    for ax, draw in zip(axes.flat, panels):
        draw(ax, rows)
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:  # an empty legend only warns
            ax.legend(fontsize=8)
    for ax in list(axes.flat)[len(panels) :]:
        ax.set_visible(False)
    fig.tight_layout()
    return fig


def bottleneck_line(rows: list[dict[str, Any]]) -> str:
    """``\nbottleneck: inference in 78% of status rows, learner in 22%`` (empty without rows)."""
    named = [r["bottleneck"] for r in rows if r.get("bottleneck")]
    if not named:
        return ""
    counts: dict[str, int] = {}
    for b in named:
        counts[b] = counts.get(b, 0) + 1
    shares = [(b, n / len(named)) for b, n in sorted(counts.items(), key=lambda kv: -kv[1])]
    parts = [
        f"{b} in {share:.0%}" + (" of status rows" if i == 0 else "")
        for i, (b, share) in enumerate(shares)
        if i == 0 or share >= 0.005  # "actor in 0%" says nothing
    ]
    return "\nbottleneck: " + ", ".join(parts)


def informative(series: dict[str, list[tuple[int, float]]]) -> dict[str, list[tuple[int, float]]]:
    """The evaluation series that say something: one pinned at 1.0 throughout (every game won
    against random) is left out."""
    return {k: pts for k, pts in series.items() if any(v != 1.0 for _, v in pts)}


def _rating_points(path: Path) -> list[dict[str, Any]]:
    """The rated checkpoints of the run's ladder (``RUN/ladder/ratings.json``), by step."""
    try:
        players = json.loads(path.read_text()).get("players", [])
    except (OSError, ValueError):
        return []
    rated = [
        p
        for p in players
        if p.get("step") is not None and p.get("games") and p.get("lo") is not None
    ]
    return sorted(rated, key=lambda p: p["step"])


def _rating(ax: Any, points: list[dict[str, Any]]) -> None:
    xs = [p["step"] for p in points]
    ys = [p["elo"] for p in points]
    err = [[p["elo"] - p["lo"] for p in points], [p["hi"] - p["elo"] for p in points]]
    ax.errorbar(xs, ys, yerr=err, fmt="-o", markersize=3, capsize=2, label="Elo, 95% interval")
    last = points[-1]
    ax.set(
        title=f"rating: {last['elo']:.0f} Elo ({last['lo']:.0f}..{last['hi']:.0f}) at step "
        f"{last['step']:,}",
        xlabel="learner step",
        ylabel="Elo (random play = 0)",
    )


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _title(run_dir: Path) -> str:
    """The run, and the config it ran: game, net, search, batch."""
    try:
        cfg = tomllib.loads((run_dir / "config.toml").read_text())
    except (OSError, tomllib.TOMLDecodeError):
        return f"run {run_dir}"
    net, mcts, tr = cfg.get("net", {}), cfg.get("mcts", {}), cfg.get("trainer", {})
    return (
        f"run {run_dir}: {cfg.get('game', '?')}, net {net.get('blocks', '?')}x"
        f"{net.get('channels', '?')}, {mcts.get('num_simulations', '?')} simulations/move, "
        f"batch {tr.get('batch_size', '?')}, lr {tr.get('lr', '?')} "
        f"(config {run_dir / 'config.toml'})"
    )


def with_gaps(xs: list[float], ys: list[float], times: list[float]) -> tuple[list, list]:
    """``xs``/``ys`` with a NaN inserted where consecutive ``times`` are far apart (the run was
    stopped), so that matplotlib breaks the line there."""
    if len(times) < 3:
        return xs, ys
    steps = sorted(b - a for a, b in zip(times, times[1:]))
    typical = max(steps[len(steps) // 2], 1e-9)
    out_x, out_y = [xs[0]], [ys[0]]
    for i in range(1, len(xs)):
        if times[i] - times[i - 1] > GAP_FACTOR * typical:
            out_x.append(math.nan)
            out_y.append(math.nan)
        out_x.append(xs[i])
        out_y.append(ys[i])
    return out_x, out_y


def _series(rows: list[dict[str, Any]], key: str, x: str = "step") -> tuple[list, list]:
    have = [r for r in rows if isinstance(r.get(key), (int, float)) and x in r]
    return with_gaps(
        [r[x] for r in have], [float(r[key]) for r in have], [r.get("time", 0.0) for r in have]
    )


def _loss(ax: Any, rows: list[dict[str, Any]]) -> None:
    for key, label in (
        ("loss", "total"),
        ("policy_loss", "policy (cross-entropy)"),
        ("value_loss", "value (MSE)"),
    ):
        xs, ys = _series(rows, key)
        if xs:
            ax.plot(xs, ys, label=label)
    ax.set(title="training loss", xlabel="learner step", ylabel="loss (nats / squared error)")


def eval_series(
    evals: list[dict[str, Any]], benchmarks: dict[str, Benchmark] | None = None
) -> dict[str, list[tuple[int, float]]]:
    """Evaluation curves: fractions in [0, 1] per learner step, each benchmark's ``series``
    (``benchmarks`` by name, the run's game's; every built-in game's when None) and the score
    against random play."""
    if benchmarks is None:
        benchmarks = benchmarks_by_name()
    series: dict[str, list[tuple[int, float]]] = {}

    def add(name: str, step: int, value: float) -> None:
        series.setdefault(name, []).append((step, value))

    for e in evals:
        step = e["step"]
        for name, bench in benchmarks.items():
            result = e.get(name)
            if not isinstance(result, dict):
                continue
            for s in bench.series:
                value = s.headline(result)
                if value is not None:
                    add(s.label, step, value)
        # Only against random play: against an earlier checkpoint of the same run the
        # matches of a deterministic game repeat the same few games (a constant line).
        if "vs_random" in e:
            r = e["vs_random"]
            n = r["win"] + r["draw"] + r["loss"]
            if n:  # none finished: a final evaluation's games all stopped at its time limit
                add("score vs random (win 1, draw 1/2)", step, (r["win"] + 0.5 * r["draw"]) / n)
    return series


def _evaluation(ax: Any, series: dict[str, list[tuple[int, float]]]) -> None:
    values: list[float] = []
    for label, pts in series.items():
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=label)
        values += [p[1] for p in pts]
    if values:  # scaled to the data: 0.97 against 0.99 must not look flat
        lo, hi = min(values), max(values)
        pad = max((hi - lo) * 0.1, 0.005)
        ax.set_ylim(max(0.0, lo - pad), min(1.0, hi + pad) if hi <= 1 else hi + pad)
    ax.set(title="evaluation", xlabel="learner step", ylabel="fraction of positions / score")


def _throughput(ax: Any, rows: list[dict[str, Any]]) -> None:
    timed = [r for r in rows if "time" in r and "positions" in r]
    if len(timed) > 1:
        t0 = timed[0]["time"]
        ts = [(r["time"] - t0) / 60 for r in timed]
        times = [r["time"] for r in timed]
        rate = [math.nan] + [
            (b["positions"] - a["positions"]) / max(b["time"] - a["time"], 1e-9)
            for a, b in zip(timed, timed[1:])
        ]
        ax.plot(*with_gaps(ts, rate, times), label="self-play positions/s")
        samples = [float(r.get("sample_rate", math.nan)) for r in timed]
        ax.plot(*with_gaps(ts, samples, times), label="learner samples/s")
    ax.set(title="throughput", xlabel="minutes since the run began", ylabel="per second")


def _learning_rate(ax: Any, rows: list[dict[str, Any]]) -> None:
    xs, ys = _series(rows, "lr")
    if xs:
        ax.plot(xs, ys, label="learning rate")
    ax.set(title="learning rate", xlabel="learner step", ylabel="learning rate (per step)")


def _freshness(ax: Any, rows: list[dict[str, Any]]) -> None:
    for key, label in (
        ("mean_lag", "policy lag (versions behind)"),
        ("reuse", "reuse (samples per position)"),
    ):
        xs, ys = _series(rows, key)
        if xs:
            ax.plot(xs, ys, label=label)
    ax.set(title="freshness of training data", xlabel="learner step", ylabel="versions / samples")


def _inference(ax: Any, rows: list[dict[str, Any]]) -> None:
    xs, ys = _series(rows, "server_batch")
    if xs:
        ax.plot(xs, ys, color="tab:blue", label="mean batch (rows)")
    ax.set(title="inference server and learner", xlabel="learner step", ylabel="rows per batch")
    busy = ax.twinx()
    for key, label, color in (
        ("inference_busy", "inference busy", "tab:red"),
        ("learner_busy", "learner busy", "tab:green"),
    ):
        bx, by = _series(rows, key)
        if bx:
            busy.plot(bx, by, color=color, linestyle="--", label=label)
    busy.set(ylabel="busy fraction (0-1)", ylim=(0, 1.05))
    if busy.get_legend_handles_labels()[0]:
        busy.legend(fontsize=8, loc="lower right")
