"""``azserve actors``: one actor process (K game coroutines, one EvalClient, one sink).

Nothing here imports torch: an actor process is pure Python MCTS, numpy and ZeroMQ.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import os
import socket
import uuid

import zmq.asyncio

from actors.config import ActorsConfig
from actors.inflight import follow, wait_for_games
from actors.prom import actor_registry, metrics_port, sample_loop_lag
from actors.search import MCTSConfig
from actors.selfplay import SelfPlay, SelfPlayStats
from actors.sender import TrajectorySender
from actors.sinks import FileSink, NullSink, TrajectorySink
from azserve.auth import AuthConfig
from azserve.client import ClientConfig, EvalClient
from azserve.errors import ComponentFailed, RequestTimeout
from azserve.lifecycle import stop_on_signals
from azserve.prom import start_endpoint

log = logging.getLogger("actors")

SUMMARY_TAG = "actor summary:"
START_TAG = "actor started:"
"""Prefix of the JSON line an actor process logs when it ends."""


def open_sink(
    cfg: ActorsConfig,
    *,
    context: zmq.asyncio.Context | None = None,
    auth: AuthConfig | None = None,
) -> TrajectorySink:
    """The sink ``cfg.sink`` names: the learner at ``cfg.learner``, the file ``cfg.file``, or
    a counter."""
    if cfg.sink == "learner":
        return TrajectorySender(cfg, context=context, auth=auth)
    if cfg.sink == "file":
        return FileSink(cfg.file)
    return NullSink()


async def run_actors(
    game: str,
    actors: ActorsConfig,
    mcts: MCTSConfig,
    client_cfg: ClientConfig,
    auth: AuthConfig,
    actor_id: str | None = None,
    stop: asyncio.Event | None = None,
) -> SelfPlayStats:
    """Run self-play until stopped (SIGINT/SIGTERM or ``stop``) or the game budget is spent.
    Endpoints (``client_cfg.server``, ``actors.learner``) must be resolved."""
    # A fresh suffix per process lifetime: a restarted actor counts game ids from 0 again, and
    # the learner drops (actor, game_id) pairs it has seen.
    port = metrics_port(actors.metrics_port, actor_id, actors.metrics_index)
    actor_id = f"{actor_id or socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    # Parsed by azserve bench chaos (START_TAG): the games of one life are stored under this id.
    log.info("%s %s, %d game coroutines", START_TAG, actor_id, actors.games)
    if stop is None:
        stop = stop_on_signals()
    # server <- client <- games -> sink -> learner
    client = EvalClient(client_cfg, auth)
    await client.start(wait_ready=False)
    try:
        if not await wait_for_server(client, stop):
            return SelfPlayStats()
        # The autopilot's number, before the first game: sized games from the start, and a
        # restarted process starts where the run is, not at the configured count.
        first = await wait_for_games(actors.games_file, stop) if actors.games_file else None
        if first is not None:
            log.info("games in flight from %s: %d, lanes of %d", *(actors.games_file, *first))
            actors = dataclasses.replace(actors, games=first.games)
        elif actors.games_file and not stop.is_set():
            log.warning("nothing in %s: %d games in flight", actors.games_file, actors.games)
        sink = open_sink(actors, auth=auth)
        await sink.start()
        selfplay = SelfPlay(game, actors, mcts, client, sink, actor_id)
        if first is not None:
            selfplay.lane_rows = first.rows
        registry, lag = actor_registry(game, selfplay, sink)
        metrics = await start_endpoint(registry, actors.metrics_host, port, "actor")
        sampler = asyncio.create_task(sample_loop_lag(lag), name="actor-loop-lag")
        # games file -> games in flight (azserve train's autopilot)
        follower = (
            asyncio.create_task(
                follow(actors.games_file, lambda s: selfplay.set_games(*s)), name="games-file"
            )
            if actors.games_file
            else None
        )
        try:
            stats = await selfplay.run(stop)
        finally:
            sampler.cancel()
            if follower is not None:
                follower.cancel()
            if metrics is not None:
                metrics.close()
            undelivered = await sink.aclose()
    finally:
        await client.aclose()
    if client.lifecycle.error is not None:
        raise ComponentFailed(f"actor {actor_id}: {client.lifecycle.error!r}")
    if undelivered:
        log.warning("%d trajectories were not delivered", undelivered)
    log.info(
        "actor %s done: %d games, %d positions recorded of %d moves played",
        actor_id,
        stats.games,
        stats.positions,
        stats.moves,
    )
    sent = sink.stats()
    # One machine-readable line: the supervisor's final summary adds these up over actors.
    summary = {
        "actor": actor_id,
        "games": stats.games,
        "abandoned": stats.abandoned,
        "sent": sent.sent,
        "acked": sent.acked,
        "resent": sent.resent,
        "undelivered": undelivered,
        "cache": selfplay.cache.stats.as_dict() if selfplay.cache is not None else None,
        # Evaluation messages, and those sent sparse (client.sparse_policy).
        "evals": {"messages": client.stats.messages, "sparse": client.stats.sparse_messages},
        # The longest an evaluation waited for its reply, and a move for its game's version.
        "longest_wait_s": {
            "eval": round(client.stats.longest_wait_s, 3),
            "version": round(stats.longest_version_wait_s, 3),
        },
    }
    log.info("%s %s", SUMMARY_TAG, json.dumps(summary))
    return stats


async def wait_for_server(client: EvalClient, stop: asyncio.Event) -> bool:
    """Ping until the server answers (True) or ``stop`` is set (False). No deadline: the server
    may come up long after the actors (another host, CUDA start-up), and a stop must not wait."""
    waited = 0
    while not stop.is_set():
        try:
            await client.ping(timeout_s=1.0)
            return True
        except RequestTimeout:
            waited += 1
            if waited % 30 == 1:
                log.info("waiting for the inference server at %s (%d s)", client.cfg.server, waited)
    return False
