"""One trial of ``azserve tune`` (a Ray Tune ``Trainable``), its rating on the tune's shared
ladder, and the driver's progress lines (a Ray Tune ``Callback``).

A trial starts ``azserve train`` (a child process that dies with the trial's Ray worker) in a
run directory of its own, ``RUN_DIR/trials/tN`` (``tN.2``, ``tN.3``... when a resumed tune
starts it again: a trial interrupted mid-run trains afresh, under a new name on the ladder).
Each ``step`` waits for the next rung (a quarter, a half, then the end of the run), hard-links
the run's newest checkpoint into ``rated/`` (the run's own retention may delete it later) and
plays ``ladder_games`` games on the shared ladder, ``RUN_DIR/ladder``, among every trial's
rated checkpoints and the anchors (one trial at a time: a lock), at low priority while the
run still trains. Its rating is reported (``rating``; a trial with no checkpoint yet gets
``UNRATED``) and kept in ``rungs.jsonl`` beside the run. When Ray Tune stops the trial (ASHA,
or its end), ``cleanup`` stops the run: SIGTERM, as Ctrl-C would, so that it shuts down in
order before the next trial takes its cores.
"""

from __future__ import annotations

import fcntl
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from ray import tune

from azserve.config.schema import Config, load_config, replace
from azserve.errors import AzserveError
from azserve.run.supervisor import azserve_argv
from azserve.run.tune_setup import (
    BASE,
    LADDER,
    QUARTERS,
    RATED,
    RUNG_LOG,
    RUNGS,
    TRIALS,
    TuneSetup,
    attempt_dirs,
    current_dirs,
    finite,
    trial_label,
)
from learner.checkpoint import list_checkpoints

T = TypeVar("T")

UNRATED = -10_000.0
"""The rating reported for a trial with no checkpoint at a rung: below any rated one."""
NICE = 10
"""The ladder's priority below the training run's, while both run."""
STOP_TIMEOUT_S = 120.0
"""How long a stopped trial's run may take to shut down before it is killed."""
POLL_S = 0.5


def trial_name(trial: Any) -> str:
    """Ray Tune's name (and directory name) for a trial: ``t0``, ``t1``, ..."""
    return trial_label(int(trial.config["trial"]))


class Trial(tune.Trainable):
    """One trial: ``azserve train`` of the base config with the trial's values; each step is
    a rung (``RUNGS``) and reports the rating of the run's newest checkpoint then."""

    # tune.with_parameters hands setup its keywords: Ray's documented form of the override.
    def setup(  # type: ignore[override]
        self, config: dict[str, Any], tune_setup: dict[str, Any], out: str
    ) -> None:
        self.plan = TuneSetup.from_json(tune_setup)
        self.out = Path(out)
        self.index = int(config["trial"])
        dirs = attempt_dirs(self.out, self.index)
        label = trial_label(self.index)
        self.run_dir = self.out / TRIALS / (label if not dirs else f"{label}.{len(dirs) + 1}")
        overrides = self.plan.overrides(self.index)
        self.cfg = load_config(self.out / BASE, overrides)
        self.run_dir.mkdir(parents=True)
        argv = azserve_argv(
            "train", "--config", str(self.out / BASE), "--run-dir", str(self.run_dir),
            "--no-progress", *[a for s in overrides for a in ("--set", s)],
        )  # fmt: skip
        workdir = self.plan.workdir if Path(self.plan.workdir).is_dir() else None
        with (self.run_dir / "train.log").open("ab") as log:
            self.proc = subprocess.Popen(
                argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=workdir,
                env=dict(os.environ, PYTHONUNBUFFERED="1"),
                preexec_fn=_child_setup(os.getpid()),
                # Ctrl-C at the tune's terminal goes to Ray Tune, which stops the trial
                # (cleanup): the run must not take it for its own and end as interrupted.
                start_new_session=True,
            )
        self.t0 = time.monotonic()

    def step(self) -> dict[str, Any]:
        quarters = RUNGS[self.iteration]
        last = quarters == QUARTERS
        due = self.t0 + self.plan.trial_minutes * 60.0 * quarters / QUARTERS
        while self.proc.poll() is None and (last or time.monotonic() < due):
            time.sleep(POLL_S)
        code = self.proc.poll()
        if code not in (None, 0):
            raise AzserveError(
                f"{self.run_dir.name}: azserve train exited with code {code}; its log: "
                f"{self.run_dir / 'train.log'} and {self.run_dir / 'logs'}"
            )
        row = rate(self.plan, self.out, self.run_dir, self.cfg.checkpoint.dir, quarters)
        with (self.run_dir / RUNG_LOG).open("a") as f:
            f.write(json.dumps(row) + "\n")
        return {**row, "done": last}

    def cleanup(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def _child_setup(parent: int) -> Callable[[], None]:
    """In the child, before it runs ``azserve train``: SIGINT unblocked (a Ray worker blocks
    it, and the mask is inherited: the run's learner, told to stop by SIGINT, would not hear
    it), and on Linux SIGTERM when the trial's Ray worker dies, even by SIGKILL
    (PR_SET_PDEATHSIG), so that no training run outlives its trial."""
    libc = None
    if sys.platform.startswith("linux"):
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)

    def setup() -> None:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
        if libc is not None:
            libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
            if os.getppid() != parent:  # the worker died before prctl took effect
                os.kill(os.getpid(), signal.SIGTERM)

    return setup


# -- the rating ------------------------------------------------------------------------------


