"""The ladder kept during ``azserve train`` (``[ladder]`` in the config): rounds of
``azserve ladder`` on the run, each a child process at low priority, spaced so that the
ladder runs at most ``ladder.share`` of the wall time, and the latest rating of the run's
newest rated checkpoint for the live display, ``summary.json`` and the report.
"""

from __future__ import annotations

import json
import math
import signal
from pathlib import Path
from typing import Any

from azserve.config.schema import Config
from azserve.run.supervisor import Child, azserve_argv, child_env

NICE = 10
"""The ladder's priority below self-play's."""


class LadderRounds:
    """Starts a round when the last one has been idle long enough; never two at once."""

    def __init__(self, cfg: Config, run_dir: Path) -> None:
        self.cfg = cfg
        self.run_dir = run_dir
        self.out = run_dir / "ladder"
        ladder = cfg.ladder
        argv = azserve_argv(
            "ladder",
            str(run_dir),
            "--out",
            str(self.out),
            "--games",
            str(ladder.games),
            "--max-checkpoints",
            str(ladder.max_checkpoints),
            *(["--sims", str(ladder.sims)] if ladder.sims else []),
        )
        for anchor in ladder.anchors:
            argv += ["--anchor", anchor]
        self.child = Child(
            "ladder", ["nice", "-n", str(NICE), *argv], run_dir / "logs" / "ladder.log",
            child_env(1),
        )  # fmt: skip
        self.rounds = 0
        self.busy_s = 0.0
        self._started: float | None = None
        self._next = 0.0

    @property
    def enabled(self) -> bool:
        return self.cfg.ladder.games > 0

    def tick(self, now: float) -> None:
        """Start a round when due and a checkpoint exists; account for a round that ended."""
        if not self.enabled:
            return
        if self._started is not None:
            if self.child.poll() is None:
                return
            took = now - self._started
            self.busy_s += took
            self.rounds += 1
            self._started = None
            share = self.cfg.ladder.share
            self._next = now + took * (1.0 - share) / share
        if now < self._next:
            return
        if not any((self.run_dir / self.cfg.checkpoint.dir).glob("ckpt-*.safetensors")):
            return
        self.child.start()
        self._started = now

    def stop(self) -> None:
        """End a round in progress (its unfinished game is not stored: the next round, or
        ``azserve ladder`` on the run, plays it again)."""
        if self._started is not None and self.child.poll() is None:
            self.child.stop(timeout=10, sig=signal.SIGTERM)
        self._started = None

    def latest(self) -> dict[str, Any] | None:
        """The newest rated checkpoint of this run (player, step, Elo, interval, games), with
        the games stored; None before the first round's ratings."""
        return latest_rating(self.out / "ratings.json")


def latest_rating(path: Path) -> dict[str, Any] | None:
    """From a ladder's ``ratings.json``: the rated checkpoint with the highest step."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    rated = [
        p
        for p in data.get("players", [])
        if p.get("step") is not None and p.get("games", 0) > 0 and p.get("lo") is not None
    ]
    if not rated:
        return None
    best = max(rated, key=lambda p: p["step"])
    keys = ("player", "step", "hours", "elo", "lo", "hi", "games")
    return {**{k: best.get(k) for k in keys}, "ladder_games": data.get("games", 0)}


def rating_text(r: dict[str, Any] | None) -> str:
    """One line for the display: ``412 Elo (350..470) at step 4,000, 86 games``."""
    if r is None:
        return "no rating yet"
    lo, hi = r["lo"], r["hi"]
    interval = f"{lo:.0f}..{hi:.0f}" if lo is not None and math.isfinite(hi or math.inf) else "?"
    return (
        f"{r['elo']:.0f} Elo ({interval}, random 0) at step {r['step']:,}; "
        f"{r['ladder_games']} ladder games"
    )


__all__ = ["NICE", "LadderRounds", "latest_rating", "rating_text"]
