"""``azserve ladder``: strength against training time. The checkpoints of one or more runs play
each other and a set of anchors (random play, GTP engines such as GnuGo, OpenSpiel's MCTS,
another run's checkpoint); every game is refereed (``azserve.arena.referee``) and stored; Elo
ratings are fitted by maximum likelihood over all the games (``azserve.arena.ratings``), random
play held at 0 (without a random anchor, the first anchor).

The store, ``OUT/games.jsonl``, is append-only: one JSON line per finished game (its players,
colours, result, moves, seed, and each checkpoint's step, wall time and positions). A game is
named by its pair and its number within the pair (``k``), which with the ladder's seed fix its
colours (the two take turns; who opens the pair's first game is drawn from the seed and the
pair: ``store.colours``) and its seed; the next game of a pair is always the first number not
yet stored. So a ladder killed at any point (``kill -9`` mid-game included) resumes where it
stopped: an unfinished game was never written and is played again from the same seed, and a
stored one is never played twice. A torn last line is cut off on resume.
Every game is also written as its game keeps records (SGF for Go, PGN for chess, text
otherwise) under ``OUT/games/``.

Pairing: each checkpoint plays its neighbours in time within its run, the checkpoint of each
other run nearest to it in time, and every anchor; of all those pairs the next game goes to
the one with the highest ``p (1 - p) / (1 + n)``, where ``p`` is the expected score under the
current fit and ``n`` the games the pair has played: close pairs inform the fit most, and
each game played makes its pair less pressing. Anchors far from a checkpoint's rating are thus
rarely played by it.

A game itself is played by ``azserve.arena.ladder.play`` (its players, its record, the worker
of ``--jobs``); this module picks the pairs, runs the loop and fits.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Collection, Iterable, Sequence
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from actors.games import Game
from azserve.arena.ladder.output import at_equal_time, draw_ladder, ratings_json, table
from azserve.arena.ladder.play import JobSetup, LadderJob, play_pair, store_record
from azserve.arena.ladder.store import Entrant, LadderReport, Store, pair_of, results_of
from azserve.arena.lineup import Lineup
from azserve.arena.players import PlayerError, parse_spec
from azserve.arena.pool import Task, play_in_pool
from azserve.arena.ratings import Rating, expected_score, fit
from azserve.config.schema import Config
from azserve.errors import AzserveError, ConfigError

RANDOM = "random"
"""The anchor fixed at 0 Elo."""


def run_label(run_dir: str | Path, taken: Iterable[str] = ()) -> str:
    """A run's name on the ladder: its directory's name, or more of its path when two runs
    share a name."""
    p = Path(run_dir).resolve()
    label = p.name
    parts = list(p.parts)
    depth = 2
    while label in set(taken) and depth <= len(parts):
        label = "/".join(parts[-depth:])
        depth += 1
    return label


def checkpoints_of(
    run_dir: str | Path,
    label: str,
    limit: int = 0,
    subdir: str = "checkpoints",
    at_hours: Iterable[float] = (),
) -> list[Entrant]:
    """The checkpoints of a run directory (``RUN/checkpoints/`` or another ``subdir``, or a
    directory of checkpoint files), oldest first, with their place in the run. ``limit`` > 0
    keeps that many, evenly spaced, the first and the newest always among them, and besides
    them the checkpoint nearest in time to each of ``at_hours`` (hours from the run's start)."""
    from azserve.arena.curves import Timeline
    from learner.checkpoint import list_checkpoints

    d = Path(run_dir)
    found = list_checkpoints(d / subdir) or list_checkpoints(d)
    if not found:
        raise AzserveError(f"no checkpoint (ckpt-*.safetensors) in {d} or {d / subdir}")
    timeline = Timeline.of_run(d)
    out = []
    for step, path in found:
        place = timeline.at(step)
        hours, positions = (place[0] / 60, place[1]) if place is not None else (None, None)
        out.append(Entrant(f"{label}@{step}", f"checkpoint:{path}", label, step, hours, positions))
    if limit <= 0 or len(out) <= limit:
        return out
    picks = {round(i * (len(out) - 1) / (limit - 1)) for i in range(limit)} if limit > 1 else set()
    picks.add(len(out) - 1)
    timed = [i for i, e in enumerate(out) if e.hours is not None]
    for h in at_hours if timed else ():
        picks.add(min(timed, key=lambda i: abs((out[i].hours or 0.0) - h)))
    return [out[i] for i in sorted(picks)]


def run_ends(run_dirs: Sequence[str | Path], subdirs: Sequence[str]) -> list[float | None]:
    """Each run's hours from its start to its newest checkpoint (None where unknown)."""
    return [checkpoints_of(d, "", 1, sub)[-1].hours for d, sub in zip(run_dirs, subdirs)]


def anchor_entrant(spec: str) -> Entrant:
    kind, arg = parse_spec(spec)
    name = kind if not arg else f"{kind}:{arg}"  # random, greedy: their kind alone
    return Entrant(name, spec)


def fit_ladder(
    games: Sequence[dict[str, Any]], names: Iterable[str], fixed: str | None
) -> dict[str, Rating]:
    """Ratings of every player in ``games`` and ``names``, ``fixed`` held at 0 Elo."""
    return fit(results_of(games), {fixed: 0.0} if fixed else {}, players=names)


def fixed_player(anchors: Sequence[str], entrants: Sequence[Entrant]) -> str:
    """Who is held at 0 Elo: random play where it is an anchor, else the first anchor, else
    the first checkpoint."""
    names = [anchor_entrant(a).name for a in anchors]
    if RANDOM in names:
        return RANDOM
    return names[0] if names else entrants[0].name


# -- pairing --------------------------------------------------------------------------------


def candidate_pairs(entrants: Sequence[Entrant]) -> list[tuple[str, str]]:
    """The pairs worth a game: neighbours in time within a run, the nearest checkpoint in time
    of every other run, every anchor, and the anchors with each other."""
    runs: dict[str, list[Entrant]] = {}
    for e in entrants:
        if not e.anchor:
            runs.setdefault(e.run or "", []).append(e)
    anchors = [e for e in entrants if e.anchor]
    pairs: list[tuple[str, str]] = []

    def add(a: str, b: str) -> None:
        p = pair_of(a, b)
        if a != b and p not in pairs:
            pairs.append(p)

    for label, points in runs.items():
        points.sort(key=lambda e: e.step or 0)
        for i, e in enumerate(points):
            if i > 0:
                add(points[i - 1].name, e.name)
            for x in anchors:
                add(e.name, x.name)
            for other, theirs in runs.items():
                if other == label:
                    continue
                near = min(theirs, key=lambda t: abs(_when(t) - _when(e)))
                add(e.name, near.name)
    for i, a in enumerate(anchors):
        for b in anchors[i + 1 :]:
            add(a.name, b.name)
    return pairs


def _when(e: Entrant) -> float:
    return e.hours if e.hours is not None else float(e.step or 0)


def next_pair(
    entrants: Sequence[Entrant],
    ratings: dict[str, Rating],
    counts: dict[tuple[str, str], int],
    busy: Collection[tuple[str, str]] = (),
) -> tuple[str, str] | None:
    """The pair whose next game informs the fit most: ``p (1 - p) / (1 + n)``, leaving out the
    ``busy`` pairs (being played now; None when every pair is). A player with no games yet is
    guessed at its run's previous checkpoint's rating (0 for the first)."""
    guess = _guesses(entrants, ratings)
    best, best_w = None, -1.0
    for pair in candidate_pairs(entrants):
        if pair in busy:
            continue
        p = expected_score(guess[pair[0]], guess[pair[1]])
        w = p * (1.0 - p) / (1 + counts.get(pair, 0))
        if w > best_w + 1e-12:
            best, best_w = pair, w
    return best


def _guesses(entrants: Sequence[Entrant], ratings: dict[str, Rating]) -> dict[str, float]:
    out: dict[str, float] = {}
    last: dict[str | None, float] = {}
    for e in sorted(entrants, key=lambda e: (e.run or "", e.step or 0)):
        r = ratings.get(e.name)
        known = r is not None and r.games > 0 and math.isfinite(r.elo)
        out[e.name] = r.elo if known else last.get(e.run, 0.0)  # type: ignore[union-attr]
        last[e.run] = out[e.name]
    return out


# -- running ---------------------------------------------------------------------------------


def run_ladder(
    run_dirs: Sequence[str],
    anchors: Sequence[str],
    out: Path,
    games: int,
    minutes: float = 0.0,
    sims: int | None = None,
    sample_moves: int = 4,
    seed: int = 0,
    max_checkpoints: int = 12,
    progress: IO[str] | None = sys.stderr,
    configs: Sequence[Config] | None = None,
    jobs: int = 1,
) -> LadderReport:
    """Play up to ``games`` new games (and for at most ``minutes``, 0 = no limit), then fit.
    ``configs``: each run's config (as ``azserve compare`` knows them), else each checkpoint's
    own. ``jobs`` > 1: that many games at once, each in a worker process
    (``azserve.arena.pool``, ``LadderJob``)."""
    from actors.games import make_game

    if not run_dirs:
        raise ConfigError("give at least one run directory")
    labels: list[str] = []
    entrants: list[Entrant] = []
    by_path: dict[str, Config] = {}
    subdirs = (
        [c.checkpoint.dir for c in configs]
        if configs is not None
        else ["checkpoints"] * len(run_dirs)
    )
    # Every run also brings its checkpoint nearest to each other run's end: runs of different
    # lengths meet at equal training time.
    ends = run_ends(run_dirs, subdirs)
    for i, d in enumerate(run_dirs):
        label = run_label(d, labels)
        labels.append(label)
        others = [h for j, h in enumerate(ends) if j != i and h is not None]
        found = checkpoints_of(d, label, max_checkpoints, subdirs[i], others)
        entrants += found
        if configs is not None:
            by_path.update((parse_spec(e.spec)[1], configs[i]) for e in found)
    entrants += [anchor_entrant(a) for a in anchors]
    by_name = {e.name: e for e in entrants}
    if len(by_name) < len(entrants):
        raise ConfigError("an anchor is given twice")
    spec, eval_sims = _game_of(entrants, configs)
    game = make_game(spec)
    sims = eval_sims if sims is None else sims
    zero = fixed_player(anchors, entrants)
    store = Store(out / "games.jsonl")
    tally = _Tally(games, progress, game.sides)
    deadline = time.monotonic() + minutes * 60 if minutes > 0 else math.inf
    schedule = _Schedule(store, entrants, by_name, zero, seed, deadline, tally)
    try:
        if progress:
            print(
                f"azserve ladder: {game.name}, {len(entrants) - len(anchors)} checkpoints of "
                f"{len(run_dirs)} run(s), anchors {', '.join(anchors) or 'none'}; {sims} "
                f"simulations a move; {len(store.games)} games stored in {store.path}"
                + (f"; {jobs} games at a time" if jobs > 1 else ""),
                file=progress,
                flush=True,
            )
        if jobs > 1:
            setup = JobSetup(spec, sims, sample_moves, str(out), entrants, by_path)
            _play_in_jobs(jobs, setup, schedule, game.record_suffix)
        else:
            lineup = Lineup(game, out, sims, sample_moves, by_path)
            try:
                _play_here(lineup, schedule)
            finally:
                lineup.close()
    finally:
        store.close()
    ratings = fit_ladder(store.games, by_name, zero)
    disputed = sum(g["reason"] == "disputed" for g in store.games)
    results = results_of(store.games)
    return LadderReport(tally.played, len(store.games), ratings, entrants, disputed, results)


class _Tally:
    """Games stored and failed in this invocation, and their progress lines."""

    def __init__(self, games: int, progress: IO[str] | None, sides: tuple[str, str]) -> None:
        self.games, self.progress, self.sides = games, progress, sides
        self.played = self.failures = 0

    def stored(self, g: dict[str, Any]) -> None:
        self.played += 1
        if self.progress:
            first, second = self.sides
            print(
                f"ladder game {self.played}/{self.games}: {g['black']} ({first}) v "
                f"{g['white']} ({second}): "
                f"{g['result']} ({g['reason']}, {len(g['moves'])} moves, {g['seconds']:.0f} s)",
                file=self.progress,
                flush=True,
            )

    def failed(self, why: str) -> None:
        """A player failed: the game is not stored (it is played again later); five such
        failures stop the ladder."""
        self.failures += 1
        if self.progress:
            print(f"ladder: {why} (not stored; played again later)", file=self.progress)
        if self.failures >= 5:
            raise AzserveError(f"{self.failures} games failed; last: {why}")


@dataclass
class _Schedule:
    """What picks the ladder's next games and keeps their results: the store, the entrants and
    who is held at 0 Elo, the seed, the deadline, and this invocation's tally."""

    store: Store
    entrants: Sequence[Entrant]
    by_name: dict[str, Entrant]
    zero: str
    seed: int
    deadline: float
    tally: _Tally

    def next_pair(self, busy: Collection[tuple[str, str]] = ()) -> tuple[str, str] | None:
        """The pair to play next under the current fit, leaving out ``busy``; None past the
        deadline or when every pair is busy."""
        if time.monotonic() >= self.deadline:
            return None
        ratings = fit_ladder(self.store.games, self.by_name, self.zero)
        return next_pair(self.entrants, ratings, self.store.counts, busy)


def _play_here(lineup: Lineup, schedule: _Schedule) -> None:
    """One game at a time, in this process."""
    tally = schedule.tally
    while tally.played < tally.games:
        pair = schedule.next_pair()
        if pair is None:
            return
        try:
            g = play_pair(lineup, schedule.store, schedule.by_name, pair, schedule.seed)
        except PlayerError as e:
            for n in pair:
                lineup.drop(n)
            tally.failed(str(e))
            continue
        tally.stored(g)


def _play_in_jobs(jobs: int, setup: JobSetup, schedule: _Schedule, suffix: str) -> None:
    """Keep ``jobs`` worker processes (``LadderJob``) busy with the pair that informs the fit
    most among those not being played, storing each game (its record text ``*{suffix}``) as
    it ends; the games in flight at the deadline are finished and stored."""
    store, tally = schedule.store, schedule.tally

    def next_task(busy: set[Any]) -> Task | None:
        if tally.played + len(busy) >= tally.games:
            return None
        pair = schedule.next_pair(busy)
        if pair is None:
            return None
        return pair, {"pair": list(pair), "k": store.next_k(pair), "seed": schedule.seed}

    with closing(play_in_pool(jobs, LadderJob, setup, next_task)) as ended:
        for _pair, answer in ended:
            if "error" in answer:
                tally.failed(answer["error"])
            else:
                store_record(store, answer["record"], answer["text"], suffix)
                tally.stored(answer["record"])


def _game_of(entrants: Sequence[Entrant], configs: Sequence[Config] | None) -> tuple[str, int]:
    """The spec of the game every checkpoint plays (one for all) and the first run's
    ``eval.sims``."""
    from learner.checkpoint import load_checkpoint

    if configs:
        return referee_spec({c.game: c.game for c in configs}), configs[0].eval.sims
    seen: dict[str, str] = {}
    sims = None
    for e in entrants:
        if e.anchor:
            continue
        path = parse_spec(e.spec)[1]
        config = load_checkpoint(path).meta.config
        seen.setdefault(config["game"], e.name)
        if sims is None:
            sims = int(config.get("eval", {}).get("sims", 64))
    return referee_spec(seen), int(sims or 64)


def referee_game(seen: dict[str, str]) -> Game:
    """The game that referees checkpoints of the games ``seen`` (``referee_spec``)."""
    from actors.games import make_game

    return make_game(referee_spec(seen))


def referee_spec(seen: dict[str, str]) -> str:
    """The spec of the game that referees checkpoints of the games ``seen`` (game spec -> a
    player of it, for the error): their own, or where they differ only in encoding (go9 and
    go9-features), the game of the rules they share; but where they share one state that game's
    differs from (chess(history=1) with and without ``features``: the rules' game, ``chess``,
    keeps 7 earlier positions), the first of their specs, whose states every player reads;
    ConfigError when their rules differ."""
    from actors.games import make_game

    if len(seen) == 1:
        return next(iter(seen))
    games = {name: make_game(name) for name in seen}
    rules = {g.rules for g in games.values()}
    if len(rules) != 1:
        raise ConfigError(
            "the runs play different games: " + ", ".join(f"{g} ({n})" for g, n in seen.items())
        )
    referee, first = rules.pop(), min(seen)
    start = games[first].initial_state()
    shared = all(g.initial_state() == start for g in games.values())
    return first if shared and make_game(referee).initial_state() != start else referee


def run_ladder_command(args: argparse.Namespace) -> int:
    """The ``azserve ladder`` main."""
    import torch

    torch.set_num_threads(1)  # one position at a time, beside engines: as match does
    out = Path(args.out) if args.out else Path(args.runs[0]) / "ladder"
    anchors = args.anchors if args.anchors is not None else [RANDOM]
    report = run_ladder(
        args.runs,
        anchors,
        out,
        args.games,
        minutes=args.minutes,
        sims=args.sims,
        sample_moves=args.sample_moves,
        seed=args.seed,
        max_checkpoints=args.max_checkpoints,
        jobs=args.jobs,
    )
    (out / "ratings.json").write_text(json.dumps(ratings_json(report), indent=1) + "\n")
    plot = draw_ladder(report, out / "ladder.png")
    print(table(report))
    if same_time := at_equal_time(report):
        print(same_time)
    print(
        f"azserve ladder: {report.played} games played now, {report.total} stored "
        f"({report.disputed} disputed, left out of the fit); ratings in {out / 'ratings.json'}, "
        f"plot {plot}",
        file=sys.stderr,
    )
    return 0


__all__ = [
    "RANDOM",
    "Entrant",
    "LadderReport",
    "candidate_pairs",
    "checkpoints_of",
    "fit_ladder",
    "fixed_player",
    "next_pair",
    "referee_spec",
    "run_ladder",
    "run_ladder_command",
]
