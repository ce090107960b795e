"""``azserve bench soak``: the whole system for many minutes; is anything growing?

One run, started the way ``bench selfplay --learner`` starts it (``selfplay.Run``): the server
(``azserve serve``), ``actors.processes`` actor processes (``azserve actors``, ``--games`` game
coroutines in total, split evenly) and the learner (``azserve learn``), all child processes on
private ipc endpoints in a temporary directory. The clock starts when the first evaluations
reach the server; every ``--sample-s`` seconds for ``--minutes`` it samples:

- per process (``/proc/PID``): resident memory (``VmRSS``), CPU cores used since the previous
  sample, threads, open file descriptors;
- a probe thread's latency since the previous sample: one position every 50 ms on the latest
  version, send to reply, so it waits in the server's queue like an actor's leaf;
- the server's status (one ``SyncClient`` kept open): rows/s and requests/s since the previous
  sample, its latency percentiles (receipt to reply, its last 8,192 requests), queued rows,
  error replies, dropped messages, resident versions, clients holding leases;
- each actor's status lines written since the previous sample: games/s, simulations/s,
  evaluations/s, event-loop lag, rows in flight in its EvalClient, trajectories waiting for the
  learner's ack, games abandoned;
- the learner's newest ``metrics.jsonl`` row (step, version, games, replay size) and the
  publishes its log says the server refused.

After ``--warmup-s`` the samples are compared in two windows of ``--window-s`` each, the first
after the warm-up and the last before the end, by their medians (one sample is noise):

- per process, RSS growth = (last-window median - first-window median) / first-window median;
  ``rss_flat`` when every process grew less than ``--rss-bound`` (5%);
- latency: last-window median of the probe's p99 / the first window's; ``latency_stable`` when
  it is at most ``--latency-bound``. The server's own percentiles are reported beside it, but
  8,192 requests are minutes at these rates, so they lag;
- leaks of tasks and futures, measured from outside (no process exposes task counts): RSS
  flat, the EvalClient's rows in flight never above ``games x mcts.leaves_in_flight`` per
  process (each game coroutine waits on at most that many leaves), trajectories pending an ack
  never above ``actors.max_outbox``; threads and fds per process (first and last window
  medians) and the server's clients with leases are reported. Not measured: the number of
  asyncio tasks and futures alive inside each process (see ``MEASURED``);
- errors: error replies to anything but a publish, dropped messages, games abandoned,
  trajectories rejected, probe errors; all must stay zero. Publishes the server refused
  (``Overloaded``: every resident version is latest, pinned or busy) are back-pressure that the
  learner retries: counted, not errors.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import json
import math
import re
import shlex
import signal
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from azserve.app.bench.common import cpu_seconds, load_cfg, percentiles, sleep_until
from azserve.app.bench.selfplay import Run, parse_status_lines
from azserve.app.supervisor import Child
from azserve.errors import AzserveError, ConfigError
from azserve.sync_client import SyncClient

_REFUSED = re.compile(r"publishing v\d+ to \S+ failed: (?P<reason>\w+)")
"""``learner.publisher``'s warning for each refused or failed publish attempt."""

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


# --- windows and verdicts --------------------------------------------------------------------


def window_medians(
    samples: Sequence[dict[str, Any]], pick: Callable[[dict[str, Any]], float | None]
) -> float | None:
    """Median of ``pick(sample)`` over the samples where it is known (None if none is)."""
    values = [v for s in samples if (v := pick(s)) is not None and not math.isnan(v)]
    return float(statistics.median(values)) if values else None


def picker(section: str, name: str, key: str) -> Callable[[dict[str, Any]], float | None]:
    """``sample[section][name][key]``, None where that part of the sample is missing."""

    def pick(sample: dict[str, Any]) -> float | None:
        part = sample[section].get(name)
        return part.get(key) if part else None

    return pick


def growth(first: float | None, last: float | None) -> float | None:
    """(last - first) / first, or None when either is unknown or first is 0."""
    if first is None or last is None or first == 0:
        return None
    return round((last - first) / first, 4)


