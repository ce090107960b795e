"""``azserve serve``: the standalone model-serving endpoint."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from azserve.backends import make_backend
from azserve.config.load import apply_overrides, from_dict, read_toml
from azserve.config.schema import Config, config_from_data
from azserve.errors import ComponentFailed, ConfigError, WeightsError
from azserve.lifecycle import stop_on_signals, until_stopped
from azserve.model.network import build_net, initial_weights
from azserve.model.spec import NetConfig
from azserve.model.weights import load_strict, load_weights_file, state_dict_to_bytes
from azserve.server import InferenceServer, InitialWeights
from learner.checkpoint import CheckpointMeta, list_checkpoints, load_checkpoint

log = logging.getLogger("azserve.serve")

_RUN_ONLY = {"server": ("bind",), "client": ("server",)}
"""Keys of a checkpoint's saved config that belong to the run that wrote it (its private ipc
sockets), not to a server started from the checkpoint later: they fall back to the defaults."""


def serve_config(
    config_path: str | None, overrides: Sequence[str], checkpoint: str | None
) -> Config:
    """The served config: ``config_path`` when given, else the one a learner checkpoint
    carries (less its run's endpoints), with ``overrides`` applied."""
    if config_path:
        data: dict[str, Any] = read_toml(config_path)
    else:
        assert checkpoint is not None
        meta = _meta(checkpoint)
        if meta is None:
            raise ConfigError(f"{checkpoint} is plain weights and carries no config: pass --config")
        data = {k: dict(v) if isinstance(v, dict) else v for k, v in meta.config.items()}
        for section, keys in _RUN_ONLY.items():
            for key in keys:
                data.get(section, {}).pop(key, None)
    return config_from_data(apply_overrides(data, list(overrides)))


def _meta(path: str) -> CheckpointMeta | None:
    """A learner checkpoint's metadata; None for plain safetensors weights. A file that is not
    safetensors at all raises one ``WeightsError`` line naming it."""
    try:
        return load_checkpoint(path).meta
    except WeightsError as exc:
        if "not an azserve checkpoint" in str(exc):
            return None
        raise WeightsError(f"{path}: not a safetensors weights file or checkpoint") from exc


def _describe(game: str, net: NetConfig) -> str:
    return f"{game} (obs {list(net.obs_shape)}, {net.num_actions} actions, {net.blocks}x{net.channels} net)"


def checked_weights(cfg: Config, path: str) -> tuple[bytes, CheckpointMeta | None]:
    """The weights of ``path`` as safetensors bytes, checked against the configured net. A
    checkpoint of another game or shape is one ``WeightsError`` line naming both sides."""
    meta = _meta(path)
    if meta is not None:
        saved = meta.config
        saved_net = from_dict(NetConfig, saved.get("net", {}), "net")
        game = saved.get("game", "?")
        if game != cfg.game or saved_net.spec != cfg.net.spec:
            raise WeightsError(
                f"{path} holds a {_describe(game, saved_net)}, but the config serves "
                f"{_describe(cfg.game, cfg.net)}"
            )
    state = load_weights_file(path)
    load_strict(build_net(cfg.net), state, f"weights in {path}")
    return state_dict_to_bytes(state), meta


def initial_for(
    cfg: Config, checkpoint: str | None, version: int | None, checkpoint_dir: str | None = None
) -> InitialWeights:
    """What a server starts with: the checkpoint's weights as ``version`` (None: the version
    it was saved at, 0 for plain weights); else the newest readable checkpoint in
    ``checkpoint_dir`` as the version it was saved at; else version 0's seeded random weights
    (the origin the learner shares, ``net.seed``)."""
    if checkpoint:
        blob, meta = checked_weights(cfg, checkpoint)
        if version is None:
            version = meta.version if meta is not None else 0
        log.info("serving %s as version %d", checkpoint, version)
        return InitialWeights(version, blob)
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
    return InitialWeights(version or 0, initial_weights(cfg.net))


async def serve(
    cfg: Config,
    checkpoint: str | None = None,
    version: int | None = None,
    checkpoint_dir: str | None = None,
) -> None:
    """Run the inference server until SIGINT/SIGTERM, then shut down gracefully. A server
    whose owner task died raises ``ComponentFailed`` (the command exits non-zero)."""
    initial = initial_for(cfg, checkpoint, version, checkpoint_dir)
    # config -> backend -> server (model spec, initial weights) -> socket
    server = InferenceServer(cfg.server, cfg.net.spec, make_backend(cfg.net, cfg.backend), cfg.auth)
    await server.start(initial)
    stop = stop_on_signals()
    print(
        f"azserve serving {cfg.game} on {server.endpoint} (weights version {initial.version})",
        flush=True,
    )
    failed = await until_stopped(stop, server.lifecycle)
    log.info("draining" if failed is None else "server failed: closing")
    await server.aclose()
    if failed is not None:
        raise ComponentFailed(f"inference server failed: {failed.error!r}")
