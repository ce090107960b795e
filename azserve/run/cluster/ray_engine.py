"""The Ray engine: Ray places each process (resource requests, node pinning) and restarts actor
processes that die (``max_restarts``); ZeroMQ still carries every evaluation, game and weight.

Each plan process runs under a small Ray actor, the *runner*, which starts the watchdog of
``azserve.run.cluster.remote`` (and so ``azserve``) as its child and keeps the watchdog's stdin:

- the actor processes' runners exit when their process dies, so Ray restarts them (a new
  runner, a new process) up to ``ray.max_restarts`` times;
- servers and the learner are restarted by the launcher's supervisor instead, pinned to the IP
  of the node they first ran on (their address is in every other process's config): a Ray node
  restarted on that host has a new node id and takes them back;
- a runner that does not answer (``ActorUnavailableError``, a timeout: a partition, a loaded
  node) is not taken for dead until ``UNREACHABLE_S``; Ray says ``ActorDiedError`` once the
  runner or its node is gone (its health check: 5 failed checks 3 s apart by default);
- a runner that dies (or is killed) closes the watchdog's stdin, which stops its process: no
  azserve process outlives its runner.

Logs are pulled from the runners into ``RUN_DIR/logs/ray/NAME.log`` once a second.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from azserve.errors import AzserveError, ConfigError
from azserve.run.cluster.engines import remote_argv
from azserve.run.cluster.keys import LAUNCHER
from azserve.run.cluster.plan import RoleProc
from azserve.run.cluster.spec import ClusterSpec, Placement
from azserve.run.supervisor import Child

LOG_CHUNK = 1 << 20
START_S = 300.0
"""How long ``RayChild.start`` may take to place a runner, retries on other nodes included."""
PLACE_S = 60.0
"""How long one placement may take before the node is tried no more (a node that died before
Ray's health check said so takes the runner and never starts it)."""
UNREACHABLE_S = 120.0
"""A runner that has not answered for this long counts as gone. Longer than Ray takes to
declare a cut-off node dead (5 health checks of 10 s, 3 s apart: about 65 s with its
defaults), after which its runners are reported dead (``ActorDiedError``) and their node's
raylet stops them once it hears of it: Ray normally says first, and a restart does not run the
role twice."""


class RoleRunner:
    """Runs one plan process on the node Ray chose (the body of a Ray actor)."""

    def __init__(self, argv: list[str], env: dict[str, str], die_with_child: bool) -> None:
        import tempfile

        self.instance = uuid.uuid4().hex
        self.stopping = False
        fd, self.log_path = tempfile.mkstemp(prefix="azserve-ray-", suffix=".log")
        with os.fdopen(fd, "wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, *argv[1:]],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.PIPE,
                env={**os.environ, **env},
                start_new_session=True,
            )
        if die_with_child:
            threading.Thread(target=self._exit_with_child, daemon=True).start()

    def _exit_with_child(self) -> None:
        self.proc.wait()
        if not self.stopping:
            time.sleep(2.0)  # the launcher pulls the log once a second: let it take the tail
            os._exit(1)  # Ray sees the actor die and restarts it: a fresh process

    def info(self) -> dict[str, Any]:
        import ray

        children = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children")
        try:
            inner = [int(p) for p in children.read_text().split()]
        except OSError:
            inner = []
        return {
            "instance": self.instance,
            "watchdog_pid": self.proc.pid,
            "pids": inner,
            "node_id": ray.get_runtime_context().get_node_id(),
            "node_ip": ray.util.get_node_ip_address(),
        }

    def poll(self) -> int | None:
        return self.proc.poll()

    def signal(self, name: str, stopping: bool = False) -> None:
        self.stopping = self.stopping or stopping
        if self.proc.poll() is None and self.proc.stdin is not None:
            try:
                self.proc.stdin.write(f"{name}\n".encode())
                self.proc.stdin.flush()
            except (BrokenPipeError, ValueError):
                pass

    def remove_log(self) -> None:
        """The launcher has the whole log: the node's copy goes."""
        Path(self.log_path).unlink(missing_ok=True)

    def read_log(self, offset: int) -> tuple[str, bytes]:
        with open(self.log_path, "rb") as f:
            f.seek(offset)
            return self.instance, f.read(LOG_CHUNK)


@dataclass
class RayChild(Child):
    """A plan process whose runner is a Ray actor."""

    options: dict[str, Any] = field(default_factory=dict)
    runner_args: tuple[Any, ...] = ()
    group: bool = False
    """An actor process: Ray restarts it; the launcher only counts the restarts."""
    pin_ip: str = ""
    """A server or the learner: the IP of the node chosen for it (empty: Ray places it)."""
    pin_node: str = ""
    """The id of the node chosen for it at launch."""
    runner: Any = None
    info: dict[str, Any] = field(default_factory=dict)
    _log_instance: str = ""
    _log_remote_offset: int = 0
    _pump: threading.Thread | None = None
    _unreachable_since: float = 0.0
    _starts: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> None:
        import ray

        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        if self.log_offset is None:
            self.log_offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        self._place(ray.remote(RoleRunner))
        self._unreachable_since = 0.0
        if self._pump is None:
            self._pump = threading.Thread(target=self._pump_logs, daemon=True, name=self.name)
            self._pump.start()

    def _place(self, remote_cls: Any) -> None:
        """Start the runner; a pinned one on a live node at ``pin_ip``, trying the next such
        node when one does not take it within ``PLACE_S``, for up to ``START_S`` in all."""
        import ray
        import ray.exceptions as rx
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        if self.runner is not None:  # a restart: the old runner, and so its process, goes
            try:
                ray.kill(self.runner, no_restart=True)
            except rx.RayError:
                pass  # gone already
        deadline = time.monotonic() + START_S
        tried: set[str] = set()
        while True:
            # A name per start: the old runner's may not be released yet (Ray refuses a taken one).
            self._starts += 1
            options = dict(self.options)
            if self._starts > 1 and "name" in options:
                options["name"] = f"{options['name']}-{self._starts}"
            node = ""
            if self.pin_ip:
                node = self._node_at(tried, deadline)
                options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(node, soft=False)
            self.runner = remote_cls.options(**options).remote(*self.runner_args)
            left = deadline - time.monotonic()
            try:
                self.info = ray.get(
                    self.runner.info.remote(),
                    timeout=max(1.0, min(PLACE_S, left) if self.pin_ip else left),
                )
                return
            except (rx.RayActorError, rx.GetTimeoutError, rx.ActorUnschedulableError):
                ray.kill(self.runner, no_restart=True)
                self.runner = None
                if not self.pin_ip or time.monotonic() >= deadline:
                    raise
                tried.add(node)

    def _node_at(self, tried: set[str], deadline: float) -> str:
        """A live node at ``pin_ip`` not in ``tried``, waiting for one until ``deadline``. After
        a restart of the host's Ray node, its old node may still count as alive (until Ray's
        health check says otherwise): a node other than the one the role last ran on goes
        first."""
        import ray

        last = self.info.get("node_id", "")
        while True:
            alive = [
                n["NodeID"]
                for n in ray.nodes()
                if n.get("Alive") and n["NodeManagerAddress"] == self.pin_ip
            ]
            fits = [n for n in alive if n not in tried]
            fits.sort(key=lambda n: (n == last, n != self.pin_node))
            if fits:
                return fits[0]
            if time.monotonic() >= deadline:
                raise AzserveError(
                    f"{self.name}: no live Ray node at {self.pin_ip} took it within "
                    f"{START_S:g} s (nodes there: {alive or 'none'}; tried: {sorted(tried)})"
                )
            time.sleep(1.0)

    def _call(self, method: str, *args: Any, timeout: float = 10.0) -> Any:
        import ray

        return ray.get(getattr(self.runner, method).remote(*args), timeout=timeout)

    def poll(self) -> int | None:
        import ray.exceptions as rx

        if self.runner is None:
            return None
        try:
            code = self._call("poll")
            if self.group:
                self._note_restart()
            self._unreachable_since = 0.0
            return code if not self.group else None
        except (rx.ActorUnavailableError, rx.GetTimeoutError):
            pass  # no answer (a partition, a loaded node): not dead, Ray says when it is
        except rx.RayActorError:
            if not self.group:
                return 137  # the runner is gone: the supervisor restarts the role
        # A group's runner is restarted by Ray; only one gone for good (restarts used up) ends
        # it. A pinned runner that does not answer is waited for up to UNREACHABLE_S.
        now = time.monotonic()
        self._unreachable_since = self._unreachable_since or now
        if now - self._unreachable_since <= UNREACHABLE_S:
            return None
        return 1 if self.group else 137

    def _note_restart(self) -> None:
        info = self._call("info")
        if info["instance"] != self.info.get("instance"):
            self.restarts += 1
            self.info = info

    def send(self, sig: int) -> None:
        if self.runner is None:
            return
        # The supervisor sends SIGINT/SIGTERM only to stop a process: the runner must then not
        # exit (an actor's runner would be restarted by Ray).
        stopping = sig in (signal.SIGINT, signal.SIGTERM)
        try:
            self._call("signal", signal.Signals(sig).name, stopping)
        except Exception:  # noqa: BLE001 - a runner that is gone needs no signal
            pass

    def wait(self, timeout: float) -> int | None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                code = self._call("poll")
            except Exception:  # noqa: BLE001 - gone counts as stopped
                return 137
            if code is not None:
                return code
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.2)

    def stop(self, timeout: float, sig: int = signal.SIGTERM) -> int:
        import ray

        if self.runner is None:
            return 0
        if self.group:
            try:
                self._note_restart()  # a restart since the last poll still counts
            except Exception:  # noqa: BLE001 - a runner that is gone has nothing to report
                pass
        try:
            self._call("signal", signal.Signals(sig).name, True)
        except Exception:  # noqa: BLE001
            pass
        code = self.wait(timeout)
        if code is None:
            try:
                self._call("signal", "SIGKILL", True)
            except Exception:  # noqa: BLE001
                pass
            code = self.wait(5.0)
        try:
            self._pull_log()
            self._call("remove_log")
        except Exception:  # noqa: BLE001 - a runner that is gone left nothing to pull
            pass
        ray.kill(self.runner, no_restart=True)
        self.runner = None
        return 137 if code is None else code

    def _pump_logs(self) -> None:
        while True:
            time.sleep(1.0)
            if self.runner is None:
                continue
            try:
                self._pull_log()
            except Exception:  # noqa: BLE001 - a restarting runner: try again next second
                continue

    def _pull_log(self) -> None:
        with self._lock:
            while self.runner is not None:
                instance, data = self._call("read_log", self._log_remote_offset)
                if instance != self._log_instance:
                    self._log_instance, self._log_remote_offset = instance, 0
                    instance, data = self._call("read_log", 0)
                if not data:
                    return
                with self.log_path.open("ab") as f:
                    f.write(data)
                self._log_remote_offset += len(data)
                if len(data) < LOG_CHUNK:
                    return


