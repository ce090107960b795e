"""The end of ``azserve tune``: the shared ladder fitted once more over all its games, each
trial's rungs read on that one scale, the best trial's config written out with the evidence.

- ``best.toml``: the best trial's config, resolved (the base config, ``--set`` and the trial's
  values; not the tune's own budget and evaluation settings): ``azserve train --config`` it.
  The best is the trial with the highest rating at the end of its time among those that ran
  all of it (a trial ASHA stopped was never measured there).
- ``tune.json``: the settings, and per trial its values, status, run directory and at each
  rung the checkpoint rated, the rating reported to ASHA then and its rating in the final fit.
- ``tune.md`` (also printed): one row per trial, the final fit's rating at each rung.
- ``tune.png``: rating against hours of training, one line per trial, the anchors dashed.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from azserve.arena.ladder.schedule import anchor_entrant, fit_ladder, fixed_player
from azserve.arena.ratings import Rating
from azserve.config.load import dump_toml, to_dict
from azserve.config.schema import load_config
from azserve.run.tune_setup import (
    BASE,
    LADDER,
    QUARTERS,
    RUNGS,
    TuneSetup,
    current_dirs,
    finite,
    read_jsonl,
    read_rungs,
    trial_label,
)


@dataclass(frozen=True)
class Summary:
    """What the tune found, as printed."""

    table: str
    verdict: str
    best: str | None
    """The best trial's label (None when no trial ran its whole time with a rating)."""


def write_outputs(setup: TuneSetup, out: Path, statuses: dict[str, dict[str, Any]]) -> Summary:
    """Fit the ladder, write ``best.toml``, ``tune.json``, ``tune.md`` and ``tune.png`` in
    ``out``; the table and the verdict."""
    games = read_jsonl(out / LADDER / "games.jsonl")
    anchors = [anchor_entrant(a).name for a in setup.ladder_anchors]
    ratings = fit_ladder(games, anchors, fixed_player(setup.ladder_anchors, []))
    dirs = current_dirs(out, len(setup.points))
    trials = [
        trial_figures(setup, i, dirs.get(i), statuses.get(trial_label(i), {}), ratings)
        for i in range(len(setup.points))
    ]
    best = pick_best(trials)
    if best is not None:
        best["best"] = True
        write_best(setup, out, best)
    figures = {
        "setup": setup.to_json(),
        "trial_minutes": setup.trial_minutes,
        "rungs": [q / QUARTERS for q in RUNGS],
        "ladder": {
            "games": len(games),
            "anchors": {a: _rating(ratings.get(a)) for a in anchors},
        },
        "trials": trials,
        "best": None if best is None else best["label"],
    }
    (out / "tune.json").write_text(json.dumps(figures, indent=1) + "\n")
    table = format_table(setup, trials)
    verdict = format_verdict(setup, out, best, len(games))
    (out / "tune.md").write_text(
        f"# azserve tune: {setup.game}\n\n{len(setup.points)} trials of {setup.trial_minutes:g} "
        f"min each, rated on one ladder ({len(games)} games, random = 0 Elo; 95% intervals) "
        f"at {', '.join(f'{q}/{QUARTERS}' for q in RUNGS)} of their time.\n\n{table}\n\n"
        f"{verdict}\n\n![rating against hours](tune.png)\n"
    )
    draw(setup, trials, ratings, anchors, out / "tune.png")
    return Summary(table, verdict, None if best is None else best["label"])


def trial_figures(
    setup: TuneSetup,
    index: int,
    run_dir: Path | None,
    status: dict[str, Any],
    ratings: dict[str, Rating],
) -> dict[str, Any]:
    """One trial's entry of ``tune.json``."""
    rungs = []
    for row in read_rungs(run_dir) if run_dir is not None else []:
        player = row.get("player")
        rungs.append(
            {
                "quarters": row["quarters"],
                "hours": row["hours"],
                "player": player,
                "step": row.get("step"),
                "reported": {k: row.get(k) for k in ("rating", "lo", "hi", "games")},
                "final": _rating(ratings.get(player)) if player else None,
            }
        )
    return {
        "trial": index,
        "label": trial_label(index),
        "values": setup.points[index],
        "status": status.get("status", "not run"),
        "error": status.get("error"),
        "run_dir": None if run_dir is None else str(run_dir),
        "rungs": rungs,
        "best": False,
    }


def _rating(r: Rating | None) -> dict[str, Any] | None:
    if r is None or (r.games == 0 and not r.fixed):
        return None
    return {"elo": r.elo, "lo": finite(r.lo), "hi": finite(r.hi), "games": r.games}


