"""A data-parallel learner across hosts under ``azserve launch``: ``[learner] rank_hosts`` puts
rank 0 on the learner's host and one rank on each other host, all meeting at one rendezvous
derived from the learner's address; the checks that refuse what cannot work; and a real launch
with the two ranks in two network namespaces, where ``kill -9`` of rank 1 restarts the group
and versions keep rising."""

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

from azserve.config.schema import load_config
from azserve.errors import ConfigError
from azserve.run.cluster.engines import CommandEngine
from azserve.run.cluster.plan import describe, make_plan
from azserve.run.cluster.spec import load_cluster
from learner.distributed import interface_of, pin_interface
from tests.conftest import run_metrics
from tests.netns import unavailable

REPO = Path(__file__).resolve().parents[1]
TTT = REPO / "configs" / "tictactoe.toml"

RANKS = """
engine = "ssh"
keys = "/etc/azserve/keys"

[[server]]
host = "me@10.0.0.5"

[learner]
host = "me@10.0.0.5"
rank_hosts = ["me@10.0.0.6", "me@10.0.0.7"]
trusted_network = true

[[actors]]
hosts = ["me@10.0.1.1"]
"""


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def _plan(tmp_path: Path, text: str, overrides: list[str] | None = None):
    spec = load_cluster(str(write(tmp_path / "c.toml", text)))
    cfg = load_config(TTT, overrides or [])
    engine = CommandEngine(spec, tmp_path, "rid")
    auth = lambda name, role, *_: cfg.auth.__class__(learner_secret_key=f"/k/{name}.key_secret")  # noqa: E731
    return make_plan(spec, cfg, "/runs/x", engine.addresses(), engine.group_hosts(), auth)


def test_rank_hosts_place_one_rank_each_meeting_at_the_learners_address(tmp_path: Path) -> None:
    procs = _plan(tmp_path, RANKS, ["trainer.batch_size=63"])
    by = {p.name: p for p in procs}
    assert list(by)[:4] == ["server-server", "learner", "learner-rank-1", "learner-rank-2"]
    learner = by["learner"].config.learner
    assert (learner.processes, learner.start_ranks) == (3, False)
    assert learner.rendezvous == "tcp://10.0.0.5:29500"
    for r, host in ((1, "me@10.0.0.6"), (2, "me@10.0.0.7")):
        rank = by[f"learner-rank-{r}"]
        assert rank.host == host and rank.role == "learner-rank"
        assert rank.argv[-4:] == ("--rank", str(r), "--rendezvous", "tcp://10.0.0.5:29500")
        assert rank.config.learner.processes == 3
        # the learner's secret key stays on its host: a rank's config names no key
        assert rank.config.auth.learner_secret_key == ""
    assert by["learner"].config.auth.learner_secret_key == "/k/learner.key_secret"
    text = describe(procs, {})
    assert "rank 0 of 3, the ranks meet at tcp://10.0.0.5:29500" in text
    assert re.search(r"learner-rank-2 +on me@10.0.0.7: rank 2 of 3, meets rank 0", text), text


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        ("trusted_network = true", "no authentication or encryption"),
        ('engine = "ssh"', "rank_hosts is for ssh and Slurm"),
        ("trusted_network = true", "learner.rank_port=5555: also the learner's or a server's"),
    ],
)
def test_rank_hosts_that_cannot_work_are_refused_by_name(
    tmp_path: Path, edit: str, message: str
) -> None:
    if "no authentication" in message:
        text = RANKS.replace(edit, "")
    elif "Slurm" in message:
        text = RANKS.replace(edit, 'engine = "ray"')
    else:
        text = RANKS.replace(edit, edit + "\nrank_port = 5555")
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_cluster(str(write(tmp_path / "c.toml", text)))


def test_a_run_config_that_asks_for_other_rank_counts_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"learner.processes=2: .* places 3 ranks"):
        _plan(tmp_path, RANKS, ["learner.processes=2", "trainer.batch_size=60"])
    # the global batch must split evenly over the three ranks the cluster file makes
    with pytest.raises(ConfigError, match="trainer.batch_size"):
        _plan(tmp_path, RANKS, ["trainer.batch_size=64"])


def test_ranks_started_elsewhere_need_a_rendezvous() -> None:
    with pytest.raises(ConfigError, match="learner.rendezvous"):
        load_config(TTT, ["learner.processes=2", "learner.start_ranks=false"])


