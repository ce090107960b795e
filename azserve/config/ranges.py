"""The allowed range of every numeric config key, checked when a config is loaded.

One table, so that a bad value is refused with the key, the value and the range before any
process starts (``tests/test_config.py`` checks that every numeric key has a row). A range is
``(low, high)`` with ``None`` for no bound; both ends are allowed. NaN is never allowed.
"""

from __future__ import annotations

import math
from typing import Any

from azserve.errors import ConfigError

INF = None
SEED = (0, 2**63 - 1)
PORT = (0, 65535)
POSITIVE_S = (1e-3, INF)
"""Durations that must pass (a zero period would spin)."""

RANGES: dict[str, tuple[float | None, float | None]] = {
    "net.in_channels": (1, 1024),
    "net.height": (1, 1024),
    "net.width": (1, 1024),
    "net.num_actions": (1, 1 << 20),
    "net.blocks": (0, 256),
    "net.channels": (1, 4096),
    "net.policy_channels": (1, 4096),
    "net.value_channels": (1, 4096),
    "net.value_hidden": (1, 1 << 16),
    "net.seed": SEED,
    "net.global_pool_every": (0, 256),
    "net.global_pool_channels": (1, 4096),
    "net.moves_left_discount": (0.0, 1.0),
    "server.max_batch_size": (1, 1 << 16),
    "server.max_queue_delay_us": (0, 10_000_000),
    "server.max_queued_rows": (1, 1 << 30),
    "server.max_versions": (1, 1024),
    "server.memory_budget_mb": (1.0, INF),
    "server.version_grace_s": (0.0, INF),
    "server.max_lease_s": (0.1, 86_400.0),
    "server.max_leases": (1, 1 << 24),
    "server.max_message_mb": (0.001, 1 << 16),
    "server.cache_mb": (0.0, 1 << 20),
    "server.max_queued_replies": (1, 1 << 24),
    "server.metrics_port": PORT,
    "server.status_interval_s": (0.0, INF),
    "backend.threads": (0, 1024),
    "backend.torch.max_threads": (0, 1024),
    "backend.torch.threads_interval_s": POSITIVE_S,
    "backend.triton.max_inflight": (1, 1024),
    "backend.triton.keep_versions": (1, 1024),
    "backend.triton.instance_count": (1, 1024),
    "backend.triton.request_timeout_s": POSITIVE_S,
    "client.max_rows": (1, 1 << 16),
    "client.retry_after_s": POSITIVE_S,
    "client.request_timeout_s": POSITIVE_S,
    "client.heartbeat_s": (0.01, INF),
    "client.lease_s": (0.01, 86_400.0),
    "client.catch_up_s": (0.0, 86_400.0),
    "mcts.num_simulations": (1, 1 << 20),
    "mcts.c_puct": (0.0, INF),
    "mcts.dirichlet_alpha": (0.0, INF),
    "mcts.dirichlet_fraction": (0.0, 1.0),
    "mcts.temperature": (0.0, INF),
    "mcts.temperature_moves": (0, 1 << 20),
    "mcts.leaves_in_flight": (1, 1024),
    "mcts.virtual_loss": (0.0, INF),
    "mcts.fpu_reduction": (0.0, 2.0),
    "mcts.root_fpu_reduction": (0.0, 2.0),
    "mcts.resign_threshold": (-2.0, 1.0),
    "mcts.resign_min_moves": (0, 1 << 20),
    "mcts.no_resign_fraction": (0.0, 1.0),
    "mcts.cap_win_margin": (0.0, INF),
    "mcts.adjudicated_value": (0.0, 1.0),
    "mcts.num_sampled_actions": (1, 1 << 20),
    "mcts.c_visit": (0.0, INF),
    "mcts.c_scale": (0.0, INF),
    "mcts.full_search_fraction": (0.0, 1.0),
    "mcts.fast_simulations": (1, 1 << 20),
    "actors.processes": (1, 4096),
    "actors.cache_mb": (0.0, 1 << 20),
    "actors.games": (1, 1 << 20),
    "actors.max_outbox": (1, 1 << 24),
    "actors.resend_after_s": POSITIVE_S,
    "actors.max_resend_after_s": POSITIVE_S,
    "actors.drain_timeout_s": (0.0, INF),
    "actors.version_wait_s": (0.0, INF),
    "actors.max_games": (0, INF),
    "actors.status_interval_s": (0.0, INF),
    "actors.seed": SEED,
    "actors.metrics_port": PORT,
    "actors.metrics_index": (-1, 65535),
    "actors.material_ahead_plies": (0, 1 << 16),
    "replay.capacity": (1, 1 << 32),
    "replay.max_policy_lag": (0, 1 << 20),
    "replay.reuse_target": (1e-6, INF),
    "replay.min_size": (0, 1 << 32),
    "replay.seed": SEED,
    "replay.policy_width": (-1, 1 << 16),
    "trainer.batch_size": (1, 1 << 20),
    "trainer.lr": (1e-12, INF),
    "trainer.momentum": (0.0, 1.0),
    "trainer.adam_beta2": (0.0, 1.0),
    "trainer.weight_decay": (0.0, INF),
    "trainer.value_weight": (0.0, INF),
    "trainer.ownership_weight": (0.0, INF),
    "trainer.score_weight": (0.0, INF),
    "trainer.material_ahead_weight": (0.0, INF),
    "trainer.material_ahead_plies": (1, 1 << 16),
    "trainer.moves_left_weight": (0.0, INF),
    "trainer.reply_weight": (0.0, INF),
    "trainer.total_steps": (1, INF),
    "trainer.lr_final_ratio": (0.0, 1.0),
    "trainer.lr_anneal_fraction": (0.0, 1.0),
    "trainer.run_start_unix": (0.0, INF),
    "trainer.run_end_unix": (0.0, INF),
    "trainer.lr_gamma": (0.0, INF),
    "trainer.warmup_steps": (0, INF),
    "trainer.grad_clip": (1e-12, INF),
    "trainer.publish_every": (1, INF),
    "trainer.seed": SEED,
    "checkpoint.keep_last": (1, INF),
    "checkpoint.keep_every": (0, INF),
    "learner.publish_timeout_s": POSITIVE_S,
    "learner.publish_wait_s": POSITIVE_S,
    "learner.threads": (0, 1024),
    "learner.status_interval_s": (0.0, INF),
    "learner.log_every": (1, INF),
    "learner.max_steps": (0, INF),
    "learner.dedup_capacity": (1, 1 << 32),
    "learner.max_message_bytes": (1024, INF),
    "learner.close_linger_ms": (0, 60_000),
    "learner.bind_retry_s": (0.0, INF),
    "learner.journal_sync_ms": (0.0, 60_000.0),
    "learner.processes": (1, 256),
    "learner.rank_timeout_s": (1.0, 86_400.0),
    "learner.metrics_port": PORT,
    "train.minutes": (0.0, INF),
    "train.steps": (0, INF),
    "train.games": (0, INF),
    "train.max_restarts": (0, INF),
    "train.server_threads": (0, 1024),
    "train.learner_threads": (0, 1024),
    "train.status_interval_s": POSITIVE_S,
    "train.eval_every_s": (0.0, INF),
    "eval.sims": (0, 1 << 20),
    "eval.c_puct": (0.0, INF),
    "eval.fpu_reduction": (0.0, 2.0),
    "eval.match_games": (0, INF),
    "eval.match_sims": (0, 1 << 20),
    "eval.c4_limit": (0, INF),
    "ladder.games": (0, 1_000_000),
    "ladder.share": (0.01, 1.0),
    "ladder.sims": (0, 1 << 20),
    "ladder.max_checkpoints": (1, 10_000),
    "autopilot.interval_s": (0.5, INF),
    "autopilot.start_batches": (0.01, 1024.0),
    "autopilot.min_games": (1, 1 << 20),
    "autopilot.max_games": (0, 1 << 20),
    "autopilot.busy_low": (0.0, 1.0),
    "autopilot.busy_high": (0.0, 1.0),
    "autopilot.full_batch": (0.01, 1.0),
    "autopilot.efficiency": (0.05, 1.0),
    "autopilot.decrease": (0.05, 0.95),
    "autopilot.reuse_min": (0.01, 1000.0),
    "autopilot.reuse_max": (0.01, 1000.0),
    "autopilot.reuse_interval_s": (1.0, INF),
    "autopilot.learner_busy_low": (0.0, 1.0),
    "autopilot.learner_busy_high": (0.0, 1.0),
    "autopilot.reuse_step": (1.05, 10.0),
    "autopilot.max_learner_threads": (0, 1024),
}


def check_value(key: str, x: Any) -> None:
    """Raise ``ConfigError`` naming the key, the value and the range when numeric ``x`` is
    outside the row of ``key`` (``section.key``, ``section.table.key``) in ``RANGES``."""
    if isinstance(x, bool) or not isinstance(x, (int, float)) or key not in RANGES:
        return
    lo, hi = RANGES[key]
    if math.isnan(x) or (lo is not None and x < lo) or (hi is not None and x > hi):
        raise ConfigError(f"{key}={x!r}: must be in [{_fmt(lo)}, {_fmt(hi)}]")


def _fmt(bound: float | None) -> str:
    if bound is None:
        return "inf"
    return f"{bound:,}" if isinstance(bound, int) else f"{bound:g}"