def node_pairs(keys_dir: str, names: list[str]) -> dict[str, bytes]:
    """On one node (a Ray task pinned there): make each pair of ``names`` that is missing in
    its ``keys_dir`` and return the public certificates, each checked to hold no secret
    before it leaves the node. A secret key never leaves the node that made it."""
    from azserve.keys import create_pair, public_certificate

    out = {}
    for name in names:
        public = Path(keys_dir) / f"{name}.key"
        if not (public.exists() and public.with_suffix(".key_secret").exists()):
            create_pair(keys_dir, name, force=True)
        out[name] = public_certificate(public)
    return out


def node_write(keys_dir: str, files: dict[str, bytes]) -> None:
    """On one node: write public certificates under ``keys_dir`` (``authorized/NAME.key`` or
    ``NAME.key``), each atomically."""
    from azserve.files import atomic_write_bytes
    from azserve.keys import public_certificate

    for rel, data in files.items():
        path = Path(keys_dir) / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(path, data)
        public_certificate(path)  # a public certificate, nothing else


class RayEngine:
    """Places servers and the learner on nodes chosen up front (so their addresses go into the
    other processes' configs), and actor processes wherever their resources fit."""

    def __init__(self, spec: ClusterSpec, run_dir: Path, run_id: str) -> None:
        try:
            import ray
        except ImportError as exc:
            raise ConfigError(
                "engine = 'ray' needs Ray: pip install 'azserve[cluster]' (or `pip install ray`)"
            ) from exc
        self.spec = spec
        self.run_dir = run_dir
        self.run_id = run_id
        address = spec.ray.address
        kwargs: dict[str, Any] = {"log_to_driver": False, "configure_logging": False}
        if address == "local":
            kwargs["include_dashboard"] = False
        else:
            kwargs["address"] = address
        try:
            ray.init(**kwargs)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise ConfigError(
                f"ray.address={address!r}: cannot join the Ray cluster: {exc}"
            ) from exc
        self._nodes = [n for n in ray.nodes() if n.get("Alive")]
        self._here = ray.get_runtime_context().get_node_id()
        self._chosen: dict[str, dict[str, Any]] = {}

    def _pick(self, name: str, p: Placement, default_here: bool) -> dict[str, Any]:
        want = dict(p.resources)
        if p.num_gpus:
            want["GPU"] = p.num_gpus
        if not want and default_here:
            fits = [n for n in self._nodes if n["NodeID"] == self._here]
        else:
            fits = [
                n
                for n in self._nodes
                if all(n["Resources"].get(k, 0) >= v for k, v in want.items())
            ]
        if not fits:
            have = "; ".join(
                f"{n['NodeManagerAddress']}: {sorted(k for k in n['Resources'] if not k.startswith('node:'))}"
                for n in self._nodes
            )
            raise ConfigError(f"{name}: no Ray node offers {want} (nodes: {have})")
        return fits[0]

    def addresses(self) -> dict[str, str]:
        here_ip = next(n["NodeManagerAddress"] for n in self._nodes if n["NodeID"] == self._here)
        for s in self.spec.server:
            self._chosen[f"server-{s.name}"] = self._pick(f"server {s.name}", s, False)
        # The run dir is the launcher's: the learner runs on this node unless pinned elsewhere.
        self._chosen["learner"] = self._pick("learner", self.spec.learner, True)
        out = {}
        for name, node in self._chosen.items():
            ip = node["NodeManagerAddress"]
            if self.spec.network == "loopback" and ip != here_ip:
                raise ConfigError(
                    f"network = 'loopback' but {name} was placed on {ip}, another machine than "
                    f"this one ({here_ip}): use network = 'auto' with keys"
                )
            out[name] = ip
        return out

    def role_hosts(self) -> dict[str, str]:
        """``server-NAME``/``learner`` -> the IP of the node chosen for it (after
        ``addresses``): roles on one machine share its filesystem, and so the run dir."""
        return {name: node["NodeManagerAddress"] for name, node in self._chosen.items()}

    def group_hosts(self) -> dict[str, tuple[str, ...]]:
        return {g.name: ("",) for g in self.spec.actors}

    def child(self, proc: RoleProc) -> Child:
        group = proc.role == "actors"
        options: dict[str, Any] = {
            "num_cpus": 0,
            "resources": dict(proc.placement.resources),
            "num_gpus": proc.placement.num_gpus,
            "max_concurrency": 4,
            "name": f"azserve-{self.run_id}-{proc.name}",
            "max_restarts": self.spec.ray.max_restarts if group else 0,
        }
        chosen = self._chosen.get(proc.name, {})
        argv = remote_argv(proc, self.run_id, sys.executable)
        env = {"PYTHONUNBUFFERED": "1"}
        log = self.run_dir / "logs" / "ray" / f"{proc.name}.log"
        return RayChild(
            proc.name,
            argv,
            log,
            {},
            options=options,
            runner_args=(argv, env, group),
            group=group,
            pin_ip=chosen.get("NodeManagerAddress", ""),
            pin_node=chosen.get("NodeID", ""),
        )

    def distribute_keys(self, procs: list[RoleProc]) -> list[str]:
        """Each node makes the pairs of the roles it may run, in its own ``keys`` directory
        (the same path on every node: its own disk), through a Ray task pinned to it; the
        launcher gets back public certificates only and sends each node those it needs:

        - every node that may run actor group G (its resources fit) makes its own ``actors-G``
          pair; its public key goes to ``authorized/actors-G.node-ID.key`` on every server's
          and the learner's node;
        - server S's node makes ``server-S``: to the learner's node and every node of the
          groups it serves; the learner's node makes ``learner``: to every other node;
        - the launcher's own node (Ray's driver, wherever the learner runs) makes
          ``launcher``, the pair of its status queries: to ``authorized/`` on every server's
          node, and every server's public key comes to it.

        Returns ``"FILE: FROM -> TO"`` lines (node ids shortened to 8 characters)."""
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        if "{host}" in self.spec.keys:
            raise ConfigError(
                f"keys = {self.spec.keys!r}: under Ray every node has the same keys path on its "
                "own disk ({host} is for ssh and Slurm hosts that share a filesystem)"
            )
        keys = self.spec.keys

        def on(node: str, fn: Any, *args: Any) -> Any:
            task: Any = ray.remote(fn)
            strategy = NodeAffinitySchedulingStrategy(node, soft=False)
            return task.options(num_cpus=0, scheduling_strategy=strategy).remote(keys, *args)

        made: dict[str, list[str]] = {}  # node id -> pair names
        groups: dict[str, list[str]] = {}  # group -> node ids it may run on
        for name, chosen in self._chosen.items():
            made.setdefault(chosen["NodeID"], []).append(name)
        here = ray.get_runtime_context().get_node_id()
        made.setdefault(here, []).append(LAUNCHER)
        for g in self.spec.actors:
            want = dict(g.resources)
            fits = [
                n["NodeID"]
                for n in self._nodes
                if all(n["Resources"].get(k, 0) >= v for k, v in want.items())
            ]
            groups[g.name] = fits
            for fit in fits:
                made.setdefault(fit, []).append(f"actors-{g.name}")
        nodes = sorted(made)
        publics = dict(
            zip(nodes, ray.get([on(n, node_pairs, made[n]) for n in nodes]), strict=True)
        )
        server_node = {p.name: self._chosen[p.name]["NodeID"] for p in procs if p.role == "server"}
        learner_node = self._chosen["learner"]["NodeID"]
        served = {p.endpoint: p.name for p in procs if p.role == "server"}
        uses: dict[str, str] = {}  # group -> the server it evaluates on
        for p in procs:
            if p.role == "actors":
                uses[p.group] = served[p.config.client.server]
        writes: dict[str, dict[str, bytes]] = {}
        done: list[str] = []

        def send(src: str, name: str, dest: str, rel: str) -> None:
            if dest == src and "/" not in rel or rel in writes.get(dest, {}):
                return  # made there, or sent there already
            writes.setdefault(dest, {})[rel] = publics[src][name]
            done.append(f"{rel}: {src[:8]} -> {dest[:8]}")

        for group, fits in groups.items():
            for node in fits:
                rel = f"authorized/actors-{group}.node-{node[:8]}.key"
                for dest in sorted({*server_node.values(), learner_node}):
                    send(node, f"actors-{group}", dest, rel)
        for server, node in server_node.items():
            users = {n for g, fits in groups.items() if uses.get(g) == server for n in fits}
            for dest in sorted(users | {learner_node}):
                send(node, server, dest, f"{server}.key")
        for dest in nodes:
            send(learner_node, "learner", dest, "learner.key")
        for server, node in server_node.items():
            send(here, LAUNCHER, node, f"authorized/{LAUNCHER}.node-{here[:8]}.key")
            send(node, server, here, f"{server}.key")
        ray.get([on(node, node_write, files) for node, files in writes.items()])
        return done

    def close(self) -> None:
        import ray

        ray.shutdown()


__all__ = ["RayChild", "RayEngine", "RoleRunner"]
