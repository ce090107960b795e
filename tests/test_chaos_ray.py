"""``azserve bench chaos --engine ray``: the pure parts (the cluster file that pins each role by
its host's resource, each node's ``ray start``, where the logs are, which processes are Ray's,
how a node's restart is logged), and the short form of the real thing (``long``: not in
``make test``): six network namespaces, a real Ray node in each, ``azserve launch`` on Ray,
host crashes (raylet included, its node started again) and partitions."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from azserve.cli.main import build_parser
from azserve.perf.chaos import Injector, Strike, node_restarted
from azserve.perf.chaos_fleet import GROUPS, HOST_OF, SERVERS, log_path
from azserve.perf.chaos_ray import (
    HEAD_INDEX,
    HOSTS,
    cluster_text,
    is_ray,
    is_raylet,
    ray_unavailable,
    resource_of,
    start_argv,
    summary,
    sweep_dead,
)
from azserve.perf.netns import NetnsHost, NetnsLan, unavailable
from azserve.run.cluster.spec import load_cluster
from tests.test_chaos import run_chaos

REPO = Path(__file__).resolve().parents[1]


def paper_lan() -> NetnsLan:
    """A LAN as ``make_lan(6)`` describes it, made of names only (nothing is created)."""
    hosts = tuple(NetnsHost(f"azt1x0-{i}", f"10.77.9.{i + 1}") for i in range(HOSTS))
    return NetnsLan(hosts, "azt1x0-hub", "10.77.9.0/24", "10.77.9.254", "azt1x0r")


def test_the_cluster_file_pins_each_role_to_its_hosts_resource(tmp_path: Path) -> None:
    lan = paper_lan()
    path = tmp_path / "cluster.toml"
    path.write_text(cluster_text(lan, Path("/etc/azchaos-1"), str(REPO), 16))
    spec = load_cluster(str(path))
    assert spec.engine == "ray" and spec.network == "auto" and spec.keys == "/etc/azchaos-1"
    assert spec.ray.address == f"{lan[HEAD_INDEX].address}:6379"
    assert spec.restarts >= 1000 and spec.ray.max_restarts >= 1000
    assert {s.name: s.resources for s in spec.server} == {s: {f"chaos-{s}": 0.01} for s in SERVERS}
    assert spec.learner.resources == {"chaos-learner": 0.01}
    assert {g.name: (g.resources, g.server, g.games) for g in spec.actors} == {
        g: ({f"chaos-{g}": 0.01}, s, 16) for g, s in GROUPS.items()
    }


def test_each_nodes_ray_start() -> None:
    lan = paper_lan()
    head = lan[HEAD_INDEX]
    argv = start_argv("/venv/bin/ray", head, head.address, None)
    assert argv[:3] == ["/venv/bin/ray", "start", "--head"] and "--resources" not in argv
    assert argv[argv.index("--node-ip-address") + 1] == head.address
    s0 = lan[HOST_OF["s0"]]
    assert "--temp-dir" not in argv
    argv = start_argv("/venv/bin/ray", s0, head.address, resource_of("s0"), Path("/tmp/azray-7/s0"))
    assert argv[argv.index("--temp-dir") + 1] == "/tmp/azray-7/s0"
    assert argv[argv.index("--address") + 1] == f"{head.address}:6379"
    assert json.loads(argv[argv.index("--resources") + 1]) == {"chaos-s0": 1}
    assert argv[argv.index("--node-ip-address") + 1] == s0.address
    assert [resource_of(t) for t in HOST_OF] == [f"chaos-{t}" for t in HOST_OF]
    with pytest.raises(ValueError, match="target='head'"):
        resource_of("head")


def test_logs_under_ray_are_the_launchers_pulled_copies() -> None:
    lan, run = paper_lan(), Path("/r")
    assert log_path(run, lan, "learner", "ray") == run / "logs/ray/learner.log"
    assert log_path(run, lan, "s1", "ray") == run / "logs/ray/server-s1.log"
    assert log_path(run, lan, "east", "ray") == run / "logs/ray/actor-east-0.log"
    assert log_path(run, lan, "s1") == run / "logs" / lan[HOST_OF["s1"]].name / "server-s1.log"


def test_which_processes_are_rays() -> None:
    raylet = b"/v/lib/python3.11/site-packages/ray/core/src/ray/raylet/raylet\0--node_ip=1\0"
    assert is_raylet(raylet) and is_ray(raylet)
    assert is_ray(b"ray::RoleRunner.poll\0") and is_ray(b"ray::IDLE\0")
    assert is_ray(b"/v/bin/python\0-u\0/v/site-packages/ray/_private/log_monitor.py\0")
    # azserve's own processes are never Ray's, whatever their base64 config holds
    assert not is_ray(b"/v/bin/python\0-m\0azserve.run.cluster.remote\0--config-b64\0a/ray/b\0")
    assert not is_ray(b"/v/bin/python\0-m\0azserve.cli.main\0serve\0")
    assert not is_raylet(b"/v/bin/python\0/v/bin/ray\0start\0")


def test_a_node_restart_is_logged_with_the_strike_it_followed(tmp_path: Path) -> None:
    lan = paper_lan()
    inj = Injector(lan, tmp_path, 1, (1, 2), 60, tmp_path / "chaos.jsonl")
    s0, learner = lan[HOST_OF["s0"]].name, lan[HOST_OF["learner"]].name
    inj.strikes = [Strike(1, 10.0, "host", "server", "s0", s0, [1, 2])]
    inj.current = Strike(2, 20.0, "partition", "learner", "learner", learner, [])
    out = tmp_path / "chaos.jsonl"
    for target in ("s0", "learner", "east"):
        done = {"target": target, "host": lan[HOST_OF[target]].name, "ok": True,
                "took_s": 4.5, "killed": 3, "note": ""}  # fmt: skip
        node_restarted(done, inj, 0.0, out)
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["event"], r["after_strike"], r["after_kind"]) for r in rows] == [
        ("ray_node_restart", 1, "host"),
        ("ray_node_restart", 2, "partition"),
        ("ray_node_restart", None, None),
    ]
    s = summary(rows)
    assert (s["count"], s["failed"], s["max_took_s"]) == (3, 0, 4.5)
    assert s["by_target"] == {"s0": 1, "learner": 1, "east": 1}
    assert s["by_strike_kind"] == {"host": 1, "partition": 1, "None": 1}


def test_the_engine_is_a_flag_and_ssh_by_default() -> None:
    parse = build_parser().parse_args
    assert parse(["bench", "chaos", "--config", "tictactoe"]).engine == "ssh"
    assert parse(["bench", "chaos", "--config", "x", "--engine", "ray"]).engine == "ray"
    with pytest.raises(SystemExit):
        parse(["bench", "chaos", "--config", "x", "--engine", "slurm"])


@pytest.mark.long
@pytest.mark.cluster
@pytest.mark.xdist_group("cluster")
@pytest.mark.timeout(600)
def test_chaos_on_ray_for_two_minutes_loses_nothing(tmp_path: Path) -> None:
    """Host crashes (every process of a host, its raylet included: the keeper starts the node
    again) and partitions on the Ray engine, and the same books as under ssh. Seed 4 deals host
    strikes, a partition and kills (in its runs: the learner's host twice, a server cut off, kills
    of an actor process and a server)."""
    if unavailable():
        pytest.skip(unavailable() or "")
    if ray_unavailable():
        pytest.skip(ray_unavailable() or "")
    if shutil.which("nft") is None:
        pytest.skip("nft not installed (the partitions): apt-get install nftables")
    out, work = tmp_path / "chaos.json", tmp_path / "fleet"
    ray_dirs_before = set(Path("/tmp").glob("azray-*"))
    argv = [
        sys.executable, "-m", "azserve.cli.main", "bench", "chaos", "--engine", "ray",
        "--config", "tictactoe", "--minutes", "2", "--interval", "3,6", "--quiet-s", "10",
        "--seed", "4", "--games", "16", "--kinds", "host,partition,kill", "--net-s", "4,8",
        "--work-dir", str(work), "--json", str(out),
    ]  # fmt: skip
    done, r = run_chaos(argv, out, timeout=560)
    v = r["verdicts"]
    failed = [k for k, ok in v.items() if not ok and k != "ok"]
    assert v["ok"], (failed, r["versions_detail"], r["recovery_s"], done.stdout[-3000:])
    assert r["engine"] == "ray" and r["acked_lost"] == 0 and r["duplicates"] == 0
    assert r["games_stored"] > 0 and r["launcher_summary"]["games_stored"] == r["games_stored"]
    assert {"host", "partition"} <= set(r["kills"]), r["kills"]
    rows = [json.loads(line) for line in (work / "chaos.jsonl").read_text().splitlines()]
    strikes = [row for row in rows if "event" not in row]
    restarts = [row for row in rows if row.get("event") == "ray_node_restart"]
    assert len(strikes) == r["strikes"] and all(s["recovered_s"] is not None for s in strikes)
    # every host strike took a raylet with it, and its node was started again
    for s in (s for s in strikes if s["kind"] == "host"):
        assert any(x["after_strike"] == s["n"] and x["ok"] for x in restarts), (s, restarts)
    assert r["ray_node_restarts"]["count"] == len(restarts) >= 1
    # the logs were pulled from the nodes, every role's into logs/ray/
    names = {p.name for p in (work / "run" / "logs" / "ray").glob("*.log")}
    assert {"learner.log", "server-s0.log", "server-s1.log"} <= names, names
    assert {"actor-east-0.log", "actor-west-0.log"} <= names, names
    assert all(mb > 0 for mb in r["memory_peak_mb"].values()), r["memory_peak_mb"]
    # the launcher (on the head, the learner on a host of its own) asked the servers' status
    # with its own pair: the learner's secret key is not on the head
    launch = (work / "launch.log").read_text()
    assert re.search(r"server-s0 +\S+ rows/s", launch), launch[-3000:]
    # nothing of the run is left: no namespace (and so no Ray process), no keys under /etc,
    # no Ray session directory (each node's --temp-dir)
    ours = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    hosts = {s["host"] for s in strikes}
    assert not any(h in ours for h in hosts), ours
    assert not any((Path("/etc/netns") / h).exists() for h in hosts)
    assert set(Path("/tmp").glob("azray-*")) <= ray_dirs_before


def test_a_killed_runs_keys_directories_are_swept(tmp_path: Path) -> None:
    dead, alive = 4_194_400, os.getpid()  # above Linux's largest pid: never a live process
    made = [
        tmp_path / f"azchaos-{dead}",
        tmp_path / "netns" / f"azt{dead}x0-3",
        tmp_path / "tmp" / f"azray-{dead}",  # its Ray nodes' session directories
        tmp_path / f"azchaos-{alive}",
        tmp_path / "netns" / f"azt{alive}x1-0",
        tmp_path / "tmp" / f"azray-{alive}",
    ]
    for d in made:
        (d / "keys").mkdir(parents=True)
    assert sorted(sweep_dead(tmp_path, tmp_path / "tmp")) == sorted(made[:3])
    assert [d.exists() for d in made] == [False, False, False, True, True, True]
