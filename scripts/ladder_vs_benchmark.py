"""Does a game's rating rise as its benchmark mistake rate falls? Joins a ladder's ratings with
the runs' own benchmark scores of the same checkpoints (``eval.jsonl`` and ``curve.jsonl``, as
``azserve compare`` writes them) and prints both per checkpoint with their rank correlation.

    .venv/bin/python scripts/ladder_vs_benchmark.py runs/c4-ab/ladder runs/c4-ab/connect4 \
        runs/c4-ab/connect4-puct

Spearman's rho between Elo and the MCTS (and raw policy) mistake rate over the checkpoints
both measured: near -1 when they agree (higher rating, fewer mistakes). A ladder's intervals
are wide at few games a checkpoint, so read rho beside the games per checkpoint.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from azserve.arena.curves import read_run


def spearman(a: list[float], b: list[float]) -> float:
    """Spearman's rank correlation (ties take their mean rank)."""

    def ranks(x: list[float]) -> np.ndarray:
        v = np.asarray(x, dtype=float)
        order = v.argsort(kind="stable")
        r = np.empty(len(v))
        r[order] = np.arange(len(v), dtype=float)
        for value in np.unique(v):
            tied = v == value
            r[tied] = r[tied].mean()
        return r

    ra, rb = ranks(a), ranks(b)
    return float(np.corrcoef(ra, rb)[0, 1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("ladder", help="the ladder's directory (its ratings.json)")
    ap.add_argument("runs", nargs="+", help="the rated runs' directories")
    args = ap.parse_args(argv)
    ratings = json.loads((Path(args.ladder) / "ratings.json").read_text())["players"]
    points = {Path(r).name: {p.step: p for p in read_run(r)} for r in args.runs}
    rows = []
    for p in ratings:
        point = points.get(p.get("run") or "", {}).get(p.get("step") or -1)
        if point is None or "overall" not in point.policy:
            continue
        rows.append((p["player"], p["elo"], p["lo"], p["hi"], p["games"], point))
    if len(rows) < 3:
        print("fewer than 3 checkpoints are both rated and scored", file=sys.stderr)
        return 1
    rows.sort(key=lambda r: (r[5].minutes, r[0]))
    print(
        f"{'checkpoint':24} {'Elo':>6} {'95% interval':>15} {'games':>5} {'policy':>7} {'MCTS':>6}"
    )
    for name, elo, lo, hi, games, point in rows:
        mcts = point.mcts.get("overall")
        print(
            f"{name:24} {elo:6.0f} {lo:7.0f}..{hi:<7.0f} {games:5d} "
            f"{point.policy['overall']:7.1%} {'' if mcts is None else f'{mcts:6.1%}'}"
        )
    elos = [r[1] for r in rows]
    print(
        f"Spearman rho, Elo vs raw policy mistakes: {spearman(elos, [r[5].policy['overall'] for r in rows]):+.2f} ({len(rows)} checkpoints)"
    )
    with_mcts = [r for r in rows if "overall" in r[5].mcts]
    if len(with_mcts) >= 3:
        rho = spearman([r[1] for r in with_mcts], [r[5].mcts["overall"] for r in with_mcts])
        print(
            f"Spearman rho, Elo vs MCTS mistakes:       {rho:+.2f} ({len(with_mcts)} checkpoints)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
