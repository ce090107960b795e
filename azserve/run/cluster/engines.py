"""Engines that start the plan's processes: ssh (or any command prefix, such as ``ip netns
exec``), Slurm (``srun`` inside an allocation) and Ray (``ray_engine``).

Every process runs under the watchdog of ``azserve.run.cluster.remote``, so the launcher's
supervisor (``azserve.run.train.Training``) handles them as it handles local children: start,
poll, signal, stop, and logs in ``RUN_DIR/logs/HOST/NAME.log``.
"""

from __future__ import annotations

import base64
import os
import shlex
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from azserve.config.load import dump_toml, to_dict
from azserve.errors import ConfigError
from azserve.run.cluster.plan import RoleProc, default_address
from azserve.run.cluster.slurm import allocation_nodes
from azserve.run.cluster.spec import ClusterSpec, host_label
from azserve.run.supervisor import Child


def remote_argv(
    proc: RoleProc, run_id: str, python: str, grace_s: float = 60.0, display: bool = False
) -> list[str]:
    """The watchdog's command line on the host: interpreter, config and ``azserve`` args
    (``display``: the config elided, for people)."""
    text = dump_toml(to_dict(proc.config)).encode()
    b64 = "CONFIG" if display else base64.b64encode(text).decode()
    argv = [python, "-m", "azserve.run.cluster.remote", "--run-id", run_id, "--name", proc.name]
    argv += ["--config-b64", b64, "--grace-s", f"{grace_s:g}"]
    n = str(max(1, proc.threads))
    for key in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        argv += ["--env", f"{key}={n}"]
    return [*argv, "--", *proc.argv]


@dataclass
class CommandChild(Child):
    """A plan process started through a command prefix (ssh, ``ip netns exec``, srun, or none
    for ``local``). Its stdin is the watchdog's command channel: ``send`` writes a signal name,
    and closing it (the launcher exiting) stops the process."""

    stdin = subprocess.PIPE

    def start(self) -> None:
        if self.proc is not None and self.proc.stdin is not None:
            self.proc.stdin.close()  # a restart: the exited watchdog's channel
        super().start()

    def send(self, sig: int) -> None:
        if self.proc is None or self.proc.poll() is not None or self.proc.stdin is None:
            return
        try:
            self.proc.stdin.write(f"{signal.Signals(sig).name}\n".encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, ValueError):
            pass

    def stop(self, timeout: float, sig: int = signal.SIGTERM) -> int:
        self.send(sig)
        code = self.wait(timeout)
        if code is None:
            self.send(signal.SIGKILL)
            code = self.wait(5.0)
        assert self.proc is not None
        if self.proc.stdin is not None:
            try:
                self.proc.stdin.close()  # the watchdog stops whatever is left
            except BrokenPipeError:
                pass
        if code is None:
            self.proc.kill()
            code = self.proc.wait()
        return code


class CommandEngine:
    """ssh and Slurm: each process is one command line, prefix + watchdog."""

    def __init__(
        self, spec: ClusterSpec, run_dir: Path, run_id: str, nodes: list[str] | None = None
    ) -> None:
        """``nodes``: Slurm's nodes (None: the allocation's, which must exist)."""
        self.spec = spec
        self.run_dir = run_dir
        self.run_id = run_id
        if spec.engine == "slurm":
            self.prefix = spec.slurm.srun
            self.takes_string = False
            self.nodes = allocation_nodes() if nodes is None else nodes
        else:
            self.prefix = spec.ssh.command
            takes = spec.ssh.takes_string
            self.takes_string = (
                takes if takes is not None else shlex.split(self.prefix)[0].endswith("ssh")
            )
            self.nodes = []

    # --- where things run ---------------------------------------------------------------

    def role_hosts(self) -> dict[str, str]:
        """``server-NAME``/``learner`` -> host. Under Slurm, servers without a host take the
        allocation's nodes in order and the learner runs on the first node, the launcher's own
        in an sbatch script (the run dir is there)."""
        free = list(self.nodes)
        out: dict[str, str] = {}
        for s in self.spec.server:
            out[f"server-{s.name}"] = s.host or self._take(free, f"server {s.name}")
        out["learner"] = self.spec.learner.host or self._take(list(self.nodes), "the learner")
        return out

    def group_hosts(self) -> dict[str, tuple[str, ...]]:
        used = set(self.role_hosts().values()) | set(self.spec.learner.rank_hosts)
        free = [n for n in self.nodes if n not in used] or list(self.nodes)
        out: dict[str, tuple[str, ...]] = {}
        for g in self.spec.actors:
            if g.hosts:
                out[g.name] = tuple(g.hosts)
            elif self.spec.engine == "slurm":
                n = g.nodes or 1
                if len(free) < n:
                    raise ConfigError(
                        f"actors {g.name}: nodes={n} but only {len(free)} free node(s) in the "
                        f"allocation ({', '.join(self.nodes)})"
                    )
                out[g.name], free = tuple(free[:n]), free[n:]
            else:
                raise ConfigError(f"actors {g.name}: hosts is empty")
        return out

    def addresses(self) -> dict[str, str]:
        hosts = self.role_hosts()
        out = {}
        for s in self.spec.server:
            name = f"server-{s.name}"
            out[name] = s.address or _address_of(hosts[name], self.spec.engine)
        out["learner"] = self.spec.learner.address or _address_of(
            hosts["learner"], self.spec.engine
        )
        return out

    # --- how they start -----------------------------------------------------------------

    def python_on(self, host: str) -> str:
        if self.spec.python:
            return self.spec.python
        return sys.executable if host == "local" or not self.takes_string else ".venv/bin/python"

    def command(self, proc: RoleProc, display: bool = False) -> list[str]:
        host = proc.host
        inner = remote_argv(proc, self.run_id, self.python_on(host), display=display)
        workdir = self.spec.workdir or os.getcwd()
        return self.shell_on(host, f"cd {shlex.quote(workdir)} && exec {shlex.join(inner)}")

    def shell_on(self, host: str, script: str) -> list[str]:
        """The command line that runs shell ``script`` on ``host`` (key distribution)."""
        if host == "local" and self.spec.engine == "ssh":
            return ["sh", "-c", script]
        prefix = [w.replace("{host}", host) for w in shlex.split(self.prefix)]
        return [*prefix, script] if self.takes_string else [*prefix, "sh", "-c", script]

    def child(self, proc: RoleProc) -> Child:
        log = self.run_dir / "logs" / host_label(proc.host or "local") / f"{proc.name}.log"
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        return CommandChild(proc.name, self.command(proc), log, env)

    def close(self) -> None:
        pass

    @staticmethod
    def _take(free: list[str], what: str) -> str:
        if not free:
            raise ConfigError(f"no host for {what}: set its host, or use a larger allocation")
        return free.pop(0)


def _address_of(host: str, engine: str) -> str:
    """ssh: the host without ``user@``; Slurm: the node's name (ZeroMQ resolves it when it
    connects; servers bind every interface for a name)."""
    from azserve.run.cluster.spec import Placement

    return host if engine == "slurm" else default_address(Placement(host=host))


__all__ = ["CommandChild", "CommandEngine", "remote_argv"]
