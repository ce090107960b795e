"""Ray under ``azserve bench chaos --engine ray``: one Ray node per namespaced host, the cluster
file that pins each role to its host, and a keeper that starts a host's Ray node again when it
is gone.

Layout: the five role hosts of ``azserve.perf.chaos_fleet`` plus a sixth, ``head``
(``HEAD_INDEX``), which runs Ray's head (its GCS) and the launcher (Ray's driver) and is never
struck, as a real cluster's head node would not be by this bench: Ray's GCS keeps the cluster's
state in memory unless an external Redis holds it, so a head that dies takes the cluster with
it (every worker node's raylet and worker exits once the GCS has been unreachable for
``gcs_rpc_server_reconnect_timeout_s``, 60 s by default). The head host is still cut off from
by the partitions of other hosts, which is what Ray's control plane meets here.

Each role host's node is started with one custom resource named for its target
(``resource_of("s0")`` -> ``chaos-s0``: 1 unit), and the cluster file asks 0.01 of it for that
target's processes, so Ray can only place them there, and a restarted runner fits beside an old
one still being torn down.

Ray's own authentication is on (``RAY_AUTH_MODE=token``, a token file made here). CURVE keys:
under Ray the ``keys`` path is the same on every node, on each node's own disk; here each
namespace sees its own ``/etc/azchaos-PID`` (``ip netns exec`` bind-mounts
``/etc/netns/HOST/ENTRY`` over ``/etc/ENTRY``), and the launcher has Ray's tasks make and copy
them (``RayEngine.distribute_keys``).

The keeper (``RayFleet.keep``) looks every second for each role host's raylet; when there is
none (a ``host`` strike killed it, or Ray's GCS marked the node dead after a partition and the
raylet exited, or it gave the GCS up after 60 s), it kills what is left of Ray in that namespace
(never an azserve process: those stop by their own watchdog) and runs ``ray start`` there again
with the same resources, as a host's service manager would. Each restart is reported to a
callback (``chaos.jsonl`` logs it with the strike it followed).

``ray stop`` is not used for any of this: it kills every Ray process on the machine, whatever
its namespace; the namespaces are emptied by ``netns.destroy_lan`` instead.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from azserve.errors import AzserveError
from azserve.perf.chaos_fleet import GROUPS, HOST_OF, SERVERS
from azserve.perf.netns import NetnsHost, NetnsLan

HEAD_INDEX = len(HOST_OF)
"""LAN index of the head host (after the five role hosts)."""
HOSTS = HEAD_INDEX + 1
PORT = 6379
"""The head's GCS port."""
SHARE = 0.01
"""What each role's process asks of its host's resource (a node offers 1)."""
OBJECT_STORE_MB = 80
START_TIMEOUT_S = 120.0
"""How long one ``ray start`` may take (it waits for the GCS; cut off, it would wait longer)."""


def resource_of(target: str) -> str:
    """The custom resource of ``target``'s host: ``chaos-learner``, ``chaos-s0``, ..."""
    if target not in HOST_OF:
        raise ValueError(f"target={target!r}: not one of {', '.join(HOST_OF)}")
    return f"chaos-{target}"


def cluster_text(lan: NetnsLan, keys: Path, workdir: str, games: int) -> str:
    """The cluster file of the five roles on the Ray engine, each pinned by its host's
    resource; Ray's head at ``lan[HEAD_INDEX]``."""
    head = lan[HEAD_INDEX].address

    def pin(target: str) -> str:
        return f'resources = {{"{resource_of(target)}" = {SHARE}}}'

    servers = "".join(f'\n[[server]]\nname = "{s}"\n{pin(s)}\n' for s in SERVERS)
    actors = "".join(
        f'\n[[actors]]\nname = "{g}"\ngames = {games}\nserver = "{s}"\n{pin(g)}\n'
        for g, s in GROUPS.items()
    )
    return f"""# azserve bench chaos --engine ray: six network namespaces on one machine
engine = "ray"
network = "auto"
keys = "{keys}"
workdir = "{workdir}"
python = "{sys.executable}"
restarts = 100000

[ray]
address = "{head}:{PORT}"
max_restarts = 100000
{servers}
[learner]
{pin("learner")}
{actors}"""


