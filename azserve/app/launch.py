"""``azserve launch``: server, learner and actors across hosts, from one hosts file.

The hosts file (TOML) names each host, how to reach it and its roles::

    [[host]]
    name = "gpu0"
    ssh = "user@10.0.0.5"      # or "local": run here, no ssh
    address = "10.0.0.5"       # what the other hosts connect to
    roles = ["server", "learner"]
    workdir = "/srv/azserve"   # the repository checkout on that host

    [[host]]
    name = "cpu0"
    ssh = "user@10.0.0.6"
    address = "10.0.0.6"
    roles = ["actors"]
    actor_processes = 8

Every host runs the same checkout (``workdir``, with its ``.venv``). The launcher resolves the
config once (endpoints pointing at the server and learner hosts), sends it to each host over
ssh's stdin, starts the roles, prefixes their output with the host name, and on Ctrl-C stops
the learner first (checkpoint), then actors, then servers. Sockets that cross hosts need CURVE
keys (``azserve keys``; ``auth.*`` paths must be valid on every host).
"""

from __future__ import annotations

import argparse
import shlex
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass, field

from azserve.app.config import dump_toml, from_dict, read_toml, to_dict
from azserve.app.schema import Config, load_config, replace
from azserve.errors import ConfigError

ROLES = ("server", "learner", "actors")


@dataclass(frozen=True)
class Host:
    """One machine of the launch."""

    name: str
    """Label used in output."""
    roles: tuple[str, ...]
    """Any of ``server``, ``learner``, ``actors``."""
    ssh: str = "local"
    """ssh destination, or ``local`` to run on this machine."""
    address: str = "127.0.0.1"
    """Address the other hosts use to reach this one."""
    workdir: str = "."
    """Repository checkout on the host."""
    actor_processes: int = 1
    """Actor processes on this host (role ``actors``)."""
    server_port: int = 5555
    """Port of the inference server (role ``server``)."""
    learner_port: int = 5556
    """Port of the trajectory receiver (role ``learner``)."""


@dataclass(frozen=True)
class HostsFile:
    host: tuple[Host, ...] = field(default_factory=tuple)
    """The hosts."""


def load_hosts(path: str) -> list[Host]:
    hosts = list(from_dict(HostsFile, read_toml(path), "").host)
    for h in hosts:
        bad = [r for r in h.roles if r not in ROLES]
        if bad:
            raise ConfigError(f"host {h.name}: unknown role {bad[0]!r} (roles: {', '.join(ROLES)})")
    for role in ("server", "learner"):
        if sum(role in h.roles for h in hosts) != 1:
            raise ConfigError(f"hosts: exactly one host must have the role {role!r}")
    return hosts


def plan(cfg: Config, hosts: list[Host], run_dir: str) -> list[tuple[Host, str, list[str], str]]:
    """(host, role name, azserve argv, config TOML) for every process to start."""
    server = next(h for h in hosts if "server" in h.roles)
    learner = next(h for h in hosts if "learner" in h.roles)
    crosses = any(h.ssh != "local" for h in hosts)
    bind_host = "0.0.0.0" if crosses else "127.0.0.1"
    server_ep = f"tcp://{server.address}:{server.server_port}"
    learner_ep = f"tcp://{learner.address}:{learner.learner_port}"
    resolved = replace(
        cfg,
        server={"bind": f"tcp://{bind_host}:{server.server_port}"},
        client={"server": server_ep},
        actors={"learner": learner_ep, "sink": "learner"},
        learner={"bind": f"tcp://{bind_host}:{learner.learner_port}", "servers": (server_ep,)},
    )
    if crosses and not cfg.auth.server_secret_key and not cfg.auth.allow_insecure_remote:
        raise ConfigError(
            "auth.server_secret_key: hosts talk across the network, so CURVE keys are required "
            "(create them with `azserve keys --dir DIR`, copy DIR to every host, set auth.*)"
        )
    text = dump_toml(to_dict(resolved))
    out = []
    for h in hosts:
        if "server" in h.roles:
            out.append((h, "server", ["serve"], text))
        if "learner" in h.roles:
            out.append((h, "learner", ["learn", "--run-dir", run_dir, "--resume"], text))
        if "actors" in h.roles:
            for i in range(h.actor_processes):
                out.append((h, f"actors-{i}", ["actors", "--id", f"{h.name}-{i}"], text))
    return out


def remote_command(host: Host, role: str, argv: list[str]) -> list[str]:
    """The command line that writes stdin to a config file on the host and runs azserve there."""
    cfg_file = f"/tmp/azserve-launch-{host.name}-{role}.toml"
    script = (
        f"cd {shlex.quote(host.workdir)} && cat > {cfg_file} && "
        f"exec .venv/bin/azserve {' '.join(shlex.quote(a) for a in argv)} --config {cfg_file}"
    )
    if host.ssh == "local":
        return ["sh", "-c", script]
    return ["ssh", "-o", "BatchMode=yes", host.ssh, script]


def _pump(prefix: str, stream: object) -> None:
    for line in iter(stream.readline, b""):  # type: ignore[attr-defined]
        sys.stdout.write(f"[{prefix}] {line.decode(errors='replace')}")
        sys.stdout.flush()


def run_launch(args: argparse.Namespace) -> int:
    cfg = load_config(args.config, args.overrides)
    hosts = load_hosts(args.hosts)
    procs_plan = plan(cfg, hosts, run_dir=args.run_dir or f"runs/launch-{cfg.game}")
    if args.dry_run:
        for h, role, argv, _ in procs_plan:
            print(f"{h.name}/{role}: {shlex.join(remote_command(h, role, argv))}")
        return 0
    running: list[tuple[str, subprocess.Popen[bytes]]] = []
    # Handlers first: the processes run in their own sessions, so a Ctrl-C that killed the
    # launcher while it was still starting them would leave them running.
    stop = threading.Event()
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    order = sorted(procs_plan, key=lambda p: ROLES.index(p[1].split("-")[0]))
    for h, role, argv, text in order:
        proc = subprocess.Popen(
            remote_command(h, role, argv),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        assert proc.stdin is not None
        proc.stdin.write(text.encode())
        proc.stdin.close()
        threading.Thread(target=_pump, args=(f"{h.name}/{role}", proc.stdout), daemon=True).start()
        running.append((role, proc))
        if role == "server":
            stop.wait(2.0)  # let the server bind before clients connect (they retry anyway)
    code = 0
    while not stop.is_set():
        for role, p in running:
            if p.poll() is not None:
                print(f"{role} exited with code {p.returncode}; stopping", file=sys.stderr)
                code = code or (p.returncode or 1)
                stop.set()
        stop.wait(0.5)
    # learner first (it checkpoints on SIGINT), then actors, then the server
    for first in ("learner", "actors", "server"):
        for role, p in running:
            if role.startswith(first) and p.poll() is None:
                p.send_signal(signal.SIGINT)
        for role, p in running:
            if role.startswith(first):
                try:
                    p.wait(60)
                except subprocess.TimeoutExpired:
                    p.kill()
    return code


__all__ = ["Host", "load_hosts", "plan", "remote_command", "run_launch"]
