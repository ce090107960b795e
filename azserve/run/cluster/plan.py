"""The launch plan: every process of a cluster run, with its host, its command and its own
resolved config. Pure: the engine supplies the addresses, the plan derives endpoints from them.

Endpoints follow the two rules of the run config (``server.bind`` and ``learner.bind`` are the
truth): each server binds ``tcp://ADDRESS:PORT`` on its host; actor groups connect to their
server's address; the learner publishes to every server; actors send games to the learner.
"""

from __future__ import annotations

import ipaddress
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from azserve.auth import AuthConfig, is_local
from azserve.config.schema import Config, replace
from azserve.errors import ConfigError
from azserve.run.cluster.spec import ClusterSpec, Placement

AuthFor = Callable[[str, str, str, str, dict[str, str]], AuthConfig]
"""``auth(name, role, host, group, server_endpoints)``: one process's auth section."""

CONFIG_PLACEHOLDER = "{config}"
"""Stands for the path of the process's config file in its argv; the remote side writes the
config to a file unique to the run and puts the path there."""


@dataclass(frozen=True)
class RoleProc:
    """One process of the run."""

    name: str
    """Unique in the run: ``server-NAME``, ``learner``, ``learner-rank-R``, ``actor-GROUP-K``."""
    role: str
    """``server``, ``learner``, ``learner-rank`` (a data-parallel rank > 0) or ``actors``."""
    host: str
    """Where the ssh/Slurm engine starts it (empty under Ray)."""
    placement: Placement
    """Ray's resource request (and the host fields it came from)."""
    argv: tuple[str, ...]
    """``azserve`` arguments, with ``CONFIG_PLACEHOLDER`` for the config file."""
    config: Config
    """This process's resolved config."""
    threads: int = 1
    """OMP/MKL threads of the process."""
    group: str = ""
    """The actor group (actors only)."""
    endpoint: str = ""
    """What others connect to (servers and the learner)."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Engine-specific facts (e.g. the Ray node chosen)."""


def bind_endpoint(address: str, port: int) -> str:
    """Where a role binds: its address when that is an IP literal, else every interface."""
    try:
        ipaddress.ip_address(address)
        host = address
    except ValueError:
        host = "localhost" if address == "localhost" else "0.0.0.0"
    return f"tcp://{host}:{port}"


def default_address(p: Placement) -> str:
    """What the other hosts connect to, from the cluster file alone."""
    if p.address:
        return p.address
    if p.host in ("", "local"):
        return "127.0.0.1"
    return p.host.rsplit("@", 1)[-1]


def make_plan(
    spec: ClusterSpec,
    cfg: Config,
    run_dir: str,
    addresses: dict[str, str],
    hosts: dict[str, tuple[str, ...]],
    auth: AuthFor | None = None,
    role_hosts: dict[str, str] | None = None,
) -> list[RoleProc]:
    """Every process of the run, servers first, then the learner (and its ranks on other
    hosts), then the actors.

    ``addresses``: ``server-NAME``/``learner`` -> address others connect to (the engine knows:
    the cluster file for ssh, the node for Slurm and Ray). ``hosts``: actor group name -> the
    hosts its processes start on (``("",)`` under Ray: one slot, ``processes`` in all).
    ``auth``: each process's auth section (None: no CURVE). ``role_hosts``: where
    the engine starts ``server-NAME``/``learner`` (default: their ``host`` in the file)."""
    placed = role_hosts or {}
    loopback = spec.network == "loopback"

    def address(name: str) -> str:
        return "127.0.0.1" if loopback else addresses[name]

    servers: list[tuple[str, str]] = []  # (process name, endpoint)
    procs: list[RoleProc] = []
    for i, s in enumerate(spec.server):
        name = f"server-{s.name}"
        port = spec.server_port(i)
        servers.append((name, f"tcp://{address(name)}:{port}"))
    learner_ep = f"tcp://{address('learner')}:{spec.learner.port}"
    server_eps = dict(servers)
    all_servers = tuple(ep for _, ep in servers)
    if not loopback:
        _require_keys(spec, [ep for _, ep in servers] + [learner_ep], auth is not None)
    common: dict[str, Any] = {
        "learner": {"servers": all_servers},
        "actors": {"learner": learner_ep, "sink": "learner"},
    }
    ckpt_dir = f"{run_dir}/{cfg.checkpoint.dir}"
    for i, s in enumerate(spec.server):
        name, ep = servers[i]
        backend: dict[str, Any] = {}
        if s.device:
            backend["device"] = s.device
        if s.threads:
            backend["threads"] = s.threads
        threads = s.threads or cfg.backend.threads or cfg.train.server_threads
        bind = bind_endpoint(address(name), spec.server_port(i))
        c = _resolved(
            cfg,
            common,
            auth and auth(name, "server", placed.get(name, s.host), "", server_eps),
            spec.insecure,
            server={"bind": bind},
            backend=backend,
        )
        argv = ["serve", "--config", CONFIG_PLACEHOLDER]
        if loopback or placed.get(name, s.host) == placed.get("learner", spec.learner.host):
            # Same machine as the run dir: a restarted server starts on the newest checkpoint.
            argv += ["--checkpoint-dir", ckpt_dir]
        host = placed.get(name, s.host)
        procs.append(RoleProc(name, "server", host, s, tuple(argv), c, threads, endpoint=ep))
    trainer = {"device": spec.learner.device} if spec.learner.device else {}
    learner: dict[str, Any] = {
        "bind": bind_endpoint(address("learner"), spec.learner.port),
        "servers": all_servers,
        "threads": cfg.train.learner_threads,
    }
    if cfg.train.steps:
        learner["max_steps"] = cfg.train.steps
    rank_hosts = spec.learner.rank_hosts
    rendezvous = ""
    if rank_hosts:
        world = 1 + len(rank_hosts)
        if cfg.learner.processes not in (1, world):
            raise ConfigError(
                f"learner.processes={cfg.learner.processes}: the cluster file's "
                f"learner.rank_hosts places {world} ranks (the learner's host and "
                f"{len(rank_hosts)} more); leave learner.processes at 1 or set it to {world}"
            )
        rendezvous = f"tcp://{address('learner')}:{spec.learner.rank_port}"
        learner.update(processes=world, rendezvous=rendezvous, start_ranks=False)
    c = _resolved(
        cfg,
        common,
        auth
        and auth("learner", "learner", placed.get("learner", spec.learner.host), "", server_eps),
        spec.insecure,
        learner=learner,
        trainer=trainer,
    )
    argv = ["learn", "--config", CONFIG_PLACEHOLDER, "--run-dir", run_dir, "--resume"]
    procs.append(
        RoleProc(
            "learner",
            "learner",
            placed.get("learner", spec.learner.host),
            spec.learner,
            tuple(argv),
            c,
            cfg.train.learner_threads,
            endpoint=learner_ep,
        )
    )
    # Ranks 1..N-1 take the learner's config without its keys: they open no ZeroMQ socket,
    # and a secret key never leaves the host that owns it.
    rank_cfg = _resolved(cfg, common, None, spec.insecure, learner=learner, trainer=trainer)
    for r, host in enumerate(rank_hosts, start=1):
        argv = [
            "learn", "--config", CONFIG_PLACEHOLDER, "--run-dir", run_dir,
            "--rank", str(r), "--rendezvous", rendezvous,
        ]  # fmt: skip
        procs.append(
            RoleProc(
                f"learner-rank-{r}",
                "learner-rank",
                host,
                Placement(host=host),
                tuple(argv),
                rank_cfg,
                cfg.train.learner_threads,
                endpoint=rendezvous,
            )
        )
    on_host: dict[str, int] = {}  # actor processes per host so far: their metrics ports
    for gi, g in enumerate(spec.actors):
        _, server_ep = servers[spec.server_of(gi)]
        actors: dict[str, Any] = {"learner": learner_ep, "sink": "learner"}
        if g.games:
            actors["games"] = g.games
        k = 0
        for host in hosts[g.name]:
            for _ in range(g.processes):
                name = f"actor-{g.name}-{k}"
                index = on_host[host] = on_host.get(host, -1) + 1
                c = _resolved(
                    cfg,
                    common,
                    auth and auth(name, "actors", host, g.name, server_eps),
                    spec.insecure,
                    client={"server": server_ep},
                    actors={**actors, "metrics_index": index},
                )
                argv = ["actors", "--config", CONFIG_PLACEHOLDER, "--id", name]
                placement = Placement(host=host, resources=dict(g.resources))
                procs.append(
                    RoleProc(name, "actors", host, placement, tuple(argv), c, 1, group=g.name)
                )
                k += 1
    return procs