def start_argv(
    ray: str, host: NetnsHost, head: str, resource: str | None, temp_dir: Path | None = None
) -> list[str]:
    """``ray start`` of ``host``'s node: the head (``resource`` None; no dashboard) or a worker
    joining ``head`` with one unit of ``resource``. One CPU and a small object store each: the
    runners ask no CPU and pass no objects. ``temp_dir``: the node's session directories
    (Ray's default, ``/tmp/ray``, is shared by every namespace and outlives the run)."""
    where = (
        ["--head", "--port", str(PORT), "--include-dashboard", "false"]
        if resource is None
        else ["--address", f"{head}:{PORT}", "--resources", json.dumps({resource: 1})]
    )
    own = ["--temp-dir", str(temp_dir)] if temp_dir is not None else []
    return [ray, "start", *where, "--node-ip-address", host.address, "--num-cpus", "1",
            "--object-store-memory", str(OBJECT_STORE_MB << 20),
            "--disable-usage-stats", *own]  # fmt: skip


def ray_env(token: Path) -> dict[str, str]:
    """This process's environment with Ray's token authentication on (the token is made
    here, as ``ray get-auth-token --generate`` would) and no usage stats."""
    if not token.exists():
        token.write_text(secrets.token_hex(32))
        token.chmod(0o600)
    return {
        **os.environ,
        "RAY_USAGE_STATS_ENABLED": "0",
        "RAY_AUTH_MODE": "token",
        "RAY_AUTH_TOKEN_PATH": str(token),
    }


def ray_unavailable() -> str | None:
    """Why Ray nodes cannot be started here (None when they can)."""
    if importlib.util.find_spec("ray") is None:
        return "Ray is not installed (pip install 'azserve[cluster]')"
    if not Path(ray_bin()).exists():
        return f"{ray_bin()} not found (Ray's command line, beside this interpreter)"
    return None


def ray_bin() -> str:
    return str(Path(sys.executable).with_name("ray"))


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def is_ray(cmd: bytes) -> bool:
    """Whether a ``/proc/PID/cmdline`` is one of Ray's processes (raylet, agents, workers,
    log monitor) and not azserve's (whose base64 config could hold anything)."""
    if b"azserve." in cmd:
        return False
    return cmd.startswith(b"ray::") or b"/ray/" in cmd


def is_raylet(cmd: bytes) -> bool:
    return cmd.split(b"\0")[0].endswith(b"/raylet")


