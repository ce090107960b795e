"""The chaos fleet's layout (``azserve bench chaos``): five namespaced hosts, one role each,
their cluster file and keys, where each role logs, its process, and the log lines that show it
at work. Shared by the injector (``azserve.perf.chaos``) and the books
(``azserve.perf.chaos_books``)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from azserve.perf.netns import NetnsHost, NetnsLan
from azserve.run.actor_lives import STATUS

ROLES = ("server", "learner", "actors")
SERVERS = ("s0", "s1")
GROUPS = {"east": "s0", "west": "s1"}
HOST_OF = {"learner": 0, "s0": 1, "s1": 2, "east": 3, "west": 4}
"""LAN index of each target's host."""

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


def log_path(run_dir: Path, lan: NetnsLan, target: str) -> Path:
    host = lan[HOST_OF[target]].name
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
