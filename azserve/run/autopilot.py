"""``azserve train``'s autopilot: games in flight per actor process, sized while the run runs.

**What it decides.** How many games each actor process keeps in play. With the search pool a
game has one leaf in flight at a time, so games in flight are leaf rows in flight: the server's
batches can be no larger, and each game's move waits for every other game's rows. Fewer rows
than the server's best batch waste its compute; more only queue, and each extra game slows every
game by as much (a move takes ``games x simulations / rows per second``) and ages its data: a
game's policy lag, in versions, grows with the games in flight whatever the machine
(docs/autopilot.md). So the rule keeps ``batches`` best batches of rows in flight
(``autopilot.start_batches`` to begin with, never below one) and moves it by what the server
measures over each ``autopilot.interval_s``:

- the server is **starved** (busy below ``autopilot.busy_low``): it waits for rows, so one best
  batch more is put in flight (additive increase);
- the server is **saturated with rows waiting** (busy at or above ``autopilot.busy_high``, and
  its mean batch at least ``autopilot.full_batch`` of the best or more than a best batch of
  each weights version queued): rows beyond one batch of each version only queue, so
  ``batches`` is cut by ``autopilot.decrease`` (multiplicative decrease, down to one best batch
  of each version: a batch holds one version's rows, ``Measure.versions``);
- the server is saturated on **part-full batches** with less queued: one best batch more;
- anything between is a **hold**: the band between the two thresholds is the hysteresis that
  keeps a noisy 2-core machine from see-sawing.

The **best batch** is the smallest of the backend's batch buckets (a batch is padded up to
its bucket) whose rows per second reach ``autopilot.efficiency`` of the fastest bucket's, by the
server's own timing of each bucket at start (status ``backend.bucket_ms``): on a CPU a batch of
32 often computes a row nearly as cheaply as one of 128, and needs a quarter of the games in
flight. Untimed buckets: the largest a batch can reach; no buckets: ``server.max_batch_size``.
Games follow as ``batches x best batch / (actor processes x leaves per game)``, within
``autopilot.min_games`` and ``autopilot.max_games`` (0: ``actors.games``, so the autopilot only
ever plays fewer games than configured, or as many). The first number is written at the
server's first status reply, and the actors wait for it before their first game.

**From what.** Two status replies of the server, the one ``azserve train`` already asks for
every half second for its table: the differences of ``busy_s``, ``rows`` and ``batches`` give
the busy fraction, the mean batch and rows per second of the interval (counted from the first
batch served); the latency p50 and the learner's game count ride along in the log. The only
new measurement is the bucket timing, a few batches once the server's graphs are warm.

**Why the supervisor decides, through a file.** It already holds the server's status, knows
how many actor processes share the server and owns the run directory, where each decision
becomes a row of ``metrics.jsonl`` (``"event": "autopilot"``). It tells the actors through one
file (``actors.games_file``, read by ``actors.inflight``): atomic to write, read again by a
restarted actor before its first game, and no protocol to add. An actor applies a new number
without abandoning a game: lowering lets the games in play finish and starts fewer new ones,
raising starts more at once (``actors.selfplay.SelfPlay.set_games``).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from actors.inflight import InFlight, write_inflight
from azserve.config.schema import AutopilotConfig, Config
from learner.runlog import append_event

log = logging.getLogger("azserve.run.autopilot")

EVENT = "autopilot"
"""The ``event`` of the autopilot's rows in ``metrics.jsonl``."""

ADDITIVE_BATCHES = 1.0
"""Best batches of rows added when the server is starved: a whole one, so that the lanes of a
best batch (``actors.inflight``) stay full."""
STALE_BAND = 1.25
"""Games in flight over more than this times ``max_versions`` versions are lowered; between
``max_versions`` and that, held (a band, so that the count does not see-saw at the limit)."""


@dataclass(frozen=True)
class Measure:
    """The server over one interval, from two of its status replies."""

    seconds: float
    busy: float
    """Share of the interval with a batch computing."""
    batch: float
    """Mean rows per batch."""
    rows_per_s: float
    latency_p50_ms: float
    """Receipt to reply, per request, over the server's recent window."""
    queued_rows: float = 0.0
    """Rows waiting in the server's queue: the mean of the two replies' counts."""
    versions: float = 1.0
    """Weights versions the interval's rows were served for, counted by their share of the rows
    (``(sum r)^2 / sum r^2``: two versions of equal rows are 2, a straggler of a few rows beside
    a busy one little above 1). A batch holds one version's rows, so this many batches are in
    flight for one round of every game's leaf."""


