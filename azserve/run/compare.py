"""``azserve compare``: an A/B at equal wall time, as one command.

Each candidate config trains for the same minutes, one after another on this machine (never
side by side: they would share the cores unevenly), each in its own run directory. After each
run, every checkpoint it kept is scored with MCTS at the eval setting (outside the timed run,
so scoring takes nothing from training), then all learning curves go into one image,
``curves.png``, and the figures into ``compare.json``. A candidate whose run directory already
holds a finished run (``summary.json``) is not trained again, so an interrupted comparison
continues where it stopped and a finished one can be redrawn; an unfinished one (interrupted,
or stopped by a config error) is trained afresh, its directory set aside first when it holds
any training output. A child's config error stops the comparison (exit 2): the next
candidates would most likely fail the same way.
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from azserve.arena.curves import CurvePoint, draw_curves, read_run, run_started, set_names
from azserve.config.schema import Config, load_config, replace
from azserve.errors import AzserveError, ConfigError
from learner.checkpoint import list_checkpoints, load_checkpoint
from learner.runlog import read_metrics

log = logging.getLogger("azserve.run.compare")


@dataclass(frozen=True)
class Candidate:
    """One config of the comparison."""

    label: str
    """Its name in the image and the run directory's name."""
    config: Config
    """The config, with ``--set`` applied."""


def load_candidates(
    paths: list[str],
    labels: list[str],
    overrides: list[str],
    own: Sequence[tuple[str, str]] = (),
) -> list[Candidate]:
    """Candidates from config files (labels default to the files' stems, made unique), with
    ``overrides`` applied to every one and each ``own`` (label, ``SECTION.KEY=VALUE``) to its
    label's alone, after them. Their games must play the same rules (``Game.rules``: go9 and
    go9-features meet on one ladder)."""
    from actors.games import make_game

    if labels and len(labels) != len(paths):
        raise ConfigError(f"--label given {len(labels)} times for {len(paths)} --config files")
    names: list[str] = []
    for i, path in enumerate(paths):
        label = labels[i] if labels else Path(path).stem
        names.append(f"{label}-{i}" if label in names else label)
    unknown = sorted({label for label, _ in own} - set(names))
    if unknown:
        raise ConfigError(
            f"--set-in {unknown[0]}: no candidate has that label (labels: {', '.join(names)})"
        )
    out: list[Candidate] = []
    for path, label in zip(paths, names):
        mine = [kv for lab, kv in own if lab == label]
        cfg = load_config(path, [*overrides, *mine])
        if out and cfg.game != out[0].config.game:
            first = out[0].config.game
            if make_game(cfg.game).rules != make_game(first).rules:
                raise ConfigError(
                    f"{path}: plays {cfg.game}, {paths[0]} plays {first} (other rules)"
                )
        out.append(Candidate(label, cfg))
    return out


def run_comparison(
    candidates: list[Candidate],
    out_dir: Path,
    minutes: float,
    keep_every: int | None = None,
    progress: bool = False,
    score: bool = True,
    ladder_games: int = 0,
    anchors: Sequence[str] = ("random",),
    ladder_jobs: int = 1,
) -> dict[str, Any]:
    """Train each candidate for ``minutes``, score its kept checkpoints (unless not
    ``score``: then only the evaluations the runs made themselves are drawn), draw the curves;
    returns (and writes as ``compare.json``) the figures per candidate. ``keep_every``
    overrides ``checkpoint.keep_every``: how densely the MCTS curve is sampled.
    ``ladder_games`` > 0: that many more games on the candidates' shared ladder
    (``RUN_DIR/ladder``, with ``anchors``, random play at 0 Elo; ``ladder_jobs`` games at
    once), drawn as Elo against time in ``ladder.png``, every game included: the curve of
    games without benchmark positions (Go, Othello)."""
    # The supervisor pulls in the process tree: imported only when something is trained.
    from azserve.run.train import CONFIG_ERROR_EXIT, run_training

    out_dir.mkdir(parents=True, exist_ok=True)
    for c in candidates:
        run_dir = out_dir / c.label
        cfg = _timed(c.config, minutes, keep_every)
        if finished(run_dir):
            print(f"compare: {c.label}: {run_dir} holds a finished run, not trained again")
        else:
            set_aside(run_dir, cfg.checkpoint.dir)
            print(f"compare: {c.label}: training for {minutes:g} min in {run_dir}", flush=True)
            code = run_training(cfg, run_dir, progress=progress)
            if code == 130:  # Ctrl-C: the later candidates would not get equal time anyway
                raise AzserveError(
                    f"interrupted during {c.label}; run again to continue (it trains afresh)"
                )
            if code == CONFIG_ERROR_EXIT:
                raise ConfigError(
                    f"{c.label}: a process of its run refused the config (its log: "
                    f"{run_dir / 'logs'}); nothing trained, no summary written"
                )
            if code != 0:
                log.warning("%s: training exited with code %d", c.label, code)
        if score:
            scored = score_checkpoints(cfg, run_dir)
            print(f"compare: {c.label}: {scored} checkpoints scored with MCTS", flush=True)
    runs = {c.label: read_run(out_dir / c.label) for c in candidates}
    figures = {c.label: summarize(runs[c.label], out_dir / c.label) for c in candidates}
    if ladder_games > 0:
        for label, rating in rate(candidates, out_dir, ladder_games, anchors, ladder_jobs).items():
            figures[label]["elo"] = rating
    (out_dir / "compare.json").write_text(json.dumps(figures, indent=1) + "\n")
    for label, points in runs.items():
        if not points:
            print(f"compare: {label}: no checkpoint was evaluated (too short a run?)")
    if any(runs.values()) and not set_names(runs):
        print(
            f"compare: {candidates[0].config.game} has no benchmark positions to score mistakes "
            "on: no curves drawn; the runs' own matches (vs_random, vs_previous) are in "
            f"{out_dir / 'compare.json'}; score the checkpoints with azserve match",
            flush=True,
        )
    elif any(runs.values()):
        title = f"{candidates[0].config.game}: {minutes:g} min per candidate"
        image = draw_curves(runs, out_dir / "curves.png", title)
        print(f"compare: curves in {image}, figures in {out_dir / 'compare.json'}", flush=True)
    return figures