def split_windows(
    samples: Sequence[dict[str, Any]], warmup_s: float, window_s: float
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The first window after the warm-up and the last window before the end."""
    soak = [s for s in samples if s["t_s"] >= warmup_s]
    if not soak:
        return [], []
    end = soak[-1]["t_s"]
    first = [s for s in soak if s["t_s"] <= warmup_s + window_s]
    last = [s for s in soak if s["t_s"] >= end - window_s]
    return first, last


def process_growth(
    first: Sequence[dict[str, Any]], last: Sequence[dict[str, Any]], names: Iterable[str]
) -> dict[str, dict[str, Any]]:
    """Per process: first/last window medians of RSS (MB), threads and fds, RSS growth."""
    out = {}
    for name in names:
        row: dict[str, Any] = {}
        for key in ("rss_mb", "threads", "fds"):
            pick = picker("processes", name, key)
            a, b = _round(window_medians(first, pick), 2), _round(window_medians(last, pick), 2)
            row[f"{key}_first"], row[f"{key}_last"] = a, b
        row["rss_growth"] = growth(row["rss_mb_first"], row["rss_mb_last"])
        out[name] = row
    return out


def latency_windows(
    first: Sequence[dict[str, Any]], last: Sequence[dict[str, Any]]
) -> dict[str, Any]:
    """Latency percentiles (ms), first- and last-window medians of the samples' values, and
    the last/first p99 ratio: ``probe`` (this window's requests, the verdict's) and
    ``server_window`` (the server's last 8,192 requests at each sample: it lags, and over a
    short soak it may span the warm-up)."""
    out: dict[str, Any] = {}
    for source, section in (("probe", "probe"), ("server_window", "server")):
        part: dict[str, Any] = {}
        for name, win in (("first", first), ("last", last)):
            part[name] = {
                q: _round(window_medians(win, picker(section, "latency_ms", q)))
                for q in ("p50", "p90", "p99")
            }
        a, b = part["first"]["p99"], part["last"]["p99"]
        part["p99_last_over_first"] = round(b / a, 3) if a and b is not None else None
        out[source] = part
    return out


def _round(x: float | None, digits: int = 3) -> float | None:
    return None if x is None else round(x, digits)


def actor_windows(
    first: Sequence[dict[str, Any]], last: Sequence[dict[str, Any]], names: Iterable[str]
) -> dict[str, dict[str, Any]]:
    """Per actor: first/last window medians of games/s, simulations/s and loop lag (ms)."""
    out = {}
    for name in names:
        row: dict[str, Any] = {}
        for key in ("games_per_s", "sims_per_s", "loop_lag_ms"):
            pick = picker("actors", name, key)
            row[f"{key}_first"] = window_medians(first, pick)
            row[f"{key}_last"] = window_medians(last, pick)
        out[name] = row
    return out


def throughput(soak: Sequence[dict[str, Any]], actor_names: Sequence[str]) -> dict[str, Any]:
    """Rates after the warm-up, all actors together: games/s from the actors' finished-game
    counters (games end in bursts, so a counter beats a rate), medians over the samples of
    simulations/s, actor evaluations/s and server rows/s, and the server's rows per actor
    evaluation (above 1: rows evaluated twice, e.g. requests the EvalClient resent after
    ``client.retry_after_s``)."""

    def total(key: str) -> float:
        per = [window_medians(soak, picker("actors", n, key)) for n in actor_names]
        return sum(v for v in per if v is not None)

    games = 0
    for n in actor_names:
        seen = [(s["t_s"], a["games"]) for s in soak if (a := s["actors"].get(n))]
        if len(seen) >= 2:
            games += seen[-1][1] - seen[0][1]
    span = soak[-1]["t_s"] - soak[0]["t_s"] if len(soak) >= 2 else 0.0
    rows = window_medians(soak, lambda s: s["server"]["rows_per_s"]) or 0.0
    evals = total("evals_per_s")
    return {
        "games_finished": games,
        "games_per_s": round(games / span, 3) if span > 0 else 0.0,
        "simulations_per_s": round(total("sims_per_s"), 1),
        "actor_evaluations_per_s": round(evals, 1),
        "server_rows_per_s": round(rows, 1),
        "server_rows_per_actor_evaluation": round(rows / evals, 3) if evals else None,
    }


def error_counts(samples: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Errors by where they were seen, totals at the end of the run. The server counts every
    error reply; the learner's log names its refused publishes (``Overloaded`` when every
    resident version is latest, pinned by a live game or busy: back-pressure, retried), so
    ``eval_error_replies`` = error replies to anything but a publish."""
    last = samples[-1]
    abandoned: dict[str, int] = {}
    for name in last["actors"]:
        newest = next((s["actors"][name] for s in reversed(samples) if s["actors"][name]), None)
        for reason, n in (newest or {}).get("abandoned", {}).items():
            abandoned[reason] = abandoned.get(reason, 0) + n
    refused = last["learner"].get("publish_refused", {})
    replies = last["server"]["errors"]
    return {
        "server_error_replies": replies,
        "publish_refused": refused,
        "eval_error_replies": max(0, replies - sum(refused.values())),
        "server_dropped": last["server"]["dropped"],
        "games_abandoned": abandoned,
        "trajectories_rejected": last["learner"].get("trajectories_rejected", 0),
        "probe_errors": last["probe"]["errors"],
    }


def verdicts(
    samples: Sequence[dict[str, Any]],
    procs: dict[str, dict[str, Any]],
    latency: dict[str, Any],
    bounds: dict[str, float],
) -> dict[str, Any]:
    """``rss_flat``, ``latency_stable`` (the probe's p99 ratio), ``in_flight_bounded``,
    ``pending_bounded``, ``errors_zero`` (refused publishes are back-pressure, not errors)
    and ``ok`` (all of them)."""
    growths = [p["rss_growth"] for p in procs.values()]
    ratio = latency["probe"]["p99_last_over_first"]
    actors = [a for s in samples for a in s["actors"].values() if a]
    in_flight = max((a["in_flight_max"] for a in actors), default=0)
    pending = max((a["pending_max"] for a in actors), default=0)
    errors = error_counts(samples)
    out = {
        "rss_flat": bool(growths) and all(g is not None and g < bounds["rss"] for g in growths),
        "latency_stable": ratio is not None and ratio <= bounds["latency"],
        "in_flight_max": in_flight,
        "in_flight_bound": int(bounds["in_flight"]),
        "in_flight_bounded": in_flight <= bounds["in_flight"],
        "pending_max": pending,
        "pending_bound": int(bounds["pending"]),
        "pending_bounded": pending <= bounds["pending"],
        "errors": errors,
        "errors_zero": not any(
            errors[k]
            for k in (
                "eval_error_replies",
                "server_dropped",
                "games_abandoned",
                "trajectories_rejected",
                "probe_errors",
            )
        ),
    }
    keys = ("rss_flat", "latency_stable", "in_flight_bounded", "pending_bounded", "errors_zero")
    out["ok"] = all(out[k] for k in keys)
    return out


# --- the run ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Timing:
    """The soak's clock, all in seconds."""

    duration_s: float
    warmup_s: float
    sample_s: float
    window_s: float

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> Timing:
        """Defaults: warm-up a quarter of the run (at most 5 minutes), a sample every
        1/120 of the run (1-10 s), windows a fifth of the time after the warm-up."""
        duration = 60.0 * args.minutes
        warmup = args.warmup_s if args.warmup_s is not None else min(300.0, 0.25 * duration)
        sample = args.sample_s if args.sample_s is not None else min(10.0, max(1.0, duration / 120))
        window = args.window_s if args.window_s is not None else (duration - warmup) / 5
        t = cls(duration, warmup, sample, window)
        t.check()
        return t

    def check(self) -> None:
        if self.sample_s <= 0 or self.window_s <= 0:
            raise ConfigError("--sample-s and --window-s must be positive")
        if self.window_s < 3 * self.sample_s:
            raise ConfigError(
                f"--window-s {self.window_s:g}: at least 3 samples of --sample-s {self.sample_s:g}"
            )
        if self.duration_s - self.warmup_s < 2 * self.window_s:
            raise ConfigError(
                f"--minutes {self.duration_s / 60:g} leaves {self.duration_s - self.warmup_s:g} s "
                f"after --warmup-s {self.warmup_s:g}: fewer than two windows of {self.window_s:g} s"
            )


def games_per_process(total: int, processes: int) -> int:
    """Game coroutines per actor process for ``total`` in all (at least 1 each)."""
    return max(1, round(total / max(1, processes)))


def soak(
    run: Run, metrics_path: Path, timing: Timing, log: Callable[[str], None] = lambda _: None
) -> list[dict[str, Any]]:
    """Start the run's children, sample them for ``timing.duration_s`` after the first
    evaluations, stop them (learner first, SIGINT, as ``train`` does). Returns the samples."""
    children = {
        "server": run.server.child,
        **({"learner": run.learner} if run.learner else {}),
        **{a.name: a for a in run.actors},
    }
    run.server.start()
    model = run.server.cfg.server.model
    client = SyncClient(run.server.endpoint, model, timeout_s=30.0)
    probe = Probe(run.server.endpoint, model, run.cfg.net.obs_shape)
    try:
        for child in children.values():
            if child is not run.server.child:
                child.start()

        def status() -> dict[str, Any]:
            st = client.status()
            st["t"] = time.monotonic()
            return st

        _wait_traffic(status, children.values(), timeout_s=180.0)
        probe.start()
        t0 = time.monotonic()
        sampler = Sampler(children, run.actors, status, metrics_path, probe, t0, timing.warmup_s)
        samples = []
        n = 1
        while True:
            sleep_until(t0 + n * timing.sample_s)
            _check_alive(children.values())
            samples.append(sampler.sample())
            log(_progress(samples[-1]))
            if samples[-1]["t_s"] >= timing.duration_s - 1e-6:
                break
            n += 1
    finally:
        probe.stop()
        client.close()
        _stop(run)
    return samples


def _wait_traffic(
    status: Callable[[], dict[str, Any]], children: Iterable[Child], timeout_s: float
) -> None:
    """Wait for the first evaluations: actor processes take seconds to import and connect."""
    deadline = time.monotonic() + timeout_s
    while status()["rows"] == 0:
        _check_alive(children)
        if time.monotonic() > deadline:
            raise AzserveError(f"no evaluation reached the server in {timeout_s:.0f} s")
        time.sleep(0.2)


def _check_alive(children: Iterable[Child]) -> None:
    for c in children:
        if c.poll() is not None:
            raise AzserveError(f"{c.name} exited with code {c.poll()}:\n{c.tail()}")


def _stop(run: Run) -> None:
    if run.learner is not None:  # SIGINT: it finishes its step and checkpoints
        run.learner.stop(timeout=60, sig=signal.SIGINT)
    for a in run.actors:
        a.stop(timeout=20)
    run.server.stop()


def _progress(s: dict[str, Any]) -> str:
    rss = " ".join(f"{n} {p['rss_mb']}" for n, p in s["processes"].items())
    lat = s["probe"]["latency_ms"]
    return (
        f"soak t={s['t_s']:.0f}s {s['phase']}: rss MB {rss}; rows/s {s['server']['rows_per_s']:.0f}"
        f" probe p50 {lat['p50']:.1f} p99 {lat['p99']:.1f} ms"
    )


def analyze(
    samples: list[dict[str, Any]], timing: Timing, bounds: dict[str, float]
) -> dict[str, Any]:
    """Windows, per-process growth, latency and actor stability, throughput and verdicts."""
    if not samples:
        raise AzserveError("soak: no samples")
    first, last = split_windows(samples, timing.warmup_s, timing.window_s)
    names = list(samples[0]["processes"])
    actor_names = list(samples[0]["actors"])
    procs = process_growth(first, last, names)
    latency = latency_windows(first, last)
    soak_samples = [s for s in samples if s["phase"] == "soak"]
    return {
        "windows": {
            "first_s": [first[0]["t_s"], first[-1]["t_s"]] if first else None,
            "last_s": [last[0]["t_s"], last[-1]["t_s"]] if last else None,
            "samples_first": len(first),
            "samples_last": len(last),
        },
        "processes": procs,
        "latency_ms": latency,
        "actors": actor_windows(first, last, actor_names),
        "throughput": throughput(soak_samples, actor_names),
        "verdicts": verdicts(samples, procs, latency, bounds),
    }


MEASURED = {
    "measured": [
        "RSS (VmRSS), CPU cores, threads and open fds of every process, from /proc",
        "a probe: one position every 50 ms (closed loop) on the latest version, its latency "
        "(send to reply, queue included) per sample interval; the latency verdict uses it",
        "the server's status: latency percentiles over its last 8,192 requests (receipt to "
        "reply), rows/s, requests/s, queued rows, error replies, dropped messages, resident "
        "versions, clients holding leases",
        "actor status lines: games/s, simulations/s, evaluations/s, loop lag, EvalClient rows "
        "in flight (bound: games x mcts.leaves_in_flight), trajectories pending an ack (bound: "
        "actors.max_outbox), games abandoned by reason",
        "learner: metrics.jsonl (step, version, games, replay size, trajectories rejected) and "
        "its log's refused publishes by reason",
    ],
    "not_measured": [
        "asyncio tasks and futures alive inside each process (no process exposes a count): a "
        "leak of them shows only as RSS growth, or as rows in flight above the bound",
        "the server's per-client reply queues, except through its RSS",
        "the actors' own view of latency (EvalClient round trips, including coalescing and "
        "resends): not in their status line",
        "requests the EvalClient resent (not in the status line): they show only as server "
        "rows per actor evaluation above 1",
    ],
}


def main(args: argparse.Namespace) -> dict[str, Any]:
    timing = Timing.from_args(args)
    cfg = load_cfg(args.config, args.overrides)
    per = games_per_process(args.games, cfg.actors.processes)
    overrides = [*args.overrides, f"actors.games={per}"]
    with _workdir(args.keep_dir) as tmp:
        ns = argparse.Namespace(config=args.config, learner=True, duration=timing.duration_s)
        work = tmp / "run"
        run = Run(ns, overrides, work)  # the learner's run dir is WORK/learner-run
        bounds = {
            "rss": args.rss_bound,
            "latency": args.latency_bound,
            "in_flight": per * max(1, run.cfg.mcts.leaves_in_flight),
            "pending": run.cfg.actors.max_outbox,
        }
        samples = soak(run, work / "learner-run" / "metrics.jsonl", timing, log=_stderr)
    result: dict[str, Any] = {
        "bench": "soak",
        "config": args.config,
        "overrides": overrides,
        "command": _command(),
        "minutes": args.minutes,
        "warmup_s": timing.warmup_s,
        "sample_s": timing.sample_s,
        "window_s": timing.window_s,
        "actor_processes": run.cfg.actors.processes,
        "games_per_process": per,
        "games_total": per * run.cfg.actors.processes,
        "num_simulations": run.cfg.mcts.num_simulations,
        "bounds": {"rss_growth": args.rss_bound, "latency_p99_ratio": args.latency_bound},
        **analyze(samples, timing, bounds),
        **MEASURED,
        "samples": samples,
    }
    if args.plot:
        plot(samples, timing, args.plot)
        result["plot"] = args.plot
    return result


@contextlib.contextmanager
def _workdir(keep: str | None) -> Iterator[Path]:
    """``keep`` (created; logs and the learner's run stay there), else a temporary directory.
    ipc socket paths must stay short (about 100 bytes), so keep it near the root."""
    if keep:
        path = Path(keep).resolve()
        path.mkdir(parents=True, exist_ok=True)
        yield path
        return
    with tempfile.TemporaryDirectory(prefix="azserve-bench-soak-") as tmp:
        yield Path(tmp)


def _command() -> str:
    return "azserve " + " ".join(shlex.quote(a) for a in sys.argv[1:])


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def plot(samples: Sequence[dict[str, Any]], timing: Timing, path: str) -> None:
    """PNG over time: RSS (MB) per process; latency p50/p99 (ms), the probe's and the server
    window's; the server's queued rows and each actor's rows in flight. The warm-up and the two
    windows are shaded."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = [s["t_s"] for s in samples]
    fig, (ax_rss, ax_lat, ax_q) = plt.subplots(3, 1, figsize=(9, 9), sharex=True)
    for name in samples[0]["processes"]:
        ax_rss.plot(t, [s["processes"][name]["rss_mb"] for s in samples], label=name)
    ax_rss.set_ylabel("RSS (MB)")
    ax_rss.legend(loc="best", fontsize="small")
    for q, color in (("p50", "tab:blue"), ("p99", "tab:red")):
        ax_lat.plot(
            t, [s["probe"]["latency_ms"][q] for s in samples], color=color, label=f"probe {q}"
        )
        ax_lat.plot(
            t,
            [s["server"]["latency_ms"].get(q) for s in samples],
            color=color,
            linestyle="--",
            alpha=0.6,
            label=f"server window {q}",
        )
    ax_lat.set_ylabel("latency (ms)")
    ax_lat.legend(loc="best", fontsize="small")
    ax_q.plot(t, [s["server"]["queued_rows"] for s in samples], label="server queued rows")
    for name in samples[0]["actors"]:
        ax_q.plot(
            t,
            [(s["actors"][name] or {}).get("in_flight_max") for s in samples],
            label=f"{name} rows in flight",
        )
    ax_q.set_ylabel("rows")
    ax_q.set_xlabel("time since first evaluation (s)")
    ax_q.legend(loc="best", fontsize="small")
    first, last = split_windows(samples, timing.warmup_s, timing.window_s)
    for ax in (ax_rss, ax_lat, ax_q):
        ax.axvspan(0, timing.warmup_s, color="0.9", label="_warm-up")
        for win in (first, last):
            if win:
                ax.axvspan(win[0]["t_s"], win[-1]["t_s"], color="tab:green", alpha=0.12)
        ax.grid(alpha=0.3)
    fig.suptitle("azserve bench soak (warm-up grey, compared windows green)")
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