def served_versions(before: dict[str, Any], after: dict[str, Any]) -> float:
    """The effective number of weights versions served between two status replies, from their
    ``versions.served_rows`` (1.0 when the replies do not carry it)."""
    b = (before.get("versions") or {}).get("served_rows") or {}
    a = (after.get("versions") or {}).get("served_rows") or {}
    rows = [int(n) - int(b.get(v, 0)) for v, n in a.items()]
    rows = [r for r in rows if r > 0]
    if not rows:
        return 1.0
    return max(1.0, sum(rows) ** 2 / sum(r * r for r in rows))


def measure(before: dict[str, Any], after: dict[str, Any], seconds: float) -> Measure | None:
    """The interval between two status replies, or None when no batch ran in it (the server is
    still compiling, or no game has started)."""
    batches = int(after["batches"]) - int(before["batches"])
    if batches <= 0 or seconds <= 0:
        return None
    rows = int(after["rows"]) - int(before["rows"])
    busy = (float(after["busy_s"]) - float(before["busy_s"])) / seconds
    return Measure(
        seconds=seconds,
        busy=min(1.0, max(0.0, busy)),
        batch=rows / batches,
        rows_per_s=rows / seconds,
        latency_p50_ms=float(after.get("latency_ms", {}).get("p50", 0.0)),
        queued_rows=(float(before.get("queued_rows", 0)) + float(after.get("queued_rows", 0))) / 2,
        versions=served_versions(before, after),
    )


def best_batch(
    max_batch_size: int,
    buckets: Sequence[int] = (),
    bucket_ms: Sequence[float] = (),
    efficiency: float = 1.0,
) -> int:
    """The server's best batch: of its buckets that a batch of at most ``max_batch_size`` rows
    fills, the smallest whose rows per second (``bucket_ms``: the server's timing of a batch
    of each bucket) reach ``efficiency`` of the fastest's; the largest such bucket when they
    are not timed; ``max_batch_size`` without buckets. A batch is padded up to its bucket, so
    a bucket is where a row costs least for its size."""
    fitting = [b for b in buckets if b <= max_batch_size]
    if not fitting:
        return max_batch_size
    timed = dict(zip(buckets, bucket_ms)) if len(bucket_ms) == len(buckets) else {}
    rates = {b: b / timed[b] for b in fitting if timed.get(b, 0) > 0}
    if len(rates) < len(fitting):
        return max(fitting)
    top = max(rates.values())
    return min(b for b in fitting if rates[b] >= efficiency * top)


def lag_versions(max_policy_lag: int) -> float:
    """The most weights versions games in flight may span: half of ``replay.max_policy_lag``
    (at least one). A game's positions carry the version it started with and arrive when it
    ends: games over V versions bring positions up to about V versions old, dropped past
    ``max_policy_lag``; at half of it they still have half of their trainable life left."""
    return max(1.0, max_policy_lag / 2)


