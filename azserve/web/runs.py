"""What the pages show of a run, read from the files ``azserve train`` (and ``ladder``,
``compare``, ``match``) already write, and nothing else: ``config.toml``, ``metrics.jsonl``
(the learner's rows: the status table's figures and the losses), ``eval.jsonl`` (benchmark
and match scores per checkpoint), ``summary.json``, the checkpoints' headers, and a ladder's
``ratings.json``. No file is written and no second record is kept: every figure is one of
these files' own, or a rate between two of its rows.

A RUN argument is a run directory (it has ``config.toml``, ``metrics.jsonl`` or
``checkpoints/``), an empty directory (a run about to start), or a directory of runs, as
``azserve compare`` writes them: each directory below it with a ``config.toml`` is a run, and
its ``ladder/`` rates them all.
"""

from __future__ import annotations

import json
import math
import re
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from azserve.errors import AzserveError
from azserve.run.display import human, pct
from azserve.run.ladder_rounds import latest_rating, rating_text
from learner.runlog import is_learner_row

_CHECKPOINT = re.compile(r"^ckpt-(\d+)\.safetensors$")
_CHECKPOINT_PLAYER = re.compile(r"^(.+)@(\d+)$")
_HEADER_MAX = 64 << 20
"""Largest safetensors header read (the checkpoint's metadata: config and trainer state)."""


class JsonLines:
    """An append-only JSON-lines file, read as it grows: ``poll`` returns the rows appended
    since the last call (a torn last line waits for its end). A file that shrank was replaced:
    it is read again from its start."""

    def __init__(
        self, path: Path, keep: Callable[[dict[str, Any]], bool] = lambda row: True
    ) -> None:
        self.path = path
        self.keep = keep
        """Which rows to keep (metrics.jsonl: the learner's, not the autopilot's events)."""
        self.rows: list[dict[str, Any]] = []
        self._offset = 0

    def poll(self) -> tuple[list[dict[str, Any]], bool]:
        """(new rows, whether the file was read again from its start)."""
        try:
            size = self.path.stat().st_size
        except FileNotFoundError:
            size = 0
        reset = size < self._offset
        if reset:
            self.rows, self._offset = [], 0
        if size == self._offset:
            return [], reset
        with self.path.open("rb") as f:
            f.seek(self._offset)
            data = f.read(size - self._offset)
        whole = data[: data.rfind(b"\n") + 1]
        self._offset += len(whole)
        new = []
        for line in whole.splitlines():
            try:
                row = json.loads(line)
            except ValueError:
                continue
            if isinstance(row, dict) and self.keep(row):
                new.append(row)
        self.rows += new
        return new, reset


