"""CURVE: an authorized client is served; a client without keys, or with a key the server does
not know, gets nothing and is counted; weights load only from the learner's key; a
network-facing bind without keys refuses to start and names the key; key files are never
overwritten without ``force`` and public-key copies never carry a secret."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
import zmq.auth

from azserve import (
    AzserveError,
    ConfigError,
    InferenceServer,
    RemoteError,
    RequestTimeout,
    SyncClient,
)
from azserve.auth import AuthConfig
from azserve.keys import authorize, create_keys, create_pair, public_certificate
from tests.conftest import (
    MakeClient,
    MakeControl,
    MakeServer,
    Reference,
    positions,
    weights_blob,
)

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
        learner_public_key=str(keys / "keys" / "learner.key"),
    )


def learner_auth(keys: Path) -> AuthConfig:
    """The learner's side: its own pair for the trajectory socket and for publishing."""
    return AuthConfig(
        learner_secret_key=str(keys / "keys" / "learner.key_secret"),
        client_keys_dir=str(keys / "keys" / "authorized"),
        server_public_key=str(keys / "keys" / "server.key"),
    )


def client_auth(keys: Path, secret: Path) -> AuthConfig:
    return AuthConfig(
        client_secret_key=str(secret),
        server_public_key=str(keys / "keys" / "server.key"),
        learner_public_key=str(keys / "keys" / "learner.key"),
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


async def test_status_command_reaches_a_curve_server_with_keys(
    make_server: MakeServer, keys: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from azserve.cli.main import main

    server = await make_server(auth=server_auth(keys))
    argv = ["status", server.endpoint, "--server-key", str(keys / "keys" / "server.key")]
    argv += ["--client-key", str(keys / "keys" / "actor.key_secret")]
    assert await asyncio.to_thread(main, argv) == 0
    assert (
        json.loads(capsys.readouterr().out)["max_batch_size"] == server.status()["max_batch_size"]
    )
    # without the keys: no answer (the server drops the handshake), said in one line
    assert await asyncio.to_thread(main, ["status", server.endpoint, "--timeout", "0.5"]) != 0
    assert "no reply" in capsys.readouterr().err


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
        auth=learner_auth(keys),
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
        deadline = asyncio.get_running_loop().time() + 10
        while receiver.stats().auth_refused == 0:  # the sender without keys, counted
            assert asyncio.get_running_loop().time() < deadline
            await asyncio.sleep(0.02)
    finally:
        await receiver.aclose()


async def _refusals(server: InferenceServer, reason: str, timeout_s: float = 10.0) -> int:
    """The server's count of refused handshakes for ``reason``, once it is non-zero."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while (n := server.status()["auth"]["auth_refused"][reason]) == 0:
        assert loop.time() < deadline, server.status()["auth"]
        await asyncio.sleep(0.02)
    return n


@pytest.mark.parametrize(
    ("who", "reason"),
    [
        ("no keys", "bad_handshake"),
        ("unknown key", "unknown_key"),
        ("wrong server key", "bad_handshake"),
    ],
)
async def test_refused_peers_are_counted_by_reason(
    make_server: MakeServer, make_client: MakeClient, keys: Path, who: str, reason: str
) -> None:
    server = await make_server(auth=server_auth(keys))
    actor = keys / "keys" / "actor.key_secret"
    auth = {
        "no keys": None,
        "unknown key": client_auth(keys, keys / "strangers" / "stranger.key_secret"),
        # The actor's own (listed) pair, but a stranger's key taken for the server's.
        "wrong server key": AuthConfig(
            client_secret_key=str(actor),
            server_public_key=str(keys / "strangers" / "stranger.key"),
        ),
    }[who]
    client = await make_client(server.endpoint, auth=auth, start=False)
    await client.start(wait_ready=False)  # it connects (and is refused) in the background
    assert await _refusals(server, reason) >= 1
    status = server.status()
    assert status["requests"] == 0 and status["auth"]["curve"] is True
    refused_keys = status["auth"]["auth_refused_keys"]
    if reason == "unknown_key":
        stranger = zmq.auth.load_certificate(keys / "strangers" / "stranger.key")[0].decode()
        assert list(refused_keys) == [stranger]
    else:
        assert refused_keys == {}
    labels = {"model": server.cfg.model}
    exported = server.metrics.prom.get_sample_value("azserve_auth_refused_total", labels)
    assert exported == sum(status["auth"]["auth_refused"].values())


async def test_load_only_from_the_learner_key_and_serving_goes_on(
    make_server: MakeServer,
    make_client: MakeClient,
    make_control: MakeControl,
    keys: Path,
    ref: Reference,
) -> None:
    server = await make_server(auth=server_auth(keys))
    actor = client_auth(keys, keys / "keys" / "actor.key_secret")
    intruder = await make_control(server.endpoint, auth=actor)
    with pytest.raises(RemoteError, match="Unauthorized: load refused: key .* not the learner"):
        await intruder.load_weights(1, weights_blob(seed=1))
    assert server.status()["auth"]["loads_refused"] == 1
    assert server.residency.latest == 0
    # The same key still reads status and gets evaluations.
    assert (await intruder.status())["auth"]["loads_refused"] == 1
    client = await make_client(server.endpoint, auth=actor)
    obs = positions(2)
    assert ref.matches(obs, *(await client.evaluate(obs)))
    # The learner's key (not in client_keys_dir: a server admits it on its own) loads.
    learner = await make_control(server.endpoint, auth=learner_auth(keys).as_learner())
    loaded = await learner.load_weights(1, weights_blob(seed=1))
    assert loaded.version == 1 and server.residency.latest == 1
    assert server.status()["auth"]["loads_refused"] == 1
    labels = {"model": server.cfg.model}
    assert server.metrics.prom.get_sample_value("azserve_loads_refused_total", labels) == 1


async def test_loopback_without_keys_loads_from_anyone(
    make_server: MakeServer, make_control: MakeControl
) -> None:
    server = await make_server()
    control = await make_control(server.endpoint)
    assert (await control.load_weights(1, weights_blob(seed=1))).version == 1
    assert server.status()["auth"] == {"curve": False, "loads_refused": 0}


async def test_curve_server_needs_the_learner_key(make_server: MakeServer, keys: Path) -> None:
    auth = AuthConfig(**{**server_auth(keys).__dict__, "learner_public_key": ""})
    with pytest.raises(ConfigError, match="auth.learner_public_key is empty"):
        await make_server(auth=auth)


async def test_learner_socket_off_loopback_needs_the_learner_key() -> None:
    from learner.config import LearnerConfig
    from learner.receiver import TrajectoryReceiver

    receiver = TrajectoryReceiver(
        LearnerConfig(bind="tcp://0.0.0.0:*"), (2, 3, 3), 9, lambda *a: None
    )
    with pytest.raises(ConfigError, match="auth.learner_secret_key is empty"):
        await receiver.start()


async def test_each_server_by_its_own_public_key(
    make_server: MakeServer, make_control: MakeControl, tmp_path: Path, keys: Path
) -> None:
    """Two servers, two secret keys: one learner config reaches both (server_public_keys)."""
    other = tmp_path / "other"
    create_pair(other, "server")
    first = await make_server(auth=server_auth(keys))
    second = await make_server(
        auth=AuthConfig(
            **{**server_auth(keys).__dict__, "server_secret_key": str(other / "server.key_secret")}
        )
    )
    learner = AuthConfig(
        **{
            **learner_auth(keys).__dict__,
            "server_public_keys": (f"{second.endpoint}={other / 'server.key'}",),
        }
    ).as_learner()
    for server in (first, second):
        control = await make_control(server.endpoint, auth=learner)
        assert (await control.load_weights(1, weights_blob(seed=1))).version == 1


def test_malformed_server_public_keys_entry_names_it() -> None:
    auth = AuthConfig(server_public_keys=("tcp://h:1=a.key", "no-separator"))
    assert auth.server_key_for("tcp://h:1") == ("auth.server_public_keys[0]", "a.key")
    with pytest.raises(ConfigError, match=r"auth.server_public_keys\[1\]='no-separator'"):
        auth.server_key_for("tcp://other:1")


def test_key_pairs_are_never_overwritten_without_force(tmp_path: Path) -> None:
    public = create_pair(tmp_path, "actors-cpu0")
    secret = tmp_path / "actors-cpu0.key_secret"
    before = secret.read_bytes()
    assert secret.stat().st_mode & 0o077 == 0
    with pytest.raises(ConfigError, match="already exists.*--force"):
        create_pair(tmp_path, "actors-cpu0")
    assert secret.read_bytes() == before
    create_pair(tmp_path, "actors-cpu0", force=True)
    assert secret.read_bytes() != before
    assert zmq.auth.load_certificate(public)[0] == zmq.auth.load_certificate(secret)[0]
    with pytest.raises(ConfigError, match="key name"):
        create_pair(tmp_path, "../escape")


def test_a_set_is_never_overwritten_without_force(tmp_path: Path) -> None:
    create_keys(tmp_path, ["a"])
    server_secret = (tmp_path / "server.key_secret").read_bytes()
    with pytest.raises(ConfigError, match="already exists"):
        create_keys(tmp_path, ["b"])
    assert not (tmp_path / "b.key").exists()  # nothing written
    assert (tmp_path / "server.key_secret").read_bytes() == server_secret
    assert sorted(p.name for p in (tmp_path / "authorized").iterdir()) == ["a.key"]


def test_only_public_certificates_are_distributed(tmp_path: Path) -> None:
    public = create_pair(tmp_path, "learner")
    assert public_certificate(public) == public.read_bytes()
    with pytest.raises(ConfigError, match="holds a secret key"):
        authorize(tmp_path / "learner.key_secret", tmp_path / "authorized")
    assert not (tmp_path / "authorized").exists()
    (tmp_path / "junk.key").write_text("not a certificate")
    with pytest.raises(ConfigError, match="not a ZeroMQ certificate"):
        public_certificate(tmp_path / "junk.key")
    assert authorize(public, tmp_path / "authorized").read_bytes() == public.read_bytes()


def test_keys_command_one_role_and_force(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from azserve.cli.main import main

    d = str(tmp_path / "k")
    assert main(["keys", "--dir", d, "--name", "actors-cpu0"]) == 0
    out = capsys.readouterr().out
    assert f"{d}/actors-cpu0.key_secret  secret: stays on this host" in out
    assert f"{d}/actors-cpu0.key  public" in out
    assert sorted(p.name for p in (tmp_path / "k").iterdir()) == [
        "actors-cpu0.key",
        "actors-cpu0.key_secret",
    ]
    before = (tmp_path / "k" / "actors-cpu0.key_secret").read_bytes()
    assert main(["keys", "--dir", d, "--name", "actors-cpu0"]) == 2
    assert "already exists" in capsys.readouterr().err
    assert (tmp_path / "k" / "actors-cpu0.key_secret").read_bytes() == before
    assert main(["keys", "--dir", d, "--name", "actors-cpu0", "--force"]) == 0
    assert (tmp_path / "k" / "actors-cpu0.key_secret").read_bytes() != before
    assert main(["keys", "--dir", d, "--name", "x", "y"]) == 2
    assert "not both" in capsys.readouterr().err


def test_clients_refuse_the_network_without_a_server_key() -> None:
    from actors.config import ActorsConfig
    from actors.sender import TrajectorySender

    with pytest.raises(ConfigError, match=r"'tcp://192.0.2.7:5555' .* auth.server_public_key"):
        SyncClient("tcp://192.0.2.7:5555")
    with pytest.raises(ConfigError, match=r"'tcp://gpu0:5556' .* auth.learner_public_key"):
        TrajectorySender(ActorsConfig(learner="tcp://gpu0:5556"))
    insecure = AuthConfig(allow_insecure_remote=True)
    TrajectorySender(ActorsConfig(learner="tcp://gpu0:5556"), auth=insecure)
    SyncClient("tcp://192.0.2.7:5555", auth=insecure).close()


async def test_one_auth_table_serves_every_role(
    make_server: MakeServer, make_client: MakeClient, tmp_path: Path, ref: Reference
) -> None:
    """A host that runs every role (``azserve keys --dir D NAMES`` on one trusted machine) sets
    all the fields in one ``[auth]`` table: each part reads its role's keys only."""
    import numpy as np

    from actors.config import ActorsConfig
    from actors.sender import TrajectorySender
    from azserve.protocol import Trajectory
    from learner.config import LearnerConfig
    from learner.publisher import Publisher
    from learner.receiver import TrajectoryReceiver

    d = tmp_path / "k"
    create_keys(d, ["actors"])
    auth = AuthConfig(
        server_secret_key=str(d / "server.key_secret"),
        client_keys_dir=str(d / "authorized"),
        learner_public_key=str(d / "learner.key"),
        learner_secret_key=str(d / "learner.key_secret"),
        client_secret_key=str(d / "actors.key_secret"),
        server_public_key=str(d / "server.key"),
    )
    server = await make_server(auth=auth)
    publisher = Publisher([server.endpoint], auth=auth, timeout_s=10)
    await publisher.start()
    try:
        result = await publisher.publish(1, weights_blob(seed=1))  # as the learner
        assert list(result.acked_ms) == [server.endpoint], result.failed
    finally:
        await publisher.aclose()
    client = await make_client(server.endpoint, auth=auth)  # as an actor: served, no load
    obs = positions(3)
    assert ref.matches(obs, *(await client.evaluate(obs)), seed=1)
    got: list[int] = []
    receiver = TrajectoryReceiver(
        LearnerConfig(bind="tcp://127.0.0.1:*", close_linger_ms=0),
        (2, 3, 3),
        9,
        lambda msg, *arrays: got.append(msg.game_id),
        auth=auth,
    )
    await receiver.start()  # with the learner's pair, which the actors' senders expect
    sender = TrajectorySender(ActorsConfig(learner=receiver.endpoint), auth=auth)
    try:
        await sender.start()
        await sender.send(
            Trajectory(actor="a", game_id=7, game="tictactoe", version=1, length=1, result=1.0),
            np.zeros((1, 2, 3, 3), np.uint8),
            np.full((1, 9), 1 / 9, np.float32),
            np.ones(1, np.float32),
        )
        assert await sender.aclose() == 0
    finally:
        await receiver.aclose()
    assert got == [7] and receiver.stats().auth_refused == 0
    assert server.status()["auth"]["loads_refused"] == 0
