"""``azserve serve``: the standalone model-serving endpoint."""

from __future__ import annotations

import logging

from azserve.app.schema import Config
from azserve.backends import make_backend
from azserve.errors import ComponentFailed, WeightsError
from azserve.lifecycle import stop_on_signals, until_stopped
from azserve.model.network import initial_weights
from azserve.model.weights import load_weights_file, state_dict_to_bytes
from azserve.server import InferenceServer, InitialWeights
from learner.checkpoint import list_checkpoints, load_checkpoint

log = logging.getLogger("azserve.serve")


def initial_for(
    cfg: Config, checkpoint: str | None, version: int, checkpoint_dir: str | None = None
) -> InitialWeights:
    """What a server starts with: the checkpoint's weights as ``version``; else the newest
    readable checkpoint in ``checkpoint_dir`` as the version it was saved at; else version 0's
    seeded random weights (the origin the learner shares, ``net.seed``)."""
    if checkpoint:
        log.info("serving %s as version %d", checkpoint, version)
        return InitialWeights(version, state_dict_to_bytes(load_weights_file(checkpoint)))
    if checkpoint_dir:
        for _, path in reversed(list_checkpoints(checkpoint_dir)):
            try:
                v = load_checkpoint(path).meta.version
                blob = state_dict_to_bytes(load_weights_file(path))
            except (WeightsError, OSError) as exc:  # truncated, or pruned meanwhile
                log.warning("skipping checkpoint %s: %s", path.name, exc)
                continue
            log.info("serving %s as version %d", path, v)
            return InitialWeights(v, blob)
    return InitialWeights(0, initial_weights(cfg.net))


async def serve(
    cfg: Config,
    checkpoint: str | None = None,
    version: int = 0,
    checkpoint_dir: str | None = None,
) -> None:
    """Run the inference server until SIGINT/SIGTERM, then shut down gracefully. A server
    whose owner task died raises ``ComponentFailed`` (the command exits non-zero)."""
    # config -> backend -> server (model spec, initial weights) -> socket
    server = InferenceServer(cfg.server, cfg.net.spec, make_backend(cfg.net, cfg.backend), cfg.auth)
    await server.start(initial_for(cfg, checkpoint, version, checkpoint_dir))
    stop = stop_on_signals()
    print(f"azserve serving {cfg.game} on {server.endpoint}", flush=True)
    failed = await until_stopped(stop, server.lifecycle)
    log.info("draining" if failed is None else "server failed: closing")
    await server.aclose()
    if failed is not None:
        raise ComponentFailed(f"inference server failed: {failed.error!r}")