def test_collectives_are_pinned_to_the_interface_that_routes_to_rank_0(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("GLOO_SOCKET_IFNAME", raising=False)
    assert interface_of("127.0.0.1") == "lo"
    assert interface_of("203.0.113.77") == ""  # an address no interface here holds
    assert pin_interface("gloo", "tcp://127.0.0.1:29500") == ""  # loopback: gloo's default
    assert "GLOO_SOCKET_IFNAME" not in os.environ
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "mine")
    assert pin_interface("gloo", "tcp://10.9.9.9:29500") == ""  # the user's choice stands
    assert os.environ["GLOO_SOCKET_IFNAME"] == "mine"


def _ranks_cluster(lan, tmp_path: Path) -> Path:
    """Server and learner rank 0 in the first namespace; rank 1 and the actors in the second.
    CURVE for the ZeroMQ sockets, each host holding its own secret keys."""
    from azserve.keys import create_pair

    keys = tmp_path / "keys"
    create_pair(keys / lan[0].name, "server-s0")
    create_pair(keys / lan[0].name, "learner")
    create_pair(keys / lan[1].name, f"actors-{lan[1].name}")
    text = f"""
engine = "ssh"
keys = "{keys}/{{host}}"
workdir = "{REPO}"
python = "{sys.executable}"

[ssh]
command = "ip netns exec {{host}}"

[[server]]
name = "s0"
host = "{lan[0].name}"
address = "{lan[0].address}"

[learner]
host = "{lan[0].name}"
address = "{lan[0].address}"
rank_hosts = ["{lan[1].name}"]
trusted_network = true

[[actors]]
name = "east"
hosts = ["{lan[1].name}"]
games = 16
"""
    return write(tmp_path / "cluster.toml", text)


def _wait_version(run_dir: Path, version: int, launcher: subprocess.Popen, s: float) -> None:
    deadline = time.monotonic() + s
    while time.monotonic() < deadline:
        rows = run_metrics(run_dir)
        if rows and rows[-1]["version"] >= version:
            return
        assert launcher.poll() is None, launcher.communicate()[0].decode()[-3000:]
        time.sleep(1)
    pytest.fail(f"no version {version} within {s:.0f} s")


@pytest.mark.cluster
@pytest.mark.timeout(420)
def test_two_ranks_in_two_namespaces_train_and_survive_kill_9_of_rank_1(
    netns_hosts, tmp_path: Path
) -> None:
    if unavailable():
        pytest.skip(unavailable() or "")
    lan = netns_hosts(2)
    run_dir = tmp_path / "run"
    argv = [
        sys.executable, "-m", "azserve.cli.main", "launch",
        "--cluster", str(_ranks_cluster(lan, tmp_path)), "--config", str(TTT),
        "--run-dir", str(run_dir), "--no-progress",
        "--set", "train.status_interval_s=2", "--set", "trainer.batch_size=64",
        "--set", "trainer.publish_every=20",
        "--set", "eval.sims=4", "--set", "eval.match_games=2",
    ]  # fmt: skip
    launcher = subprocess.Popen(
        argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
    )
    rank_log = run_dir / "logs" / lan[1].name / "learner-rank-1.log"
    try:
        _wait_version(run_dir, 2, launcher, 180)
        text = rank_log.read_text()
        assert "rank 1 of 2 joined" in text, text[-2000:]
        # gloo left alone would bind the loopback fallback in a namespace; pinned to eth0
        assert "collectives over eth0" in text, text[-2000:]
        # kill -9 rank 1 (away from the run dir): the group breaks, rank 0 exits, both are
        # restarted, and training goes on from the newest checkpoint with rising versions
        before = run_metrics(run_dir)[-1]["version"]
        os.kill(lan[1].azserve_pid(b"--rank"), signal.SIGKILL)
        _wait_version(run_dir, before + 3, launcher, 240)
        launcher.send_signal(signal.SIGINT)
        out = launcher.communicate(timeout=180)[0].decode()
    finally:
        if launcher.poll() is None:
            os.killpg(launcher.pid, signal.SIGKILL)
    assert launcher.returncode == 130, out[-3000:]
    deadline = time.monotonic() + 20
    while any(host.pids() for host in lan) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert [host.pids() for host in lan] == [[], []]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["restarts"].get("learner-rank-1", 0) >= 1, summary
    assert summary["restarts"].get("learner", 0) >= 1, summary
    assert summary["games_stored"] > 0
    versions = [r["version"] for r in run_metrics(run_dir)]
    assert versions == sorted(versions), versions
    # rank 1 came back and rejoined; it stopped at rank 0's word, not by a signal
    text = rank_log.read_text()
    assert text.count("rank 1 of 2 joined") >= 2, text[-3000:]
    assert "stopped by rank 0" in text, text[-3000:]