class RayFleet:
    """The Ray nodes of a chaos LAN: ``start`` them, ``keep`` them, ``stop`` keeping them,
    ``remove`` the files made for them (the processes go with the namespaces)."""

    def __init__(self, lan: NetnsLan, work: Path) -> None:
        if len(lan) != HOSTS:
            raise ValueError(f"lan of {len(lan)} hosts: --engine ray needs {HOSTS}")
        self.lan = lan
        self.head = lan[HEAD_INDEX]
        self.keys = Path(f"/etc/azchaos-{os.getpid()}")
        """The keys path of every node (each namespace sees its own, ``/etc/netns``)."""
        self.env = ray_env(work / "ray-token")
        """Environment of every Ray process and of the launcher (Ray's driver)."""
        self.log_dir = work / "ray-nodes"
        self.temp_dir = Path(f"/tmp/azray-{os.getpid()}")
        """Each node's session directories, under ``NAME/`` (short: Ray's sockets live there,
        and a socket's path must fit AF_UNIX's 107 bytes); removed with the run's files."""
        self.restarts: list[dict[str, Any]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _own_dirs(self) -> list[Path]:
        return [Path("/etc/netns") / h.name / self.keys.name for h in self.lan]

    def start(self) -> None:
        """The keys directories (those a killed run left are swept first), then the head's
        node, then every role host's, one at a time (five at once overran the GCS's 30 s for
        a node to register on 2 loaded cores)."""
        sweep_dead()
        self.keys.mkdir(exist_ok=True)  # the mount point; each namespace's own is bound on it
        for d in self._own_dirs():
            d.mkdir(parents=True, exist_ok=True)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        for target in [None, *HOST_OF]:
            self._wait([self._launch(target)])

    def _launch(self, target: str | None) -> tuple[str, subprocess.Popen[bytes], Path]:
        host = self.head if target is None else self.lan[HOST_OF[target]]
        name = target or "head"
        log = self.log_dir / f"start-{name}.log"
        argv = start_argv(ray_bin(), host, self.head.address, target and resource_of(target),
                          self.temp_dir / name)  # fmt: skip
        with log.open("ab") as out:
            proc = host.popen(argv, stdout=out, stderr=subprocess.STDOUT, env=self.env)
        return name, proc, log

    def _wait(self, started: list[tuple[str, subprocess.Popen[bytes], Path]]) -> None:
        failed = []
        for name, proc, log in started:
            try:
                code = proc.wait(timeout=START_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                code = proc.wait()
            if code != 0:
                failed.append(f"{name} (exit {code}): {log.read_text(errors='replace')[-800:]}")
        if failed:
            raise AzserveError(f"chaos: ray start failed on {'; '.join(failed)}")

    def raylet_alive(self, target: str) -> bool:
        return any(is_raylet(_cmdline(p)) for p in self.lan[HOST_OF[target]].pids())

    def restart(self, target: str) -> dict[str, Any]:
        """Kill what is left of Ray on ``target``'s host and start its node again; what was
        done: ``target``, ``host``, ``ok``, ``took_s``, ``killed`` (Ray processes left)."""
        host = self.lan[HOST_OF[target]]
        t = time.monotonic()
        left = [p for p in host.pids() if is_ray(_cmdline(p))]
        for pid in left:
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass
        try:
            self._wait([self._launch(target)])
            ok, note = True, ""
        except AzserveError as exc:
            ok, note = False, str(exc)[-300:]
        return {"target": target, "host": host.name, "ok": ok,
                "took_s": round(time.monotonic() - t, 1), "killed": len(left),
                "note": note}  # fmt: skip

    def keep(self, on_restart: Callable[[dict[str, Any]], None], period_s: float = 1.0) -> None:
        """From now on, restart every role host's node whose raylet is gone (``restart``),
        each reported to ``on_restart`` and kept in ``restarts``; a failed start is tried
        again at the next look."""

        def run() -> None:
            while not self._stop.wait(period_s):
                for target in HOST_OF:
                    if self._stop.is_set() or self.raylet_alive(target):
                        continue
                    done = self.restart(target)
                    self.restarts.append(done)
                    on_restart(done)

        self._thread = threading.Thread(target=run, name="chaos-ray-keeper", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop keeping the nodes (again, or never started: nothing to do)."""
        self._stop.set()
        if self._thread is not None and self._thread.is_alive():
            self._thread.join(timeout=START_TIMEOUT_S + 10)

    def remove(self) -> None:
        """The files made for the nodes: each namespace's keys, the mount point and the nodes'
        session directories (after ``netns.destroy_lan``, which kills the nodes)."""
        for d in self._own_dirs():
            shutil.rmtree(d.parent, ignore_errors=True)
        shutil.rmtree(self.keys, ignore_errors=True)
        shutil.rmtree(self.temp_dir, ignore_errors=True)


def sweep_dead(etc: Path = Path("/etc"), tmp: Path = Path("/tmp")) -> list[Path]:
    """Remove the keys directories of chaos runs whose process is gone (``azchaos-PID`` and
    the namespaces' ``netns/aztPIDx...``) and their Ray nodes' session directories
    (``/tmp/azray-PID``): a run killed before its teardown; returns them."""
    gone = []
    for path in [*etc.glob("azchaos-*"), *(etc / "netns").glob("azt*"), *tmp.glob("azray-*")]:
        m = re.match(r"^(?:azchaos-|azt|azray-)(\d+)", path.name)
        if m and not Path(f"/proc/{m[1]}").exists():
            shutil.rmtree(path, ignore_errors=True)
            gone.append(path)
    return gone


def summary(restarts: list[dict[str, Any]]) -> dict[str, Any]:
    """The keeper's restarts in short: ``count``, ``failed`` (a start that did not come up:
    tried again a second later), ``by_target``, ``by_strike_kind`` (what the restart followed),
    the slowest start (``max_took_s``) and every restart as logged (``rows``)."""
    by_target: dict[str, int] = {}
    by_kind: dict[str, int] = {}
    for r in restarts:
        by_target[r["target"]] = by_target.get(r["target"], 0) + 1
        kind = str(r.get("after_kind"))
        by_kind[kind] = by_kind.get(kind, 0) + 1
    return {
        "count": len(restarts),
        "failed": sum(not r["ok"] for r in restarts),
        "by_target": by_target,
        "by_strike_kind": by_kind,
        "max_took_s": max((r["took_s"] for r in restarts), default=None),
        "rows": restarts,
    }


__all__ = [
    "HEAD_INDEX",
    "HOSTS",
    "RayFleet",
    "cluster_text",
    "is_ray",
    "is_raylet",
    "ray_env",
    "ray_unavailable",
    "resource_of",
    "start_argv",
    "summary",
    "sweep_dead",
]
