"""The learner's Prometheus metrics: read from the learner at scrape time (a collector, so
training pays nothing per step beyond one histogram observation)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from azserve.prom import SECONDS, role_registry


class LearnerCollector:
    """Totals and current values of one ``Learner`` (``learner``: anything with its fields)."""

    def __init__(self, learner: Any) -> None:
        self.learner = learner

    def collect(self) -> Iterator[Metric]:
        lrn = self.learner
        m = lrn.replay.metrics()
        rx = lrn.receiver.stats()
        totals = {
            "azserve_learner_steps": ("Training steps taken", lrn.trainer.step_count),
            "azserve_learner_games": ("Games stored in replay", lrn.games),
            "azserve_learner_positions": ("Positions stored in replay", lrn.positions),
            "azserve_learner_duplicates_dropped": ("Resent games dropped", rx.duplicates),
            "azserve_learner_trajectories_rejected": ("Malformed games refused", rx.rejected),
            "azserve_learner_train_seconds": ("Seconds spent in training steps", lrn.train_s),
            "azserve_learner_wait_seconds": ("Seconds spent waiting for data", lrn.wait_s),
            "azserve_learner_journal_fsyncs": ("Journal fsyncs (group commits)", lrn.journal.syncs),
            "azserve_learner_journal_sync_failures": (
                "Journal fsyncs that failed",
                lrn.journal_sync_failures,
            ),
            "azserve_learner_checkpoint_failures": (
                "Checkpoints that could not be written",
                lrn.checkpoint_failures,
            ),
        }
        for name, (doc, value) in totals.items():
            yield CounterMetricFamily(name, doc, value=float(value))
        current = {
            "azserve_learner_version": ("Latest weights version", lrn.versions.current),
            "azserve_replay_size": ("Positions in the replay window", m.size),
            "azserve_replay_reuse": ("Mean samples per position", m.reuse),
            "azserve_replay_policy_lag": ("Mean versions behind of sampled data", m.mean_lag),
            "azserve_learner_busy_ratio": ("Fraction of time training", lrn.status.learner_busy),
            "azserve_learner_loss": ("Last training loss", lrn.last.get("loss", float("nan"))),
            "azserve_learner_lr": ("Learning rate", lrn.last.get("lr", float("nan"))),
        }
        for name, (doc, value) in current.items():
            yield GaugeMetricFamily(name, doc, value=float(value))


def learner_registry(learner: Any) -> tuple[CollectorRegistry, Histogram]:
    """The learner process's registry and its training-step duration histogram (seconds)."""
    registry = role_registry("learner")
    registry.register(LearnerCollector(learner))
    step = Histogram(
        "azserve_learner_step_seconds", "Duration of one training step", buckets=SECONDS,
        registry=registry,
    )  # fmt: skip
    return registry, step
