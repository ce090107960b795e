"""What training runs did and what each position, evaluation and step cost: one row per run.

    .venv/bin/python scripts/run_figures.py runs/ab36-parts/go9 runs/ab36-parts/targets ... [--minutes 60] [--json OUT]

From each run's own files, nothing recomputed: ``metrics.jsonl`` (the learner's rows: games,
positions, steps, ``step_ms``, the losses, the bottleneck), the actors' summaries in
``logs/actor-*.log`` (network evaluations: the evaluation cache's misses, i.e. the rows the
servers ran, and its hits) and ``summary.json`` (the start). ``--minutes M`` reads every run
up to M minutes from its start, so that a 2-hour run is compared with 1-hour ones at their
length (the evaluations then come from the actors' last status line before M: its cache
counters are cumulative for the actor process).

Printed per run: minutes, games, positions, learner steps, positions/s, server rows (network
evaluations)/s, evaluations per position, the learner's median ms per step, the share of
status rows whose bottleneck was inference, and the mean of each loss over the last 10 rows.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from azserve.arena.curves import run_started
from learner.runlog import read_metrics

STATUS = re.compile(
    r"^(\d\d):(\d\d):(\d\d) I actors\.selfplay: .*\bhits (\d+) shared \d+ misses (\d+)"
)
SUMMARY = re.compile(r"actor summary: (\{.*\})\s*$")


def evaluations_until(run: Path, t0: float, until: float) -> tuple[int, int]:
    """(rows the servers ran, cache hits) up to ``until`` (epoch seconds), from the actors'
    status lines (local times of day, from the day of ``t0``; their counters restart with the
    process)."""
    day = datetime.fromtimestamp(t0).replace(hour=0, minute=0, second=0, microsecond=0)
    misses = hits = 0
    for log in sorted((run / "logs").glob("actor-*.log")):
        base, prev_tod, last = day.timestamp(), -1, (0, 0)
        for line in log.read_text(errors="replace").splitlines():
            m = STATUS.match(line)
            if not m:
                continue
            tod = int(m.group(1)) * 3600 + int(m.group(2)) * 60 + int(m.group(3))
            if tod < prev_tod - 3600:  # past midnight
                base += 86400
            prev_tod = tod
            if base + tod > until:
                break
            now = (int(m.group(5)), int(m.group(4)))
            if now < last:  # a new actor process: keep the last one's counts
                misses, hits = misses + last[0], hits + last[1]
            last = now
        misses, hits = misses + last[0], hits + last[1]
    return misses, hits


def evaluations(run: Path) -> tuple[int, int]:
    """(rows the servers ran, cache hits): the last summary of every actor process."""
    last: dict[str, dict[str, Any]] = {}
    for log in sorted((run / "logs").glob("actor-*.log")):
        for line in log.read_text(errors="replace").splitlines():
            m = SUMMARY.search(line)
            if m:
                s = json.loads(m.group(1))
                last[s["actor"]] = s
    misses = sum(int(s["cache"]["misses"]) for s in last.values())
    hits = sum(int(s["cache"]["hits"]) for s in last.values())
    return misses, hits


def figures(run: Path, minutes: float | None) -> dict[str, Any]:
    rows = read_metrics(run / "metrics.jsonl")
    t0 = run_started(run) or float(rows[0]["time"])
    if minutes is not None:
        rows = [r for r in rows if r["time"] - t0 <= minutes * 60]
    last = rows[-1]
    seconds = last["time"] - t0
    out: dict[str, Any] = {
        "minutes": seconds / 60,
        "games": int(last["games"]),
        "positions": int(last["positions"]),
        "steps": int(last["step"]),
        "positions_per_s": last["positions"] / seconds,
    }
    if minutes is None:
        misses, hits = evaluations(run)
    else:
        misses, hits = evaluations_until(run, t0, t0 + minutes * 60)
    if misses:
        out.update(server_rows=misses, cache_hits=hits)
        out["server_rows_per_s"] = misses / seconds
        out["evaluations_per_position"] = (misses + hits) / max(1, last["positions"])
    step_ms = [r["step_ms"] for r in rows if r.get("step_ms")]
    if step_ms:
        out["step_ms_median"] = statistics.median(step_ms)
    status = [r for r in rows if "bottleneck" in r]
    if status:
        out["inference_bound"] = sum(r["bottleneck"] == "inference" for r in status) / len(status)
    tail = [r for r in rows if "loss" in r][-10:]
    for key in sorted({k for r in tail for k in r if k.endswith("_loss")}):
        values = [r[key] for r in tail if key in r]
        out[key] = sum(values) / len(values)
    out["started"] = datetime.fromtimestamp(t0, UTC).isoformat(timespec="seconds")
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("runs", nargs="+", help="run directories")
    p.add_argument("--minutes", type=float, help="read each run up to this many minutes")
    p.add_argument("--json", help="write the figures here too")
    args = p.parse_args()
    names = [Path(r).name for r in args.runs]
    if len(set(names)) < len(names):  # two runs of one name: their paths as given
        names = list(args.runs)
    out = {n: figures(Path(r), args.minutes) for n, r in zip(names, args.runs)}
    cols = [
        ("minutes", "min", "{:.1f}"),
        ("games", "games", "{:,}"),
        ("positions", "positions", "{:,}"),
        ("steps", "steps", "{:,}"),
        ("positions_per_s", "pos/s", "{:.0f}"),
        ("server_rows_per_s", "evals/s", "{:,.0f}"),
        ("evaluations_per_position", "evals/pos", "{:.1f}"),
        ("step_ms_median", "ms/step", "{:.0f}"),
        ("inference_bound", "inf-bound", "{:.0%}"),
    ]
    width = max(14, *(len(n) + 1 for n in out))
    print("run".ljust(width) + "".join(h.rjust(11) for _, h, _ in cols) + "  losses (last 10 rows)")
    for name, f in out.items():
        cells = "".join((fmt.format(f[k]) if k in f else "-").rjust(11) for k, _, fmt in cols)
        losses = ", ".join(f"{k[:-5]} {v:.3f}" for k, v in f.items() if k.endswith("_loss"))
        print(name.ljust(width) + cells + "  " + losses)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
