"""``azserve launch --cluster``: the cluster file's checks, the plan (endpoints per role, actor
groups dealt to servers), Slurm's node lists, the watchdog that ties remote processes to the
launcher, and a real launch across three network namespaces through the ssh engine's command
template (``ip netns exec {host}``)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from actors.main import SUMMARY_TAG
from actors.prom import metrics_port
from azserve.config.schema import load_config
from azserve.errors import AzserveError, ConfigError
from azserve.run.cluster.engines import CommandEngine, remote_argv
from azserve.run.cluster.plan import make_plan
from azserve.run.cluster.slurm import expand_nodelist
from azserve.run.cluster.spec import load_cluster
from tests.conftest import run_metrics
from tests.netns import NetnsLan, unavailable

REPO = Path(__file__).resolve().parents[1]
TTT = REPO / "configs" / "tictactoe.toml"

TWO_SERVERS = """
engine = "ssh"
keys = "/etc/azserve/keys"

[[server]]
name = "gpu0"
host = "me@10.0.0.5"
port = 6000

[[server]]
name = "gpu1"
host = "me@10.0.0.6"

[learner]
host = "me@10.0.0.5"
port = 6001

[[actors]]
name = "east"
hosts = ["me@10.0.1.1", "me@10.0.1.2"]
processes = 2
games = 64

[[actors]]
name = "west"
hosts = ["me@10.0.2.1"]
server = "gpu0"

[[actors]]
name = "north"
hosts = ["me@10.0.3.1"]
"""


def write(path: Path, text: str) -> str:
    path.write_text(text)
    return str(path)


def test_plan_derives_every_endpoint_from_the_cluster_file(tmp_path: Path) -> None:
    spec = load_cluster(write(tmp_path / "c.toml", TWO_SERVERS))
    cfg = load_config(TTT)
    engine = CommandEngine(spec, tmp_path, "rid")
    procs = make_plan(
        spec, cfg, "/runs/x", engine.addresses(), engine.group_hosts(), lambda *_: cfg.auth
    )
    by = {p.name: p for p in procs}
    assert list(by)[:3] == ["server-gpu0", "server-gpu1", "learner"]
    assert by["server-gpu0"].config.server.bind == "tcp://10.0.0.5:6000"
    assert by["server-gpu1"].config.server.bind == "tcp://10.0.0.6:5556"  # 5555 + index 1
    learner = by["learner"].config.learner
    assert learner.bind == "tcp://10.0.0.5:6001"
    assert learner.servers == ("tcp://10.0.0.5:6000", "tcp://10.0.0.6:5556")
    # east: 2 hosts x 2 processes; groups without a server are dealt out in turn
    east = [p for p in procs if p.group == "east"]
    assert [p.host for p in east] == ["me@10.0.1.1"] * 2 + ["me@10.0.1.2"] * 2
    assert {p.config.actors.games for p in east} == {64}
    assert {p.config.client.server for p in east} == {"tcp://10.0.0.5:6000"}
    assert by["actor-west-0"].config.client.server == "tcp://10.0.0.5:6000"  # named
    assert by["actor-north-0"].config.client.server == "tcp://10.0.0.6:5556"  # dealt
    assert {p.config.actors.learner for p in procs} == {"tcp://10.0.0.5:6001"}
    # the server beside the run dir restarts on its newest checkpoint; the other cannot see it
    assert "--checkpoint-dir" in by["server-gpu0"].argv
    assert "--checkpoint-dir" not in by["server-gpu1"].argv
    assert by["learner"].argv[-3:] == ("--run-dir", "/runs/x", "--resume")


def test_actor_processes_sharing_a_host_get_their_own_metrics_ports(tmp_path: Path) -> None:
    text = """