def _resolved(
    cfg: Config,
    common: dict[str, Any],
    auth: AuthConfig | None,
    insecure: bool = False,
    **sections: Any,
) -> Config:
    merged = {k: dict(v) for k, v in common.items()}
    for k, v in sections.items():
        merged[k] = {**merged.get(k, {}), **v}
    out = replace(cfg, **merged)
    if auth is not None:
        out = replace(out, auth=auth)
    if insecure:
        out = replace(out, auth={"allow_insecure_remote": True})
    return out


def _require_keys(spec: ClusterSpec, eps: list[str], keyed: bool) -> None:
    crossing = [ep for ep in eps if not is_local(ep)]
    if crossing and not keyed and not spec.insecure:
        raise ConfigError(
            f"keys: {crossing[0]} reaches the network, so sockets need CURVE keys: create them "
            "per host with `azserve keys` (docs/security.md) and set `keys` in the cluster "
            "file (or insecure = true on a trusted private network)"
        )


def describe(procs: list[RoleProc], commands: dict[str, list[str]]) -> str:
    """The resolved plan as ``--dry-run`` prints it."""
    lines = []
    for p in procs:
        where = p.host or _ray_request(p.placement)
        edge = ""
        if p.role == "server":
            edge = f"binds {p.config.server.bind}"
        elif p.role == "learner":
            edge = (
                f"binds {p.config.learner.bind}, publishes to {', '.join(p.config.learner.servers)}"
            )
            n = p.config.learner.processes
            if n > 1 and p.config.learner.start_ranks:
                meet = p.config.learner.rendezvous or "a free loopback port"
                edge += f"; {n} data-parallel ranks on its node, meeting at {meet}"
            elif n > 1:
                edge += f"; rank 0 of {n}, the ranks meet at {p.config.learner.rendezvous}"
        elif p.role == "learner-rank":
            edge = f"rank {p.name.rsplit('-', 1)[1]} of {p.config.learner.processes}, meets rank 0 at {p.endpoint}"
        else:
            edge = f"evaluates on {p.config.client.server}, games to {p.config.actors.learner}"
        lines.append(f"{p.name:<24} on {where or 'any node'}: {edge}")
        if p.name in commands:
            lines.append("    " + shlex.join(commands[p.name]))
    return "\n".join(lines)


def _ray_request(p: Placement) -> str:
    parts = [f"{k}={v:g}" for k, v in p.resources.items()]
    if p.num_gpus:
        parts.append(f"GPU={p.num_gpus:g}")
    return ("ray node with " + ", ".join(parts)) if parts else ""


__all__ = [
    "CONFIG_PLACEHOLDER",
    "RoleProc",
    "bind_endpoint",
    "default_address",
    "describe",
    "make_plan",
]