class Controller:
    """The rule, free of I/O: ``batches`` best batches of rows in flight, moved by ``decide``.

    ``best`` rows fill the server's best batch; ``rows_per_game`` is what one game keeps in
    flight (processes x leaves per game: the rows one more game per process adds);
    ``max_versions`` is the most weights versions the games in flight may span before more
    games only make their positions staler (``lag_versions``: half of
    ``replay.max_policy_lag``)."""

    def __init__(
        self,
        cfg: AutopilotConfig,
        best: int,
        rows_per_game: int,
        low: int,
        high: int,
        max_versions: float = math.inf,
    ) -> None:
        self.cfg = cfg
        self.best = best
        self.rows_per_game = rows_per_game
        self.low, self.high = low, high
        self.max_versions = max_versions
        self.batches = cfg.start_batches

    def games(self) -> int:
        """Games in flight per actor process for the current ``batches``."""
        want = math.ceil(self.batches * self.best / self.rows_per_game - 1e-9)
        return min(self.high, max(self.low, want))

    def _ceiling(self) -> float:
        """The ``batches`` at which ``games`` reaches ``high`` (raising past it changes nothing)."""
        return self.high * self.rows_per_game / self.best

    def _floor(self, versions: float = 1.0) -> float:
        """One best batch of each weights version in flight (a batch holds one version's rows),
        within the most games; or ``start_batches`` when that began lower."""
        return max(min(1.0, self.cfg.start_batches), min(versions, self._ceiling()))

    def set_best(self, best: int) -> None:
        """The server's best batch as its status reply tells it (the config's guess before)."""
        self.best = best
        self.batches = min(self.batches, self._ceiling())

    def decide(self, m: Measure) -> tuple[str, str]:
        """``(action, reason)`` for one interval's measure: ``raise``, ``lower`` or ``hold``;
        ``batches`` moves with it."""
        c = self.cfg
        # A batch holds one weights version's rows, so with games over V versions the server
        # computes one version's batch while the others' rows wait: about (V - 1) batches are
        # queued at any time, and V best batches in flight are what fills each version's batch.
        # Rows beyond that wait either way: in full batches, or queued beyond one best batch of
        # each version (long games, such as shogi's, span many versions: 128 games over 7
        # versions made batches of 29 with 95 rows queued). Counting one batch for all versions
        # see-sawed go9 between 32 and 164 games: raised on batches part-full by the split,
        # lowered on the next interval's queue of the other versions' rows.
        # But the versions grow with the games: on a saturated server a move takes games x
        # simulations / rows per second, so more games make longer games, spanning more
        # versions, which split the batches again. Past ``max_versions`` the rule stops chasing
        # them (go9 climbed to 256 games over 4.6 versions, its positions arriving past
        # replay.max_policy_lag = 6 and dropped: the learner starved, 0 steps/s) and lowers.
        spread = max(1.0, m.versions)
        versions = min(spread, self.max_versions)
        queued = m.queued_rows >= self.best * versions
        full = m.batch >= c.full_batch * self.best or queued
        if m.busy < c.busy_low:
            if self.games() >= self.high:
                return "hold", f"server busy {m.busy:.1%} < {c.busy_low:.0%}, at the most games"
            self.batches = min(self.batches + ADDITIVE_BATCHES, self._ceiling())
            return "raise", f"server busy {m.busy:.1%} < {c.busy_low:.0%}: it waits for rows"
        if m.busy >= c.busy_high and full:
            floor = self._floor(versions)
            if self.batches <= floor or self.games() <= self.low:
                where = (
                    "the fewest games"
                    if self.games() <= self.low
                    else "one best batch"
                    if versions < 1.5
                    else f"a best batch for each of {versions:.1f} versions"
                )
                return "hold", f"saturated with full batches, at {where} in flight"
            self.batches = max(floor, self.batches * c.decrease)
            waiting = (
                f"full batches ({m.batch:.1f} of {self.best})"
                if m.batch >= c.full_batch * self.best
                else f"{m.queued_rows:.0f} rows queued (batches of {m.batch:.1f} over "
                f"{spread:.1f} versions)"
            )
            return "lower", (
                f"server busy {m.busy:.1%} >= {c.busy_high:.0%} with {waiting}: rows beyond "
                "one batch of each version only queue"
            )
        if m.busy >= c.busy_high and spread > self.max_versions * STALE_BAND:
            floor = self._floor(versions)
            if self.batches <= floor or self.games() <= self.low:
                return "hold", f"games over {spread:.1f} versions, at the floor in flight"
            self.batches = max(floor, self.batches * c.decrease)
            return "lower", (
                f"server busy {m.busy:.1%}, games over {spread:.1f} versions, past "
                f"{self.max_versions:.1f} (half of replay.max_policy_lag): fewer games make "
                "shorter games, whose positions arrive fresh enough to train"
            )
        if m.busy >= c.busy_high:
            if spread >= self.max_versions:
                return "hold", (
                    f"server busy {m.busy:.1%} on part-full batches over {spread:.1f} versions: "
                    f"at {self.max_versions:.1f} (half of replay.max_policy_lag), more games "
                    "would only make staler positions"
                )
            # Saturated on part-full batches with less than a batch waiting: a batch is padded
            # up to its bucket and holds one weights version's rows, so more rows in flight
            # fill the batches it computes anyway (shogi: 32 games over 6 versions made
            # batches of 10, 286 rows/s, against 1,150 rows/s at batches of 34).
            if self.games() >= self.high:
                return "hold", f"server busy {m.busy:.1%} on part-full batches, at the most games"
            self.batches = min(self.batches + ADDITIVE_BATCHES, self._ceiling())
            return "raise", (
                f"server busy {m.busy:.1%} on part-full batches ({m.batch:.1f} of {self.best}, "
                f"{m.queued_rows:.0f} rows queued, {versions:.1f} versions): more rows in "
                "flight fill them"
            )
        return "hold", f"server busy {m.busy:.1%}, busy within the band"


