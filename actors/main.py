"""``azserve actors``: one actor process (K game coroutines, one EvalClient, one sink)."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import uuid
from typing import TYPE_CHECKING

from actors.selfplay import ActorsConfig, SelfPlay, SelfPlayStats
from actors.trajectory import SinkConfig, open_sink
from azserve.client import EvalClient
from azserve.errors import RequestTimeout

if TYPE_CHECKING:
    from azserve.schema import Config

log = logging.getLogger("actors")


def sink_config(cfg: ActorsConfig) -> SinkConfig:
    """The trajectory sink the actors section asks for."""
    if cfg.sink == "learner":
        return SinkConfig(endpoint=cfg.learner, max_outbox=cfg.max_outbox)
    if cfg.sink == "file":
        return SinkConfig(path=cfg.file, max_outbox=cfg.max_outbox)
    return SinkConfig(max_outbox=cfg.max_outbox)


async def run_actors(
    cfg: Config, actor_id: str | None = None, stop: asyncio.Event | None = None
) -> SelfPlayStats:
    """Run self-play until stopped (SIGINT/SIGTERM or ``stop``) or the game budget is spent."""
    # A fresh suffix per process lifetime: a restarted actor counts game ids from 0 again, and
    # the learner drops (actor, game_id) pairs it has seen.
    actor_id = f"{actor_id or socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    if stop is None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
    # server <- client <- games -> sink -> learner
    client = EvalClient(cfg.client, cfg.auth)
    await client.start(wait_ready=False)
    try:
        if not await wait_for_server(client, stop):
            return SelfPlayStats()
        sink = open_sink(sink_config(cfg.actors), auth=cfg.auth)
        await sink.start()
        selfplay = SelfPlay(cfg.game, cfg.actors, cfg.mcts, client, sink, actor_id)
        try:
            stats = await selfplay.run(stop)
        finally:
            undelivered = await sink.aclose()
    finally:
        await client.aclose()
    if undelivered:
        log.warning("%d trajectories were not delivered", undelivered)
    log.info("actor %s done: %d games, %d positions", actor_id, stats.games, stats.positions)
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
