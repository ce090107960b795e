"""A training run's evaluations: the newest checkpoint scored on a background thread while the
run goes on (every ``train.eval_every_s``: the raw policy's benchmarks and ``eval.match_games``
against random and the previous checkpoint at ``eval.match_sims``, the games stopping at the
next evaluation's time), the last one scored fully at the end (its games bounded in time), each
into ``eval.jsonl``, TensorBoard's ``eval/`` scalars and one line in words. The thread runs
``NICE`` below training."""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from azserve.config.schema import Config
from azserve.errors import AzserveError
from learner.checkpoint import latest_checkpoint, list_checkpoints, load_checkpoint
from learner.runlog import read_metrics

log = logging.getLogger("azserve.run.train")

FINAL_EVAL_MIN_S = 60.0
"""The least time a timed run's final evaluation games get (``final_eval_limit_s``)."""
FINAL_EVAL_MAX_S = 600.0
"""The most: ten minutes, whatever the run's length (``azserve match`` measures further)."""
EVAL_MIN_SLOT_S = 60.0
"""The least time a periodic evaluation's games get before they stop (their slot is
``train.eval_every_s``, the time to the next evaluation)."""
NICE = 10
"""How much lower the evaluation thread runs than training (Linux keeps a nice value per
thread; the backend's threads it starts inherit it): it takes the cores training leaves free.
A shogi run's evaluation at the same priority took a core of two from its server."""


def periodic_deadline(now: float, t0: float, every_s: float, minutes: float) -> float:
    """When a periodic evaluation started at ``now`` stops its games (``time.monotonic()``):
    at the next evaluation's time (``every_s``, at least ``EVAL_MIN_SLOT_S``), so that one never
    runs into the next (a shogi run's, 2 x 20 games at 32 simulations, took over half an hour
    at 2 cores), and at the end of a time budget of ``minutes`` (run from ``t0``), so that the
    run's stop waits for no evaluation of an older checkpoint."""
    until = now + max(every_s, EVAL_MIN_SLOT_S)
    return min(until, t0 + minutes * 60) if minutes else until


def _lower_priority() -> None:
    """Put the calling thread ``NICE`` below its process (where the platform allows)."""
    try:
        os.setpriority(
            os.PRIO_PROCESS, threading.get_native_id(), os.getpriority(os.PRIO_PROCESS, 0) + NICE
        )
    except (AttributeError, OSError):  # not Linux, or not allowed: at the process's priority
        pass


def final_eval_limit_s(minutes: float) -> float | None:
    """How long the final evaluation's games of a run of ``minutes`` may take: half the run,
    at least ``FINAL_EVAL_MIN_S`` (a 3-minute go13 run spent 7 minutes on 2 games) and at most
    ``FINAL_EVAL_MAX_S`` (a 2-hour shogi run would have waited an hour more); None (no limit)
    for a run without a time budget. Games still going then stop and are counted as such in
    eval.jsonl (``unfinished``)."""
    return min(FINAL_EVAL_MAX_S, max(FINAL_EVAL_MIN_S, minutes * 30.0)) if minutes else None


def _eval_rows(run_dir: Path) -> list[dict[str, Any]]:
    """The rows of the run's eval.jsonl so far (a torn last line skipped; none without one)."""
    path = run_dir / "eval.jsonl"
    return read_metrics(path) if path.exists() else []