class Autopilot:
    """The controller's shell in ``azserve train``: feeds it the server's status replies,
    writes each decision to the games file, the log and ``metrics.jsonl``."""

    def __init__(self, cfg: Config, games_file: Path, metrics_path: Path) -> None:
        ap = cfg.autopilot
        self.cfg = ap
        self.games_file = games_file
        self.metrics_path = metrics_path
        high = ap.max_games or cfg.actors.games
        leaves = cfg.mcts.leaves_in_flight if cfg.mcts.algorithm == "puct" else 1
        buckets = cfg.backend.torch.batch_buckets if cfg.backend.kind == "torch" else ()
        self.controller = Controller(
            ap,
            best_batch(cfg.server.max_batch_size, buckets),
            cfg.actors.processes * leaves,
            min(ap.min_games, high),
            high,
            lag_versions(cfg.replay.max_policy_lag),
        )
        self._max_batch_size = cfg.server.max_batch_size
        self._max_rows = cfg.client.max_rows
        self._sims = cfg.mcts.num_simulations
        self._processes = cfg.actors.processes
        self.games = cfg.actors.games
        """Games in flight per actor process: the configured count until the first decision."""
        self.decisions = 0
        self.last = ""
        """The latest decision in words, for the status table."""
        self._before: tuple[float, dict[str, Any]] | None = None
        self._games_before: tuple[float, int] | None = None

    def tick(self, now: float, status: dict[str, Any] | None, games_stored: int) -> str | None:
        """One supervisor tick with the server's latest status reply (None: none this tick).
        The first reply sizes the first games (``start``: the actors wait for it); then one
        decision per ``interval_s`` of serving. Returns the action taken, if any."""
        if status is None:
            return None
        if self._before is None:
            self._before = (now, status)
            self._games_before = (now, games_stored)
            self._start(status)
            return "start"
        t0, before = self._before
        if not int(before["batches"]):  # the interval starts with the first batch served
            self._before = (now, status)
            return None
        if now - t0 < self.cfg.interval_s:
            return None
        self._before = (now, status)
        m = measure(before, status, now - t0)
        if m is None:  # no batch in the interval: no game in play
            return None
        action, reason = self.controller.decide(m)
        self._record(action, reason, m, games_stored, now)
        return action

    def _start(self, status: dict[str, Any]) -> None:
        """The best batch as the server reports its buckets and their timings, and the first
        games in flight from it."""
        backend = status.get("backend", {})
        buckets = backend.get("buckets") or ()
        self.controller.set_best(
            best_batch(
                int(status.get("max_batch_size", self._max_batch_size)),
                buckets,
                backend.get("bucket_ms") or (),
                self.cfg.efficiency,
            )
        )
        timed = ", ".join(f"{b}: {ms:g} ms" for b, ms in zip(buckets, backend.get("bucket_ms", ())))
        self._record(
            "start",
            f"{self.controller.batches:g} x the best batch to begin with"
            + (f"; the server's buckets take {timed}" if timed else ""),
        )

    def _record(
        self,
        action: str,
        reason: str,
        m: Measure | None = None,
        games_stored: int = 0,
        now: float | None = None,
    ) -> None:
        before, self.games = self.games, self.controller.games()
        if self.games != before or action == "start":
            self._write(self.games)
        self.decisions += 1
        games_per_s = self._games_rate(games_stored, now) if now is not None else None
        # A move takes `simulations` rows of each game, and every game in flight shares rows/s.
        move_s = (
            self._sims * before * self._processes / m.rows_per_s if m and m.rows_per_s else None
        )
        row: dict[str, Any] = {
            "action": action,
            "reason": reason,
            "games_before": before,
            "games": self.games,
            "processes": self._processes,
            "batches": round(self.controller.batches, 3),
            "best_batch": self.controller.best,
            "games_stored": games_stored,
            "games_per_s": games_per_s,
            "move_s": move_s,
            **({f"server_{k}": v for k, v in asdict(m).items()} if m else {}),
        }
        self.last = f"{self.games} games/process ({action}: {reason})"
        text = (
            f"autopilot: {action} games in flight {before} -> {self.games} per actor process "
            f"({reason})"
        )
        if m is not None:
            text += (
                f"; server busy {m.busy:.1%} batch {m.batch:.1f}/{self.controller.best} "
                f"rows/s {m.rows_per_s:,.0f} p50 {m.latency_p50_ms:.0f} ms, move ~{move_s:.2f} s, "
                f"games stored {games_stored}"
            )
        log.log(logging.DEBUG if action == "hold" else logging.INFO, "%s", text)
        try:
            append_event(self.metrics_path, EVENT, row)
        except OSError as exc:  # a full disk must not stop the run: the log has it
            log.warning("autopilot: no metrics row (%s)", exc)

    def _games_rate(self, games: int, now: float) -> float | None:
        """Games stored per second since the previous decision."""
        prev = self._games_before
        self._games_before = (now, games)
        if prev is None or now <= prev[0]:
            return None
        return round((games - prev[1]) / (now - prev[0]), 4)

    def _write(self, games: int) -> None:
        # Lanes of the best batch: a second lane in flight is a second full batch, where one
        # lane of client.max_rows would make one batch padded up to the next bucket.
        rows = min(self.controller.best, self._max_rows)
        write_inflight(self.games_file, InFlight(games, rows))
