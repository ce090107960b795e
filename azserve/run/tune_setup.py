"""``azserve tune``'s settings and run directory: what defines a tune (``TuneSetup``, saved
as ``RUN_DIR/setup.json`` so that ``--resume`` continues the same tune), how a trial's values,
budget and settings become its ``--set`` flags, and where the trials, their rungs and the
shared ladder lie. The driver is ``azserve.run.tune``, a trial ``azserve.run.tune_trial``, the
outputs ``azserve.run.tune_report``."""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from azserve.config.load import to_dict
from azserve.config.schema import load_config, save_config
from azserve.errors import AzserveError, ConfigError
from azserve.run.tune_search import (
    check_points,
    check_search,
    grid_points,
    parse_search,
    trial_label,
)

RUNGS = (1, 2, 4)
"""When a trial is rated and reported, in quarters of its time (ASHA's ``time_attr``)."""
QUARTERS = RUNGS[-1]
REDUCTION = 2
"""ASHA's reduction factor: at each rung a trial below the median so far is stopped."""

SETUP = "setup.json"
BASE = "base.toml"
"""The tune's settings and its base config (``--config`` with ``--set``), in the run dir."""
RAY_DIR, EXPERIMENT = "ray", "tune"
"""Ray Tune's state: ``RUN_DIR/ray/tune`` (what ``--resume`` restores)."""

TRIAL_SETS = (
    # The run's own evaluations and ladder would only take time from training: the tune's
    # ladder judges the trials. eval.sims=0 leaves the final evaluation a raw-policy pass.
    "train.eval_every_s=0",
    "eval.sims=0",
    "eval.match_games=0",
    "ladder.games=0",
    # Trials may run side by side: no fixed port (the binds are private ipc endpoints already).
    "server.metrics_port=0",
    "learner.metrics_port=0",
    "actors.metrics_port=0",
)
"""What every trial's ``azserve train`` gets after the point's values (with its budget)."""


@dataclass(frozen=True)
class TuneSetup:
    """What defines a tune; saved as ``RUN_DIR/setup.json``."""

    search: dict[str, list[str]]
    """Each searched key and its values, as written (``{"mcts.num_simulations": ["8", "16"]}``)."""
    points: list[dict[str, str]]
    """The trials' values, trial ``i`` at index ``i``: every combination, or ``--trials`` of
    them drawn with ``seed``."""
    hours: float
    """The wall time of all trials together, were none stopped early."""
    concurrent: int
    """Trials run at once."""
    seed: int
    """Draws the points (with ``--trials``) and seeds the ladder's games."""
    ladder_games: int
    """Ladder games played at each rung of each trial."""
    ladder_anchors: list[str]
    """The ladder's fixed opponents (random at 0 Elo when among them)."""
    ladder_sims: int
    """Simulations a move of every rated checkpoint."""
    ladder_jobs: int
    """Ladder games played at once."""
    game: str
    """The base config's game."""
    workdir: str
    """Where the tune was started: trials run from there (relative paths in the config)."""

    @property
    def trial_minutes(self) -> float:
        """Each trial's time: ``hours`` shared out among the trials, ``concurrent`` at a time."""
        return self.hours * 60.0 * self.concurrent / len(self.points)

    def settings(self, index: int) -> str:
        """Trial ``index``'s values as one line: ``mcts.num_simulations=8 actors.games=16``."""
        return " ".join(f"{k}={v}" for k, v in self.points[index].items())

    def overrides(self, index: int) -> list[str]:
        """Trial ``index``'s ``--set`` values after the base config: its point, its budget and
        ``TRIAL_SETS``."""
        budget = [f"train.minutes={self.trial_minutes!r}", "train.steps=0", "train.games=0"]
        return [f"{k}={v}" for k, v in self.points[index].items()] + budget + list(TRIAL_SETS)

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TuneSetup:
        return cls(**data)


TRIALS, RATED, RUNG_LOG, LADDER = "trials", "rated", "rungs.jsonl", "ladder"
"""Where trials run (``RUN_DIR/trials``), where a trial run's rated checkpoints are linked
(``rated/`` in it), its rungs' rows (``rungs.jsonl`` in it), and the shared ladder
(``RUN_DIR/ladder``)."""


def attempt_dirs(out: Path, index: int) -> list[Path]:
    """The run directories trial ``index`` has had, first to last (``tN``, ``tN.2``, ...)."""
    label = trial_label(index)
    found = []
    for d in (out / TRIALS).glob(f"{label}*"):
        rest = d.name[len(label) :]
        if rest == "":
            found.append((1, d))
        elif rest[:1] == "." and rest[1:].isdigit():
            found.append((int(rest[1:]), d))
    return [d for _, d in sorted(found)]


