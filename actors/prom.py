"""An actor process's Prometheus metrics: self-play and sink counters read at scrape time, and
the event loop's lag (how late a 100 ms timer fires: the games' own compute starving the loop)
as a histogram in seconds."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from actors.games.compiled import live_trees
from azserve.prom import SECONDS, role_registry


class ActorCollector:
    """Counters of one actor process (``selfplay.stats``, ``sink.stats()``), by game."""

    def __init__(self, game: str, selfplay: Any, sink: Any) -> None:
        self.game, self.selfplay, self.sink = game, selfplay, sink

    def collect(self) -> Iterator[Metric]:
        st, sent = self.selfplay.stats, self.sink.stats()
        for name, doc, value in (
            ("azserve_actor_games", "Games finished", st.games),
            ("azserve_actor_positions", "Positions played", st.positions),
            ("azserve_actor_simulations", "MCTS simulations run", st.simulations),
            ("azserve_actor_evaluations", "Leaf evaluations received", st.evaluations),
            ("azserve_actor_resigned", "Games ended by resignation", st.resigned),
            (
                "azserve_actor_adjudicated",
                "Drawn games counted as won by adjudication",
                st.adjudicated,
            ),
            ("azserve_actor_trajectories_sent", "Trajectories sent", sent.sent),
            ("azserve_actor_trajectories_acked", "Trajectories acknowledged", sent.acked),
        ):
            family = CounterMetricFamily(name, doc, labels=["game"])
            family.add_metric([self.game], float(value))
            yield family
        abandoned = CounterMetricFamily(
            "azserve_actor_games_abandoned", "Games given up, by reason", labels=["game", "reason"]
        )
        for reason, n in sorted(st.abandoned.items()):
            abandoned.add_metric([self.game, reason], float(n))
        yield abandoned
        nodes, size = live_trees()
        for name, doc, value in (
            ("azserve_actor_tree_nodes", "Nodes held by the process's search trees", nodes),
            ("azserve_actor_tree_bytes", "Bytes held by the process's search trees", size),
        ):
            gauge = GaugeMetricFamily(name, doc, labels=["game"])
            gauge.add_metric([self.game], float(value))
            yield gauge


def actor_registry(game: str, selfplay: Any, sink: Any) -> tuple[CollectorRegistry, Histogram]:
    """The process's registry and its loop-lag histogram."""
    registry = role_registry("actor")
    registry.register(ActorCollector(game, selfplay, sink))
    lag = Histogram(
        "azserve_actor_loop_lag_seconds", "Lateness of a 100 ms event-loop timer",
        buckets=SECONDS, registry=registry,
    )  # fmt: skip
    return registry, lag


async def sample_loop_lag(lag: Histogram, period_s: float = 0.1) -> None:
    """Observe how late each ``period_s`` sleep wakes, until cancelled."""
    while True:
        t0 = time.monotonic()
        await asyncio.sleep(period_s)
        lag.observe(max(0.0, time.monotonic() - t0 - period_s))


def metrics_port(base: int, actor_id: str | None, index: int = -1) -> int:
    """``base + index`` (0: off); where ``index`` is -1, actor process *i* (``--id actor-i``,
    as ``azserve train`` names them) exports on ``base + i``, another id on ``base``."""
    if not base:
        return 0
    if index >= 0:
        return base + index
    m = re.search(r"(\d+)$", actor_id or "")
    return base + (int(m.group(1)) if m else 0)
