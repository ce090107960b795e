"""``azserve train``'s autopilot, its learner side: the reuse target and the core split.

**The reuse target.** ``replay.reuse_target``, the samples trained per sample made that the
learner's rate limiter (``learner.replay``) holds training to, within ``autopilot.reuse_min``
and ``autopilot.reuse_max``. Set too low for the machine, the learner idles waiting for credit
while the positions it has could teach more; set too high, the learner cannot keep up: the
reuse it reaches falls short of the target, credit piles up, and what it does train on is older
(and on a shared CPU its steps take the cores the inference server would use). So the rule
moves the target by what the learner measures over each ``autopilot.reuse_interval_s``:

- the learner **idles waiting for credit** (busy below ``autopilot.learner_busy_low``, the
  replay past ``replay.min_size``, positions arriving): the target rises to what it could
  train at the middle of the band, ``goal x reuse / busy`` (its capacity, from the reuse it
  reached and the share of the time that took); but while the server is the bottleneck (busy
  at or above ``autopilot.busy_high``) on the learner's own CPU cores, no higher than the
  configured target: there the learner's idle time is the server's, and a raise past the
  config's split takes it from self-play, while a target lowered when something else held the
  cores comes back;
- the learner **is the bottleneck** (busy at or above ``autopilot.learner_busy_high``) and its
  reuse falls short of the target (below ``BOUND`` of it: the limiter never holds it back): the
  target falls towards the same ``goal x reuse / busy``;
- anything else is a **hold**: busy within the band, busy at its target (neither side idles),
  or busy above it (spending the credit held, as after a lower). The band, the ``BOUND``
  margin and a step of at most ``autopilot.reuse_step`` a decision keep a noisy 2-core machine
  from see-sawing; aiming at the middle of the band lands the next interval inside it.

**The core split.** With the server following the idle cores (``train.server_threads = 0``),
the learner's torch threads decide how the cores are shared: one more for the learner when it
is the bottleneck (busy at or above ``learner_busy_high``) while the server has room (busy
below ``busy_low``), one back when the server is (busy at or above ``busy_high``) while the
learner idles (below ``learner_busy_low``), within 1 and ``autopilot.max_learner_threads`` (0:
the cores less one). A thread moved holds the reuse target for that interval: the learner's
speed, its capacity, has just changed.

**From what.** Two of the learner's rows of ``metrics.jsonl``, which ``azserve train`` reads
every half second for its table: the differences of the counters the learner writes in each
(``train_s``, ``wait_s``: its busy fraction; ``replay_sampled``, ``replay_inserted``: the reuse
it reached and the positions per second; ``step``) over the rows' ``time``; the servers' busy
fraction is the mean of the rows' ``inference_busy`` over the interval.

**How the learner hears it.** One file each (``replay.reuse_file``, ``learner.threads_file``, in
the run's private socket directory, ``learner.livefile``), written atomically; the learner reads
them at start and once a second: its rate limiter takes a new target at once
(``Replay.set_reuse_target``), its step thread a new thread count before its next step.
"""

from __future__ import annotations

import logging
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from azserve.config.schema import AutopilotConfig, Config
from learner.livefile import write_number
from learner.runlog import append_event

log = logging.getLogger("azserve.run.autopilot")

EVENT = "autopilot_reuse"
"""The ``event`` of the reuse controller's rows in ``metrics.jsonl``."""
THREADS_EVENT = "autopilot_threads"
"""The ``event`` of the core split's rows in ``metrics.jsonl``."""

BOUND = 0.9
"""Reuse reached at or above this share of the target: the rate limiter holds the learner back
(below it, with the learner busy, credit piles up)."""
MIN_CHANGE = 0.05
"""A move of less than this share of the target is a hold."""


@dataclass(frozen=True)
class LearnerMeasure:
    """The learner over one interval, from two of its metrics rows."""

    seconds: float
    busy: float
    """Share of its training-or-waiting time spent training (the learner's own definition)."""
    reuse: float
    """Samples trained per position inserted over the interval."""
    positions_per_s: float
    """Positions inserted into the replay per second."""
    samples_per_s: float
    steps_per_s: float
    replay_size: int
    """Fresh positions at the end of the interval."""
    inference_busy: float = 0.0
    """As the latest row has it (the servers' busy fraction)."""
    bottleneck: str = ""
    """As the latest row names it (``azserve.metrics.bottleneck``)."""


COUNTERS = ("time", "step", "train_s", "wait_s", "replay_sampled", "replay_inserted")
"""The keys of a learner row the measure is the difference of."""