def rate(
    candidates: list[Candidate],
    out_dir: Path,
    games: int,
    anchors: Sequence[str] = ("random",),
    jobs: int = 1,
) -> dict[str, dict[str, Any]]:
    """``games`` more games on the candidates' ladder (``jobs`` at once); each candidate's
    newest checkpoint's rating (``elo``, ``lo``, ``hi``, ``step``, ``hours``)."""
    from azserve.arena.ladder.output import at_equal_time, draw_ladder, ratings_json, table
    from azserve.arena.ladder.schedule import run_ladder

    dirs = [out_dir / c.label for c in candidates]
    have = [c for c, d in zip(candidates, dirs) if list_checkpoints(d / c.config.checkpoint.dir)]
    if not have:
        return {}
    ladder_dir = out_dir / "ladder"
    report = run_ladder(
        [str(out_dir / c.label) for c in have],
        list(anchors),
        ladder_dir,
        games,
        configs=[c.config for c in have],
        jobs=jobs,
    )
    (ladder_dir / "ratings.json").write_text(json.dumps(ratings_json(report), indent=1) + "\n")
    title = f"{candidates[0].config.game}: Elo against training, random = 0"
    image = draw_ladder(report, out_dir / "ladder.png", title)
    print(table(report), flush=True)
    if same_time := at_equal_time(report):
        print(same_time, flush=True)
    print(f"compare: ratings against time in {image}", flush=True)
    newest: dict[str, dict[str, Any]] = {}
    for e in report.entrants:
        r = report.ratings.get(e.name)
        if e.run is None or r is None or r.games == 0:
            continue
        if e.run not in newest or (e.step or 0) > newest[e.run]["step"]:
            newest[e.run] = {"elo": r.elo, "lo": r.lo, "hi": r.hi, "step": e.step, "hours": e.hours}
    return newest


def finished(run_dir: Path) -> bool:
    """Whether ``run_dir`` holds a run that ended other than by an interrupt (``summary.json``:
    the supervisor writes none for a run a config error stopped)."""
    path = run_dir / "summary.json"
    if not path.exists():
        return False
    try:
        reason = str(json.loads(path.read_text()).get("stop_reason", ""))
    except (ValueError, AttributeError):
        return False
    return not reason.startswith("interrupted")


def set_aside(run_dir: Path, checkpoint_dir: str = "checkpoints") -> Path | None:
    """Clear the way to train an unfinished candidate afresh: a directory holding a checkpoint
    is renamed ``LABEL.unfinished-N`` beside it (returned); one without (a run that stopped
    before its first checkpoint, as a config error stops it) is removed."""
    if not run_dir.exists():
        return None
    if run_dir.is_symlink():
        raise AzserveError(
            f"{run_dir} links to an unfinished run: finish it there, or remove the link"
        )
    if not list_checkpoints(run_dir / checkpoint_dir):
        shutil.rmtree(run_dir)
        return None
    n = 1
    while (aside := run_dir.with_name(f"{run_dir.name}.unfinished-{n}")).exists():
        n += 1
    run_dir.rename(aside)
    print(f"compare: {run_dir.name}: its unfinished run moved to {aside}", flush=True)
    return aside


