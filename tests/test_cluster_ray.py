"""The Ray engine on a real multi-node Ray cluster on this machine (a head and two worker
nodes, each with its own node resource, as ``ray.cluster_utils.Cluster`` makes them): the
launch places each actor group on its node, an actor process killed with ``kill -9`` is
restarted by Ray and games continue, and Ctrl-C stops the run leaving no process behind."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from actors.main import SUMMARY_TAG

ray = pytest.importorskip("ray")
from ray.cluster_utils import Cluster  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
TTT = REPO / "configs" / "tictactoe.toml"
NODE = {"num_cpus": 1, "object_store_memory": 80 * 1024 * 1024}

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(420)]


@pytest.fixture
def ray_cluster(monkeypatch: pytest.MonkeyPatch) -> Iterator[Cluster]:
    # no usage-stats reporting from a test machine (the nodes and the launcher inherit it)
    monkeypatch.setenv("RAY_USAGE_STATS_ENABLED", "0")
    # the nodes' sessions in a directory of the test's, not left in the machine's /tmp/ray
    # (short: Ray's sockets live there, within AF_UNIX's 107 bytes)
    temp = Path(f"/tmp/azray-{os.getpid()}-c")
    node = {**NODE, "temp_dir": str(temp)}
    # Cluster() records the head's address in Ray's default temp dir (ray_current_cluster)
    # whatever temp_dir says, without making that directory: on a machine where Ray never ran
    # it is missing (CI: FileNotFoundError '/tmp/ray/ray_current_cluster')
    Path(os.environ.get("RAY_TMPDIR") or tempfile.gettempdir(), "ray").mkdir(exist_ok=True)
    cluster = Cluster(
        initialize_head=True,
        head_node_args={**node, "resources": {"head": 1}, "include_dashboard": False},
    )
    try:
        cluster.add_node(**node, resources={"east": 1})
        cluster.add_node(**node, resources={"west": 1})
        cluster.wait_for_nodes()
        yield cluster
    finally:
        cluster.shutdown()
        shutil.rmtree(temp, ignore_errors=True)


def _processes(marker: str) -> dict[int, str]:
    """pid -> command line of every process whose command line holds ``marker``."""
    out = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if marker in cmd:
            out[int(d.name)] = cmd
    return out


def _actor_process(name: str) -> int | None:
    """The pid of ``azserve actors --id NAME`` (not its watchdog)."""
    for pid, cmd in _processes(f"--id {name}").items():
        if "azserve.cli.main actors" in cmd:
            return pid
    return None


def _games_logged(log: Path, after: float) -> int:
    """The newest ``games N`` count in the actor's status lines written after ``after``."""
    if not log.exists():
        return 0
    games = 0
    for line in log.read_text(errors="replace").splitlines():
        if "games/s" not in line:
            continue
        stamp = time.strftime("%Y-%m-%d ") + line[:8]
        try:
            t = time.mktime(time.strptime(stamp, "%Y-%m-%d %H:%M:%S"))
        except ValueError:
            continue
        if t >= after - 1:
            games = int(line.split("  games ", 1)[1].split()[0])
    return games


def test_ray_engine_restarts_a_killed_actor_process_and_stops_cleanly(
    ray_cluster: Cluster, tmp_path: Path
) -> None:
    cluster_file = tmp_path / "ray.toml"
    cluster_file.write_text(
        f"""
engine = "ray"
network = "loopback"
[ray]
address = "{ray_cluster.address}"
[[server]]
name = "s0"
port = {_free_port()}
resources = {{head = 0.01}}
[learner]
port = {_free_port()}
[[actors]]
name = "east"
games = 32
resources = {{east = 0.01}}
[[actors]]
name = "west"
games = 32
resources = {{west = 0.01}}
"""
    )
    run_dir = tmp_path / "run"
    argv = [
        sys.executable, "-m", "azserve.cli.main", "launch", "--cluster", str(cluster_file),
        "--config", str(TTT), "--run-dir", str(run_dir), "--no-progress",
        "--set", "actors.status_interval_s=1", "--set", "train.status_interval_s=2",
        "--set", "eval.match_games=2", "--set", "train.eval_every_s=0", "--set", "eval.sims=4",
    ]  # fmt: skip
    launcher = subprocess.Popen(
        argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
    )
    east_log = run_dir / "logs" / "ray" / "actor-east-0.log"
    try:
        # both groups play
        _wait(lambda: _games_logged(east_log, 0) > 0, 180, launcher, "east played no game")
        west_log = run_dir / "logs" / "ray" / "actor-west-0.log"
        _wait(lambda: _games_logged(west_log, 0) > 0, 60, launcher, "west played no game")
        victim = _actor_process("actor-east-0")
        assert victim is not None
        killed_at = time.time()
        os.kill(victim, signal.SIGKILL)
        # Ray restarts the runner, which starts a fresh actor process; its games arrive
        _wait(
            lambda: (_actor_process("actor-east-0") or victim) != victim, 90, launcher, "no restart"
        )
        _wait(
            lambda: _games_logged(east_log, killed_at) > 0,
            90,
            launcher,
            "the restarted actor process played no game",
        )
        # docs/cluster.md's figure (status lines come once a second: +-1 s)
        print(f"kill -9 to the replacement's first finished game: {time.time() - killed_at:.1f} s")
        # and the learner stores games (its metrics rows count them)
        _wait(lambda: _stored(run_dir) > 0, 90, launcher, "the learner stored no game")
        launcher.send_signal(signal.SIGINT)
        out = launcher.communicate(timeout=200)[0].decode()
    finally:
        if launcher.poll() is None:
            os.killpg(launcher.pid, signal.SIGKILL)
            launcher.communicate()
    assert launcher.returncode == 130, out[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["restarts"]["actor-east-0"] >= 1, summary
    # a stop is no death: west stopped once, wrote its accounting, and was pulled into the log
    west = (run_dir / "logs" / "ray" / "actor-west-0.log").read_text()
    assert west.count(SUMMARY_TAG) == 1, west[-2000:]
    assert summary["games_stored"] > 0

    # nothing of the run is left: no azserve process, no watchdog (theirs name the run dir or
    # this test's group names)
    def ours() -> dict[int, str]:
        found: dict[int, str] = {}
        for marker in (str(run_dir), "actor-east-", "actor-west-"):
            found |= _processes(marker)
        return found

    deadline = time.monotonic() + 30
    while ours() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert ours() == {}


def _wait(cond, timeout: float, launcher: subprocess.Popen[bytes], what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not cond():
        if launcher.poll() is not None:
            pytest.fail(
                f"{what}: the launcher exited: {launcher.communicate()[0].decode()[-3000:]}"
            )
        if time.monotonic() > deadline:
            pytest.fail(f"{what} within {timeout:.0f} s")
        time.sleep(0.5)


def _stored(run_dir: Path) -> int:
    p = run_dir / "metrics.jsonl"
    rows = p.read_text().splitlines() if p.exists() else []
    return int(json.loads(rows[-1])["games"]) if rows else 0


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
