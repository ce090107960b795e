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


EVENT = "event"
"""The key that marks a row written by another part of the run than the learner (the
autopilot's decisions: ``"event": "autopilot"``); readers of the learner's rows skip them."""


def is_learner_row(row: dict[str, Any]) -> bool:
    """Whether a metrics.jsonl row is the learner's (not an event row)."""
    return EVENT not in row


def append_event(path: str | Path, event: str, row: dict[str, Any]) -> None:
    """Append one event row ``{"time", "event", **row}`` to a metrics.jsonl. One ``write`` of
    one line to a file opened for appending: the learner's rows and these interleave by whole
    lines."""
    line = json.dumps({"time": time.time(), EVENT: event, **row}, default=_jsonable) + "\n"
    with Path(path).open("a") as f:
        f.write(line)


def read_metrics(path: str | Path, event: str | None = None) -> list[dict[str, Any]]:
    """The learner's rows of a metrics.jsonl, or with ``event`` only the event rows of that
    name (a torn last line from a crash is skipped). Also reads any JSON-lines log (eval.jsonl)."""
    rows = []
    for line in Path(path).read_text().splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if row.get(EVENT) == event if event is not None else is_learner_row(row):
            rows.append(row)
    return rows