@dataclass
class Run:
    """One run directory and the rows of its logs read so far."""

    id: str
    """Its name in URLs: the label made URL-safe, unique among the runs served."""
    label: str
    """Its directory's name: what the ladder calls its checkpoints (``LABEL@STEP``)."""
    path: Path
    metrics: JsonLines = field(init=False)
    evals: JsonLines = field(init=False)
    _headers: dict[tuple[str, float], dict[str, Any]] = field(default_factory=dict, init=False)

    def __post_init__(self) -> None:
        self.metrics = JsonLines(self.path / "metrics.jsonl", is_learner_row)
        self.evals = JsonLines(self.path / "eval.jsonl")

    # --- files ------------------------------------------------------------------------------

    def config_text(self) -> str:
        try:
            return (self.path / "config.toml").read_text()
        except FileNotFoundError:
            return ""

    def config(self) -> dict[str, Any]:
        """The run's resolved config as TOML tables ({} before it is written)."""
        try:
            return tomllib.loads(self.config_text())
        except tomllib.TOMLDecodeError:
            return {}

    def game_spec(self) -> str | None:
        game = self.config().get("game")
        return game if isinstance(game, str) else None

    def summary(self) -> dict[str, Any] | None:
        """``summary.json``: written when the run stops (None while it runs)."""
        try:
            data = json.loads((self.path / "summary.json").read_text())
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    def checkpoint_dir(self) -> Path:
        d = self.config().get("checkpoint", {}).get("dir", "checkpoints")
        return self.path / str(d)

    def checkpoints(self) -> list[dict[str, Any]]:
        """The checkpoint files, oldest first: ``{"file", "step", "version", "time"}`` from each
        one's header (read once per file)."""
        d = self.checkpoint_dir()
        if not d.is_dir():
            return []
        out = []
        for p in sorted(d.iterdir()):
            if not _CHECKPOINT.match(p.name):
                continue
            try:
                key = (p.name, p.stat().st_mtime)
                if key not in self._headers:
                    self._headers[key] = checkpoint_header(p)
            except (OSError, ValueError):  # pruned while listed, or being written
                continue
            out.append({"file": str(p.relative_to(self.path)), **self._headers[key]})
        return sorted(out, key=lambda c: c["step"])

    def ladders(self) -> list[Path]:
        """Ladder directories that rate this run: its own, and its parent's when the parent is
        a comparison (``azserve compare``'s shared ladder)."""
        found = [self.path / "ladder", self.path.parent / "ladder"]
        return [d for d in found if (d / "ratings.json").is_file()]

    # --- what the pages show ------------------------------------------------------------------

    def status_rows(self) -> list[dict[str, str]]:
        """The status table of ``azserve train`` as far as the files tell it: the learner's last
        row, rates over the last two rows, the rating, and whether the run has stopped."""
        rows = self.metrics.rows
        out: list[dict[str, str]] = []
        summary = self.summary()
        if summary is not None:
            out.append({"label": "state", "text": f"stopped: {summary.get('stop_reason', '?')}"})
        elif not rows:
            out.append({"label": "state", "text": "no learner row yet (the run is starting?)"})
            return out
        else:
            out.append({"label": "state", "text": "running (or stopped without a summary)"})
        if not rows:
            return out
        r = rows[-1]
        pos_rate = steps_rate = math.nan
        if len(rows) >= 2:
            a = rows[-2]
            dt = float(r.get("time", 0)) - float(a.get("time", 0))
            if dt > 0:
                pos_rate = (r.get("positions", 0) - a.get("positions", 0)) / dt
                steps_rate = (r.get("step", 0) - a.get("step", 0)) / dt
        num = lambda key: float(r.get(key, math.nan))  # noqa: E731
        out += [
            {
                "label": "run",
                "text": f"{human(num('games'))} games  {human(num('positions'))} positions of "
                f"{human(num('moves'))} moves  step {human(num('step'))}  "
                f"version {r.get('version', '-')}",
            },
            # The learner's own window rate where it logs one (rows near a stop are sparse).
            {"label": "self-play", "text": f"{human(r.get('insert_rate', pos_rate))} positions/s"},
            {
                "label": "inference",
                "text": f"batch {num('server_batch'):.1f}  busy {pct(num('inference_busy'))}",
            },
            {
                "label": "learner",
                "text": f"{steps_rate:.2f} steps/s  busy {pct(num('learner_busy'))}  "
                f"loss {num('loss'):.3f}",
            },
            {
                "label": "replay",
                "text": f"reuse {num('reuse'):.1f}  policy lag {num('mean_lag'):.1f}  "
                f"bottleneck: {r.get('bottleneck', '-')}",
            },
        ]
        if (self.path / "ladder" / "ratings.json").is_file():
            rating = latest_rating(self.path / "ladder" / "ratings.json")
            out.append({"label": "rating", "text": rating_text(rating)})
        return out

    def started(self) -> float | None:
        """The run's start: the time of the learner's first row."""
        rows = self.metrics.rows
        return float(rows[0]["time"]) if rows and "time" in rows[0] else None

    def networks(self, ratings: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Every checkpoint the run kept, evaluated or rated, newest first: step, version, time,
        hours into the run, its Elo (``ratings``: the ladders' players) and its benchmark and
        match scores (the last ``eval.jsonl`` row of its step, a full one before a quick one),
        and whether its file is still kept."""
        nets: dict[int, dict[str, Any]] = {}
        for c in self.checkpoints():
            nets[c["step"]] = {**c, "kept": True}
        for row in self.evals.rows:
            if "step" not in row:
                continue
            step = int(row["step"])
            net = nets.setdefault(
                step, {"step": step, "version": row.get("version"), "kept": False}
            )
            if net.get("eval_full") and not row.get("full"):
                continue
            net["scores"] = scores(row)
            net["eval_full"] = bool(row.get("full"))
        for p in ratings:
            if p.get("run") != self.label or p.get("step") is None:
                continue
            net = nets.setdefault(int(p["step"]), {"step": int(p["step"]), "kept": False})
            net["rating"] = {k: p.get(k) for k in ("elo", "lo", "hi", "games", "player")}
            if p.get("hours") is not None:
                net["hours"] = p["hours"]
        t0 = self.started()
        for net in nets.values():
            if "hours" not in net and t0 is not None and net.get("time"):
                net["hours"] = max(0.0, (net["time"] - t0) / 3600)
        return sorted(nets.values(), key=lambda n: -n["step"])


def scalar_row(row: dict[str, Any]) -> dict[str, Any]:
    """A metrics row's numbers and words, without its nested tables (``games_by_version`` grows
    with every version): what the charts and the status rows use."""
    return {k: v for k, v in row.items() if isinstance(v, (int, float, str)) or v is None}


def checkpoint_header(path: Path) -> dict[str, Any]:
    """A checkpoint's step, version and time from its safetensors header alone (no tensor is
    read, and no torch): 8 bytes of header length, then the JSON header whose
    ``__metadata__`` the learner fills (``learner.checkpoint``)."""
    with path.open("rb") as f:
        n = int.from_bytes(f.read(8), "little")
        if not 0 < n <= _HEADER_MAX:
            raise ValueError(f"{path.name}: not a safetensors file")
        meta: dict[str, str] = json.loads(f.read(n)).get("__metadata__") or {}
    named = _CHECKPOINT.match(path.name)
    return {
        "step": int(meta.get("step", named.group(1) if named else "0")),
        "version": int(meta.get("version", 0)),
        "time": float(meta.get("time", path.stat().st_mtime)),
    }


def scores(row: dict[str, Any]) -> dict[str, float]:
    """An ``eval.jsonl`` row's figures, nested ones flattened (``vs_random.win_rate``), only
    numbers, without the bookkeeping (time, step, version, how long it took)."""
    out: dict[str, float] = {}

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                walk(f"{prefix}.{k}" if prefix else str(k), v)
        elif (
            isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        ):
            out[prefix] = value

    walk("", {k: v for k, v in row.items() if k not in ("time", "step", "version", "eval_s")})
    return out


def read_ratings(ladder: Path) -> dict[str, Any] | None:
    """A ladder's ``ratings.json`` (``azserve.arena.ladder.output.ratings_json``), each player
    with ``anchor`` set (``with_place``), or None."""
    try:
        data = json.loads((ladder / "ratings.json").read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    return {**data, "players": [with_place(p) for p in data.get("players", [])]}


def with_place(player: dict[str, Any]) -> dict[str, Any]:
    """A ``ratings.json`` player with ``anchor`` set: a checkpoint (``RUN@STEP``) no longer
    among the ladder's entrants (pruned, or past ``max_checkpoints``) has no ``run`` or
    ``step`` in the file, but is still a checkpoint, not an anchor; its run and step are read
    from its name."""
    if player.get("run") is not None:
        return {**player, "anchor": False}
    m = _CHECKPOINT_PLAYER.match(str(player.get("player", "")))
    if m is None:
        return {**player, "anchor": True}
    return {**player, "anchor": False, "run": m.group(1), "step": int(m.group(2))}


def is_run_dir(p: Path) -> bool:
    return any((p / name).exists() for name in ("config.toml", "metrics.jsonl", "checkpoints"))


def find_runs(paths: list[str | Path]) -> list[Run]:
    """The runs the arguments name (see the module's docstring), each with an id unique among
    them. AzserveError, in one line, for a path that does not exist, is a file, or holds no
    run."""
    found: list[Path] = []
    for arg in paths:
        p = Path(arg)
        if not p.exists():
            raise AzserveError(f"{arg}: no such run directory")
        if not p.is_dir():
            raise AzserveError(f"{arg}: a file, not a run directory")
        p = p.resolve()
        if is_run_dir(p) or not any(p.iterdir()):
            found.append(p)
            continue
        below = sorted(d for d in p.iterdir() if d.is_dir() and (d / "config.toml").is_file())
        if not below:
            raise AzserveError(
                f"{arg}: not a run directory (no config.toml, metrics.jsonl or checkpoints/), "
                "and no run directory below it"
            )
        found += below
    runs: list[Run] = []
    for p in dict.fromkeys(found):  # the same directory named twice is served once
        run = run_at(p)
        n = 1
        while any(r.id == run.id for r in runs):
            n += 1
            run.id = f"{run_at(p).id}-{n}"
        runs.append(run)
    return runs


def run_at(path: str | Path) -> Run:
    """The run in ``path`` as it is, found or not (``azserve train --web``: a run about to
    start there)."""
    p = Path(path).resolve()
    return Run(re.sub(r"[^A-Za-z0-9._-]+", "-", p.name).strip("-.") or "run", p.name, p)


__all__ = [
    "JsonLines",
    "Run",
    "checkpoint_header",
    "find_runs",
    "read_ratings",
    "run_at",
    "scalar_row",
    "scores",
    "with_place",
]
