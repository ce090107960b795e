"""The Ray engine across a real network boundary: a Ray head and two workers, each in its own
network namespace (veth pairs on one bridge, as the ssh test has them), and ``azserve launch``
on the head with ``network = "auto"`` and CURVE keys that the launcher distributes through
Ray itself: a task on each node makes that node's pairs in its own keys directory and returns
public certificates only, and another task writes each node the public keys it needs.

Each namespace sees its own keys directory at the same path, as nodes with their own disks
do: ``ip netns exec`` bind-mounts ``/etc/netns/NAME/ENTRY`` over ``/etc/ENTRY``."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.netns import NetnsLan, unavailable

pytest.importorskip("ray")

REPO = Path(__file__).resolve().parents[1]
TTT = REPO / "configs" / "tictactoe.toml"
RAY = str(Path(sys.executable).with_name("ray"))

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(420)]


def ray_env(keys: Path) -> dict[str, str]:
    """Ray's own token authentication, on: its nodes talk over a network (the token is Ray's
    shared secret, made here, as `ray get-auth-token --generate` would)."""
    token = keys.with_name(keys.name + "-ray-token")
    if not token.exists():
        token.write_text(secrets.token_hex(32))
        token.chmod(0o600)
    return {
        **os.environ,
        "RAY_USAGE_STATS_ENABLED": "0",
        "RAY_AUTH_MODE": "token",
        "RAY_AUTH_TOKEN_PATH": str(token),
    }


@pytest.fixture
def ray_lan(netns_hosts) -> Iterator[tuple[NetnsLan, Path]]:  # type: ignore[no-untyped-def]
    """Three namespaces, each with its own ``/etc/azk-PID`` (the keys path of every node),
    running a Ray node: the head (resource ``head``) and workers ``east`` and ``west``."""
    if unavailable():
        pytest.skip(unavailable() or "")
    lan = netns_hosts(3)
    keys = Path(f"/etc/azk-{os.getpid()}")
    keys.mkdir(exist_ok=True)
    own = [Path("/etc/netns") / host.name / keys.name for host in lan]
    for d in own:
        d.mkdir(parents=True, exist_ok=True)
    env = ray_env(keys)
    node = [
        "--num-cpus",
        "1",
        "--object-store-memory",
        str(80 * 1024 * 1024),
        "--disable-usage-stats",
    ]
    head = lan[0].address
    try:
        for i, (host, res) in enumerate(zip(lan, ("head", "east", "west"), strict=True)):
            where = ["--head", "--port", "6379", "--include-dashboard", "false"] if i == 0 else [
                "--address", f"{head}:6379"]  # fmt: skip
            done = host.run(
                [
                    RAY,
                    "start",
                    *where,
                    "--node-ip-address",
                    host.address,
                    *node,
                    "--resources",
                    json.dumps({res: 1}),
                ],  # fmt: skip
                env=env,
                timeout=180,
            )
            assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        yield lan, keys
    finally:
        for host in lan:
            host.run([RAY, "stop", "--force"], env=env, timeout=120, check=False)
        for d in own:
            shutil.rmtree(d.parent, ignore_errors=True)
        shutil.rmtree(keys, ignore_errors=True)
        keys.with_name(keys.name + "-ray-token").unlink(missing_ok=True)


def test_ray_across_namespaces_with_keys_distributed_by_ray(
    ray_lan: tuple[NetnsLan, Path], tmp_path: Path
) -> None:
    lan, keys = ray_lan
    cluster = tmp_path / "ray.toml"
    cluster.write_text(
        f"""
engine = "ray"
network = "auto"
keys = "{keys}"
[ray]
address = "{lan[0].address}:6379"
[[server]]
name = "s0"
resources = {{head = 0.01}}
[learner]
resources = {{head = 0.01}}
[[actors]]
name = "east"
games = 16
resources = {{east = 0.01}}
[[actors]]
name = "west"
games = 16
resources = {{west = 0.01}}
"""
    )
    run_dir = tmp_path / "run"
    argv = [
        sys.executable, "-m", "azserve.cli.main", "launch", "--cluster", str(cluster),
        "--config", str(TTT), "--run-dir", str(run_dir), "--minutes", "0.6", "--no-progress",
        "--set", "train.eval_every_s=0", "--set", "eval.match_games=2", "--set", "eval.sims=4",
        "--set", "train.status_interval_s=2",
    ]  # fmt: skip
    env = ray_env(keys)
    done = lan[0].run(argv, cwd=REPO, env=env, timeout=360)
    out = done.stdout[-4000:] + done.stderr[-4000:]
    assert done.returncode == 0, out
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["games_stored"] > 0, summary
    # both groups played, from their own namespaces, over CURVE
    for group in ("east", "west"):
        log = (run_dir / "logs" / "ray" / f"actor-{group}-0.log").read_text()
        assert "games/s" in log and "actor summary" in log, log[-2000:]
    assert "public key authorized/actors-east.node-" in done.stdout, done.stdout[:4000]

    def files(host_index: int) -> dict[str, list[str]]:
        base = Path("/etc/netns") / lan[host_index].name / keys.name
        return {
            "secret": sorted(p.name for p in base.glob("*.key_secret")),
            "public": sorted(p.name for p in base.glob("*.key")),
            "authorized": sorted(p.name.split(".node-")[0] for p in base.glob("authorized/*")),
        }

    head, east, west = files(0), files(1), files(2)
    # each secret key stayed on the node that made it; nothing else holds it
    assert head["secret"] == ["learner.key_secret", "server-s0.key_secret"]
    assert east["secret"] == ["actors-east.key_secret"]
    assert west["secret"] == ["actors-west.key_secret"]
    # the head (server and learner) admits both actor nodes' own keys
    assert head["authorized"] == ["actors-east", "actors-west"]
    # each actor node got the server's and the learner's public keys, and nothing of the other
    for node, own in ((east, "actors-east.key"), (west, "actors-west.key")):
        assert node["public"] == sorted([own, "learner.key", "server-s0.key"])
        assert node["authorized"] == []
    assert not list(keys.iterdir())  # the root namespace's own directory stayed empty
