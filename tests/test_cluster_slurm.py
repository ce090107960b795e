"""The Slurm engine against a real Slurm (one controller and one node daemon on this machine,
``tests/slurm.py``): inside ``salloc``, the launcher starts every role with ``srun`` on the
allocation's node, the run trains to its budget, and no job step or process is left."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.slurm import slurm_cluster  # noqa: F401 - the fixture

REPO = Path(__file__).resolve().parents[1]
TTT = REPO / "configs" / "tictactoe.toml"

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]


def test_launch_inside_an_allocation_runs_every_role_under_srun(
    slurm_cluster: dict[str, str],  # noqa: F811
    tmp_path: Path,
) -> None:
    env = slurm_cluster
    cluster = tmp_path / "slurm.toml"
    cluster.write_text(
        f"""
engine = "slurm"
network = "loopback"
workdir = "{REPO}"
python = "{sys.executable}"
[[server]]
name = "s0"
port = 17555
[learner]
port = 17600
[[actors]]
name = "a"
nodes = 1
processes = 2
games = 16
"""
    )
    # one node: the group shares it with the server and the learner
    run_dir = tmp_path / "run"
    argv = [
        "salloc", "-N1", "--job-name=azserve-test",
        sys.executable, "-m", "azserve.cli.main", "launch", "--cluster", str(cluster),
        "--config", str(TTT), "--run-dir", str(run_dir), "--minutes", "0.5", "--no-progress",
        "--set", "eval.sims=4", "--set", "eval.match_games=2", "--set", "train.eval_every_s=0",
        "--set", "replay.min_size=200", "--set", "trainer.batch_size=64",
    ]  # fmt: skip
    r = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=280)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-3000:]
    assert "time budget of 0.5 min reached" in out
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert rows[-1]["version"] >= 1 and rows[-1]["games"] > 0
    # every role ran as a step of the allocation, on its node
    for name in ("server-s0", "learner", "actor-a-0", "actor-a-1"):
        assert list((run_dir / "logs").glob(f"*/{name}.log")), name
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["games_stored"] > 0
    # the job ended with the launcher: no step left in the queue
    deadline = time.monotonic() + 30
    while True:
        q = subprocess.run(["squeue", "-h"], env=env, capture_output=True, text=True)
        if q.stdout.strip() == "" or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert q.stdout.strip() == ""
