"""The cluster file: which engine places the processes, the inference servers, the learner and
the actor groups. Documented field by field in docs/cluster.md; loaded with the same checks as
the run config (an unknown key lists the known ones, a bad value names the key and the reason).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Literal

from azserve.config.load import from_dict, read_toml
from azserve.errors import ConfigError

ENGINES = ("ray", "slurm", "ssh")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")


@dataclass(frozen=True)
class Placement:
    """Where one role runs. ``host`` serves the ssh and Slurm engines; ``resources`` and
    ``num_gpus`` the Ray engine."""

    host: str = ""
    """ssh: the ssh destination (``user@host``) or ``local`` (this machine, no ssh); with a
    command template (``ssh.command``) whatever ``{host}`` stands for (a network namespace,
    a node name). Slurm: a node of the allocation (empty: the next free node)."""
    address: str = ""
    """What the other hosts connect to (empty: ``host`` without ``user@``; ``127.0.0.1`` for
    ``local``; the node's IP address under Ray)."""
    resources: dict[str, float] = field(default_factory=dict)
    """Ray: custom resources the process requests (``{"gpu-host-0": 1}`` pins it to the node
    started with that resource)."""
    num_gpus: float = 0.0
    """Ray: GPUs the process requests."""


@dataclass(frozen=True)
class ServerRole(Placement):
    """One inference server (one per accelerator; several allowed)."""

    name: str = "server"
    """Label in logs and the status table; actor groups name it in ``server``."""
    port: int = 0
    """TCP port the server binds on its host (0: 5555 + its index)."""
    device: str = ""
    """``backend.device`` for this server (empty: the run config's)."""
    threads: int = 0
    """``backend.threads`` for this server (0: the run config's)."""


@dataclass(frozen=True)
class LearnerRole(Placement):
    """The learner: trains, checkpoints into the run dir, publishes every version to every
    server. The run dir must be on the launcher's machine (or a shared filesystem): the launcher
    reads metrics.jsonl and the checkpoints there for the status table and evaluations."""

    port: int = 5600
    """TCP port of the trajectory receiver."""
    device: str = ""
    """``trainer.device`` (empty: the run config's)."""
    rank_hosts: tuple[str, ...] = ()
    """ssh/Slurm: the hosts of a data-parallel learner's ranks 1, 2, ... (one each; rank 0 is
    the learner on ``host``), so ``learner.processes`` is one more than their count. Empty:
    every rank on the learner's host (``learner.processes`` of the run config)."""
    rank_port: int = 29500
    """TCP port on the learner's host where the ranks meet (torch.distributed's store)."""
    trusted_network: bool = False
    """Ranks on other hosts talk torch.distributed (gloo, NCCL), which has no authentication and
    no encryption: set true to say that the learner's hosts share a private network nobody
    else reaches (``insecure = true`` says it for every socket)."""


@dataclass(frozen=True)
class ActorGroup:
    """Self-play processes on a set of hosts, all using one inference server."""

    name: str = "actors"
    """Label in logs and the status table."""
    hosts: tuple[str, ...] = ()
    """ssh/Slurm: the hosts (or namespaces, or nodes) that run this group."""
    nodes: int = 0
    """Slurm: take this many nodes of the allocation not used by another group (when ``hosts``
    is empty)."""
    processes: int = 1
    """ssh/Slurm: actor processes per host. Ray: actor processes of the group in all."""
    games: int = 0
    """Concurrent games per process (0: the run config's ``actors.games``)."""
    server: str = ""
    """The server (by name) this group's games evaluate on (empty: servers are dealt out to the
    groups in turn)."""
    resources: dict[str, float] = field(default_factory=dict)
    """Ray: custom resources each process requests (pins the group to nodes)."""


@dataclass(frozen=True)
class SshEngine:
    """How the ssh engine reaches a host."""

    command: str = "ssh -o BatchMode=yes -o ServerAliveInterval=15 {host}"
    """Command prefix with ``{host}``; for instance ``ip netns exec {host}`` for namespaces."""
    takes_string: bool | None = None
    """The prefix takes one shell string (as ssh does) rather than an argv (None: true when the
    command is ssh)."""


@dataclass(frozen=True)
class RayEngine:
    """How the Ray engine finds its cluster."""

    address: str = "auto"
    """``auto`` (the cluster this machine belongs to, as ``ray start`` made it), ``local`` (start
    a Ray instance on this machine for the run), or ``HOST:PORT`` of the head."""
    max_restarts: int = 100
    """How often Ray restarts an actor process that dies (then the run stops)."""


@dataclass(frozen=True)
class SlurmEngine:
    """How the Slurm engine uses the allocation it runs in."""

    srun: str = "srun --nodes=1 --ntasks=1 --overlap --nodelist={host}"
    """Command prefix that starts one process on node ``{host}`` of the allocation."""


@dataclass(frozen=True)
class ClusterSpec:
    """A whole cluster file."""

    engine: Literal["ray", "slurm", "ssh"] = "ssh"
    """What places and starts the processes."""
    network: Literal["auto", "loopback"] = "auto"
    """``loopback``: every role is on this machine, all sockets on 127.0.0.1 (no keys needed);
    ``auto``: sockets on the hosts' addresses, CURVE-authenticated."""
    workdir: str = ""
    """The checkout on every host, where processes start (empty: the launcher's working dir)."""
    python: str = ""
    """The interpreter on every host, relative to ``workdir`` or absolute (empty: the
    launcher's own interpreter; ssh hosts default to ``.venv/bin/python``)."""
    keys: str = ""
    """Directory of CURVE keys, the same path on every host (``azserve keys``; see
    docs/security.md). Required when ``network = "auto"`` unless ``insecure``."""
    insecure: bool = False
    """Run cross-host sockets without CURVE (trusted private networks only)."""
    restarts: int = 5
    """How often the launcher restarts a server or the learner that exits (as ``azserve train``
    does with ``train.restart_children``); ssh/Slurm actor processes too."""
    server: tuple[ServerRole, ...] = ()
    """The inference servers (at least one)."""
    learner: LearnerRole = field(default_factory=LearnerRole)
    """The learner."""
    actors: tuple[ActorGroup, ...] = ()
    """The actor groups (at least one)."""
    ssh: SshEngine = field(default_factory=SshEngine)
    """ssh engine settings."""
    ray: RayEngine = field(default_factory=RayEngine)
    """Ray engine settings."""
    slurm: SlurmEngine = field(default_factory=SlurmEngine)
    """Slurm engine settings."""

    def __post_init__(self) -> None:
        if not self.server:
            raise ConfigError("server: the cluster needs at least one [[server]]")
        if not self.actors:
            raise ConfigError("actors: the cluster needs at least one [[actors]] group")
        _unique("server", [s.name for s in self.server])
        _unique("actors", [g.name for g in self.actors])
        names = {s.name for s in self.server}
        for i, s in enumerate(self.server):
            _check_placement(f"server[{i}]", s)
            if not 0 <= s.port < 65536:
                raise ConfigError(f"server[{i}].port={s.port}: must be in [0, 65535]")
        _check_placement("learner", self.learner)
        self._check_ranks(ports=[self.server_port(i) for i in range(len(self.server))])
        for i, g in enumerate(self.actors):
            _check_resources(f"actors[{i}].resources", g.resources)
            if g.server and g.server not in names:
                raise ConfigError(
                    f"actors[{i}].server={g.server!r}: no such server (servers: {', '.join(sorted(names))})"
                )
            if g.processes < 1:
                raise ConfigError(f"actors[{i}].processes={g.processes}: must be >= 1")
            if g.games < 0 or g.nodes < 0:
                raise ConfigError(f"actors[{i}]: games and nodes must be >= 0")
            if self.engine == "ssh" and not g.hosts:
                raise ConfigError(f"actors[{i}].hosts: the ssh engine needs the group's hosts")
        ports = [self.server_port(i) for i in range(len(self.server))]
        if self.learner.port in ports:
            raise ConfigError(f"learner.port={self.learner.port}: also a server's port")
        if self.restarts < 0:
            raise ConfigError(f"restarts={self.restarts}: must be >= 0")

    def _check_ranks(self, ports: list[int]) -> None:
        lr = self.learner
        if not 0 < lr.rank_port < 65536:
            raise ConfigError(f"learner.rank_port={lr.rank_port}: must be in [1, 65535]")
        if lr.rank_port in [*ports, lr.port]:
            raise ConfigError(
                f"learner.rank_port={lr.rank_port}: also the learner's or a server's port"
            )
        if not lr.rank_hosts:
            return
        if self.engine == "ray":
            raise ConfigError(
                "learner.rank_hosts: the Ray engine runs every rank on the learner's node "
                "(set learner.processes in the run config); rank_hosts is for ssh and Slurm"
            )
        if self.network != "loopback" and not (lr.trusted_network or self.insecure):
            raise ConfigError(
                "learner.rank_hosts: ranks on other hosts talk torch.distributed (gloo or "
                "NCCL), which has no authentication or encryption; put the learner's hosts on "
                "a private network and set learner.trusted_network = true (docs/cluster.md)"
            )

    def server_port(self, index: int) -> int:
        return self.server[index].port or 5555 + index

    def server_of(self, index: int) -> int:
        """Index of the server actor group ``index`` uses."""
        group = self.actors[index]
        if group.server:
            return [s.name for s in self.server].index(group.server)
        unnamed = [i for i, g in enumerate(self.actors) if not g.server]
        return unnamed.index(index) % len(self.server)


def _unique(where: str, names: list[str]) -> None:
    for i, n in enumerate(names):
        if not _NAME.match(n):
            raise ConfigError(
                f"{where}[{i}].name={n!r}: use letters, digits, '.', '_' or '-' (at most 63)"
            )
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ConfigError(f"{where}: the name {dup[0]!r} is used twice")


def _check_placement(where: str, p: Placement) -> None:
    _check_resources(f"{where}.resources", p.resources)
    if p.num_gpus < 0:
        raise ConfigError(f"{where}.num_gpus={p.num_gpus}: must be >= 0")


def _check_resources(where: str, resources: Any) -> None:
    if not isinstance(resources, dict):
        raise ConfigError(f"{where}: expected a table of resource = amount")
    for k, v in resources.items():
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0:
            raise ConfigError(f"{where}.{k}={v!r}: must be a number >= 0")


def host_label(host: str) -> str:
    """``host`` as a file-name part (log directories, key names): other characters as ``_``."""
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in host) or "local"


def load_cluster(path: str) -> ClusterSpec:
    """Read and check a cluster file. Bad keys or values raise ``ConfigError``."""
    return from_dict(ClusterSpec, read_toml(path, "cluster file"), "")


__all__ = [
    "ENGINES",
    "ActorGroup",
    "ClusterSpec",
    "LearnerRole",
    "ServerRole",
    "host_label",
    "load_cluster",
]