def current_dirs(out: Path, trials: int) -> dict[int, Path]:
    """Each trial's newest run directory (a trial that has not started has none)."""
    found = {}
    for i in range(trials):
        dirs = attempt_dirs(out, i)
        if dirs:
            found[i] = dirs[-1]
    return found


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The rows of a JSON-lines file, first to last (none without the file; a torn last line
    skipped): a trial's rungs, the ladder's games."""
    rows = []
    for line in path.read_text().splitlines() if path.exists() else []:
        try:
            rows.append(json.loads(line))
        except ValueError:
            continue
    return rows


def read_rungs(run_dir: Path) -> list[dict[str, Any]]:
    """A trial run's rung rows, first to last."""
    return read_jsonl(run_dir / RUNG_LOG)


# -- the tune's settings ---------------------------------------------------------------------


DEFAULTS = {"concurrent": 1, "seed": 0, "ladder_games": 20, "ladder_jobs": 1}
"""The flags a tune saves, at their defaults (argparse leaves them None: with ``--resume`` a
flag given must agree with the saved tune)."""


def new_setup(args: argparse.Namespace) -> tuple[TuneSetup, Any]:
    """The tune that ``args`` ask for, and its base config; ConfigError for any bad input,
    before anything starts."""
    for flag, value in (
        ("--config", args.config),
        ("--search", args.search),
        ("--hours", args.hours),
    ):
        if not value:
            raise ConfigError(f"{flag} is required (unless --resume continues a tune)")
    space = parse_search(args.search)
    base = load_config(args.config, args.overrides)
    check_search(args.config, args.overrides, space)
    seed = _given(args, "seed")
    points = grid_points(space, args.trials, seed)
    check_points(args.config, args.overrides, points)
    anchors = list(args.ladder_anchors or base.ladder.anchors)
    setup = TuneSetup(
        search=space,
        points=points,
        hours=float(args.hours),
        concurrent=_given(args, "concurrent"),
        seed=seed,
        ladder_games=_given(args, "ladder_games"),
        ladder_anchors=anchors,
        ladder_sims=base.ladder.sims or base.eval.sims,
        ladder_jobs=_given(args, "ladder_jobs"),
        game=base.game,
        workdir=os.getcwd(),
    )
    if not anchors:
        raise ConfigError("the ladder needs an anchor (--ladder-anchor random): it holds 0 Elo")
    if setup.ladder_sims < 1:
        raise ConfigError(
            "the ladder needs simulations: eval.sims and ladder.sims are 0; set ladder.sims"
        )
    return setup, base


def _given(args: argparse.Namespace, name: str) -> Any:
    value = getattr(args, name)
    return DEFAULTS[name] if value is None else value


def saved_setup(args: argparse.Namespace, out: Path) -> TuneSetup:
    """The tune saved in ``out``, for ``--resume``; a flag given again must agree with it."""
    path = out / SETUP
    if not path.exists():
        raise AzserveError(f"--resume: no tune in {out} to continue (no {SETUP})")
    setup = TuneSetup.from_json(json.loads(path.read_text()))
    given = [bool(args.config), bool(args.search), bool(args.hours)]
    if any(given) and not all(given):
        raise AzserveError(
            "--resume: give --config, --search and --hours all as before, or none of them"
        )
    if all(given):
        asked, base = new_setup(args)
        saved_base = load_config(out / BASE)
        theirs = dataclasses.replace(asked, workdir=setup.workdir)
        for field in dataclasses.fields(TuneSetup):
            a, b = getattr(theirs, field.name), getattr(setup, field.name)
            if a != b:
                raise AzserveError(
                    f"--resume: {field.name} differs from the tune in {out} ({_short(a)} now, "
                    f"{_short(b)} there): give the same flags, or none but --run-dir and --resume"
                )
        if to_dict(base) != to_dict(saved_base):
            raise AzserveError(
                f"--resume: the config (--config, --set) differs from the tune's {out / BASE}: "
                "give the same, or none but --run-dir and --resume"
            )
    return setup


def _short(value: Any) -> str:
    text = json.dumps(value) if not isinstance(value, str) else value
    return text if len(text) <= 60 else text[:57] + "..."


def start_setup(args: argparse.Namespace, out: Path) -> TuneSetup:
    """A new tune's settings, checked and saved in ``out`` (refused where one is already)."""
    if (out / SETUP).exists():
        raise AzserveError(
            f"{out} holds a tune already: pass --resume to continue it, or pick a new --run-dir"
        )
    setup, base = new_setup(args)
    out.mkdir(parents=True, exist_ok=True)
    save_config(base, out / BASE)
    (out / SETUP).write_text(json.dumps(setup.to_json(), indent=1) + "\n")
    return setup


def finite(x: Any) -> float | None:
    """``x`` as a float, or None when it is missing or not finite."""
    return float(x) if isinstance(x, (int, float)) and math.isfinite(x) else None


__all__ = [
    "BASE",
    "EXPERIMENT",
    "LADDER",
    "QUARTERS",
    "RATED",
    "RAY_DIR",
    "REDUCTION",
    "RUNGS",
    "RUNG_LOG",
    "SETUP",
    "TRIALS",
    "TRIAL_SETS",
    "TuneSetup",
    "attempt_dirs",
    "current_dirs",
    "finite",
    "read_jsonl",
    "read_rungs",
    "saved_setup",
    "start_setup",
    "trial_label",
]