engine = "ssh"
network = "loopback"
[[server]]
host = "localhost"
[learner]
host = "localhost"
[[actors]]
name = "east"
hosts = ["localhost"]
processes = 2
[[actors]]
name = "west"
hosts = ["localhost"]
processes = 2
"""
    spec = load_cluster(write(tmp_path / "c.toml", text))
    cfg = load_config(TTT, ["actors.metrics_port=9260"])
    engine = CommandEngine(spec, tmp_path, "rid")
    procs = make_plan(spec, cfg, "/runs/x", engine.addresses(), engine.group_hosts(), None)
    ports = {
        p.name: metrics_port(p.config.actors.metrics_port, p.name, p.config.actors.metrics_index)
        for p in procs
        if p.role == "actors"
    }
    # by the ids alone, actor-east-0 and actor-west-0 would both ask for 9260
    assert ports == {"actor-east-0": 9260, "actor-east-1": 9261, "actor-west-0": 9262,
                     "actor-west-1": 9263}  # fmt: skip


def test_crossing_hosts_without_keys_is_refused(tmp_path: Path) -> None:
    spec = load_cluster(
        write(tmp_path / "c.toml", TWO_SERVERS.replace('keys = "/etc/azserve/keys"', ""))
    )
    engine = CommandEngine(spec, tmp_path, "rid")
    with pytest.raises(ConfigError, match="CURVE keys"):
        make_plan(spec, load_config(TTT), "/r", engine.addresses(), engine.group_hosts())


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[[actors]]\nhosts=['a']\n", "at least one \\[\\[server\\]\\]"),
        ("[[server]]\nhost='a'\n", "at least one \\[\\[actors\\]\\]"),
        (
            "[[server]]\nhost='a'\n[[actors]]\nhosts=['b']\nserver='nope'\n",
            "actors\\[0\\].server='nope': no such server",
        ),
        ("[[server]]\nhost='a'\n[[actors]]\n", "actors\\[0\\].hosts"),
        (
            "[[server]]\nname='a b'\n[[actors]]\nhosts=['b']\n",
            "server\\[0\\].name='a b'",
        ),
        ("engine='k8s'\n", "engine: must be one of"),
        ("[[server]]\nhost='a'\nportt=1\n", "server\\[0\\].portt: unknown key"),
        (
            "[[server]]\nhost='a'\nresources={x=-1}\n[[actors]]\nhosts=['b']\n",
            "server\\[0\\].resources.x=-1",
        ),
        (
            "[[server]]\nhost='a'\nport=5600\n[[actors]]\nhosts=['b']\n",
            "learner.port=5600: also a server's port",
        ),
    ],
)
def test_bad_cluster_files_name_the_key(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_cluster(write(tmp_path / "c.toml", text))


def test_slurm_nodelists_expand_as_scontrol_does() -> None:
    assert expand_nodelist("gpu[01-03,07],cpu5") == ["gpu01", "gpu02", "gpu03", "gpu07", "cpu5"]
    assert expand_nodelist("n[8-10]") == ["n8", "n9", "n10"]
    assert expand_nodelist("r[1-2]c[3-4]") == ["r1c3", "r1c4", "r2c3", "r2c4"]
    assert expand_nodelist("solo") == ["solo"]
    for bad in ("n[1-", "n[3-1]", "n[a]"):
        with pytest.raises(ConfigError, match="SLURM_JOB_NODELIST"):
            expand_nodelist(bad)


def test_slurm_engine_takes_nodes_from_the_allocation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = """
engine = "slurm"
insecure = true
[[server]]
name = "s"
[[actors]]
name = "a"
nodes = 2
processes = 3
"""
    monkeypatch.setenv("SLURM_JOB_NODELIST", "localhost,node[2-3]")
    spec = load_cluster(write(tmp_path / "c.toml", text))
    engine = CommandEngine(spec, tmp_path, "rid")
    # server and learner share the first node (the launcher's); the group takes the others
    assert engine.role_hosts() == {"server-s": "localhost", "learner": "localhost"}
    assert engine.group_hosts() == {"a": ("node2", "node3")}
    monkeypatch.setenv("SLURM_JOB_NODELIST", "localhost")
    spec = load_cluster(
        write(
            tmp_path / "c.toml",
            text.replace('[[server]]\nname = "s"', '[[server]]\nname = "s"\nhost = "localhost"'),
        )
    )
    engine = CommandEngine(spec, tmp_path, "rid")
    with pytest.raises(ConfigError, match="nodes=2 but only 1 free node"):
        engine.group_hosts()
    monkeypatch.delenv("SLURM_JOB_NODELIST")
    monkeypatch.delenv("SLURM_NODELIST", raising=False)
    with pytest.raises(ConfigError, match="not inside a Slurm allocation"):
        CommandEngine(spec, tmp_path, "rid")


def test_slurm_command_lines_use_srun_on_the_node(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SLURM_JOB_NODELIST", "c[1-3]")
    text = """
