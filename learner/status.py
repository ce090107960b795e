"""The learner's status: its busy fractions and the servers', measured once a status interval
(``learner.status_interval_s``), and its row of counters and gauges: ``metrics.jsonl``
(``learner.runlog``), the log line, and through them the live table, the report, the web page
and ``azserve train``'s autopilot, which reads the rows' counters as rates over its own
intervals (``azserve.run.autopilot_learner``)."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from azserve.metrics import RateMeter, bottleneck

log = logging.getLogger("learner")


class Status:
    """One learner's status; ``await loop()`` measures and writes it until cancelled."""

    def __init__(self, learner: Any) -> None:
        self.learner = learner
        """The ``learner.learn.Learner`` whose counters it reads (not imported: that module
        imports this one)."""
        self._rates = RateMeter()
        self.inference_busy = 0.0
        """Mean busy fraction of the servers over the last status interval."""
        self.learner_busy = 0.0
        """Fraction of the last status interval spent training (not waiting for data)."""
        self.server_stats: dict[str, float] = {}
        """The servers' mean batch and latency percentiles at the last status interval."""

    def row(self) -> dict[str, Any]:
        lrn = self.learner
        m = lrn.replay.metrics()
        rx = lrn.receiver.stats()
        if not lrn.cfg.learner.status_interval_s:  # no status loop: busy since the start
            self.learner_busy = lrn.train_s / max(lrn.train_s + lrn.wait_s, 1e-9)
        return {
            "step": lrn.trainer.step_count,
            "version": lrn.versions.current,
            "games": lrn.games,
            "positions": lrn.positions,
            "moves": lrn.moves,
            **{k: v for k, v in lrn.last.items() if k != "step"},
            "replay_size": m.size,
            "reuse": m.reuse,
            "reuse_target": m.reuse_target,
            # Counters since this process started, for rates over any interval (the autopilot)
            "replay_inserted": m.inserted,
            "replay_sampled": m.sampled,
            "train_s": round(lrn.train_s, 3),
            "wait_s": round(lrn.wait_s, 3),
            "mean_lag": m.mean_lag,
            "insert_rate": m.insert_rate,
            "sample_rate": m.sample_rate,
            "dropped_stale": m.dropped_stale,
            "games_stored": rx.accepted,
            "duplicates_dropped": rx.duplicates,
            "trajectories_rejected": rx.rejected,
            "auth_refused": rx.auth_refused,
            "games_by_version": {str(v): n for v, n in sorted(rx.by_version.items())},
            "checkpoint_failures": lrn.checkpoint_failures,
            "versions_restored": lrn.publisher.restored,
            "learner_busy": self.learner_busy,
            "learner_threads": lrn.threads,
            "inference_busy": self.inference_busy,
            **self.server_stats,
            "bottleneck": bottleneck(
                {"learner": self.learner_busy, "inference": self.inference_busy}
            ),
        }

    async def loop(self) -> None:
        lrn = self.learner
        interval = lrn.cfg.learner.status_interval_s
        if not interval:
            return
        while True:
            await asyncio.sleep(interval)
            now = time.monotonic()
            steps = lrn.trainer.step_count
            sps = self._rates.rate("steps", steps, now)
            dt_train = self._rates.delta("train_s", lrn.train_s)
            dt_wait = self._rates.delta("wait_s", lrn.wait_s)
            self.learner_busy = dt_train / max(dt_train + dt_wait, 1e-9)
            self.inference_busy = await self._inference_busy(now)
            row = self.row()
            lrn.runlog.write(row, steps)  # also while waiting, so progress stays visible
            log.info(
                "steps/s %.2f  samples/s %.0f  loss %.3f (pi %.3f v %.3f)  reuse %.2f  lag %.2f  "
                "replay %d  v%d  games %d  learner busy %.0f%%  inference busy %.0f%%  "
                "bottleneck: %s",
                sps,
                sps * lrn.cfg.trainer.batch_size,
                lrn.last.get("loss", float("nan")),
                lrn.last.get("policy_loss", float("nan")),
                lrn.last.get("value_loss", float("nan")),
                row["reuse"],
                row["mean_lag"],
                row["replay_size"],
                row["version"],
                row["games"],
                100 * self.learner_busy,
                100 * self.inference_busy,
                row["bottleneck"],
            )

    async def _inference_busy(self, now: float) -> float:
        """Mean busy fraction of the servers since the last call (their ``busy_s`` counters)."""
        fractions = []
        replies = await self.learner.publisher.statuses()
        statuses = [st for st in replies.values() if st is not None]
        for server, st in replies.items():
            if st is not None:
                fractions.append(min(1.0, self._rates.rate(f"busy {server}", st["busy_s"], now)))
        if statuses:  # for metrics.jsonl, TensorBoard and the report
            self.server_stats = {
                "server_batch": sum(st["mean_batch"] for st in statuses) / len(statuses),
                "server_latency_p50_ms": max(st["latency_ms"]["p50"] for st in statuses),
                "server_latency_p99_ms": max(st["latency_ms"]["p99"] for st in statuses),
            }
        return sum(fractions) / len(fractions) if fractions else self.inference_busy