def _timed(cfg: Config, minutes: float, keep_every: int | None) -> Config:
    """The candidate's config for this comparison: a time budget only, and the checkpoint
    density asked for."""
    checkpoint = {} if keep_every is None else {"keep_every": keep_every}
    return replace(cfg, train={"minutes": minutes, "steps": 0, "games": 0}, checkpoint=checkpoint)


def score_checkpoints(cfg: Config, run_dir: Path) -> int:
    """Score every kept checkpoint of ``run_dir`` not yet scored with MCTS (raw policy and MCTS
    at ``eval.sims``, no matches), appending rows to ``curve.jsonl``; returns how many."""
    import torch

    from azserve.arena.evaluate import evaluate_checkpoint

    torch.set_num_threads(1)
    done = {
        int(r["step"])
        for name in ("eval.jsonl", "curve.jsonl")
        for r in _rows(run_dir / name)
        if r.get("full")
    }
    quiet = replace(cfg, eval={"match_games": 0})
    scored = 0
    for step, path in list_checkpoints(run_dir / cfg.checkpoint.dir):
        if step in done:
            continue
        meta = load_checkpoint(path).meta
        t0 = time.monotonic()
        result = evaluate_checkpoint(quiet, path, full=True)
        row = {
            "time": time.time(),
            "step": meta.step,
            "version": meta.version,
            "full": True,
            "eval_s": time.monotonic() - t0,
            **result,
        }
        with (run_dir / "curve.jsonl").open("a") as f:
            f.write(json.dumps(row) + "\n")
        scored += 1
    return scored


def _rows(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def summarize(points: list[CurvePoint], run_dir: Path) -> dict[str, Any]:
    """A run's figures: the last point's mistake rates (and the last MCTS-scored point's),
    its last evaluation's matches (``vs_random``, ``vs_previous``: the only figures of a game
    without benchmark positions, such as Go or Othello), and its throughput from the run's
    start to the last metrics row."""
    metrics = (
        read_metrics(run_dir / "metrics.jsonl") if (run_dir / "metrics.jsonl").exists() else []
    )
    out: dict[str, Any] = {}
    if metrics:
        last = metrics[-1]
        started = run_started(run_dir)
        seconds = max(last["time"] - (metrics[0]["time"] if started is None else started), 1e-9)
        positions = int(last.get("positions", 0))
        moves = int(last.get("moves", positions))
        out.update(
            minutes=seconds / 60,
            learner_steps=int(last.get("step", 0)),
            games=int(last.get("games", 0)),
            positions=positions,
            moves=moves,
            positions_per_s=positions / seconds,
            moves_per_s=moves / seconds,
        )
    if points:
        out["policy"] = points[-1].policy
        out["policy_step"] = points[-1].step
    scored = [p for p in points if p.mcts]
    if scored:
        out["mcts"] = scored[-1].mcts
        out["mcts_step"] = scored[-1].step
    matches = [r for r in _rows(run_dir / "eval.jsonl") if "vs_random" in r or "vs_previous" in r]
    if matches:  # the run's last evaluation matches (every game has them; Go and Othello only them)
        last_match = matches[-1]
        out["matches_step"] = int(last_match["step"])
        for key in ("vs_random", "vs_previous"):
            if key in last_match:
                out[key] = last_match[key]
    return out


def format_table(figures: dict[str, dict[str, Any]]) -> str:
    """The figures as a plain table: one row per candidate, overall rates and throughput."""
    lines = [
        f"{'candidate':<24} {'min':>5} {'steps':>7} {'positions':>10} {'moves':>10} "
        f"{'pos/s':>7} {'policy':>7} {'MCTS':>7}"
    ]
    for label, f in figures.items():
        lines.append(
            f"{label:<24} {f.get('minutes', 0):5.1f} {f.get('learner_steps', 0):7d} "
            f"{f.get('positions', 0):10d} {f.get('moves', 0):10d} {f.get('positions_per_s', 0):7.1f} "
            f"{_pct(f.get('policy'))} {_pct(f.get('mcts'))}"
        )
    return "\n".join(lines)


def _pct(rates: dict[str, float] | None) -> str:
    return f"{100 * rates['overall']:6.1f}%" if rates and "overall" in rates else f"{'-':>7}"


def run_compare(args: Any) -> int:
    """The ``azserve compare`` main."""
    candidates = load_candidates(
        args.config, args.label or [], args.overrides, [tuple(x) for x in args.set_in or []]
    )
    figures = run_comparison(
        candidates,
        Path(args.run_dir),
        args.minutes,
        args.keep_every,
        not args.no_progress,
        score=not args.no_score,
        ladder_games=args.ladder_games,
        anchors=args.ladder_anchors or ["random"],
        ladder_jobs=args.ladder_jobs,
    )
    print(format_table(figures), flush=True)
    return 0
