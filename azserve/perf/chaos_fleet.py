"""The chaos fleet's layout (``azserve bench chaos``): five namespaced hosts, one role each,
their ssh cluster file and keys (Ray's: ``azserve.perf.chaos_ray``), where each role logs, its
process, and the log lines that show it at work. Shared by the injector
(``azserve.perf.chaos``) and the books (``azserve.perf.chaos_books``)."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

from azserve.errors import AzserveError
from azserve.perf.netns import NetnsHost, NetnsLan
from azserve.perf.slowlink import redirect_rules, write_delays
from azserve.run.actor_lives import STATUS

ROLES = ("server", "learner", "actors")
SERVERS = ("s0", "s1")
GROUPS = {"east": "s0", "west": "s1"}
HOST_OF = {"learner": 0, "s0": 1, "s1": 2, "east": 3, "west": 4}
"""LAN index of each target's host."""

LINK_PORT = 39999
"""Each host's delay forwarder listens on its own loopback at this port."""

LIVE = re.compile(r"version (\d+) live")
PUBLISHED = re.compile(r"published v(\d+)")
SERVER_START = "torch backend:"


def cluster_text(lan: NetnsLan, keys: Path, workdir: str, games: int) -> str:
    """The ssh cluster file of the five hosts."""
    h = {name: lan[i] for name, i in HOST_OF.items()}
    servers = "".join(
        f'\n[[server]]\nname = "{s}"\nhost = "{h[s].name}"\naddress = "{h[s].address}"\n'
        for s in SERVERS
    )
    actors = "".join(
        f'\n[[actors]]\nname = "{g}"\nhosts = ["{h[g].name}"]\ngames = {games}\nserver = "{s}"\n'
        for g, s in GROUPS.items()
    )
    return f"""# azserve bench chaos: five network namespaces on one machine
engine = "ssh"
network = "auto"
keys = "{keys}/{{host}}"
workdir = "{workdir}"
python = "{sys.executable}"
restarts = 100000

[ssh]
command = "ip netns exec {{host}}"
{servers}
[learner]
host = "{h["learner"].name}"
address = "{h["learner"].address}"
{actors}"""


def make_keys(lan: NetnsLan, keys: Path) -> None:
    """Each host's own pairs, made in its own directory (namespaces share one filesystem, so
    ``keys = ".../{host}"`` stands for each host's disk); the launcher copies public keys."""
    from azserve.keys import create_pair

    create_pair(keys / lan[HOST_OF["learner"]].name, "learner")
    for s in SERVERS:
        create_pair(keys / lan[HOST_OF[s]].name, f"server-{s}")
    for g in GROUPS:
        host = lan[HOST_OF[g]].name
        create_pair(keys / host, f"actors-{host}")


def log_path(run_dir: Path, lan: NetnsLan, target: str, engine: str = "ssh") -> Path:
    """Where ``target``'s log is: ``logs/HOST/NAME.log`` under ssh, ``logs/ray/NAME.log``
    under Ray (the launcher pulls each runner's log there, every life appended)."""
    host = "ray" if engine == "ray" else lan[HOST_OF[target]].name
    name = target if target == "learner" else f"server-{target}" if target in SERVERS else None
    return run_dir / "logs" / host / (f"{name}.log" if name else f"actor-{target}-0.log")


def role_pids(host: NetnsHost, target: str) -> list[int]:
    """The azserve process of ``target`` in its namespace (not its watchdog)."""
    word = b"learn" if target == "learner" else b"serve" if target in SERVERS else b"actors"
    return host.azserve_pids(word)


def read_from(path: Path, offset: int) -> str:
    try:
        with path.open("rb") as f:
            f.seek(offset)
            return f.read().decode(errors="replace")
    except OSError:
        return ""


def size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def working(target: str, text: str) -> bool:
    """Whether log text written after a strike shows ``target`` at work again."""
    if target == "learner":
        return PUBLISHED.search(text) is not None
    if target in SERVERS:
        return LIVE.search(text) is not None
    return any(float(m[0]) > 0 for m in STATUS.findall(text))


def role_of(target: str) -> str:
    return "server" if target in SERVERS else "actors" if target in GROUPS else "learner"


def start_links(lan: NetnsLan, control: Path, log_dir: Path) -> list[subprocess.Popen[bytes]]:
    """Every host's delay forwarder (``azserve.perf.slowlink``), then the nftables redirect
    that sends the host's TCP connections to the LAN through it; the delays start at none.
    The forwarders stand for the hosts' kernels: a host strike spares them."""
    write_delays(control, {})
    log_dir.mkdir(parents=True, exist_ok=True)
    procs, logs = [], []
    for host in lan:
        log = log_dir / f"slowlink-{host.name}.log"
        with log.open("wb") as out:
            procs.append(host.popen(
                [sys.executable, "-m", "azserve.perf.slowlink", "--own", host.address,
                 "--port", str(LINK_PORT), "--control", str(control)],
                stdout=out, stderr=subprocess.STDOUT,
            ))  # fmt: skip
        logs.append(log)
    deadline = time.monotonic() + 60
    for host, proc, log in zip(lan, procs, logs, strict=True):
        while b"forwarding on" not in log.read_bytes():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AzserveError(
                    f"chaos: the delay forwarder on {host.name} did not start: "
                    f"{log.read_text(errors='replace')[-500:]}"
                )
            time.sleep(0.05)
        r = host.run(["nft", "-f", "-"], input=redirect_rules(lan.subnet, host.address, LINK_PORT))
        if r.returncode != 0:
            raise AzserveError(f"chaos: no redirect on {host.name}: {r.stderr.strip()}")
    return procs
