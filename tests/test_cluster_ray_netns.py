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
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from azserve.perf.chaos_ray import ray_env as chaos_ray_env
from tests.netns import NetnsLan, unavailable

pytest.importorskip("ray")

REPO = Path(__file__).resolve().parents[1]
TTT = REPO / "configs" / "tictactoe.toml"
RAY = str(Path(sys.executable).with_name("ray"))

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(420)]


def ray_env(keys: Path) -> dict[str, str]:
    """Ray's own token authentication, on: its nodes talk over a network (the token is Ray's
    shared secret, made beside the keys)."""
    return chaos_ray_env(keys.with_name(keys.name + "-ray-token"))


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
    temp = Path(f"/tmp/azray-{os.getpid()}")  # the nodes' sessions, not left in /tmp/ray
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
                    "--temp-dir",
                    str(temp / res),
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
        shutil.rmtree(temp, ignore_errors=True)
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
resources = {{east = 0.01}}
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
        "--config", str(TTT), "--run-dir", str(run_dir), "--minutes", "5", "--no-progress",
        "--set", "train.eval_every_s=0", "--set", "eval.match_games=2", "--set", "eval.sims=4",
        "--set", "train.status_interval_s=0.5", "--set", "actors.status_interval_s=1",
    ]  # fmt: skip
    # The run goes on until each group has had games acked, then Ctrl-C ends it: not a game
    # count, which one group can reach before the other's node has started its process (CI
    # saw it twice: east stored the 40 games that ended the run while west was still starting).
    out_path = tmp_path / "launch.out"
    logs = [run_dir / "logs" / "ray" / f"actor-{group}-0.log" for group in ("east", "west")]
    with out_path.open("w") as out_file:
        launcher = lan[0].popen(
            argv, cwd=REPO, env=ray_env(keys), stdout=out_file, stderr=subprocess.STDOUT
        )
        try:
            deadline = time.monotonic() + 240
            while not all(_acked(log) for log in logs):
                assert time.monotonic() < deadline, "a group had no game acked in 240 s"
                assert launcher.poll() is None, out_path.read_text()[-4000:]
                time.sleep(1)
            launcher.send_signal(signal.SIGINT)
            launcher.wait(timeout=150)
        finally:
            if launcher.poll() is None:
                os.killpg(launcher.pid, signal.SIGKILL)
    stdout = out_path.read_text()
    assert launcher.returncode == 130, stdout[-4000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["games_stored"] > 0, summary
    # both groups were answered from their own namespaces over CURVE, and their games reached
    # the learner: each actor process's own summary, logged as Ctrl-C stopped it
    for log in logs:
        text = log.read_text()
        summaries = [json.loads(line.split("actor summary: ", 1)[1])
                     for line in text.splitlines() if "actor summary: " in line]  # fmt: skip
        assert summaries, text[-2000:]
        assert summaries[-1]["evals"]["messages"] > 0 and summaries[-1]["acked"] > 0, text[-2000:]
    assert "public key authorized/actors-east.node-" in stdout, stdout[:4000]

    def files(host_index: int) -> dict[str, list[str]]:
        base = Path("/etc/netns") / lan[host_index].name / keys.name
        return {
            "secret": sorted(p.name for p in base.glob("*.key_secret")),
            "public": sorted(p.name for p in base.glob("*.key")),
            "authorized": sorted(p.name.split(".node-")[0] for p in base.glob("authorized/*")),
        }

    head, east, west = files(0), files(1), files(2)
    # each secret key stayed on the node that made it; nothing else holds it: the launcher
    # (Ray's driver, on the head) has a pair of its own for its status queries, the learner
    # being on east
    assert head["secret"] == ["launcher.key_secret", "server-s0.key_secret"]
    assert east["secret"] == ["actors-east.key_secret", "learner.key_secret"]
    assert west["secret"] == ["actors-west.key_secret"]
    # the server admits both actor nodes' own keys and the launcher's; the learner, the actors'
    assert head["authorized"] == ["actors-east", "actors-west", "launcher"]
    assert east["authorized"] == ["actors-east", "actors-west"]
    assert head["public"] == ["launcher.key", "learner.key", "server-s0.key"]
    # each actor node got the server's and the learner's public keys, and nothing of the other
    for node, own in ((east, "actors-east.key"), (west, "actors-west.key")):
        assert node["public"] == sorted([own, "learner.key", "server-s0.key"])
    assert west["authorized"] == []
    # and the launcher's status queries got through, over CURVE with that pair
    assert re.search(r"server-s0 +\S+ rows/s", stdout), stdout[-3000:]
    assert not list(keys.iterdir())  # the root namespace's own directory stayed empty


def _acked(log: Path) -> bool:
    """Whether an actor process's status lines (pulled into the run dir) show a game acked."""
    try:
        text = log.read_text()
    except FileNotFoundError:
        return False  # not started yet, or nothing logged
    return any(int(m) > 0 for m in re.findall(r"trajectories sent \d+ acked (\d+)", text))
