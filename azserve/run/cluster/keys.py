"""Keys per role for a cluster run (docs/security.md): every host keeps its own pair in the
cluster file's ``keys`` directory, made there with ``azserve keys --dir KEYS --name NAME``:

- server ``S``: ``server-S``; the learner: ``learner``; each actor host ``H``: ``actors-H``
  (under Ray, where a group has no fixed host: ``actors-GROUP``).

The launcher copies public certificates only (``distribute``), through the same engine that
starts the processes, and checks each one holds no secret key before it leaves its host:

- every actor host's ``actors-H.key`` to ``KEYS/authorized/`` on every server and the learner;
- every server's ``server-S.key`` to the learner and the actor hosts of the groups it serves;
- the learner's ``learner.key`` to every server and every actor host.

The launcher's status queries use the learner's pair (it runs beside the learner), or under Ray
its own, ``launcher`` (``status_auth``).
"""

from __future__ import annotations

import shlex
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from azserve.auth import AuthConfig
from azserve.errors import ConfigError
from azserve.keys import public_certificate
from azserve.run.cluster.spec import ClusterSpec, host_label


def actor_key(host: str, group: str) -> str:
    """The key pair name of an actor process on ``host`` (empty under Ray) of ``group``."""
    return f"actors-{host_label(host)}" if host else f"actors-{group}"


def keys_dir(spec: ClusterSpec, host: str) -> Path:
    """The keys directory on ``host`` (``{host}`` in the path stands for the host's name, for
    hosts that share a filesystem)."""
    return Path(spec.keys.replace("{host}", host_label(host)))


def _server_endpoints(k: Path, spec: ClusterSpec, endpoints: dict[str, str]) -> tuple[str, ...]:
    return tuple(
        f"{endpoints[f'server-{s.name}']}={k / f'server-{s.name}.key'}" for s in spec.server
    )


def role_auth(
    spec: ClusterSpec, name: str, role: str, host: str, group: str, endpoints: dict[str, str]
) -> AuthConfig:
    """The ``auth`` section of one process. ``endpoints``: ``server-NAME`` -> its endpoint."""
    k = keys_dir(spec, host)
    if role == "server":
        return AuthConfig(
            server_secret_key=str(k / f"{name}.key_secret"),
            client_keys_dir=str(k / "authorized"),
            learner_public_key=str(k / "learner.key"),
        )
    if role == "learner":
        return AuthConfig(
            learner_secret_key=str(k / "learner.key_secret"),
            client_keys_dir=str(k / "authorized"),
            server_public_keys=_server_endpoints(k, spec, endpoints),
        )
    return AuthConfig(
        client_secret_key=str(k / f"{actor_key(host, group)}.key_secret"),
        server_public_keys=_server_endpoints(k, spec, endpoints),
        learner_public_key=str(k / "learner.key"),
    )


LAUNCHER = "launcher"
"""The pair of the launcher's own status queries under Ray (``RayEngine.distribute_keys``)."""


def status_auth(spec: ClusterSpec, learner_host: str, endpoints: dict[str, str]) -> AuthConfig:
    """The launcher's status queries. Under ssh and Slurm it runs beside the learner and uses
    the learner's pair, which every server admits; under Ray it runs on Ray's driver node,
    wherever the learner was placed, with its own pair (``launcher``, made on that node and
    admitted by every server)."""
    k = keys_dir(spec, learner_host)
    pair = LAUNCHER if spec.engine == "ray" else "learner"
    return AuthConfig(
        client_secret_key=str(k / f"{pair}.key_secret"),
        server_public_keys=_server_endpoints(k, spec, endpoints),
    )


def distribute(spec: ClusterSpec, engine: Any, procs: list[Any]) -> list[str]:
    """Copy the public certificates each host needs from the host that made them; returns
    ``"FILE: FROM -> TO"`` lines. A missing or secret-bearing file is a ``ConfigError`` naming
    it and the command that makes it."""
    servers = [p for p in procs if p.role == "server"]
    learner = next(p for p in procs if p.role == "learner")
    actor_hosts: dict[str, str] = {}  # host -> the server it evaluates on
    for p in procs:
        if p.role == "actors":
            actor_hosts.setdefault(p.host, p.config.client.server)
    # (file name, from host, to host, subdirectory of the keys dir there)
    copies: list[tuple[str, str, str, str]] = []
    for host in actor_hosts:
        for dest in sorted({s.host for s in servers} | {learner.host}):
            copies.append((f"{actor_key(host, '')}.key", host, dest, "authorized"))
    for s in servers:
        users = {h for h, ep in actor_hosts.items() if ep == s.endpoint}
        for dest in sorted(users | {learner.host}):
            copies.append((f"{s.name}.key", s.host, dest, ""))
    for dest in sorted({s.host for s in servers} | set(actor_hosts)):
        copies.append(("learner.key", learner.host, dest, ""))
    done: list[str] = []
    cache: dict[tuple[str, str], bytes] = {}
    for name, src, dest, sub in copies:
        if dest == src and not sub:
            continue  # the host made it: already in place
        if (src, name) not in cache:
            path = keys_dir(spec, src) / name
            cache[(src, name)] = _checked(_read(engine, src, path), path, src)
        _write(engine, dest, keys_dir(spec, dest) / sub / name, cache[(src, name)])
        done.append(f"{Path(sub) / name}: {src} -> {dest}")
    return done


def _checked(data: bytes, path: Path, host: str) -> bytes:
    with tempfile.NamedTemporaryFile(suffix=".key") as f:
        f.write(data)
        f.flush()
        try:
            public_certificate(f.name)
        except ConfigError as exc:
            raise ConfigError(f"{host}:{path}: {exc}") from exc
    return data


def _read(engine: Any, host: str, path: Path) -> bytes:
    r = subprocess.run(
        engine.shell_on(host, f"cat {shlex.quote(str(path))}"),
        capture_output=True,
        timeout=60,
        check=False,
    )
    if r.returncode != 0:
        raise ConfigError(
            f"{host}:{path}: cannot read ({r.stderr.decode(errors='replace').strip()}); make "
            f"the pair there with `azserve keys --dir {path.parent} --name {path.stem}`"
        )
    return r.stdout


def _write(engine: Any, host: str, path: Path, data: bytes) -> None:
    q, tmp = shlex.quote(str(path)), shlex.quote(f"{path}.tmp")
    script = f"mkdir -p {shlex.quote(str(path.parent))} && cat > {tmp} && mv {tmp} {q}"
    r = subprocess.run(
        engine.shell_on(host, script), input=data, capture_output=True, timeout=60, check=False
    )
    if r.returncode != 0:
        raise ConfigError(f"{host}:{path}: cannot write: {r.stderr.decode(errors='replace')}")


__all__ = ["LAUNCHER", "actor_key", "distribute", "role_auth", "status_auth"]
