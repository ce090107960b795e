"""How ``azserve bench soak`` judges its samples: the two compared windows (``Timing``), their
medians, per-process RSS growth, latency and actor stability, throughput, errors, verdicts."""

from __future__ import annotations

import argparse
import math
import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from azserve.errors import AzserveError, ConfigError


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
    """Per actor: first/last window medians of games/s, simulations/s, loop lag (ms), and the
    MB its evaluation cache and its search trees hold."""
    out = {}
    for name in names:
        row: dict[str, Any] = {}
        for key in ("games_per_s", "sims_per_s", "loop_lag_ms", "cache_mb", "tree_mb"):
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