def learner_measure(
    before: dict[str, Any], after: dict[str, Any], inference_busy: float | None = None
) -> LearnerMeasure | None:
    """The interval between two learner rows, or None when it cannot be measured: a row
    without the counters, no time between them, or counters that went back (a restarted
    learner counts from zero again). ``inference_busy``: the servers' busy fraction over the
    interval (default: the latest row's)."""
    if any(k not in before or k not in after for k in COUNTERS):
        return None
    d = {k: float(after[k]) - float(before[k]) for k in COUNTERS}
    if d["time"] <= 0 or any(v < 0 for v in d.values()):
        return None
    worked = d["train_s"] + d["wait_s"]
    seconds = d["time"]
    return LearnerMeasure(
        seconds=seconds,
        busy=min(1.0, d["train_s"] / worked) if worked > 0 else 0.0,
        reuse=d["replay_sampled"] / d["replay_inserted"] if d["replay_inserted"] else 0.0,
        positions_per_s=d["replay_inserted"] / seconds,
        samples_per_s=d["replay_sampled"] / seconds,
        steps_per_s=d["step"] / seconds,
        replay_size=int(after.get("replay_size", 0)),
        inference_busy=(
            float(after.get("inference_busy", 0.0)) if inference_busy is None else inference_busy
        ),
        bottleneck=str(after.get("bottleneck", "")),
    )


class ReuseController:
    """The rule, free of I/O: ``target`` moved by ``decide``, within ``[reuse_min,
    reuse_max]``. ``min_size``: the replay's ``min_size`` (below it the learner waits for data,
    not for credit)."""

    def __init__(
        self, cfg: AutopilotConfig, target: float, min_size: int, shared_cores: bool = False
    ) -> None:
        self.cfg = cfg
        self.target = min(cfg.reuse_max, max(cfg.reuse_min, target))
        self.configured = self.target
        """The config's target (within the bounds): on shared cores the most a raise goes to
        while the server is the bottleneck."""
        self.min_size = min_size
        self.shared_cores = shared_cores
        """The learner trains on the CPU cores the inference server computes on: time the
        learner idles is the server's, so a server that is the bottleneck stops a raise past
        the configured target."""

    @property
    def goal(self) -> float:
        """The busy fraction a move aims at: the middle of the band."""
        return (self.cfg.learner_busy_low + self.cfg.learner_busy_high) / 2

    def capacity(self, m: LearnerMeasure) -> float | None:
        """The reuse the learner would reach at ``goal`` busy with the positions it is sent
        (None: it did not train, so its speed is unknown)."""
        return self.goal * m.reuse / m.busy if m.busy > 0 and m.reuse > 0 else None

    def decide(self, m: LearnerMeasure) -> tuple[str, str]:
        """``(action, reason)`` for one interval's measure: ``raise``, ``lower`` or ``hold``;
        ``target`` moves with it."""
        c, t = self.cfg, self.target
        busy = f"learner busy {m.busy:.0%}"
        if m.positions_per_s <= 0:
            return "hold", f"{busy}, no positions arrived"
        if m.replay_size < self.min_size:
            return "hold", f"{busy}, replay {m.replay_size} below min_size {self.min_size}"
        cap = self.capacity(m)
        if m.busy < c.learner_busy_low:
            # On shared cores a saturated server caps a raise at the configured target: past
            # it, the learner's idle time is the server's (go9: raises to 8 at server busy
            # 96-99% cost 44% of the positions); up to it, a target lowered while something
            # else held the cores comes back (shogi: lowered 4 -> 1.19 while a test suite ran
            # beside the run, and held there for the rest of it).
            # The server counts as busy from autopilot.busy_low (below it, it waits for rows):
            # at busy_high, go9 raised to 8 at server busy 93% and spent its cores on steps
            # that aged every game's positions past replay.max_policy_lag.
            most = c.reuse_max
            if self.shared_cores and m.inference_busy >= c.busy_low:
                most = min(most, self.configured)
                if t >= most:
                    return "hold", (
                        f"{busy} < {c.learner_busy_low:.0%}, but the server on the same cores is "
                        f"busy ({m.inference_busy:.0%} >= {c.busy_low:.0%}): the learner's idle "
                        "time makes games"
                    )
            if t >= most:
                return "hold", f"{busy} < {c.learner_busy_low:.0%}, at reuse_max {c.reuse_max:g}"
            want = most if cap is None else cap
            new = min(most, t * c.reuse_step, want)
            if new < t * (1 + MIN_CHANGE):
                return "hold", f"{busy}, reuse {m.reuse:.2f} far below the target: not for credit"
            self.target = round(new, 2)
            return "raise", (
                f"{busy} < {c.learner_busy_low:.0%}, waiting for credit at reuse {m.reuse:.2f}: "
                f"it could train {'more' if cap is None else f'{cap:.2f} at {self.goal:.0%}'}"
            )
        if m.busy >= c.learner_busy_high and m.reuse < BOUND * t:
            if t <= c.reuse_min:
                return "hold", f"{busy}, behind its target, at reuse_min {c.reuse_min:g}"
            assert cap is not None  # busy and positions in: it trained on them
            new = max(c.reuse_min, t / c.reuse_step, cap)
            if new > t * (1 - MIN_CHANGE):
                return "hold", f"{busy}, reuse {m.reuse:.2f} near the target"
            self.target = round(new, 2)
            return "lower", (
                f"{busy} >= {c.learner_busy_high:.0%}, the bottleneck: reuse {m.reuse:.2f} < "
                f"target {t:g}, credit piles up on aging positions; it keeps up with "
                f"{cap:.2f} at {self.goal:.0%}"
            )
        if m.busy >= c.learner_busy_high and m.reuse > (2 - BOUND) * t:
            # After a lower: the credit held (up to target x replay size) takes a while to go.
            return "hold", f"{busy}, spending the credit held (reuse {m.reuse:.2f} > {t:g})"
        if m.busy >= c.learner_busy_high:
            return "hold", f"{busy} at its target: neither side idles"
        return "hold", f"{busy}, within the band"