engine = "slurm"
insecure = true
workdir = "/srv/az"
[[server]]
name = "s"
[[actors]]
name = "a"
"""
    spec = load_cluster(write(tmp_path / "c.toml", text))
    engine = CommandEngine(spec, tmp_path, "rid")
    addresses = {"server-s": "10.1.0.1", "learner": "10.1.0.1"}
    procs = make_plan(
        spec, load_config(TTT), "/r", addresses, engine.group_hosts(), None, engine.role_hosts()
    )
    cmd = engine.command(procs[0])
    assert cmd[:5] == ["srun", "--nodes=1", "--ntasks=1", "--overlap", "--nodelist=c1"]
    assert cmd[5:7] == ["sh", "-c"] and cmd[7].startswith("cd /srv/az && exec ")
    actor = next(p for p in procs if p.role == "actors")
    assert "--nodelist=c2" in engine.command(actor)  # the first node not taken by a role


def _watchdog_target(tmp_path: Path) -> list[str]:
    """A plan process whose azserve command runs for a long time (the real serve main)."""
    text = f"""
engine = "ssh"
network = "loopback"
[[server]]
name = "s"
host = "local"
port = {_free_port()}
[learner]
host = "local"
port = {_free_port()}
[[actors]]
name = "a"
hosts = ["local"]
"""
    spec = load_cluster(write(tmp_path / "c.toml", text))
    engine = CommandEngine(spec, tmp_path, "wd-test")
    cfg = load_config(TTT)
    (tmp_path / "served.toml").write_text(
        f'[server]\nbind = "tcp://127.0.0.1:{spec.server_port(0)}"\n'
    )
    procs = make_plan(spec, cfg, str(tmp_path), engine.addresses(), engine.group_hosts())
    return remote_argv(procs[0], f"wd-{os.getpid()}", sys.executable, grace_s=10)


def _wait_serving(tmp_path: Path) -> None:
    """Until the server of ``_watchdog_target`` answers ``status``."""
    from azserve.sync_client import SyncClient

    bind = load_config(tmp_path / "served.toml").server.bind
    deadline = time.monotonic() + 60
    while True:
        try:
            with SyncClient(bind, timeout_s=1.0) as c:
                c.status()
                return
        except AzserveError:
            assert time.monotonic() < deadline, "the server never answered"


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(p) for p in text.split()]


def _gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
            state = Path(f"/proc/{pid}/stat").read_text().split()[2]
            if state == "Z":
                return True
        except (ProcessLookupError, FileNotFoundError):
            return True
        time.sleep(0.1)
    return False


def _start_watchdog(tmp_path: Path) -> tuple[subprocess.Popen[bytes], int]:
    argv = _watchdog_target(tmp_path)
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, cwd=REPO)
    deadline = time.monotonic() + 30
    while not _children(proc.pid):
        assert time.monotonic() < deadline, "the watchdog started no process"
        assert proc.poll() is None, "the watchdog exited"
        time.sleep(0.05)
    return proc, _children(proc.pid)[0]


def test_watchdog_stops_its_process_when_the_launcher_is_killed(tmp_path: Path) -> None:
    # The launcher's end of the pipe closing is what a kill -9 of the launcher (or a dropped
    # ssh connection) looks like from the host.
    launcher = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import subprocess,sys,time\n"
            f"p=subprocess.Popen({_watchdog_target(tmp_path)!r}, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)\n"
            "print(p.pid, flush=True)\ntime.sleep(600)",
        ],
        stdout=subprocess.PIPE,
        cwd=REPO,
    )
    assert launcher.stdout is not None
    watchdog = int(launcher.stdout.readline())
    deadline = time.monotonic() + 30
    while not _children(watchdog):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    serve = _children(watchdog)[0]
    launcher.send_signal(signal.SIGKILL)
    launcher.wait()
    launcher.stdout.close()
    assert _gone(serve, 20), "the server outlived its launcher"
    assert _gone(watchdog, 20)


def test_watchdog_forwards_signals_and_returns_the_exit_code(tmp_path: Path) -> None:
    proc, serve = _start_watchdog(tmp_path)
    assert proc.stdin is not None
    _wait_serving(tmp_path)
    proc.stdin.write(b"SIGINT\n")
    proc.stdin.flush()
    code = proc.wait(30)
    proc.stdin.close()
    assert _gone(serve, 5)
    assert code == 0  # the forwarded SIGINT stopped serve cleanly, and its exit code came back
    # the run's config file is gone with it
    assert not list(Path("/tmp").glob(f"azserve-wd-{os.getpid()}/*.toml"))


# --- a real launch across network namespaces --------------------------------------------------


def _make_keys(lan: NetnsLan, keys: Path) -> None:
    """Each host's own pair, made "on" it (namespaces share the filesystem, so each host has
    its own directory: ``keys = ".../{host}"``)."""
    from azserve.keys import create_pair

    create_pair(keys / lan[0].name, "server-s0")
    create_pair(keys / lan[0].name, "learner")
    create_pair(keys / lan[1].name, "server-s1")
    for host in lan[1:]:
        create_pair(keys / host.name, f"actors-{host.name}")


def _cluster_file(lan: NetnsLan, tmp_path: Path) -> str:
    _make_keys(lan, tmp_path / "keys")
    text = f"""
