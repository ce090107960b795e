"""CURVE across hosts: a real ``azserve serve`` in one network namespace, bound to that
namespace's address with the server's own key pair, and clients in another namespace. Each
role's pair is made by ``azserve keys --name`` in its own host's directory, and only public
files are copied between hosts (``azserve.keys.authorize``), as the launcher does.

Checked: an authenticated actor host is served (a real ``azserve actors`` process and a direct
client); a peer without keys and a peer with an unlisted key are refused and counted; a
non-learner key's ``load`` is refused and counted while the learner's load succeeds and serving
goes on; ``azserve keys`` will not overwrite a pair without ``--force``.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import zmq.auth

from tests.netns import NetnsHost

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(240)]

REPO = Path(__file__).resolve().parent.parent
TTT = REPO / "configs" / "tictactoe.toml"
PORT = 5555


def azserve(*args: str) -> list[str]:
    """The ``azserve`` script next to this interpreter."""
    return [str(Path(sys.executable).with_name("azserve")), *args]


def probe(spec: dict[str, Any]) -> dict[str, Any]:
    """Runs on the client host (``python -c``): every client of the test, in order. Returns
    what each saw (JSON-able)."""
    import numpy as np

    from azserve import RemoteError, RequestTimeout, SyncClient
    from azserve.auth import AuthConfig

    endpoint = spec["endpoint"]
    actor = AuthConfig(**spec["actor"])
    learner = AuthConfig(**spec["learner"]).as_learner()
    obs = np.zeros((2, 2, 3, 3), np.uint8)
    seen: dict[str, Any] = {}
    with SyncClient(endpoint, timeout_s=90, auth=actor) as c:
        seen["first_eval_version"] = c.evaluate(obs)[2]  # waits for the server to come up
    for name in ("none", "stranger"):
        with SyncClient(endpoint, timeout_s=1.5, auth=AuthConfig(**spec[name])) as c:
            try:
                c.ping()
                seen[name] = "answered"
            except RequestTimeout:
                seen[name] = "no reply"
    with SyncClient(endpoint, timeout_s=30, auth=actor) as c:
        try:
            c.load_weights(1, Path(spec["blob"]).read_bytes())
            seen["actor_load"] = "loaded"
        except RemoteError as exc:
            seen["actor_load"] = f"{exc.type}: {exc.message}"
        seen["eval_after_refused_load"] = c.evaluate(obs)[2]
        with SyncClient(endpoint, timeout_s=30, auth=learner) as lc:
            seen["learner_load_version"] = lc.load_weights(
                1, Path(spec["blob"]).read_bytes()
            ).version
        seen["eval_after_learner_load"] = c.evaluate(obs)[2]
        # Refusals are counted as the handshakes fail; the refused peers are gone by now.
        deadline = time.monotonic() + 30
        while True:
            auth_status = c.status()["auth"]
            refused = auth_status["auth_refused"]
            if min(refused.values()) > 0 or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        seen["auth"] = auth_status
        seen["requests"] = c.status()["requests"]
    return seen


def _run_probe(host: NetnsHost, spec: dict[str, Any]) -> dict[str, Any]:
    code = "import json, sys; from tests.test_cluster_auth import probe; "
    code += "print(json.dumps(probe(json.loads(sys.argv[1]))))"
    done = host.run([sys.executable, "-c", code, json.dumps(spec)], cwd=REPO, timeout=150)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def _keys(host: NetnsHost, directory: Path, name: str) -> subprocess.CompletedProcess[str]:
    return host.run(azserve("keys", "--dir", str(directory), "--name", name), cwd=REPO)


def _spawn(host: NetnsHost, argv: list[str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return host.popen(argv, stdout=out, stderr=subprocess.STDOUT, cwd=REPO)


def _stop(proc: subprocess.Popen[bytes]) -> int:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait()


def test_curve_across_namespaces(netns_hosts, tmp_path: Path) -> None:
    from azserve.config.schema import load_config
    from azserve.keys import authorize
    from azserve.model.network import build_net
    from azserve.model.weights import state_dict_to_bytes

    server_host, actor_host = netns_hosts(2)
    # One directory per host; the learner's pair lives with the server, as in a small cluster.
    srv, act, out = tmp_path / "server-host", tmp_path / "actor-host", tmp_path / "elsewhere"

    # Each pair is made on its own host; a second `azserve keys` there refuses to overwrite.
    for host, d, name in [
        (server_host, srv, "server"),
        (server_host, srv, "learner"),
        (actor_host, act, "actors-b"),
        (actor_host, out, "stranger"),
    ]:
        made = _keys(host, d, name)
        assert made.returncode == 0, made.stderr
        assert f"{d / name}.key  public" in made.stdout
    secret_before = (srv / "server.key_secret").read_bytes()
    again = _keys(server_host, srv, "server")
    assert again.returncode == 2 and "already exists" in again.stderr and "--force" in again.stderr
    assert (srv / "server.key_secret").read_bytes() == secret_before

    # Only public certificates cross: the actor's to the server, the server's and the
    # learner's to the actor host.
    authorize(act / "actors-b.key", srv / "authorized")
    authorize(srv / "server.key", act / "received")
    authorize(srv / "learner.key", act / "received")
    assert not list((act / "received").glob("*secret*"))

    endpoint = f"tcp://{server_host.address}:{PORT}"
    server = _spawn(
        server_host,
        azserve(
            "serve", "--config", str(TTT), "--log-level", "WARNING",
            "--set", f"server.bind={endpoint}",
            "--set", "backend.device=cpu",
            "--set", f"auth.server_secret_key={srv / 'server.key_secret'}",
            "--set", f"auth.client_keys_dir={srv / 'authorized'}",
            "--set", f"auth.learner_public_key={srv / 'learner.key'}",
        ),
        tmp_path / "serve.log",
    )  # fmt: skip
    cfg = load_config(TTT, [])
    blob = tmp_path / "v1.safetensors"
    blob.write_bytes(state_dict_to_bytes(build_net(cfg.net, seed=1).state_dict()))
    actor = {
        "client_secret_key": str(act / "actors-b.key_secret"),
        "server_public_key": str(act / "received" / "server.key"),
    }
    try:
        seen = _run_probe(
            actor_host,
            {
                "endpoint": endpoint,
                "blob": str(blob),
                "actor": actor,
                # The learner's own pair, on the server's host (its client of the server).
                "learner": {
                    "learner_secret_key": str(srv / "learner.key_secret"),
                    "server_public_key": str(srv / "server.key"),
                },
                # No keys at all (our clients refuse that off loopback; a stranger's need not).
                "none": {"allow_insecure_remote": True},
                "stranger": {
                    "client_secret_key": str(out / "stranger.key_secret"),
                    "server_public_key": str(act / "received" / "server.key"),
                },
            },
        )
        assert seen["first_eval_version"] == 0
        assert seen["none"] == seen["stranger"] == "no reply"
        assert seen["actor_load"].startswith("Unauthorized: load refused"), seen
        assert seen["eval_after_refused_load"] == 0  # refused, and still serving
        assert seen["learner_load_version"] == 1
        assert seen["eval_after_learner_load"] == 1
        auth = seen["auth"]
        assert auth["curve"] is True and auth["loads_refused"] == 1
        assert auth["auth_refused"]["bad_handshake"] >= 1  # the peer without keys
        assert auth["auth_refused"]["unknown_key"] >= 1  # the stranger
        stranger_key = zmq.auth.load_certificate(out / "stranger.key")[0].decode()
        assert list(auth["auth_refused_keys"]) == [stranger_key]

        # A real actor host: self-play against the server across the namespaces.
        actors = _spawn(
            actor_host,
            azserve(
                "actors", "--config", str(TTT), "--id", "b0", "--log-level", "WARNING",
                "--set", f"client.server={endpoint}",
                "--set", "actors.sink=null",
                "--set", "actors.games=8",
                "--set", f"auth.client_secret_key={actor['client_secret_key']}",
                "--set", f"auth.server_public_key={actor['server_public_key']}",
            ),
            tmp_path / "actors.log",
        )  # fmt: skip
        try:
            assert _served_requests(actor_host, endpoint, actor, actors, seen["requests"] + 10)
        finally:
            assert _stop(actors) == 0, (tmp_path / "actors.log").read_text()
    finally:
        code = _stop(server)
    assert code == 0, (tmp_path / "serve.log").read_text()
    assert server_host.pids() == [] and actor_host.pids() == []


def _served_requests(
    host: NetnsHost,
    endpoint: str,
    auth: dict[str, str],
    actors: subprocess.Popen[bytes],
    at_least: int,
) -> bool:
    """Whether the server's eval request count reaches ``at_least`` within a minute (polled
    from ``host``): only the actors process is evaluating by then."""
    code = (
        "import json, sys, time\n"
        "from azserve import SyncClient\nfrom azserve.auth import AuthConfig\n"
        "auth = AuthConfig(**json.loads(sys.argv[2]))\n"
        "with SyncClient(sys.argv[1], timeout_s=10, auth=auth) as c:\n"
        "    deadline = time.monotonic() + 60\n"
        "    while (n := c.status()['requests']) < int(sys.argv[3]):\n"
        "        if time.monotonic() > deadline:\n"
        "            sys.exit(f'{n} requests served')\n"
        "        time.sleep(0.2)\n"
    )
    argv = [sys.executable, "-c", code, endpoint, json.dumps(auth), str(at_least)]
    done = host.run(argv, cwd=REPO, timeout=90)
    assert actors.poll() is None, "the actors process exited"
    assert done.returncode == 0, done.stderr
    return True