class ThreadsController:
    """The core split, free of I/O: the learner's torch ``threads`` moved by ``decide``, one at
    a time, within ``[1, most]``; the server, following the idle cores, takes the rest."""

    def __init__(self, cfg: AutopilotConfig, threads: int, most: int) -> None:
        self.cfg = cfg
        self.threads = threads
        self.most = max(1, most)

    def decide(self, m: LearnerMeasure) -> tuple[str, str]:
        """``(action, reason)``: ``raise`` (a core to the learner), ``lower`` (one back to the
        server) or ``hold``; ``threads`` moves with it."""
        c = self.cfg
        sides = f"learner busy {m.busy:.0%}, server busy {m.inference_busy:.0%}"
        if m.busy >= c.learner_busy_high and m.inference_busy < c.busy_low:
            if self.threads >= self.most:
                most = f"{self.most} thread{'s' if self.most > 1 else ''}"
                return "hold", f"{sides}: the learner is the bottleneck, at its most, {most}"
            self.threads += 1
            return "raise", (
                f"{sides}: the learner is the bottleneck (>= {c.learner_busy_high:.0%}) and the "
                f"server has room (< {c.busy_low:.0%}): a core to the learner"
            )
        if m.inference_busy >= c.busy_high and m.busy < c.learner_busy_low:
            if self.threads <= 1:
                return "hold", f"{sides}: the server is the bottleneck, the learner at 1 thread"
            self.threads -= 1
            return "lower", (
                f"{sides}: the server is the bottleneck (>= {c.busy_high:.0%}) and the learner "
                f"idles (< {c.learner_busy_low:.0%}): a core back to the server"
            )
        return "hold", sides


