"""The effect of the server's following threads in one run, from its log: for each thread
count, the time spent at it and the server's mean rows/s, batch and busy fraction over the
status lines written at that count.

    python scripts/threads_effect.py runs/c4/logs/server.log [--json OUT]

A status line covers the 5 s before it; a line right after a switch is counted at the new
count (the switch happens at a batch, so most of its window ran at the new count).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from datetime import datetime
from pathlib import Path

SWITCH = re.compile(r"^(\d\d:\d\d:\d\d) .*compute threads (\d+) -> (\d+)")
STATUS = re.compile(
    r"^(\d\d:\d\d:\d\d) .*azserve\.server: rows/s ([\d,]+) .*?batch ([\d.]+)\s+busy (\d+)%"
)
IN_FORCE = re.compile(r"  threads (\d+)\s*$")
"""A status line's own thread count (servers since the switch lines went to DEBUG); older
logs have only the switch lines."""


def _seconds(hms: str) -> float:
    t = datetime.strptime(hms, "%H:%M:%S")
    return t.hour * 3600 + t.minute * 60 + t.second


def effect(lines: list[str], start_threads: int = 1) -> dict[int, dict[str, float]]:
    threads = start_threads
    rows: dict[int, list[tuple[float, float, float, float]]] = {}
    last: float | None = None
    for line in lines:
        if m := SWITCH.match(line):
            threads = int(m.group(3))
            continue
        if m := STATUS.match(line):
            if n := IN_FORCE.search(line):
                threads = int(n.group(1))
            t = _seconds(m.group(1))
            rate = float(m.group(2).replace(",", ""))
            dt = 5.0 if last is None else max(0.0, (t - last) % 86400)
            last = t
            if rate == 0:  # before the first evaluation, or after the last
                continue
            rows.setdefault(threads, []).append((dt, rate, float(m.group(3)), int(m.group(4))))
    out = {}
    for n, items in sorted(rows.items()):
        seconds = sum(dt for dt, *_ in items)
        out[n] = {
            "seconds": round(seconds, 1),
            "status_lines": len(items),
            "rows_per_s": round(sum(dt * r for dt, r, _, _ in items) / seconds, 1),
            "mean_batch": round(sum(dt * b for dt, _, b, _ in items) / seconds, 1),
            "busy": round(sum(dt * u for dt, _, _, u in items) / seconds / 100, 3),
        }
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("log", type=Path, help="a server log (RUN/logs/server.log)")
    p.add_argument("--json", type=Path, help="also write the table here")
    args = p.parse_args(argv)
    try:
        table = effect(args.log.read_text().splitlines())
    except OSError as exc:
        print(f"threads_effect: {exc}", file=sys.stderr)
        return 1
    print("threads  seconds  rows/s  batch  busy")
    for n, r in table.items():
        print(
            f"{n:>7}  {r['seconds']:>7.0f}  {r['rows_per_s']:>6.0f}  {r['mean_batch']:>5.1f}  "
            f"{r['busy']:.2f}"
        )
    if args.json:
        args.json.write_text(json.dumps(table, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