def pick_best(trials: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The finished trial rated highest at the end of its time (None when none is)."""
    ended = [
        (t, t["rungs"][-1]["final"])
        for t in trials
        if t["status"] == "finished"
        and t["rungs"]
        and t["rungs"][-1]["quarters"] == QUARTERS
        and t["rungs"][-1]["final"] is not None
    ]
    if not ended:
        return None
    return max(ended, key=lambda tf: (tf[1]["elo"], tf[1]["lo"] or -math.inf))[0]


def write_best(setup: TuneSetup, out: Path, best: dict[str, Any]) -> Path:
    """``best.toml``: the base config with the best trial's values, resolved."""
    sets = [f"{k}={v}" for k, v in best["values"].items()]
    cfg = load_config(out / BASE, sets)
    end = best["rungs"][-1]["final"]
    head = (
        f"# azserve tune: the best of {len(setup.points)} trials, {best['label']} "
        f"({' '.join(sets)}): Elo {end['elo']:.0f} after {setup.trial_minutes:g} min on the "
        f"tune's ladder (random = 0).\n# The base config with its values; evidence in "
        f"tune.md, tune.json and tune.png beside this file.\n"
    )
    path = out / "best.toml"
    path.write_text(head + dump_toml(to_dict(cfg)))
    return path


def _cell(rung: dict[str, Any] | None) -> str:
    if rung is None:
        return "-"
    if rung["player"] is None:
        return "no checkpoint"
    r = rung["final"]
    if r is None:
        return "no games"
    if r["lo"] is None or r["hi"] is None:
        return f"{r['elo']:.0f}"
    return f"{r['elo']:.0f} ({r['lo']:.0f}..{r['hi']:.0f})"


def format_table(setup: TuneSetup, trials: list[dict[str, Any]]) -> str:
    """A Markdown table: one row per trial, its values, status and the final fit's rating
    (Elo, 95% interval) at each rung."""
    keys = list(setup.search)
    rungs = [f"Elo at {q}/{QUARTERS}" if q < QUARTERS else "Elo at the end" for q in RUNGS]
    head = ["trial", *keys, "status", *rungs]
    rows = [head, ["---"] * len(head)]
    for t in trials:
        by_q = {r["quarters"]: r for r in t["rungs"]}
        status = t["status"] + (" (best)" if t["best"] else "")
        if t["status"] == "stopped" and t["rungs"]:
            status = f"stopped at {t['rungs'][-1]['quarters']}/{QUARTERS}"
        rows.append(
            [
                t["label"],
                *(t["values"][k] for k in keys),
                status,
                *(_cell(by_q.get(q)) for q in RUNGS),
            ]
        )
    return "\n".join("| " + " | ".join(str(c) for c in row) + " |" for row in rows)


def format_verdict(setup: TuneSetup, out: Path, best: dict[str, Any] | None, games: int) -> str:
    files = f"table {out / 'tune.md'}, plot {out / 'tune.png'}, figures {out / 'tune.json'}"
    if best is None:
        return (
            f"tune: no trial ran its whole time with a rated checkpoint, so no best.toml; {files}"
        )
    end = best["rungs"][-1]["final"]
    interval = (
        f" ({end['lo']:.0f}..{end['hi']:.0f})"
        if end["lo"] is not None and end["hi"] is not None
        else ""
    )
    settings = " ".join(f"{k}={v}" for k, v in best["values"].items())
    return (
        f"tune: best {best['label']} ({settings}): Elo {end['elo']:.0f}{interval} after "
        f"{setup.trial_minutes:g} min, on the ladder's final fit over {games} games; its config "
        f"in {out / 'best.toml'}; {files}"
    )


def draw(
    setup: TuneSetup,
    trials: list[dict[str, Any]],
    ratings: dict[str, Rating],
    anchors: list[str],
    path: Path,
) -> Path:
    """Rating against hours of training, one line per trial (95% intervals; the best one
    thicker), the anchors as dashed lines."""
    from azserve.arena.curves import plt

    fig, ax = plt.subplots(figsize=(8, 4.8))
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for t in trials:
        pts = [(r["hours"], r["final"]) for r in t["rungs"] if r["final"] is not None]
        if not pts:
            continue
        xs = [h for h, _ in pts]
        ys = [f["elo"] for _, f in pts]
        err = [
            [f["elo"] - f["lo"] if f["lo"] is not None else 0.0 for _, f in pts],
            [f["hi"] - f["elo"] if f["hi"] is not None else 0.0 for _, f in pts],
        ]
        label = f"{t['label']}: {' '.join(f'{k}={v}' for k, v in t['values'].items())}"
        if t["status"] == "stopped":
            label += " (stopped)"
        ax.errorbar(
            xs, ys, yerr=err, fmt="-o", markersize=4, capsize=2,
            linewidth=3.0 if t["best"] else 1.2, color=colours[t["trial"] % len(colours)],
            label=label + (" (best)" if t["best"] else ""),
        )  # fmt: skip
    for name in anchors:
        r = ratings.get(name)
        if r is None or (r.games == 0 and not r.fixed):
            continue
        ax.axhline(r.elo, color="grey", linestyle="--", linewidth=0.8)
        ax.annotate(name, (0.01, r.elo), xycoords=("axes fraction", "data"), fontsize=7,
                    color="dimgrey", va="bottom")  # fmt: skip
    ax.set_xlim(0.0, setup.trial_minutes / 60.0 * 1.05)
    ax.set(xlabel="hours of training per trial", ylabel="Elo (random = 0)")
    ax.set_title(
        f"{setup.game}: azserve tune, {len(setup.points)} trials of {setup.trial_minutes:g} min "
        "(95% intervals)"
    )
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return path


__all__ = ["Summary", "write_outputs"]
