"""A run's scalar log: ``metrics.jsonl`` (one JSON object per line) and TensorBoard scalars."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any


class RunLog:
    """Append rows to ``DIR/metrics.jsonl`` and, when tensorboard is installed, ``DIR/tb``.

    Steps never go backwards in the file: a learner resumed from a checkpoint older than its
    last logged row re-trains those steps, and its rows start again only past that step."""

    def __init__(self, run_dir: str | Path, tensorboard: bool = True) -> None:
        self.dir = Path(run_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        path = self.dir / "metrics.jsonl"
        earlier = read_metrics(path) if path.exists() else []
        self._floor = int(earlier[-1].get("step", 0)) if earlier else 0
        self._file = path.open("a", buffering=1)
        self._tb: Any = None
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError:  # tensorboard is a core dependency; tolerate a slim install
                return
            self._tb = SummaryWriter(str(self.dir / "tb"))

    def write(self, row: dict[str, Any], step: int) -> None:
        if step < self._floor:
            return  # re-trained after a resume: the file already has this step
        self._floor = step
        row = {"time": time.time(), **row}
        self._file.write(json.dumps(row, default=_jsonable) + "\n")
        if self._tb is not None:
            for key, value in row.items():
                if (
                    isinstance(value, (int, float))
                    and not isinstance(value, bool)
                    and key not in ("time", "step")
                ):
                    self._tb.add_scalar(tb_tag(key), value, step)

    def close(self) -> None:
        self._file.close()
        if self._tb is not None:
            self._tb.close()


TB_GROUPS = {
    "replay/": ("replay_size", "reuse", "mean_lag", "insert_rate", "sample_rate", "dropped_stale"),
    "selfplay/": (
        "games",
        "positions",
        "games_stored",
        "duplicates_dropped",
        "trajectories_rejected",
    ),
    "server/": (
        "inference_busy",
        "server_batch",
        "server_latency_p50_ms",
        "server_latency_p99_ms",
        "versions_restored",
    ),
}
"""TensorBoard tag groups of metrics.jsonl keys; every other key is under ``train/``."""


def tb_tag(key: str) -> str:
    """The grouped TensorBoard tag of a metrics.jsonl key: ``reuse`` -> ``replay/reuse``."""
    return next((g + key for g, keys in TB_GROUPS.items() if key in keys), "train/" + key)


def _jsonable(x: Any) -> Any:
    if hasattr(x, "item"):
        return x.item()
    if hasattr(x, "tolist"):
        return x.tolist()
    return str(x)


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """All rows of a metrics.jsonl (a torn last line from a crash is skipped)."""
    rows = []
    for line in Path(path).read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return rows
