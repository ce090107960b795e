"""CURVE: an authorized client is served; a client without keys, or with a key the server does
not know, gets nothing; a network-facing bind without keys refuses to start and names the key."""

from __future__ import annotations

from pathlib import Path

import pytest
import zmq.auth

from azserve import AzserveError, ConfigError, RequestTimeout, SyncClient
from azserve.auth import AuthConfig, create_keys
from tests.conftest import MakeClient, MakeServer, Reference, positions

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def keys(tmp_path: Path) -> Path:
    """``server`` and ``actor`` certificates, ``actor`` authorized; ``stranger`` elsewhere."""
    create_keys(tmp_path / "keys", ["actor"])
    (tmp_path / "strangers").mkdir()
    zmq.auth.create_certificates(tmp_path / "strangers", "stranger")
    return tmp_path


def server_auth(keys: Path) -> AuthConfig:
    return AuthConfig(
        server_secret_key=str(keys / "keys" / "server.key_secret"),
        client_keys_dir=str(keys / "keys" / "authorized"),
    )


def client_auth(keys: Path, secret: Path) -> AuthConfig:
    return AuthConfig(
        client_secret_key=str(secret), server_public_key=str(keys / "keys" / "server.key")
    )


async def test_authorized_client_is_served(
    make_server: MakeServer, make_client: MakeClient, keys: Path, ref: Reference
) -> None:
    server = await make_server(auth=server_auth(keys))
    client = await make_client(
        server.endpoint, auth=client_auth(keys, keys / "keys" / "actor.key_secret")
    )
    obs = positions(4)
    assert ref.matches(obs, *(await client.evaluate(obs)))


async def test_client_without_keys_gets_nothing(
    make_server: MakeServer, make_client: MakeClient, keys: Path
) -> None:
    server = await make_server(auth=server_auth(keys))
    with pytest.raises(RequestTimeout, match="no server answered"):
        await make_client(server.endpoint, timeout_s=0.5)
    assert server.status()["requests"] == 0


async def test_client_with_unknown_key_gets_nothing(
    make_server: MakeServer, make_client: MakeClient, keys: Path
) -> None:
    server = await make_server(auth=server_auth(keys))
    stranger = client_auth(keys, keys / "strangers" / "stranger.key_secret")
    with pytest.raises(RequestTimeout, match="no server answered"):
        await make_client(server.endpoint, auth=stranger, timeout_s=0.5)
    assert server.status()["requests"] == 0


@pytest.mark.parametrize("bind", ["tcp://0.0.0.0:*", "tcp://*:5555", "tcp://example.org:5555"])
async def test_network_bind_without_keys_raises(make_server: MakeServer, bind: str) -> None:
    with pytest.raises(ConfigError, match="auth.server_secret_key is empty"):
        await make_server(bind)


@pytest.mark.parametrize(
    ("field", "path", "match"),
    [
        ("server_secret_key", "keys/missing.key_secret", "certificate file not found"),
        ("server_secret_key", "keys/server.key", "holds no secret key"),
        ("client_keys_dir", "keys/nowhere", "not a directory"),
    ],
)
async def test_bad_server_key_config_names_the_key(
    make_server: MakeServer, keys: Path, field: str, path: str, match: str
) -> None:
    auth = AuthConfig(**{**server_auth(keys).__dict__, field: str(keys / path)})
    with pytest.raises(ConfigError, match=f"auth.{field}=.*{match}"):
        await make_server(auth=auth)


async def test_bad_client_key_config_names_the_key(make_client: MakeClient, keys: Path) -> None:
    auth = AuthConfig(server_public_key=str(keys / "keys" / "server.key"))  # no client secret
    with pytest.raises(ConfigError, match="auth.client_secret_key"):
        await make_client("tcp://127.0.0.1:1", auth=auth, timeout_s=0.5)


async def test_failed_bind_with_keys_does_not_hang(make_server: MakeServer, keys: Path) -> None:
    """The authenticator started for the socket is stopped when the bind fails (it used to keep
    the context from terminating, so start() never returned)."""
    first = await make_server(auth=server_auth(keys))
    with pytest.raises(AzserveError, match="cannot bind"):
        await make_server(first.endpoint, auth=server_auth(keys))


def test_sync_client_bad_key_config_names_the_key(keys: Path) -> None:
    auth = AuthConfig(server_public_key=str(keys / "keys" / "server.key"))  # no client secret
    with pytest.raises(ConfigError, match="auth.client_secret_key"):
        SyncClient("tcp://127.0.0.1:1", auth=auth)


async def test_trajectory_socket_needs_an_authorized_key(keys: Path) -> None:
    """The learner's trajectory ROUTER takes CURVE keys too: the authorized actor's games
    arrive, a sender without keys delivers nothing."""
    import asyncio

    import numpy as np

    from actors.config import ActorsConfig
    from actors.sender import TrajectorySender
    from azserve.protocol import Trajectory
    from learner.config import LearnerConfig
    from learner.receiver import TrajectoryReceiver

    got: list[int] = []
    receiver = TrajectoryReceiver(
        LearnerConfig(bind="tcp://127.0.0.1:*", close_linger_ms=0),
        (2, 3, 3),
        9,
        lambda msg, *arrays: got.append(msg.game_id),
        auth=server_auth(keys),
    )
    await receiver.start()
    arrays = (
        np.zeros((1, 2, 3, 3), np.uint8),
        np.full((1, 9), 1 / 9, np.float32),
        np.ones(1, np.float32),
    )
    good = TrajectorySender(
        ActorsConfig(learner=receiver.endpoint, drain_timeout_s=5.0),
        auth=client_auth(keys, keys / "keys" / "actor.key_secret"),
    )
    bad = TrajectorySender(ActorsConfig(learner=receiver.endpoint, drain_timeout_s=0.5))
    try:
        for i, s in ((1, good), (2, bad)):
            await s.start()
            await s.send(
                Trajectory(actor="a", game_id=i, game="tictactoe", version=0, length=1, result=1.0),
                *arrays,
            )
        assert await good.aclose() == 0
        assert await bad.aclose() == 1  # never acked
        await asyncio.sleep(0.1)
        assert got == [1]
    finally:
        await receiver.aclose()
