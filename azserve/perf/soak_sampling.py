"""What ``azserve bench soak`` reads every sample: processes from ``/proc``, the actors' and the
learner's logs, a latency probe, and the server's status (``Sampler``)."""

from __future__ import annotations

import ast
import json
import re
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from azserve.errors import AzserveError
from azserve.perf.common import cpu_seconds, percentiles
from azserve.perf.selfplay import parse_status_lines
from azserve.run.supervisor import Child
from azserve.sync_client import SyncClient

_REFUSED = re.compile(r"publishing v\d+ to \S+ failed: (?P<reason>\w+)")
"""``learner.publisher``'s warning for each refused or failed publish attempt."""

_CACHE_MB = re.compile(r"entries \d+ (?P<mb>[0-9.]+) MB")
_TREE_MB = re.compile(r"trees \d+ nodes (?P<mb>[0-9.]+) MB")
_EXTRA = re.compile(
    r"in flight (?P<in_flight>\d+)\s.*?\sgames (?P<games>\d+)\s.*?"
    r"pending (?P<pending>\d+)\s+abandoned (?P<abandoned>\{[^}]*\}|0)"
)


# --- reading processes from outside ----------------------------------------------------------


def proc_status(pid: int | None) -> dict[str, int]:
    """``VmRSS`` (bytes) and ``Threads`` of a live process from ``/proc/PID/status`` (Linux),
    ``{}`` when it is gone or unreadable."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return {}
    out: dict[str, int] = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key == "VmRSS":
            out["rss_bytes"] = int(value.split()[0]) * 1024  # the kernel writes kB
        elif key == "Threads":
            out["threads"] = int(value)
    return out


def open_fds(pid: int | None) -> int | None:
    """Open file descriptors of a live process (``/proc/PID/fd``); None when unreadable."""
    try:
        return sum(1 for _ in Path(f"/proc/{pid}/fd").iterdir())
    except OSError:
        return None


class LogTail:
    """The complete lines appended to a file since the previous ``read`` (a torn last line
    waits for its end), from ``offset`` (bytes; default: the file's end now)."""

    def __init__(self, path: Path, offset: int | None = None) -> None:
        self.path = path
        if offset is None:
            offset = path.stat().st_size if path.exists() else 0
        self.offset = offset

    def read(self) -> list[str]:
        try:
            with self.path.open("rb") as f:
                f.seek(self.offset)
                data = f.read()
        except OSError:
            return []
        end = data.rfind(b"\n") + 1
        self.offset += end
        return data[:end].decode(errors="replace").splitlines()


def parse_actor_line(line: str) -> dict[str, Any] | None:
    """One actor status line (``actors.selfplay.SelfPlay._status_loop``): rates as
    ``selfplay.parse_status_lines`` reads them plus ``in_flight`` (rows), ``games`` (finished
    so far), ``pending`` (trajectories not yet acked) and ``abandoned`` (``{reason: n}``)."""
    rates = parse_status_lines(line)
    extra = _EXTRA.search(line)
    if not rates or extra is None:
        return None
    abandoned = extra["abandoned"]
    return {
        "games_per_s": rates[0]["games"],
        "positions_per_s": rates[0]["positions"],
        "sims_per_s": rates[0]["sims"],
        "evals_per_s": rates[0]["evals"],
        "loop_lag_ms": rates[0]["lag"],
        "in_flight": int(extra["in_flight"]),
        "games": int(extra["games"]),
        "pending": int(extra["pending"]),
        "abandoned": {} if abandoned == "0" else dict(ast.literal_eval(abandoned)),
        **{
            key: float(m["mb"])
            for key, pattern in (("cache_mb", _CACHE_MB), ("tree_mb", _TREE_MB))
            if (m := pattern.search(line))
        },
    }


def summarize_actor_lines(lines: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """One sample of one actor from the status lines of the interval: mean rates and lag,
    the most rows in flight and trajectories pending, the newest totals."""
    if not lines:
        return None

    def mean(key: str) -> float:
        return round(sum(x[key] for x in lines) / len(lines), 3)

    return {
        "games_per_s": mean("games_per_s"),
        "positions_per_s": mean("positions_per_s"),
        "sims_per_s": mean("sims_per_s"),
        "evals_per_s": mean("evals_per_s"),
        "loop_lag_ms": mean("loop_lag_ms"),
        "in_flight_max": max(x["in_flight"] for x in lines),
        "pending_max": max(x["pending"] for x in lines),
        "games": lines[-1]["games"],
        "abandoned": lines[-1]["abandoned"],
        "status_lines": len(lines),
        # the actor's two bounded stores: the evaluation cache (actors.cache_mb) and the trees
        **{k: lines[-1][k] for k in ("cache_mb", "tree_mb") if k in lines[-1]},
    }


# --- a latency probe ------------------------------------------------------------------------


class Probe:
    """A thread that sends one position to the server every ``period_s`` (closed loop: the
    next leaves when the reply is back) and records its latency (ms), receipt of the request
    to the reply, queue included: what an actor's leaf waits. The server's own percentiles
    cover its last 8,192 requests, minutes at a soak's rates, so they cannot tell one window
    from the next; the probe's can."""

    def __init__(
        self, endpoint: str, model: str, obs_shape: tuple[int, ...], period_s: float = 0.05
    ) -> None:
        self.endpoint = endpoint
        self.model = model
        self.obs = np.zeros((1, *obs_shape), np.uint8)
        self.period_s = period_s
        self.errors = 0
        self._done: list[float] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="soak-probe", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=35)

    def take(self) -> list[float]:
        """Latencies (ms) recorded since the previous ``take``."""
        with self._lock:
            out, self._done = self._done, []
        return out

    def _run(self) -> None:
        with SyncClient(self.endpoint, self.model, timeout_s=30.0) as client:
            while not self._stop.is_set():
                t = time.monotonic()
                try:
                    client.evaluate(self.obs)
                except AzserveError:
                    self.errors += 1
                else:
                    with self._lock:
                        self._done.append((time.monotonic() - t) * 1e3)
                self._stop.wait(max(0.0, t + self.period_s - time.monotonic()))


# --- the sampler -----------------------------------------------------------------------------


@dataclass
class Sampler:
    """Takes one sample of every process, the server and the actors' new status lines."""

    children: dict[str, Child]
    actors: list[Child]
    status: Callable[[], dict[str, Any]]
    """The server's status reply, stamped with ``t`` (monotonic s)."""
    metrics_path: Path
    """The learner's ``metrics.jsonl``."""
    probe: Probe
    t0: float
    warmup_s: float
    _tails: dict[str, LogTail] = field(default_factory=dict)
    _metrics: LogTail | None = None
    _learner_log: LogTail | None = None
    _refused: dict[str, int] = field(default_factory=dict)
    _prev_cpu: dict[str, tuple[float, float]] = field(default_factory=dict)
    _prev_server: dict[str, Any] | None = None
    _learner_row: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._tails = {a.name: LogTail(a.log_path) for a in self.actors}
        self._metrics = LogTail(self.metrics_path)
        learner = self.children.get("learner")
        # From the learner's start: the server's error count runs from its start too.
        self._learner_log = LogTail(learner.log_path, learner.log_offset or 0) if learner else None
        self.probe.take()
        self._prev_server = self.status()
        for name in self.children:
            self._process(name, self._prev_server["t"])

    def sample(self) -> dict[str, Any]:
        st = self.status()
        t = st["t"]
        return {
            "t_s": round(t - self.t0, 2),
            "phase": "warmup" if t - self.t0 < self.warmup_s else "soak",
            "processes": {name: self._process(name, t) for name in self.children},
            "server": self._server(st),
            "probe": self._probe(),
            "actors": {
                name: summarize_actor_lines(
                    [p for line in tail.read() if (p := parse_actor_line(line)) is not None]
                )
                for name, tail in self._tails.items()
            },
            "learner": self._learner(),
        }

    def _process(self, name: str, t: float) -> dict[str, Any]:
        """RSS (MB), CPU cores since the previous sample, threads and fds of one child."""
        child = self.children[name]
        pid = child.proc.pid if child.proc else None
        st = proc_status(pid)
        cpu = cpu_seconds(pid)
        out: dict[str, Any] = {
            "rss_mb": round(st["rss_bytes"] / 2**20, 2) if "rss_bytes" in st else None,
            "threads": st.get("threads"),
            "fds": open_fds(pid),
            "cpu_cores": None,
        }
        prev = self._prev_cpu.get(name)
        if cpu is not None:
            if prev is not None and t > prev[0]:
                out["cpu_cores"] = round((cpu - prev[1]) / (t - prev[0]), 3)
            self._prev_cpu[name] = (t, cpu)
        return out

    def _server(self, st: dict[str, Any]) -> dict[str, Any]:
        """Rates since the previous status, the latency window, queue and error counters."""
        prev = self._prev_server or st
        self._prev_server = st
        dt = st["t"] - prev["t"]
        versions = st.get("versions") or {}
        batches = st["batches"] - prev["batches"]
        return {
            "rows_per_s": round((st["rows"] - prev["rows"]) / dt, 1) if dt > 0 else 0.0,
            "requests_per_s": round((st["requests"] - prev["requests"]) / dt, 1) if dt > 0 else 0.0,
            "mean_batch": round((st["rows"] - prev["rows"]) / batches, 2) if batches else 0.0,
            "latency_ms": {k: round(v, 3) for k, v in st["latency_ms"].items()},
            "queued_rows": st["queued_rows"],
            "errors": st["errors"],
            "dropped": st["dropped"],
            "latest_version": versions.get("latest"),
            "versions_resident": len(versions.get("resident", [])),
            "clients_with_leases": versions.get("clients_with_leases"),
        }

    def _probe(self) -> dict[str, Any]:
        """The probe's latency percentiles (ms) since the previous sample, and its errors."""
        done = self.probe.take()
        return {"n": len(done), "latency_ms": percentiles(done), "errors": self.probe.errors}

    def _learner(self) -> dict[str, Any]:
        """The newest learner metrics row's step, version, games and replay size, and the
        publishes the server refused so far, by reason (from the learner's log)."""
        assert self._metrics is not None
        for line in self._learner_log.read() if self._learner_log else []:
            if m := _REFUSED.search(line):
                self._refused[m["reason"]] = self._refused.get(m["reason"], 0) + 1
        for line in self._metrics.read():
            try:
                self._learner_row = json.loads(line)
            except ValueError:
                continue
        keys = ("step", "version", "games", "replay_size", "trajectories_rejected")
        row = {k: self._learner_row[k] for k in keys if k in self._learner_row}
        return {**row, "publish_refused": dict(self._refused)}
