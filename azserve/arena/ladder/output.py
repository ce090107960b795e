"""The ladder's outputs: the ratings as a text table, as ``ratings.json``, and as a plot of Elo
against wall-clock hours, positions and steps (``ladder.png``)."""

from __future__ import annotations

import math
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from azserve.arena.ratings import wilson

if TYPE_CHECKING:
    from azserve.arena.ladder.store import Entrant, LadderReport


def table(report: LadderReport) -> str:
    """The ratings as a text table, strongest first."""
    rows = sorted(report.ratings.items(), key=lambda kv: -kv[1].elo)
    width = max((len(n) for n, _ in rows), default=6)
    lines = [f"{'player':<{width}}  {'Elo':>6}  {'95% interval':>15}  {'games':>5}  score"]
    for n, r in rows:
        if r.games == 0 and not r.fixed:
            interval, elo = "no games", "-"
        else:
            elo = f"{r.elo:6.0f}"
            interval = "fixed" if r.fixed else f"{r.lo:6.0f} .. {r.hi:6.0f}"
        score = f"{r.score / r.games:.0%}" if r.games else "-"
        lines.append(f"{n:<{width}}  {elo:>6}  {interval:>15}  {r.games:>5}  {score}")
    return "\n".join(lines)


def at_equal_time(report: LadderReport) -> str:
    """Runs of different lengths read at the same training time: the shortest run's end, each
    run's checkpoint nearest to it (its rating), and the games between those checkpoints, pair
    by pair (the first's wins-draws-losses, score, 95% Wilson interval). Empty with fewer than
    two runs placed in time."""
    runs: dict[str, list[Entrant]] = {}
    for e in report.entrants:
        if not e.anchor and e.hours is not None and e.run is not None:
            runs.setdefault(e.run, []).append(e)
    if len(runs) < 2:
        return ""
    hours = min(max(e.hours or 0.0 for e in points) for points in runs.values())
    picks = [min(points, key=lambda e: abs((e.hours or 0.0) - hours)) for points in runs.values()]
    picks.sort(key=lambda e: -report.ratings[e.name].elo if e.name in report.ratings else math.inf)
    width = max(len(e.name) for e in picks)
    lines = [f"at {hours:.2f} hours (the shortest run's end), each run's nearest checkpoint:"]
    for e in picks:
        r = report.ratings.get(e.name)
        rating = (
            f"Elo {r.elo:6.0f} ({r.lo:.0f} .. {r.hi:.0f}), {r.games} games"
            if r is not None and r.games > 0 and math.isfinite(r.lo)
            else "no rated games"
        )
        lines.append(f"  {e.name:<{width}}  {e.hours or 0.0:5.2f} h  {rating}")
    lines.append("  head to head (the first's wins-draws-losses, score, 95% interval):")
    for i, a in enumerate(picks):
        for b in picks[i + 1 :]:
            scores = [
                r.score if r.a == a.name else 1.0 - r.score
                for r in report.results
                if {r.a, r.b} == {a.name, b.name}
            ]
            if not scores:
                lines.append(f"  {a.name} v {b.name}: no games")
                continue
            w, d = sum(s == 1.0 for s in scores), sum(s == 0.5 for s in scores)
            n = len(scores)
            lo, hi = wilson(w + 0.5 * d, n)
            lines.append(
                f"  {a.name} v {b.name}: {w}-{d}-{n - w - d}, {(w + 0.5 * d) / n:.2f} "
                f"({lo:.2f}-{hi:.2f})"
            )
    return "\n".join(lines)


def ratings_json(report: LadderReport) -> dict[str, Any]:
    by_name = {e.name: e for e in report.entrants}
    players = []
    for n, r in sorted(report.ratings.items(), key=lambda kv: -kv[1].elo):
        e = by_name.get(n)
        row: dict[str, Any] = {"player": n, **asdict(r)}
        for key in ("lo", "hi"):
            if not math.isfinite(row[key]):
                row[key] = None
        if e is not None:
            row.update(run=e.run, step=e.step, hours=e.hours, positions=e.positions)
        players.append(row)
    return {"games": report.total, "disputed": report.disputed, "players": players}


def draw_ladder(report: LadderReport, out: Path, title: str = "") -> Path:
    """Elo against wall-clock hours, positions and steps: one line per run with 95% intervals,
    the anchors as horizontal lines."""
    from azserve.arena.curves import plt

    axes_keys = (("hours", "wall-clock hours"), ("positions", "positions"), ("step", "steps"))
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2), squeeze=False)
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    runs: dict[str, list[Entrant]] = {}
    for e in report.entrants:
        if not e.anchor:
            runs.setdefault(e.run or "", []).append(e)
    for col, (key, label) in enumerate(axes_keys):
        ax = axes[0][col]
        for i, (run, points) in enumerate(runs.items()):
            pts = [
                (getattr(e, key), report.ratings[e.name])
                for e in sorted(points, key=lambda e: e.step or 0)
                if getattr(e, key) is not None
                and e.name in report.ratings
                and report.ratings[e.name].games > 0
                and math.isfinite(report.ratings[e.name].hi)
            ]
            if not pts:
                continue
            xs = [x for x, _ in pts]
            ys = [r.elo for _, r in pts]
            err = [[r.elo - r.lo for _, r in pts], [r.hi - r.elo for _, r in pts]]
            ax.errorbar(xs, ys, yerr=err, fmt="-o", markersize=3, capsize=2,
                        color=colours[i % len(colours)], label=run)  # fmt: skip
        anchors = {x.name for x in report.entrants if x.anchor}
        for n, r in report.ratings.items():
            if n not in anchors or (r.games == 0 and not r.fixed):
                continue
            ax.axhline(r.elo, color="grey", linestyle="--", linewidth=0.8)
            ax.annotate(n, (0.01, r.elo), xycoords=("axes fraction", "data"), fontsize=7,
                        color="dimgrey", va="bottom")  # fmt: skip
        ax.set(xlabel=label, ylabel="Elo (random = 0)")
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    fig.suptitle(title or "azserve ladder: Elo against training (95% intervals)")
    fig.tight_layout()
    fig.savefig(out, dpi=80)
    plt.close(fig)
    return out


__all__ = ["at_equal_time", "draw_ladder", "ratings_json", "table"]