engine = "ssh"
network = "auto"
keys = "{tmp_path}/keys/{{host}}"
workdir = "{REPO}"
python = "{sys.executable}"

[ssh]
command = "ip netns exec {{host}}"

[[server]]
name = "s0"
host = "{lan[0].name}"
address = "{lan[0].address}"

[[server]]
name = "s1"
host = "{lan[1].name}"
address = "{lan[1].address}"

[learner]
host = "{lan[0].name}"
address = "{lan[0].address}"

[[actors]]
name = "east"
hosts = ["{lan[1].name}"]
games = 16
server = "s0"

[[actors]]
name = "west"
hosts = ["{lan[2].name}"]
games = 16
server = "s1"
"""
    return write(tmp_path / "cluster.toml", text)


def _caught_up(log: Path, offset: int) -> bool:
    """Whether the server restarted after ``offset`` of its log went live on a version > 0."""
    with log.open("rb") as f:
        f.seek(offset)
        text = f.read().decode(errors="replace")
    return any(int(v) > 0 for v in re.findall(r"version (\d+) live", text))


@pytest.mark.cluster
@pytest.mark.timeout(300)
def test_launch_across_three_namespaces_two_servers_kill_then_ctrl_c_leaves_nothing(
    netns_hosts, tmp_path: Path
) -> None:
    if unavailable():
        pytest.skip(unavailable() or "")
    lan = netns_hosts(3)
    run_dir = tmp_path / "run"
    argv = [
        sys.executable, "-m", "azserve.cli.main", "launch",
        "--cluster", _cluster_file(lan, tmp_path), "--config", str(TTT),
        "--run-dir", str(run_dir), "--no-progress",
        "--set", "train.status_interval_s=2", "--set", "trainer.batch_size=64",
        "--set", "eval.sims=4", "--set", "eval.match_games=2",
    ]  # fmt: skip
    launcher = subprocess.Popen(
        argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
    )
    try:
        deadline = time.monotonic() + 150
        while time.monotonic() < deadline:
            rows = run_metrics(run_dir)
            if rows and rows[-1]["version"] >= 2:
                break
            assert launcher.poll() is None, launcher.communicate()[0].decode()[-3000:]
            time.sleep(1)
        else:
            pytest.fail("no version 2 within 150 s")
        # every namespace runs its part of the run
        assert all(host.pids() for host in lan)
        # kill -9 the second server (on the east host, away from the run dir): the launcher
        # restarts it and the learner catches it up with the current version
        s1_log = run_dir / "logs" / lan[1].name / "server-s1.log"
        offset = s1_log.stat().st_size
        victim = lan[1].azserve_pid(b"serve")
        os.kill(victim, signal.SIGKILL)
        deadline = time.monotonic() + 90
        while not _caught_up(s1_log, offset):
            assert time.monotonic() < deadline, s1_log.read_text()[-3000:]
            assert launcher.poll() is None
            time.sleep(0.5)
        launcher.send_signal(signal.SIGINT)
        out = launcher.communicate(timeout=150)[0].decode()
    finally:
        if launcher.poll() is None:
            os.killpg(launcher.pid, signal.SIGKILL)
    assert launcher.returncode == 130, out[-3000:]
    assert "interrupted" in out
    # Ctrl-C left no process in any namespace
    deadline = time.monotonic() + 20
    while any(host.pids() for host in lan) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert [host.pids() for host in lan] == [[], [], []]
    # games flowed from both actor hosts, and the learner stored them
    for group, host in (("east", lan[1]), ("west", lan[2])):
        log = (run_dir / "logs" / host.name / f"actor-{group}-0.log").read_text()
        summary = json.loads(log.split(SUMMARY_TAG, 1)[1].splitlines()[0])
        assert summary["games"] > 0, group
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["games_stored"] > 0
    assert summary["restarts"]["server-s1"] == 1 and summary["restarts"]["server-s0"] == 0
    # versions rose and both servers went live on them (their logs, pulled into the run dir)
    versions = [r["version"] for r in run_metrics(run_dir)]
    assert versions == sorted(versions) and versions[-1] >= 2
    for name, host in (("s0", lan[0]), ("s1", lan[1])):
        server_log = (run_dir / "logs" / host.name / f"server-{name}.log").read_text()
        assert "version 2 live" in server_log, server_log[-2000:]
    assert (run_dir / "report.png").exists() and (run_dir / "config.toml").exists()
    # CURVE all the way: the launcher's status queries got through with the learner's key
    assert re.search(r"server-s0 +\S+ rows/s", out), out[-3000:]
    # only public keys travelled: each host holds its own secret files and no other
    keys = tmp_path / "keys"
    secrets = {d.name: sorted(p.name for p in d.rglob("*.key_secret")) for d in keys.iterdir()}
    assert secrets == {
        lan[0].name: ["learner.key_secret", "server-s0.key_secret"],
        lan[1].name: [f"actors-{lan[1].name}.key_secret", "server-s1.key_secret"],
        lan[2].name: [f"actors-{lan[2].name}.key_secret"],
    }
    for server_host in lan[:2]:
        authorized = sorted(p.name for p in (keys / server_host.name / "authorized").iterdir())
        assert authorized == [f"actors-{lan[1].name}.key", f"actors-{lan[2].name}.key"]
    assert (keys / lan[0].name / "server-s1.key").exists()  # the learner publishes to s1
    # each actor host got the public key of the server its group uses, and the learner's
    assert (keys / lan[1].name / "server-s0.key").exists()
    assert (keys / lan[2].name / "server-s1.key").exists()
    assert not (keys / lan[2].name / "server-s0.key").exists()
    for host in lan[1:]:
        assert (keys / host.name / "learner.key").exists()


@pytest.mark.parametrize("name", ["ssh", "slurm", "ray", "local-ray"])
def test_shipped_cluster_files_resolve(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from azserve.run.cluster.run import dry_run

    monkeypatch.setenv("SLURM_JOB_NODELIST", "gpu1,cpu[1-2]")
    spec = load_cluster(str(REPO / "configs" / "cluster" / f"{name}.toml"))
    text = dry_run(load_config(TTT), spec, tmp_path / "run")
    assert "learner" in text and "server-" in text and "actor-" in text
    if name == "slurm":
        assert "--nodelist=cpu1" in text and "--nodelist=cpu2" in text
    if name == "ssh":
        assert "ssh -o BatchMode=yes" in text and "me@10.0.0.7" in text


def test_a_watchdog_killed_with_sigkill_takes_its_process_with_it(tmp_path: Path) -> None:
    # What Ray does to a dead worker's children: the azserve process must not be orphaned.
    proc, serve = _start_watchdog(tmp_path)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert proc.stdin is not None
    proc.stdin.close()
    assert _gone(serve, 20), "the process outlived its killed watchdog"