def spare_cores() -> int:
    """The cores this process may run on, less one left to the server."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    return max(1, cores - 1)


def shared_cores(cfg: Config) -> bool:
    """Whether the learner and the inference server compute on the same CPU cores, as in
    ``azserve train`` when both devices resolve to the CPU (the torch backend; a Triton server
    or the synthetic backend's cores are not counted)."""
    from azserve.model.device import resolve_device

    if cfg.backend.kind != "torch":
        return False
    learner = resolve_device(cfg.trainer.device, "trainer.device")
    server = resolve_device(cfg.backend.device, "backend.device")
    return learner.type == "cpu" and server.type == "cpu"


class LearnerPilot:
    """The learner side's shell in ``azserve train``: fed the learner's latest metrics row each
    tick, it measures each interval, asks the core split (``learner.threads_file`` set) and
    then the reuse controller (``replay.reuse_file`` set), and writes each decision to its file,
    the log and ``metrics.jsonl``."""

    def __init__(self, cfg: Config, metrics_path: Path) -> None:
        ap = cfg.autopilot
        self.cfg = ap
        self.metrics_path = metrics_path
        self.reuse_file = cfg.replay.reuse_file
        self.threads_file = cfg.learner.threads_file
        self.reuse = ReuseController(
            ap, cfg.replay.reuse_target, cfg.replay.min_size, shared_cores=shared_cores(cfg)
        )
        most = ap.max_learner_threads or spare_cores()
        self.split = ThreadsController(ap, cfg.learner.threads, most)
        self.decisions = 0
        self.last = self._words()
        """The latest decisions in words, for the status table."""
        self._before: dict[str, Any] | None = None
        self._busy: dict[float, float] = {}
        """The servers' busy fraction of each learner row seen in the interval, by its time."""

    @property
    def target(self) -> float:
        return self.reuse.target

    def summary(self) -> dict[str, Any]:
        """Where the learner side left the run, for summary.json's ``"autopilot"``."""
        out: dict[str, Any] = {"learner_decisions": self.decisions}
        if self.reuse_file:
            out["reuse_target"] = self.reuse.target
        if self.threads_file:
            out["learner_threads"] = self.split.threads
        return out

    def tick(self, row: dict[str, Any] | None) -> str | None:
        """One supervisor tick with the learner's latest metrics row (None: none yet). One
        decision per ``reuse_interval_s`` of the rows' time; returns its action (the core
        split's when it moved a thread, else the reuse controller's), if any."""
        if row is None:
            return None
        now = float(row.get("time", 0))
        before = self._before
        if (
            before is None
            or now < float(before.get("time", 0))
            # The first interval starts once the replay may be sampled: waiting for min_size
            # is not waiting for credit.
            or int(before.get("replay_size", 0)) < self.reuse.min_size
        ):
            self._before, self._busy = row, {}
            return None
        self._busy[now] = float(row.get("inference_busy", 0.0))
        if now - float(before.get("time", 0)) < self.cfg.reuse_interval_s:
            return None
        busy = sum(self._busy.values()) / len(self._busy)
        self._before, self._busy = row, {}
        m = learner_measure(before, row, busy)
        if m is None:  # a restarted learner, or rows of an older one: start over from here
            return None
        if self.threads_file:
            threads = self.split.threads
            action, reason = self.split.decide(m)
            self._record_threads(action, reason, threads, m)
            if action != "hold" or not self.reuse_file:
                return action  # the learner's speed changes: the reuse target waits
        reuse = self.reuse.target
        action, reason = self.reuse.decide(m)
        self._record_reuse(action, reason, reuse, m)
        return action

    def _words(self, action: str = "", reason: str = "") -> str:
        what = [f"reuse {self.reuse.target:g}"] if self.reuse_file else []
        what += [f"learner threads {self.split.threads}"] if self.threads_file else []
        return ", ".join(what) + (f" ({action}: {reason})" if action else "")

    def _record_threads(self, action: str, reason: str, before: int, m: LearnerMeasure) -> None:
        after = self.split.threads
        if after != before:
            self._write(self.threads_file, after)
        self._note(
            THREADS_EVENT,
            action,
            reason,
            f"learner threads {before} -> {after}",
            {"threads_before": before, "threads": after, "most_threads": self.split.most},
            m,
        )

    def _record_reuse(self, action: str, reason: str, before: float, m: LearnerMeasure) -> None:
        after = self.reuse.target
        if after != before:
            self._write(self.reuse_file, after)
        self._note(
            EVENT,
            action,
            reason,
            f"reuse {before:g} -> {after:g}",
            {"reuse_before": before, "reuse_target": after, "capacity": self.reuse.capacity(m)},
            m,
        )

    def _write(self, path: str, number: float) -> None:
        try:
            write_number(path, number)
        except OSError as exc:  # the learner keeps what it has; the log says why
            log.warning("autopilot: %s not written (%s)", path, exc)

    def _note(
        self,
        event: str,
        action: str,
        reason: str,
        change: str,
        fields: dict[str, Any],
        m: LearnerMeasure,
    ) -> None:
        """One decision to the log (holds at DEBUG), the status table and metrics.jsonl."""
        self.decisions += 1
        self.last = self._words(action, reason)
        log.log(
            logging.DEBUG if action == "hold" else logging.INFO,
            "autopilot: %s %s (%s); learner busy %.1f%% steps/s %.2f reuse %.2f, "
            "positions/s %.1f, inference busy %.0f%%, bottleneck %s",
            action,
            change,
            reason,
            100 * m.busy,
            m.steps_per_s,
            m.reuse,
            m.positions_per_s,
            100 * m.inference_busy,
            m.bottleneck or "-",
        )
        row = {
            "action": action,
            "reason": reason,
            **fields,
            **{
                k if k in ("inference_busy", "bottleneck") else f"learner_{k}": v
                for k, v in asdict(m).items()
            },
        }
        try:
            append_event(self.metrics_path, event, row)
        except OSError as exc:  # a full disk must not stop the run: the log has it
            log.warning("autopilot: no metrics row (%s)", exc)
