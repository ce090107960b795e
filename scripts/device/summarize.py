"""scripts/device/run's bookkeeping: one JSON line per step from the step's own files, one text
line per step, and the table at the end. Standard library only (it runs on the lent machine
before anything else is known to work).

    summarize.py step NAME WORK STATE SECONDS   -> a JSON line on stdout
    summarize.py line RESULTS NAME             -> that step's text line
    summarize.py table RESULTS                 -> the table of every step
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


def _load(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())  # type: ignore[no-any-return]
    except (OSError, json.JSONDecodeError):
        return None


def serve_figures(r: dict[str, Any]) -> dict[str, Any]:
    lat = r.get("latency_ms") or {}
    return {
        "positions_per_s": r.get("positions_per_s"),
        "model_positions_per_s": r.get("model_positions_per_s"),
        "efficiency": r.get("efficiency"),
        "mean_batch": r.get("mean_batch"),
        "busy": r.get("inference_busy_fraction"),
        "latency_p50_ms": lat.get("p50"),
        "latency_p99_ms": lat.get("p99"),
        "model_by_batch": {
            k: v.get("positions_per_s") for k, v in (r.get("model_by_batch") or {}).items()
        },
    }


def selfplay_figures(r: dict[str, Any]) -> dict[str, Any]:
    learner = (r.get("capacity") or {}).get("learner") or {}
    return {
        "positions_per_s": r.get("positions_per_s"),
        "simulations_per_s": r.get("simulations_per_s"),
        "games_per_s": r.get("games_per_s"),
        "evaluations_per_s": r.get("evaluations_per_s"),
        "mean_batch": r.get("mean_batch"),
        "busy": r.get("inference_busy_fraction"),
        "actor_processes": r.get("actor_processes"),
        "actor_simulations_per_cpu_s": r.get("actor_simulations_per_cpu_s"),
        "actor_cpu_cores": (r.get("cpu_cores_used") or {}).get("actors"),
        "capacity_positions_per_s": r.get("capacity_positions_per_s"),
        "learner_samples_per_s": learner.get("samples_per_s"),
        "bottleneck": r.get("bottleneck"),
    }


def learner_figures(r: dict[str, Any]) -> dict[str, Any]:
    return {
        "points": [
            {k: p.get(k) for k in ("config", "batch", "amp", "samples_per_s", "steps_per_s")}
            for p in r.get("points", [])
        ]
    }


def train_figures(run: Path) -> dict[str, Any]:
    rows = []
    metrics = run / "metrics.jsonl"
    if metrics.exists():
        for line in metrics.read_text().splitlines():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    if not rows:
        return {"rows": 0}
    last = rows[-1]
    span = last.get("time", 0) - rows[0].get("time", 0)
    named = [r["bottleneck"] for r in rows if r.get("bottleneck")]
    shares = {b: round(named.count(b) / len(named), 2) for b in sorted(set(named))}
    first = rows[0]
    return {
        "rows": len(rows),
        "games": last.get("games"),
        "positions": last.get("positions"),
        "steps": last.get("step"),
        "positions_per_s": round((last.get("positions", 0) - first.get("positions", 0)) / span, 1)
        if span > 0
        else None,
        "bottleneck_shares": shares,
        "inference_busy": last.get("inference_busy"),
        "learner_busy": last.get("learner_busy"),
    }


def step(name: str, work: Path, state: str, seconds: str) -> dict[str, Any]:
    out: dict[str, Any] = {"step": name, "status": state, "seconds": int(seconds)}
    if name.startswith("serve-") and (r := _load(work / f"{name}.json")):
        out.update(serve_figures(r))
    elif name.startswith("selfplay-") and (r := _load(work / f"{name}.json")):
        out.update(selfplay_figures(r))
    elif name == "learner" and (r := _load(work / "learner.json")):
        out.update(learner_figures(r))
    elif name.startswith("train-"):
        out.update(train_figures(work / name))
    return out


def _fmt(x: Any, nd: int = 0) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:,.{nd}f}"
    return f"{x:,}" if isinstance(x, int) else str(x)


def text_line(r: dict[str, Any]) -> str:
    name, state = r["step"], r["status"]
    head = f"{name:<22} {state:<10} {r.get('seconds', 0):>4} s"
    if state == "skipped":
        return f"{name:<22} skipped ({r.get('left_s')} s left)"
    if name.startswith("serve-"):
        return (
            f"{head}  {_fmt(r.get('positions_per_s'))} pos/s, model alone "
            f"{_fmt(r.get('model_positions_per_s'))} (efficiency {_fmt(r.get('efficiency'), 2)}), "
            f"batch {_fmt(r.get('mean_batch'), 1)}, busy {_fmt(r.get('busy'), 2)}, "
            f"p50 {_fmt(r.get('latency_p50_ms'), 1)} ms"
        )
    if name.startswith("selfplay-"):
        return (
            f"{head}  {_fmt(r.get('positions_per_s'), 1)} pos/s, {_fmt(r.get('simulations_per_s'))} sims/s "
            f"on {r.get('actor_processes')} actor processes ({_fmt(r.get('actor_simulations_per_cpu_s'))} "
            f"sims per actor CPU-s), server busy {_fmt(r.get('busy'), 2)}, bottleneck {r.get('bottleneck')}"
        )
    if name == "learner":
        pts = ", ".join(
            f"{p['config']}@{p['batch']} {_fmt(p['samples_per_s'])} samples/s"
            for p in r.get("points", [])
        )
        return f"{head}  {pts}"
    if name.startswith("train-"):
        return (
            f"{head}  {r.get('games')} games, {r.get('positions')} positions "
            f"({_fmt(r.get('positions_per_s'), 1)}/s), {r.get('steps')} steps, bottleneck "
            f"{r.get('bottleneck_shares')}"
        )
    return head


def _results(path: Path) -> list[dict[str, Any]]:
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return rows


def main(argv: list[str]) -> int:
    verb = argv[0] if argv else ""
    if verb == "step" and len(argv) == 5:
        print(json.dumps(step(argv[1], Path(argv[2]), argv[3], argv[4])))
    elif verb == "line" and len(argv) == 3:
        rows = [r for r in _results(Path(argv[1])) if r.get("step") == argv[2]]
        print(text_line(rows[-1]) if rows else f"{argv[2]}: no result recorded")
    elif verb == "table" and len(argv) == 2:
        rows = _results(Path(argv[1]))
        print(f"== {len(rows)} steps, {sum(r.get('status') == 'ok' for r in rows)} ok")
        for r in rows:
            print(text_line(r))
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
