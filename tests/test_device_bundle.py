"""The lent GPU machine's bundle and run (scripts/device/, docs/gpu.md): what can be checked
without the rehearsal (`make device-rehearsal` runs the whole thing on a clean clone)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEVICE = REPO / "scripts" / "device"


def _names(path: Path) -> set[str]:
    out = set()
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            out.add(re.split(r"[<>=!~ \[;]", line, maxsplit=1)[0].lower().replace("_", "-"))
    return out


def test_every_runtime_dependency_is_in_the_image_or_the_bundle() -> None:
    """A dependency added to pyproject.toml must reach the lent machine: its image holds it
    (image.txt, as KINDS.md lists) or the bundle carries it (wheels.txt)."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    wanted = {
        re.split(r"[<>=!~ \[;]", d, maxsplit=1)[0].lower().replace("_", "-")
        for d in project["dependencies"]
    }
    have = _names(DEVICE / "image.txt") | _names(DEVICE / "wheels.txt")
    assert wanted - have == set(), f"not on the lent machine: {sorted(wanted - have)}"


def test_the_bundle_pins_one_exact_version_of_each_wheel() -> None:
    lines = [
        ln.strip()
        for ln in (DEVICE / "wheels.txt").read_text().splitlines()
        if ln.strip() and not ln.startswith("#")
    ]
    assert lines and all(re.fullmatch(r"[A-Za-z0-9_.-]+==[0-9][0-9A-Za-z.]*", ln) for ln in lines)
    assert len({ln.split("==")[0].lower() for ln in lines}) == len(lines)


def test_the_scripts_parse() -> None:
    for name in ("bundle", "run", "rehearse", "lib.sh"):
        subprocess.run(["bash", "-n", str(DEVICE / name)], check=True)


def _summarize(*args: str) -> str:
    return subprocess.run(
        [sys.executable, str(DEVICE / "summarize.py"), *args],
        check=True,
        capture_output=True,
        text=True,
    ).stdout


def test_summarize_reads_each_steps_own_files(tmp_path: Path) -> None:
    """One JSON line per step from the bench's JSON (or the train run's metrics), then the
    text lines and the table that come back from the lent machine."""
    (tmp_path / "serve-go9-graphs.json").write_text(
        json.dumps(
            {
                "positions_per_s": 90000.0,
                "model_positions_per_s": 100000.0,
                "efficiency": 0.9,
                "mean_batch": 1000.0,
                "inference_busy_fraction": 0.95,
                "latency_ms": {"p50": 12.0, "p99": 30.0},
                "model_by_batch": {"1024": {"positions_per_s": 100000.0}},
            }
        )
    )
    train = tmp_path / "train-go9"
    train.mkdir()
    rows = [
        {"time": 100.0, "positions": 0, "games": 0, "step": 0, "bottleneck": "actor"},
        {"time": 160.0, "positions": 6000, "games": 80, "step": 50, "bottleneck": "actor"},
        {"time": 220.0, "positions": 12000, "games": 160, "step": 100, "bottleneck": "learner"},
    ]
    (train / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    results = tmp_path / "results.jsonl"
    lines = [
        _summarize("step", "serve-go9-graphs", str(tmp_path), "ok", "40"),
        _summarize("step", "train-go9", str(tmp_path), "ok", "230"),
        _summarize("step", "selfplay-chess", str(tmp_path), "timed out at 60 s", "61"),
    ]
    results.write_text("".join(lines))
    serve, train_row, selfplay = (json.loads(ln) for ln in lines)
    assert serve["efficiency"] == 0.9 and serve["latency_p50_ms"] == 12.0
    assert train_row["positions_per_s"] == 100.0  # 12,000 positions over 120 s
    assert train_row["bottleneck_shares"] == {"actor": 0.67, "learner": 0.33}
    assert selfplay["status"] == "timed out at 60 s" and "positions_per_s" not in selfplay
    assert "90,000 pos/s, model alone 100,000 (efficiency 0.90)" in _summarize(
        "line", str(results), "serve-go9-graphs"
    )
    table = _summarize("table", str(results))
    assert table.startswith("== 3 steps, 2 ok") and "12000 positions (100.0/s)" in table
