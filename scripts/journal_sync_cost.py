"""What the learner's journal costs per game under each sync policy: flush only, fsync every
game, and group commit every N ms. Appends Connect Four-sized trajectories (30 positions) to a
journal in DIR (default: a temporary directory under runs/, on the disk the runs use) for
--seconds each, the policies in turn, and prints games/s, fsyncs/s and µs of the learner's
loop per game. Run: ``.venv/bin/python scripts/journal_sync_cost.py [--dir D] [--seconds 3]``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

from azserve.protocol import Trajectory
from learner.journal import Journal


def run(directory: Path, sync_ms: float | None, seconds: float) -> dict[str, float]:
    """Append for ``seconds``; ``sync_ms`` None: never fsync (flush only), 0: every game."""
    shutil.rmtree(directory, ignore_errors=True)
    journal = Journal(directory, sync_ms=sync_ms)
    journal.rotate(0)
    T = 30
    obs = np.random.default_rng(0).integers(0, 2, (T, 2, 6, 7), dtype=np.uint8)
    policy = np.full((T, 7), 1 / 7, np.float32)
    outcome = np.ones(T, np.float32)
    n, t0 = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - t0) < seconds:
        msg = Trajectory(actor="a", game_id=n, game="connect4", version=0, length=T, result=1.0)
        journal.append(msg, obs, policy, outcome)
        journal.sync_due(time.monotonic())  # what the learner's loop does between appends
        n += 1
    syncs = journal.syncs
    journal.close()
    return {
        "games_per_s": round(n / elapsed),
        "fsyncs_per_s": round(syncs / elapsed, 1),
        "us_per_game": round(elapsed / n * 1e6, 1),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dir", type=Path, help="where to write (default: a temp dir in runs/)")
    p.add_argument("--seconds", type=float, default=3.0)
    args = p.parse_args()
    base = args.dir or Path(tempfile.mkdtemp(prefix="journal-", dir=Path("runs").resolve()))
    report = {}
    for name, sync_ms in [("flush only", None), ("fsync every game", 0.0),
                          ("group 10 ms", 10.0), ("group 100 ms", 100.0), ("group 1000 ms", 1000.0)]:  # fmt: skip
        report[name] = run(base / "j", sync_ms, args.seconds)
        print(name, report[name], flush=True)
    shutil.rmtree(base, ignore_errors=True)
    print(json.dumps(report))


if __name__ == "__main__":
    main()
