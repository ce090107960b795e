"""``azserve train``: server, actor processes and learner on one machine, supervised.

Children talk over ipc endpoints in a private temp directory. The supervisor shows a live
status table, stops at the budget (minutes, steps or games) or on Ctrl-C, stopping the learner
first so that it leaves a resumable checkpoint, evaluates checkpoints as they appear, and writes
``report.png``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import shutil
import signal
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from azserve.auth import AuthConfig
from azserve.config.schema import Config, replace, save_config
from azserve.errors import AzserveError, ConfigError
from azserve.metrics import RateMeter
from azserve.run.actor_lives import KILLED_IN_PLAY, actor_lives, killed_in_play
from azserve.run.autopilot import Autopilot
from azserve.run.autopilot_learner import LearnerPilot
from azserve.run.display import Display, Row, bar, human, pct
from azserve.run.evaluations import RunEvaluations, periodic_deadline
from azserve.run.ladder_rounds import LadderRounds, rating_text
from azserve.run.supervisor import Child, azserve_argv, child_env
from azserve.sync_client import SyncClient
from learner.checkpoint import latest_checkpoint, load_checkpoint
from learner.runlog import read_metrics

log = logging.getLogger("azserve.run.train")

CONFIG_ERROR_EXIT = 2
"""The CLI's exit code for a config error (``azserve.cli.main``): never worth a restart."""


@dataclass
class Snapshot:
    """What the status table shows, gathered from the learner's log and the server's status."""

    elapsed_s: float = 0.0
    step: int = 0
    version: int = 0
    games: int = 0
    positions: int = 0
    moves: int = 0
    loss: float = float("nan")
    reuse: float = 0.0
    lag: float = 0.0
    positions_per_s: float = 0.0
    steps_per_s: float = 0.0
    rows_per_s: float = 0.0
    mean_batch: float = 0.0
    inference_busy: float = 0.0
    learner_busy: float = 0.0
    bottleneck: str = "actor"
    """As the learner's latest metrics row names it (``azserve.metrics.bottleneck``), so the
    table and metrics.jsonl never disagree."""


def resolve_for_run(cfg: Config, sock_dir: Path) -> Config:
    """The run's config: private ipc endpoints, per-process torch threads, the step budget
    handed to the learner (which stops exactly there; the supervisor only sees logged rows), and
    with the autopilot on, the games file the actors follow (``azserve.run.autopilot``) and the
    reuse and threads files the learner follows (``azserve.run.autopilot_learner``)."""
    # The two binds are the truth; the endpoints that follow them are cleared so they derive.
    ap, t = cfg.autopilot, cfg.train
    learner: dict[str, Any] = {
        "bind": f"ipc://{sock_dir}/learner",
        "servers": (),
        "threads": t.learner_threads,
        # The cores the learner leaves go to a server that follows the idle cores.
        "threads_file": (
            str(sock_dir / "learner-threads")
            if ap.enabled and ap.threads and not t.server_threads and t.learner_threads
            else ""
        ),
    }
    if cfg.train.steps:
        learner["max_steps"] = cfg.train.steps
    return replace(
        cfg,
        server={"bind": f"ipc://{sock_dir}/server"},
        client={"server": ""},
        backend=server_threads(cfg.train.server_threads),
        actors={
            "learner": "",
            "sink": "learner",
            "games_file": str(sock_dir / "games") if cfg.autopilot.enabled else "",
        },
        replay={"reuse_file": str(sock_dir / "reuse") if ap.enabled and ap.reuse else ""},
        learner=learner,
    )


def with_run_clock(cfg: Config, now: float) -> Config:
    """The time budget written into the learner's config for ``trainer.lr_schedule = "run"``
    (which anneals by the clock over its end), counted from ``now``; a resumed run anneals
    over its own new budget. Other schedules are left as they are."""
    if cfg.trainer.lr_schedule != "run":
        return cfg
    if not cfg.train.minutes:
        raise ConfigError(
            "trainer.lr_schedule: 'run' anneals over the time budget, and train.minutes is 0 "
            "(no time budget): set train.minutes (or --minutes), or use 'cosine' with "
            "trainer.total_steps"
        )
    return replace(
        cfg, trainer={"run_start_unix": now, "run_end_unix": now + cfg.train.minutes * 60}
    )


def server_threads(threads: int) -> dict[str, Any]:
    """The server's thread settings for ``train.server_threads``: a fixed count, or for 0 one
    thread to start with that follows the idle cores (``backend.torch.auto_threads``)."""
    if threads:
        return {"threads": threads, "torch": {"auto_threads": False}}
    return {"threads": 1, "torch": {"auto_threads": True}}


