"""``azserve serve``: the standalone model-serving endpoint."""

from __future__ import annotations

import asyncio
import logging
import signal
from typing import Any

from azserve.schema import Config
from azserve.server import InferenceServer
from azserve.weights import load_weights_file

log = logging.getLogger("azserve.serve")


async def serve(cfg: Config, checkpoint: str | None = None, version: int = 0) -> None:
    """Run the inference server until SIGINT/SIGTERM, then shut down gracefully."""
    initial: dict[str, Any] = {"version": version}
    if checkpoint:
        initial["state"] = load_weights_file(checkpoint)
        log.info("serving %s as version %d", checkpoint, version)
    # config -> server (backend built from its section) -> socket
    server = InferenceServer(cfg.server, cfg.net, cfg.backend, cfg.auth)
    await server.start(initial)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    print(f"azserve serving {cfg.game} on {server.endpoint}", flush=True)
    await stop.wait()
    log.info("signal received: draining")
    await server.aclose()