def rate(
    setup: TuneSetup, out: Path, run_dir: Path, checkpoint_dir: str, quarters: int
) -> dict[str, Any]:
    """The rung's row: the run's newest checkpoint, linked into ``rated/`` and rated on the
    shared ladder after ``setup.ladder_games`` more games (``rating`` ``UNRATED`` when the run
    has no checkpoint yet)."""
    row: dict[str, Any] = {
        "quarters": quarters,
        "hours": setup.trial_minutes * quarters / QUARTERS / 60.0,
        "label": run_dir.name,
        "run_dir": str(run_dir),
        "player": None,
        "step": None,
        "rating": UNRATED,
        "lo": None,
        "hi": None,
        "games": 0,
    }
    linked = _link_newest(run_dir / checkpoint_dir, run_dir / RATED)
    if linked is None:
        return row
    row["step"] = linked
    row["player"] = f"{run_dir.name}@{linked}"
    ratings = _in_low_priority(lambda: _play(setup, out, run_dir))
    r = ratings.get(row["player"])
    if r is not None and r.games > 0 and math.isfinite(r.elo):
        row.update(rating=r.elo, lo=finite(r.lo), hi=finite(r.hi), games=r.games)
    return row


def _link_newest(source: Path, rated: Path) -> int | None:
    """Hard-link (else copy) the newest checkpoint of ``source`` into ``rated``; its step, or
    None when there is none. A file deleted between listing and linking (the run's retention)
    is passed over for the next newest."""
    rated.mkdir(exist_ok=True)
    for step, path in reversed(list_checkpoints(source)):
        target = rated / path.name
        if target.exists():
            return step
        try:
            try:
                os.link(path, target)
            except OSError as e:
                if isinstance(e, FileNotFoundError):
                    raise
                shutil.copy2(path, target)
        except FileNotFoundError:
            continue
        return step
    return None


def _play(setup: TuneSetup, out: Path, run_dir: Path) -> dict[str, Any]:
    """``setup.ladder_games`` more games on the shared ladder among every trial's rated
    checkpoints (this run's first) and the anchors, one trial at a time; the ratings."""
    from azserve.arena.ladder.output import ratings_json
    from azserve.arena.ladder.schedule import run_ladder

    ladder = out / LADDER
    ladder.mkdir(exist_ok=True)
    runs = [run_dir] + [d for d in current_dirs(out, len(setup.points)).values() if d != run_dir]
    runs = [d for d in runs if list_checkpoints(d / RATED) and (d / "config.toml").exists()]
    with (ladder / "tune.lock").open("ab") as lock, (run_dir / "ladder.log").open("a") as log:
        fcntl.flock(lock, fcntl.LOCK_EX)  # trials side by side take turns
        report = run_ladder(
            [str(d) for d in runs],
            setup.ladder_anchors,
            ladder,
            setup.ladder_games,
            sims=setup.ladder_sims,
            seed=setup.seed,
            max_checkpoints=0,
            progress=log,
            configs=[rated_config(d) for d in runs],
            jobs=setup.ladder_jobs,
        )
        (ladder / "ratings.json").write_text(json.dumps(ratings_json(report), indent=1) + "\n")
    return report.ratings


def rated_config(run_dir: Path) -> Config:
    """A trial run's config (as it saved it) with its checkpoints where the tune linked the
    rated ones."""
    return replace(load_config(run_dir / "config.toml"), checkpoint={"dir": RATED})


def _in_low_priority(fn: Callable[[], T]) -> T:
    """``fn()`` on a thread of its own at ``nice`` +``NICE`` (Linux keeps a nice value per
    thread), so that the ladder yields to the training run it shares the cores with; the
    ladder's worker processes inherit it."""

    def lower() -> None:
        try:
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), NICE)
        except OSError:
            pass  # not Linux: the ladder runs at the trial's priority

    with ThreadPoolExecutor(1, initializer=lower) as pool:
        return pool.submit(fn).result()


# -- progress --------------------------------------------------------------------------------


class Progress(tune.Callback):
    """One line on stdout per trial started, rung reported, trial stopped, finished or failed."""

    def __init__(self, tune_setup: dict[str, Any]) -> None:
        self.plan = TuneSetup.from_json(tune_setup)

    def _say(self, trial: Any, text: str) -> None:
        index = int(trial.config["trial"])
        print(f"tune: {trial_label(index)} ({self.plan.settings(index)}): {text}", flush=True)

    def on_trial_start(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        self._say(trial, f"started, {self.plan.trial_minutes:g} min of training")

    def on_trial_result(
        self, iteration: int, trials: list[Any], trial: Any, result: dict[str, Any], **info: Any
    ) -> None:
        self._say(trial, f"at {result['quarters']}/{QUARTERS} of its time: {rung_text(result)}")

    def on_trial_complete(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        quarters = (trial.last_result or {}).get("quarters")
        if quarters == QUARTERS:
            self._say(trial, "finished")
        else:
            self._say(trial, f"stopped by ASHA at {quarters}/{QUARTERS}: below the rung's median")

    def on_trial_error(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        self._say(trial, f"failed (Ray Tune's error file: {trial.error_file or 'none'})")


def rung_text(row: dict[str, Any]) -> str:
    """``Elo 152 (80..224) at step 120, 12 games`` or ``no checkpoint yet``."""
    if row.get("player") is None:
        return "no checkpoint yet"
    if row.get("lo") is None or row.get("hi") is None:
        return f"step {row['step']}: no rated game"
    return (
        f"Elo {row['rating']:.0f} ({row['lo']:.0f}..{row['hi']:.0f}) at step {row['step']}, "
        f"{row['games']} games"
    )


__all__ = ["UNRATED", "Progress", "Trial", "rung_text", "trial_name"]