class Training:
    """One run in ``run_dir``."""

    def __init__(self, cfg: Config, run_dir: Path, resume: bool, progress: bool) -> None:
        self.run_dir = run_dir
        self.sock_dir = Path(tempfile.mkdtemp(prefix="azserve-"))
        self.cfg = self._resolve(cfg)
        self.resume = resume
        self.progress = progress and sys.stdout.isatty()
        self.display = Display(live=self.progress)
        self.children: list[Child] = []
        self.t0 = time.monotonic()
        self.started = time.time()
        self.snap = Snapshot()
        self._rates = RateMeter()
        self._stop_reason = ""
        self._server_rows: dict[str, float] = {}
        self._evals = RunEvaluations(self.cfg, run_dir, self.display.note)
        self._server_status: dict[str, dict[str, Any]] = {}
        self._ladder = LadderRounds(self.cfg, run_dir)
        self._autopilot: Autopilot | None = None
        self._learner_pilot: LearnerPilot | None = None

    def _resolve(self, cfg: Config) -> Config:
        """The config the supervisor works from (the learner's, where roles differ)."""
        return resolve_for_run(cfg, self.sock_dir)

    def _servers(self) -> list[tuple[str, str]]:
        """(child name, endpoint) of every inference server, for the status table."""
        return [("server", self.cfg.server.bind)]

    def _status_auth(self) -> AuthConfig | None:
        """The keys the supervisor's status queries use (None: the servers are local)."""
        return None

    def _extra_rows(self) -> list[Row]:
        """More rows for the status display (per server and per host in a cluster run)."""
        return []

    # --- children ------------------------------------------------------------------------------

    def _build_children(self) -> None:
        cfg_path = save_config(self.cfg, self.run_dir / "config.toml")
        logs = self.run_dir / "logs"
        # The server starts (and restarts) on the newest readable checkpoint's weights, found
        # when it starts: no path fixed now that retention could delete, and no game of a
        # resumed run begins on random weights.
        serve = [
            "serve",
            "--config",
            str(cfg_path),
            "--checkpoint-dir",
            str(self.run_dir / self.cfg.checkpoint.dir),
        ]
        # The learner always resumes from its newest readable checkpoint (none: it starts
        # fresh), so a restarted learner continues the run and never reuses a version number.
        learn = ["learn", "--config", str(cfg_path), "--run-dir", str(self.run_dir), "--resume"]
        self.children = [
            Child(
                "server",
                azserve_argv(*serve),
                logs / "server.log",
                child_env(self.cfg.train.server_threads),
            ),
            Child(
                "learner",
                azserve_argv(*learn),
                logs / "learner.log",
                child_env(self.cfg.train.learner_threads),
            ),
        ]
        for i in range(self.cfg.actors.processes):
            argv = azserve_argv("actors", "--config", str(cfg_path), "--id", f"actor-{i}")
            self.children.append(Child(f"actor-{i}", argv, logs / f"actor-{i}.log", child_env(1)))

    def run(self) -> int:
        try:
            return self._run()
        finally:  # whatever happened, the private socket directory goes
            shutil.rmtree(self.sock_dir, ignore_errors=True)

    def _run(self) -> int:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        if not self.resume and self._holds_run():
            raise AzserveError(
                f"{self.run_dir} already holds a run: pass --resume to continue it, or pick a new --run-dir"
            )
        self.cfg = with_run_clock(self.cfg, time.time())  # the budget counts from about now
        self._build_children()
        if self.cfg.autopilot.enabled and self.cfg.actors.games_file:
            # It sizes the first games at the server's first status reply; the actors wait
            # for that number before their first game.
            self._autopilot = Autopilot(
                self.cfg, Path(self.cfg.actors.games_file), self.run_dir / "metrics.jsonl"
            )
        if self.cfg.autopilot.enabled and (
            self.cfg.replay.reuse_file or self.cfg.learner.threads_file
        ):
            # It moves the learner's reuse target and threads from the learner's rows.
            self._learner_pilot = LearnerPilot(self.cfg, self.run_dir / "metrics.jsonl")
        # server first (actors wait for it), then the learner, then the actors
        for child in self.children:
            child.start()
        self.t0 = time.monotonic()  # the budget counts from here, not from placing processes
        self.display.start()
        self.display.note(
            f"azserve train: {self.cfg.game}, run dir {self.run_dir}, logs in {self.run_dir / 'logs'}"
        )
        if self.resume:
            self._say_resumed()
        interrupted = False
        previous = signal.signal(
            signal.SIGINT, lambda *_: self._request_stop("interrupted (Ctrl-C)")
        )
        previous_term = signal.signal(signal.SIGTERM, lambda *_: self._request_stop("terminated"))
        code = 0
        try:
            code = self._supervise()
        finally:
            self.display.note(f"stopping ({self._stop_reason or 'error'})...")
            # Handlers stay until the children are stopped: children run in their own sessions,
            # so a second Ctrl-C that interrupted the shutdown would leave them running.
            self._shutdown()
            signal.signal(signal.SIGINT, previous)
            signal.signal(signal.SIGTERM, previous_term)
            interrupted = self._stop_reason.startswith("interrupted")
            self.display.close()  # its last frame stays above what follows
        if code == CONFIG_ERROR_EXIT:
            # The run did not run: no evaluation, report or summary.json (which would mark it
            # finished, for compare, or replace a resumed run's own).
            self.display.note(f"stopped: {self._stop_reason}; fix the config and run again")
            return code
        if interrupted:
            self.display.note("Ctrl-C again stops the final evaluation's games where they are")
        # Python's own Ctrl-C for the final evaluation, whatever this process was started with
        # (a background job, or a pytest-xdist worker's child, starts with SIGINT ignored):
        # asyncio.run turns it into its games' cancellation.
        signal.signal(signal.SIGINT, signal.default_int_handler)
        try:
            self._evals.final()
        except (KeyboardInterrupt, asyncio.CancelledError):
            # What the run made is still reported and accounted for (summary.json) below.
            interrupted = True
            self.display.note("final evaluation stopped (Ctrl-C): no score of the last checkpoint")
        finally:
            signal.signal(signal.SIGINT, previous)
        self._evals.close()
        self._report()
        self.display.note(self.write_summary())
        self.display.note(f"stopped: {self._stop_reason}; outputs in {self.run_dir}")
        return 130 if interrupted and code == 0 else code

    def write_summary(self) -> str:
        """One line of accounting (also written as ``summary.json``): games finished (actors),
        stored (learner), abandoned by reason, trajectories not delivered, duplicates dropped,
        restarts per role."""
        finished = undelivered = 0
        abandoned: dict[str, int] = {}
        for child in self.children:
            if not child.name.startswith("actor"):
                continue
            # A process that died wrote no summary: its games in play are lost (counted), and
            # its finished ones are those of its last status line (stored or not: the journal
            # knows; azserve bench chaos reads it).
            lives = actor_lives(child.log_since_start())
            for life in lives:
                finished += life.finished
                undelivered += life.undelivered
                for reason, n in life.abandoned.items():
                    abandoned[reason] = abandoned.get(reason, 0) + n
            if lost := killed_in_play(lives):
                abandoned[KILLED_IN_PLAY] = abandoned.get(KILLED_IN_PLAY, 0) + lost
        rows = read_metrics(self.run_dir / "metrics.jsonl") if self._metrics_exist() else []
        last = rows[-1] if rows else {}
        stored = max(int(last.get("games", 0)), self._games_in_last_checkpoint())
        restarts = {c.name: c.restarts for c in self.children if c.restarts}
        # The same accounting, machine-readable, beside the run's other outputs.
        (self.run_dir / "summary.json").write_text(
            json.dumps(
                {
                    "stop_reason": self._stop_reason,
                    "started": self.started,
                    "games_finished": finished,
                    "games_stored": stored,
                    "games_abandoned": abandoned,
                    "trajectories_undelivered": undelivered,
                    "duplicates_dropped": last.get("duplicates_dropped", 0),
                    "restarts": {c.name: c.restarts for c in self.children},
                    **self._autopilot_summary(),
                    **(
                        {
                            "rating": self._ladder.latest(),
                            "ladder_rounds": self._ladder.rounds,
                            "ladder_busy_s": round(self._ladder.busy_s, 1),
                        }
                        if self._ladder.enabled
                        else {}
                    ),
                },
                indent=1,
            )
            + "\n"
        )
        return (
            f"games: {finished} finished, {stored} stored in the run, "
            f"{sum(abandoned.values())} abandoned{f' {abandoned}' if abandoned else ''}, "
            f"{undelivered} not delivered, "
            f"{last.get('duplicates_dropped', 0)} duplicates dropped; "
            f"restarts: {restarts or 'none'}"
        )

    def _autopilot_summary(self) -> dict[str, Any]:
        """``{"autopilot": {...}}`` for summary.json: where its controllers left the run."""
        out: dict[str, Any] = {}
        if self._autopilot is not None:
            out |= {"games": self._autopilot.games, "decisions": self._autopilot.decisions}
        if self._learner_pilot is not None:
            out |= self._learner_pilot.summary()
        return {"autopilot": out} if out else {}

    def _games_in_last_checkpoint(self) -> int:
        """The games the learner's stop checkpoint counts: those stored after the last row of
        metrics.jsonl included (rows come every ``learner.log_every`` steps)."""
        path = latest_checkpoint(self.run_dir / self.cfg.checkpoint.dir)
        if path is None:
            return 0
        try:
            return int(load_checkpoint(path).meta.extra.get("games", 0))
        except (AzserveError, OSError, ValueError):
            return 0

    def _say_resumed(self) -> None:
        path = latest_checkpoint(self.run_dir / self.cfg.checkpoint.dir)
        if path is None:
            self.display.note(
                f"resumed {self.run_dir}: no checkpoint yet, the learner starts fresh"
            )
            return
        try:
            meta = load_checkpoint(path).meta
        except AzserveError as exc:  # the learner sets an unreadable one aside and says so
            self.display.note(f"resuming {self.run_dir}: newest checkpoint unreadable ({exc})")
            return
        self.display.note(f"resumed from step {meta.step}, version {meta.version} ({path.name})")

    def _metrics_exist(self) -> bool:
        return (self.run_dir / "metrics.jsonl").exists()

    def _holds_run(self) -> bool:
        """Whether ``run_dir`` has outputs of an earlier run (config, metrics or checkpoints)."""
        earlier = [self.run_dir / "config.toml", self.run_dir / "metrics.jsonl"]
        return (
            any(p.exists() for p in earlier)
            or latest_checkpoint(self.run_dir / self.cfg.checkpoint.dir) is not None
        )

    def _request_stop(self, reason: str) -> None:
        if not self._stop_reason:
            self._stop_reason = reason

    def _supervise(self) -> int:
        t = self.cfg.train
        last_status = last_eval = time.monotonic()
        while not self._stop_reason:
            time.sleep(0.5)
            for child in self.children:
                code = child.poll()
                if code is None:
                    continue
                if child.name == "learner" and code == 0:
                    self._request_stop(
                        f"step budget of {t.steps} reached" if t.steps else "learner finished"
                    )
                    break
                print(
                    f"\n{child.name} exited with code {code}; last log lines:\n{child.tail()}",
                    file=sys.stderr,
                    flush=True,
                )
                if code == CONFIG_ERROR_EXIT:  # the same config would fail the same way
                    self._request_stop(f"{child.name}: config error (exit {code})")
                    return CONFIG_ERROR_EXIT
                if t.restart_children and child.restarts < t.max_restarts:
                    child.restarts += 1
                    log.warning("restarting %s (%d/%d)", child.name, child.restarts, t.max_restarts)
                    child.start()
                else:
                    self._request_stop(f"{child.name} crashed (exit {code})")
                    return 1
            now = time.monotonic()
            self._refresh(now)
            if t.minutes and now - self.t0 >= t.minutes * 60:
                self._request_stop(f"time budget of {t.minutes:g} min reached")
            if t.steps and self.snap.step >= t.steps:
                self._request_stop(f"step budget of {t.steps} reached")
            if t.games and self.snap.games >= t.games:
                self._request_stop(f"game budget of {t.games} reached")
            if now - last_status >= t.status_interval_s:
                last_status = now
                self._update_rates(now)
                self._show()
            if t.eval_every_s and now - last_eval >= t.eval_every_s:
                last_eval = now
                self._evals.start(
                    deadline=periodic_deadline(now, self.t0, t.eval_every_s, t.minutes)
                )
            self._ladder.tick(now)
        return 0

    def _shutdown(self) -> None:
        self._ladder.stop()
        by_name = {c.name: c for c in self.children}
        # Actors first: their finished games drain to the learner, which is still acking. Then
        # the learner (SIGINT: it finishes its step and writes a resumable checkpoint), then the
        # server.
        actors = [c for c in self.children if c.name.startswith("actor")]
        for c in actors:
            c.send(signal.SIGTERM)
        for c in actors:
            c.stop(timeout=20)
        learner = by_name.get("learner")
        if learner is not None and learner.poll() is None:
            learner.stop(timeout=120, sig=signal.SIGINT)
        for c in self.children:  # ranks on other hosts: rank 0 told them to stop
            if c.name.startswith("learner-rank-"):
                c.stop(timeout=30)
        for c in self.children:
            if c.name.startswith("server"):
                c.stop(timeout=20)
        self._evals.join()

    # --- status ----------------------------------------------------------------------------------

    def _refresh(self, now: float) -> None:
        s = self.snap
        s.elapsed_s = now - self.t0
        metrics = self.run_dir / "metrics.jsonl"
        if metrics.exists():
            rows = read_metrics(metrics)
            if self._learner_pilot is not None:
                self._learner_pilot.tick(rows[-1] if rows else None)
            if rows:
                r = rows[-1]
                s.step, s.version = int(r.get("step", 0)), int(r.get("version", 0))
                s.games, s.positions = int(r.get("games", 0)), int(r.get("positions", 0))
                s.moves = int(r.get("moves", s.positions))
                s.loss, s.reuse, s.lag = (
                    r.get("loss", s.loss),
                    r.get("reuse", 0.0),
                    r.get("mean_lag", 0.0),
                )
                s.learner_busy = r.get("learner_busy", 0.0)
                s.inference_busy = r.get("inference_busy", 0.0)
                s.bottleneck = r.get("bottleneck", s.bottleneck)
        answered: dict[str, dict[str, Any]] = {}
        for name, endpoint in self._servers():
            try:
                with SyncClient(
                    endpoint, self.cfg.server.model, timeout_s=1.0, auth=self._status_auth()
                ) as c:
                    self._server_status[name] = answered[name] = c.status()
            except AzserveError:
                continue
            self._server_rows[name] = self._server_status[name]["rows"]
        if self._autopilot is not None:
            self._autopilot.tick(now, answered.get("server"), s.games)
        batches = [st["mean_batch"] for st in self._server_status.values()]
        if batches:
            s.mean_batch = sum(batches) / len(batches)

    def _update_rates(self, now: float) -> None:
        """Rates over the last status interval."""
        s = self.snap
        s.rows_per_s = self._rates.rate("rows", sum(self._server_rows.values()), now)
        s.positions_per_s = self._rates.rate("positions", s.positions, now)
        s.steps_per_s = self._rates.rate("steps", s.step, now)

    def _show(self) -> None:
        s, t = self.snap, self.cfg.train
        budget = ""
        if t.minutes:
            budget = f"{pct(min(1.0, s.elapsed_s / (t.minutes * 60)))} of {t.minutes:g} min"
        elif t.steps:
            budget = f"{pct(min(1.0, s.step / t.steps))} of {human(t.steps)} steps"
        elif t.games:
            budget = f"{pct(min(1.0, s.games / t.games))} of {human(t.games)} games"
        self.display.update(
            [
                Row("progress", f"{bar(_fraction(s, t))} {budget}  {s.elapsed_s / 60:.1f} min"),
                Row(
                    "run",
                    f"{human(s.games)} games  {human(s.positions)} positions of "
                    f"{human(s.moves)} moves  "
                    f"step {human(s.step)}  version {s.version}",
                ),
                Row("self-play", f"{human(s.positions_per_s)} positions/s"),
                Row(
                    "inference",
                    f"{human(s.rows_per_s)} rows/s  batch {s.mean_batch:.1f}  "
                    f"busy {pct(s.inference_busy)}",
                ),
                Row(
                    "learner",
                    f"{s.steps_per_s:.2f} steps/s  busy {pct(s.learner_busy)}  loss {s.loss:.3f}",
                ),
                Row(
                    "replay",
                    f"reuse {s.reuse:.1f}  policy lag {s.lag:.1f}  bottleneck: {s.bottleneck}",
                ),
                *(
                    [Row("rating", rating_text(self._ladder.latest()))]
                    if self._ladder.enabled
                    else []
                ),
                *([Row("autopilot", self._autopilot.last)] if self._autopilot is not None else []),
                *(
                    [Row("autopilot", self._learner_pilot.last)]
                    if self._learner_pilot is not None
                    else []
                ),
                *self._extra_rows(),
            ]
        )

    # --- report --------------------------------------------------------------------------------

    def _report(self) -> None:
        from azserve.run.report import write_report

        try:
            out = write_report(self.run_dir)
            self.display.note(f"report: {out}")
        except (OSError, ValueError) as exc:
            log.warning("no report: %s", exc)


def _fraction(s: Snapshot, t: Any) -> float:
    """How much of the budget is spent (0 without one)."""
    if t.minutes:
        return s.elapsed_s / (t.minutes * 60)
    if t.steps:
        return s.step / t.steps
    if t.games:
        return s.games / t.games
    return 0.0


def run_training(cfg: Config, run_dir: Path, resume: bool = False, progress: bool = True) -> int:
    return Training(cfg, run_dir, resume, progress).run()
