"""Pieces every bench shares: child processes, server status deltas, percentiles, sync files.

Benches coordinate their processes through files in one work directory (a ``ready-N`` file per
worker, one ``go.json`` with the measurement window, one result file per worker), never through
pickled objects. Times are ``time.monotonic()`` values: on Linux that clock (CLOCK_MONOTONIC) is
system-wide, so a window written by one process means the same instants in every other.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from azserve.config.schema import Config
from azserve.errors import AzserveError
from azserve.run.supervisor import Child, azserve_argv, child_env
from azserve.sync_client import SyncClient

Percentiles = dict[str, float]
"""``{"p50": ms, "p90": ms, "p99": ms}``."""


def percentiles(
    samples_ms: Sequence[float] | np.ndarray, qs: Sequence[int] = (50, 90, 99)
) -> Percentiles:
    """Latency percentiles in ms (NaN when there are no samples, so a JSON reader sees it)."""
    a = np.asarray(samples_ms, dtype=np.float64)
    if a.size == 0:
        return {f"p{q}": float("nan") for q in qs}
    return {f"p{q}": round(float(np.percentile(a, q)), 3) for q in qs}


def python_argv(module: str, *args: str) -> list[str]:
    """``python -m MODULE ARGS`` with this interpreter."""
    return [sys.executable, "-m", module, *args]


def overrides_args(overrides: Sequence[str]) -> list[str]:
    """``--set`` flags for a child command."""
    return [a for o in overrides for a in ("--set", o)]


# --- the inference server as a child process -------------------------------------------------


class ServerChild:
    """``azserve serve`` in a child process on a private ipc endpoint, plus its status.

    ``start()`` returns once the server answers a ping; ``stop()`` sends SIGTERM (it drains)."""

    def __init__(
        self, config_path: str, overrides: Sequence[str], workdir: Path, name: str = "server"
    ) -> None:
        self.endpoint = f"ipc://{workdir}/{name}.sock"
        self.overrides = [
            *overrides,
            f"server.bind={self.endpoint}",
        ]
        self.cfg = load_cfg(config_path, self.overrides)
        argv = azserve_argv("serve", "--config", config_path, *overrides_args(self.overrides))
        self.child = Child(name, argv, workdir / f"{name}.log", child_env(self.cfg.backend.threads))

    def start(self, timeout_s: float = 600.0) -> None:
        # A compiled backend compiles every batch bucket before it binds: a minute or more
        # on a busy 2-core machine (inductor's cache makes later starts quicker).
        self.child.start()
        wait_ready(self.endpoint, self.cfg.server.model, timeout_s, self.child)

    def status(self) -> dict[str, Any]:
        """The status reply plus ``t`` (monotonic) and ``cpu_s`` (the process's CPU seconds)."""
        st = server_status(self.endpoint, self.cfg.server.model)
        st["cpu_s"] = cpu_seconds(self.child.proc.pid if self.child.proc else None)
        return st

    def stop(self) -> None:
        self.child.stop(timeout=30)


def load_cfg(config_path: str, overrides: Sequence[str]) -> Config:
    from azserve.config.schema import load_config

    return load_config(config_path, list(overrides))


def wait_ready(endpoint: str, model: str, timeout_s: float, child: Child | None = None) -> None:
    """Ping until the server answers; fail early (with its log tail) if its process died."""
    deadline = time.monotonic() + timeout_s
    while True:
        if child is not None and child.poll() is not None:
            raise AzserveError(f"{child.name} exited with code {child.poll()}:\n{child.tail()}")
        try:
            with SyncClient(endpoint, model, timeout_s=1.0) as c:
                c.ping()
            return
        except AzserveError:
            if time.monotonic() > deadline:
                tail = child.tail() if child is not None else ""
                raise AzserveError(
                    f"no server answered at {endpoint} in {timeout_s:.0f} s\n{tail}"
                ) from None


def server_status(endpoint: str, model: str) -> dict[str, Any]:
    """The server's status reply, stamped with the monotonic time it was taken."""
    with SyncClient(endpoint, model, timeout_s=10.0) as c:
        st = c.status()
    st["t"] = time.monotonic()
    return st


@dataclass
class ServerWindow:
    """What the server did between two status snapshots."""

    seconds: float
    rows: int
    requests: int
    batches: int
    busy_s: float
    batch_hist: dict[str, int]
    """Batches per size bucket, keyed by the bucket's upper bound (``"inf"`` for the rest)."""

    @classmethod
    def between(cls, a: dict[str, Any], b: dict[str, Any]) -> ServerWindow:
        hist = {k: int(b["batch_hist"][k] - a["batch_hist"].get(k, 0)) for k in b["batch_hist"]}
        return cls(
            seconds=b["t"] - a["t"],
            rows=b["rows"] - a["rows"],
            requests=b["requests"] - a["requests"],
            batches=b["batches"] - a["batches"],
            busy_s=b["busy_s"] - a["busy_s"],
            batch_hist={k: n for k, n in hist.items() if n},
        )

    @property
    def rows_per_s(self) -> float:
        return self.rows / self.seconds if self.seconds > 0 else 0.0

    @property
    def mean_batch(self) -> float:
        return self.rows / self.batches if self.batches else 0.0

    @property
    def busy_fraction(self) -> float:
        return min(1.0, self.busy_s / self.seconds) if self.seconds > 0 else 0.0

    def bucket_sizes(self, max_batch_size: int) -> dict[int, int]:
        """Batch counts keyed by a representative size: each bucket's upper bound, capped at
        ``max_batch_size``. The upper bound makes the model's reference rate, if anything, a
        little faster than the batches really were (per-row cost falls with batch size), so the
        efficiency derived from it is conservative."""
        out: dict[int, int] = {}
        for bound, n in self.batch_hist.items():
            size = max_batch_size if bound == "inf" else min(int(float(bound)), max_batch_size)
            out[size] = out.get(size, 0) + n
        return out


def weighted_rate(batches_by_size: dict[int, int], rate_by_size: dict[int, float]) -> float:
    """Rows/s of a workload of these batches on a model with these per-size rows/s rates:
    total rows over total compute time."""
    rows = sum(s * n for s, n in batches_by_size.items())
    secs = sum(s * n / rate_by_size[s] for s, n in batches_by_size.items() if rate_by_size.get(s))
    return rows / secs if secs > 0 else 0.0


# --- worker processes that meet at a measurement window --------------------------------------


class Workers:
    """Worker processes (load generators) that report ready, start together on ``go.json`` and
    leave one result file each. A context manager: leaving it stops any that still run."""

    def __init__(self, workdir: Path, argvs: list[list[str]], threads: int = 1) -> None:
        self.workdir = workdir
        self.children = [
            Child(f"worker-{i}", argv, workdir / f"worker-{i}.log", child_env(threads))
            for i, argv in enumerate(argvs)
        ]

    def __enter__(self) -> Workers:
        for f in self.workdir.glob("ready-*"):
            f.unlink()
        (self.workdir / "go.json").unlink(missing_ok=True)
        for c in self.children:
            c.start()
        return self

    def __exit__(self, *exc: object) -> None:
        for c in self.children:
            c.stop(timeout=10)

    def wait_ready(self, timeout_s: float = 120.0) -> None:
        deadline = time.monotonic() + timeout_s
        while sum((self.workdir / f"ready-{i}").exists() for i in range(len(self.children))) < len(
            self.children
        ):
            for c in self.children:
                if c.poll() is not None:
                    raise AzserveError(f"{c.name} exited with code {c.poll()}:\n{c.tail()}")
            if time.monotonic() > deadline:
                raise AzserveError(
                    f"workers not ready in {timeout_s:.0f} s:\n{self.children[0].tail()}"
                )
            time.sleep(0.05)

    def go(self, warmup_s: float, duration_s: float) -> tuple[float, float]:
        """Start every worker now; the measured window is ``[now + warmup, + duration]``."""
        t_measure = time.monotonic() + warmup_s
        window = {"t_measure": t_measure, "t_end": t_measure + duration_s}
        write_json_atomic(self.workdir / "go.json", window)
        return window["t_measure"], window["t_end"]

    def cpu_seconds(self) -> float | None:
        """CPU seconds so far of all workers together (None if unreadable)."""
        each = [cpu_seconds(c.proc.pid if c.proc else None) for c in self.children]
        return None if None in each else sum(x for x in each if x is not None)

    def wait_done(self, timeout_s: float) -> None:
        for c in self.children:
            code = c.wait(timeout_s)
            if code != 0:
                raise AzserveError(f"{c.name} exited with code {code}:\n{c.tail()}")


def cpu_seconds(pid: int | None) -> float | None:
    """User + system CPU seconds of a live process, all threads (Linux ``/proc``; None elsewhere
    or when it is gone). CPU time, unlike wall time, does not shrink when other tenants of the
    machine take the cores, so per-CPU-second rates stay comparable across a noisy run."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    # After the ")" closing the command name, utime and stime are fields 12 and 13 (0-based).
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def write_json_atomic(path: Path, data: Any) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)


def sleep_until(t: float) -> None:
    time.sleep(max(0.0, t - time.monotonic()))


def run_json_child(
    argv: list[str], out: Path, timeout_s: float, threads: int, log: Path
) -> dict[str, Any]:
    """Run a child that writes a JSON report to ``out``; kill its whole process group if it
    outlives ``timeout_s`` (peers start daemons of their own). Returns ``{"skipped": reason}``
    instead of raising when it fails, so one broken peer never sinks a whole bench."""
    with log.open("ab") as f:
        proc = subprocess.Popen(
            argv,
            stdout=f,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=child_env(threads),
            start_new_session=True,
        )
    try:
        code = proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        return {"skipped": f"timed out after {timeout_s:.0f} s (log {log})"}
    if code != 0 or not out.exists():
        tail = log.read_text(errors="replace").strip().splitlines()[-3:]
        return {"skipped": f"exit code {code}: {' | '.join(tail)}"}
    return json.loads(out.read_text())
