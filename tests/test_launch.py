"""``azserve launch``: hosts-file validation, the process plan (endpoints and binds), the CURVE
requirement across hosts, ``--dry-run``, and a real local launch stopped with Ctrl-C."""

from __future__ import annotations

import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from azserve.app.launch import Host, load_hosts, plan, remote_command
from azserve.app.schema import load_config
from azserve.errors import ConfigError

REPO = Path(__file__).resolve().parents[1]
TTT = REPO / "configs" / "tictactoe.toml"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_hosts(path: Path, text: str) -> str:
    path.write_text(text)
    return str(path)


TWO_HOSTS = """
[[host]]
name = "gpu0"
ssh = "me@10.0.0.5"
address = "10.0.0.5"
roles = ["server", "learner"]
workdir = "/srv/azserve"
server_port = 6000
learner_port = 6001

[[host]]
name = "cpu0"
ssh = "me@10.0.0.6"
address = "10.0.0.6"
roles = ["actors"]
actor_processes = 3
"""


def test_load_hosts(tmp_path: Path) -> None:
    hosts = load_hosts(write_hosts(tmp_path / "h.toml", TWO_HOSTS))
    assert [h.name for h in hosts] == ["gpu0", "cpu0"]
    assert hosts[0].roles == ("server", "learner") and hosts[0].server_port == 6000
    assert hosts[1].actor_processes == 3 and hosts[1].workdir == "."


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            '[[host]]\nname = "a"\nroles = ["server", "learner", "gpu"]\n',
            "host a: unknown role 'gpu'",
        ),
        (
            '[[host]]\nname = "a"\nroles = ["learner", "actors"]\n',
            "exactly one host must have the role 'server'",
        ),
        (
            '[[host]]\nname = "a"\nroles = ["server", "actors"]\n',
            "exactly one host must have the role 'learner'",
        ),
        (
            '[[host]]\nname = "a"\nroles = ["server", "learner"]\n[[host]]\nname = "b"\nroles = ["server"]\n',
            "exactly one host must have the role 'server'",
        ),
        ("", "exactly one host must have the role 'server'"),
        (
            '[[host]]\nname = "a"\nroles = ["server", "learner"]\nport = 1\n',
            "host[0].port: unknown key",
        ),
        (
            '[[host]]\nname = "a"\nroles = ["server", "learner"]\nserver_port = "x"\n',
            "host[0].server_port",
        ),
        ('[[host]]\nroles = ["server", "learner"]\n', "name"),
    ],
)
def test_load_hosts_rejects(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_hosts(write_hosts(tmp_path / "h.toml", text))


def by_role(procs: list) -> dict[str, tuple]:
    return {role: (host, argv, text) for host, role, argv, text in procs}


def test_plan_across_hosts(tmp_path: Path) -> None:
    hosts = load_hosts(write_hosts(tmp_path / "h.toml", TWO_HOSTS))
    keys = ["auth.server_secret_key=/k/server.key_secret", "auth.client_keys_dir=/k/authorized"]
    cfg = load_config(TTT, keys)
    procs = plan(cfg, hosts, run_dir="runs/x")
    assert [role for _, role, _, _ in procs] == [
        "server",
        "learner",
        "actors-0",
        "actors-1",
        "actors-2",
    ]
    roles = by_role(procs)
    # Every process gets the same resolved config.
    resolved = tomllib.loads(roles["server"][2])
    assert all(text == roles["server"][2] for _, _, _, text in procs)
    # Binds reach the network; clients connect to the hosts' addresses.
    assert resolved["server"]["bind"] == "tcp://0.0.0.0:6000"
    assert resolved["learner"]["bind"] == "tcp://0.0.0.0:6001"
    assert resolved["client"]["server"] == "tcp://10.0.0.5:6000"
    assert resolved["actors"]["learner"] == "tcp://10.0.0.5:6001"
    assert resolved["actors"]["sink"] == "learner"
    assert resolved["learner"]["servers"] == ["tcp://10.0.0.5:6000"]
    assert resolved["auth"]["server_secret_key"] == "/k/server.key_secret"
    assert roles["server"][0].name == "gpu0" and roles["actors-2"][0].name == "cpu0"
    assert roles["learner"][1] == ["learn", "--run-dir", "runs/x", "--resume"]
    assert roles["actors-1"][1] == ["actors", "--id", "cpu0-1"]
    # ssh for remote hosts, the config written from stdin in the host's workdir.
    cmd = remote_command(roles["server"][0], "server", roles["server"][1])
    assert cmd[:4] == ["ssh", "-o", "BatchMode=yes", "me@10.0.0.5"]
    assert cmd[4].startswith("cd /srv/azserve && cat > ")
    assert ".venv/bin/azserve serve --config" in cmd[4]


def test_plan_all_local_binds_loopback() -> None:
    hosts = [
        Host(name="a", roles=("server", "learner"), server_port=7000, learner_port=7001),
        Host(name="b", roles=("actors",), actor_processes=2),
    ]
    procs = plan(load_config(TTT), hosts, run_dir="r")
    resolved = tomllib.loads(procs[0][3])
    assert resolved["server"]["bind"] == "tcp://127.0.0.1:7000"
    assert resolved["learner"]["bind"] == "tcp://127.0.0.1:7001"
    assert resolved["client"]["server"] == "tcp://127.0.0.1:7000"
    assert resolved["actors"]["learner"] == "tcp://127.0.0.1:7001"
    assert remote_command(hosts[1], "actors-0", ["actors"])[:2] == ["sh", "-c"]


def test_crossing_hosts_needs_curve_keys(tmp_path: Path) -> None:
    hosts = load_hosts(write_hosts(tmp_path / "h.toml", TWO_HOSTS))
    with pytest.raises(ConfigError, match=r"^auth\.server_secret_key: .*azserve keys"):
        plan(load_config(TTT), hosts, run_dir="r")
    # An explicit opt-out for trusted networks.
    assert plan(load_config(TTT, ["auth.allow_insecure_remote=true"]), hosts, run_dir="r")


def azserve(*args: str) -> list[str]:
    """The installed ``azserve`` script next to this interpreter (else ``python -m azserve.app.cli``)."""
    script = Path(sys.executable).with_name("azserve")
    head = [str(script)] if script.exists() else [sys.executable, "-m", "azserve.app.cli"]
    return [*head, *args]


@pytest.mark.slow
def test_dry_run_prints_one_command_per_process(tmp_path: Path) -> None:
    hosts = write_hosts(tmp_path / "h.toml", TWO_HOSTS)
    proc = subprocess.run(
        azserve("launch", "--config", str(TTT), "--hosts", hosts, "--dry-run",
                "--set", "auth.allow_insecure_remote=true"),
        capture_output=True, text=True, timeout=110, cwd=REPO,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert [line.split(":")[0] for line in lines] == [
        "gpu0/server", "gpu0/learner", "cpu0/actors-0", "cpu0/actors-1", "cpu0/actors-2",
    ]  # fmt: skip
    for line in lines:
        argv = shlex.split(line.split(": ", 1)[1])
        assert argv[0] == "ssh" and argv[3] in ("me@10.0.0.5", "me@10.0.0.6")
    assert "--run-dir runs/launch-tictactoe --resume" in lines[1]
    bad = subprocess.run(
        azserve("launch", "--config", str(TTT), "--hosts", hosts, "--dry-run"),
        capture_output=True, text=True, timeout=110, cwd=REPO,
    )  # fmt: skip
    assert bad.returncode == 2
    assert "config error: auth.server_secret_key" in bad.stderr


def children_of(pid: int) -> list[int]:
    """Pids whose parent is ``pid`` (from /proc)."""
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(entry.name))
    return out


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


@pytest.fixture
def launched() -> Iterator[list[int]]:
    """Pids to kill at teardown (the launcher and what it started)."""
    pids: list[int] = []
    yield pids
    for pid in pids:
        if alive(pid):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.slow
@pytest.mark.timeout(180)
@pytest.mark.skipif(
    not (REPO / ".venv" / "bin" / "azserve").exists(),
    reason="launch runs WORKDIR/.venv/bin/azserve",
)
def test_local_launch_runs_and_stops_on_ctrl_c(
    tmp_path: Path, launched: list[int], request: pytest.FixtureRequest
) -> None:
    server_port, learner_port = free_port(), free_port()
    name = f"t{os.getpid()}"  # the launcher's per-role config files are named after the host
    hosts = write_hosts(
        tmp_path / "hosts.toml",
        f"""
[[host]]
name = "{name}"
ssh = "local"
address = "127.0.0.1"
roles = ["server", "learner", "actors"]
workdir = "{REPO}"
server_port = {server_port}
learner_port = {learner_port}
""",
    )

    # The launcher leaves each role's config in the host's /tmp; these are this test's.
    def remove_configs() -> None:
        for p in Path("/tmp").glob(f"azserve-launch-{name}-*.toml"):
            p.unlink(missing_ok=True)

    request.addfinalizer(remove_configs)
    run_dir = tmp_path / "run"
    sets = [
        "actors.games=8", "mcts.num_simulations=4", "actors.status_interval_s=1",
        "server.status_interval_s=1", "replay.min_size=50", "trainer.batch_size=32",
        "trainer.publish_every=5",
    ]  # fmt: skip
    out_path = tmp_path / "launch.out"
    with out_path.open("wb") as out:
        proc = subprocess.Popen(
            azserve("launch", "--config", str(TTT), "--hosts", hosts, "--run-dir", str(run_dir),
                    *[a for s in sets for a in ("--set", s)]),
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=tmp_path,
        )  # fmt: skip
    launched.append(proc.pid)

    def output() -> str:
        return out_path.read_text(errors="replace")

    # Until every role reports progress: the server serves, the learner trains and publishes,
    # the actor plays games.
    deadline = time.monotonic() + 120
    want = [
        f"[{name}/server] azserve serving",
        f"[{name}/learner]",
        "published v1",
        f"[{name}/actors-0]",
        "games/s",
    ]
    while not all(w in output() for w in want):
        assert proc.poll() is None, f"launcher exited early ({proc.returncode}):\n{output()}"
        assert time.monotonic() < deadline, f"roles did not all start:\n{output()}"
        launched.extend(p for p in children_of(proc.pid) if p not in launched)
        time.sleep(0.5)
    children = children_of(proc.pid)
    launched.extend(p for p in children if p not in launched)
    assert len(children) == 3  # server, learner, one actor process

    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=120) == 0, output()
    assert not [p for p in children if alive(p)], "a launched process outlived the launcher"
    text = output()
    assert "server closed" in text
    assert f"checkpoint: {run_dir / 'checkpoints'}" in text  # the learner saved on the way out
    assert list((run_dir / "checkpoints").glob("ckpt-*.safetensors"))
    assert (run_dir / "learner-config.toml").is_file()