class RunEvaluations:
    """The evaluations of the run in ``run_dir``; ``note`` shows a line to the person watching
    (the live display's)."""

    def __init__(self, cfg: Config, run_dir: Path, note: Callable[[str], None]) -> None:
        self.cfg = cfg
        self.run_dir = run_dir
        self.note = note
        self._thread: threading.Thread | None = None
        self._evaluated: set[Path] = set()
        self._tb: Any = None
        self._tb_lock = threading.Lock()

    def join(self) -> None:
        """Wait for the evaluation on its thread, if one runs (saying so)."""
        if self._thread is not None and self._thread.is_alive():
            self.note("waiting for the evaluation under way to finish...")
            self._thread.join()

    def close(self) -> None:
        """Close the TensorBoard writer (when one was opened)."""
        if self._tb is not None:
            self._tb.close()

    def start(self, full: bool = False, deadline: float | None = None) -> None:
        """Score the newest checkpoint on a thread of its own, unless one is being scored or
        it was scored already (``full``: with MCTS too); its match games still going at
        ``deadline`` (``time.monotonic()``) stop."""
        if self._thread is not None and self._thread.is_alive():
            return
        found = list_checkpoints(self.run_dir / self.cfg.checkpoint.dir)
        if not found or found[-1][1] in self._evaluated:
            return
        path = found[-1][1]
        previous = found[0][1] if len(found) > 1 else None
        self._evaluated.add(path)
        self._thread = threading.Thread(
            target=self._evaluate, args=(path, previous, full, deadline), daemon=True
        )
        self._thread.start()

    def _evaluate(
        self, path: Path, previous: Path | None, full: bool, deadline: float | None = None
    ) -> str | None:
        """Score checkpoint ``path`` into eval.jsonl and TensorBoard; its figures in words (None
        when it could not be scored). Match games still going at ``deadline`` stop."""
        import torch

        from actors.games import make_game
        from azserve.arena.evaluate import evaluate_checkpoint, scores_text

        _lower_priority()
        torch.set_num_threads(1)
        t0 = time.monotonic()
        try:
            meta = load_checkpoint(path).meta
            result = evaluate_checkpoint(self.cfg, path, full, previous, deadline)
        except (AzserveError, OSError) as exc:  # e.g. a checkpoint pruned while the run goes on
            log.warning("evaluation of %s skipped: %s", path.name, exc)
            return None
        row = {
            "time": time.time(),
            "step": meta.step,
            "version": meta.version,
            "full": full,
            "eval_s": time.monotonic() - t0,
            **result,
        }
        with (self.run_dir / "eval.jsonl").open("a") as f:
            f.write(json.dumps(row) + "\n")
        self._to_tensorboard(result, meta.step)
        text = scores_text(result, make_game(self.cfg.game).benchmarks())
        log.info(
            "eval of step %d (v%d) in %.0f s: %s", meta.step, meta.version, row["eval_s"], text
        )
        return text

    def _to_tensorboard(self, result: dict[str, Any], step: int) -> None:
        """Evaluation scalars beside the learner's in ``tb/`` (grouped ``eval/``)."""
        from torch.utils.tensorboard import SummaryWriter

        from azserve.arena.evaluate import eval_scalars

        with self._tb_lock:
            if self._tb is None:
                self._tb = SummaryWriter(str(self.run_dir / "tb"), filename_suffix=".eval")
            for tag, value in eval_scalars(result).items():
                self._tb.add_scalar(tag, value, step)
            self._tb.flush()

    def final(self) -> None:
        """The last checkpoint scored fully, here, its games bounded by ``final_eval_limit_s``;
        what it will do and what it found go to ``note``."""
        path = latest_checkpoint(self.run_dir / self.cfg.checkpoint.dir)
        if path is None:
            return
        found = list_checkpoints(self.run_dir / self.cfg.checkpoint.dir)
        previous = found[0][1] if len(found) > 1 else None
        limit = final_eval_limit_s(self.cfg.train.minutes)
        plan = self._plan(previous)
        if limit is not None:
            plan += f"; its games stop after {limit:.0f} s"
        self.note(f"final evaluation of {path.name}: {plan}")
        t0 = time.monotonic()
        deadline = None if limit is None else t0 + limit
        text = self._evaluate(path, previous, full=True, deadline=deadline)
        if text is not None:
            self.note(f"final evaluation in {time.monotonic() - t0:.0f} s: {text}")

    def _plan(self, previous: Path | None) -> str:
        """What the final evaluation will do and, from the run's last evaluations, about how
        long it takes: on a slow machine a short run's final games can outlast the run."""
        from actors.games import make_game

        e = self.cfg.eval
        names = [b.name for b in make_game(self.cfg.game).benchmarks()]
        bench = f"the {', '.join(names)} benchmark"
        parts = [f"{bench} at {e.sims} simulations" if e.sims else f"{bench}, raw policy"]
        parts = parts if names else []
        if e.match_games:
            rivals = "random" + (" and the previous checkpoint" if previous else "")
            parts.append(f"{e.match_games} games against {rivals} at {e.match_sims} simulations")
        plan = ", ".join(parts) or "nothing to score (no benchmark, eval.match_games = 0)"
        took = [r["eval_s"] for r in _eval_rows(self.run_dir) if "eval_s" in r]
        if not took:
            return plan + " (no evaluation of this run yet to time it by)"
        hint = ""
        budget = self.cfg.train.minutes * 60
        if budget and max(took) > budget / 2:
            hint = "; longer than half the run: --set eval.match_games=0 skips the games"
        return plan + f" (the run's evaluations took up to {max(took):.0f} s{hint})"


__all__ = ["FINAL_EVAL_MIN_S", "RunEvaluations", "final_eval_limit_s"]
