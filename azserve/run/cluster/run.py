"""``azserve launch --cluster FILE``: the multi-host counterpart of ``azserve train``.

The engine (ssh, Slurm or Ray) places and starts the processes; the supervisor of ``azserve
train`` watches them, restarts servers and the learner that exit (with the run's current state:
the learner resumes its newest checkpoint, a server is caught up by the learner), evaluates the
checkpoints, and writes the same outputs into the run dir: config.toml, checkpoints,
metrics.jsonl, TensorBoard, eval.jsonl, report.png, summary.json, and logs/HOST/NAME.log.
"""

from __future__ import annotations

import os
import re
import secrets
import time
from pathlib import Path
from typing import Any

from azserve.auth import AuthConfig
from azserve.config.schema import Config, replace, save_config
from azserve.run.cluster.plan import RoleProc, describe, make_plan
from azserve.run.cluster.spec import ClusterSpec
from azserve.run.display import Row, human, pct
from azserve.run.supervisor import Child
from azserve.run.train import Training

_GAMES_PER_S = re.compile(r"games/s ([0-9.]+)")


def new_run_id() -> str:
    """Unique per launch: names the remote config files and the Ray actors."""
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}"


def supervised(cfg: Config, spec: ClusterSpec) -> Config:
    """The run config with the cluster file's restart policy (as ``train`` has it on request)."""
    return replace(
        cfg, train={"restart_children": spec.restarts > 0, "max_restarts": spec.restarts}
    )


def make_engine(spec: ClusterSpec, run_dir: Path, run_id: str) -> Any:
    if spec.engine == "ray":
        from azserve.run.cluster.ray_engine import RayEngine

        return RayEngine(spec, run_dir, run_id)
    from azserve.run.cluster.engines import CommandEngine

    return CommandEngine(spec, run_dir, run_id)


def build_plan(spec: ClusterSpec, cfg: Config, run_dir: Path, engine: Any) -> list[RoleProc]:
    """The processes of the run, with the addresses the engine knows."""
    hosts = engine.group_hosts()
    addresses = engine.addresses()  # under Ray this chooses the nodes role_hosts reports
    placed = engine.role_hosts()
    return make_plan(spec, cfg, str(run_dir.resolve()), addresses, hosts, _auth(spec), placed)


def _auth(spec: ClusterSpec) -> Any:
    if not spec.keys:
        return None
    from azserve.run.cluster.keys import role_auth

    return lambda name, role, host, group, eps: role_auth(spec, name, role, host, group, eps)


class ClusterRun(Training):
    """One launch: the plan's processes under the train supervisor."""

    def __init__(
        self, cfg: Config, spec: ClusterSpec, run_dir: Path, resume: bool, progress: bool
    ) -> None:
        self.spec = spec
        self.run_id = new_run_id()
        self.engine: Any = None
        self.procs: list[RoleProc] = []
        super().__init__(cfg, run_dir, resume, progress)

    def _resolve(self, cfg: Config) -> Config:
        return supervised(cfg, self.spec)

    def _build_children(self) -> None:
        self.engine = make_engine(self.spec, self.run_dir, self.run_id)
        self.procs = build_plan(self.spec, self.cfg, self.run_dir, self.engine)
        learner = next(p for p in self.procs if p.role == "learner")
        self.cfg = learner.config  # what the evaluations, budgets and report read
        save_config(self.cfg, self.run_dir / "config.toml")
        if self.spec.keys and hasattr(self.engine, "shell_on"):
            from azserve.run.cluster.keys import distribute

            for line in distribute(self.spec, self.engine, self.procs):
                self.display.note(f"public key {line}")
        elif self.spec.keys and hasattr(self.engine, "distribute_keys"):  # Ray: through tasks
            for line in self.engine.distribute_keys(self.procs):
                self.display.note(f"public key {line}")
        self.children = [self.engine.child(p) for p in self.procs]
        for line in describe(self.procs, {}).splitlines():
            self.display.note(line)

    def _servers(self) -> list[tuple[str, str]]:
        return [(p.name, p.endpoint) for p in self.procs if p.role == "server"]

    def _status_auth(self) -> AuthConfig | None:
        if not self.spec.keys:
            return None
        from azserve.run.cluster.keys import status_auth

        learner = next(p for p in self.procs if p.role == "learner")
        return status_auth(self.spec, learner.host, dict(self._servers()))

    def _extra_rows(self) -> list[Row]:
        rows = []
        now = time.monotonic()
        for name, _ in self._servers():
            st = self._server_status.get(name)
            if st is None:
                rows.append(Row(name, "no status"))
                continue
            rate = self._rates.rate(f"rows:{name}", st["rows"], now)
            busy = self._rates.rate(f"busy:{name}", st["busy_s"], now)
            rows.append(
                Row(
                    name,
                    f"{human(rate)} rows/s  batch {st['mean_batch']:.1f}  "
                    f"busy {pct(min(1.0, busy))}  live v{st['versions']['latest']}",
                )
            )
        per_host: dict[str, list[float]] = {}
        for child, proc in zip(self.children, self.procs):
            if proc.role == "actors":
                per_host.setdefault(proc.host or proc.group, []).append(_games_per_s(child))
        for host, rates in per_host.items():
            plural = "es" if len(rates) > 1 else ""
            rows.append(
                Row(f"actors {host}", f"{sum(rates):.2f} games/s  {len(rates)} process{plural}")
            )
        return rows

    def run(self) -> int:
        try:
            return super().run()
        finally:
            if self.engine is not None:
                self.engine.close()


def _games_per_s(child: Child) -> float:
    for line in reversed(child.log_since_start()[-50:]):
        m = _GAMES_PER_S.search(line)
        if m:
            return float(m.group(1))
    return 0.0


def dry_run(cfg: Config, spec: ClusterSpec, run_dir: Path) -> str:
    """The resolved plan with each process's command line, starting nothing."""
    from azserve.run.cluster.engines import CommandEngine

    cfg = supervised(cfg, spec)
    if spec.engine == "ray":
        # Placement is Ray's at launch; show what each process asks for.
        procs = make_plan(
            spec,
            cfg,
            str(run_dir.resolve()),
            {f"server-{s.name}": "RAY-NODE-IP" for s in spec.server} | {"learner": "RAY-NODE-IP"},
            {g.name: ("",) for g in spec.actors},
            _auth(spec),
        )
        return describe(procs, {})
    note = ""
    nodes = None
    if spec.engine == "slurm" and not in_allocation():
        # A plan, not a launch: placeholder nodes stand for the allocation's.
        nodes = [f"NODE{i + 1}" for i in range(slurm_nodes_needed(spec))]
        note = (
            f"# not inside a Slurm allocation: the plan on {len(nodes)} placeholder nodes "
            f"({', '.join(nodes)}); inside one (salloc, sbatch), the allocation's nodes\n"
        )
    engine = CommandEngine(spec, run_dir, new_run_id(), nodes)
    procs = build_plan(spec, cfg, run_dir, engine)
    commands = {p.name: engine.command(p, display=True) for p in procs}
    return note + describe(procs, commands)


def in_allocation() -> bool:
    """Whether this process runs inside a Slurm allocation (its node list is known)."""
    return bool(os.environ.get("SLURM_JOB_NODELIST") or os.environ.get("SLURM_NODELIST"))


def slurm_nodes_needed(spec: ClusterSpec) -> int:
    """The nodes a Slurm cluster file takes: one per server without a host (the learner
    shares the first), then each actor group's ``nodes`` (at least one) unless it names hosts."""
    servers = sum(1 for s in spec.server if not s.host)
    groups = sum(g.nodes or 1 for g in spec.actors if not g.hosts)
    return max(1, servers + groups)


__all__ = ["ClusterRun", "build_plan", "dry_run", "in_allocation", "make_engine"]
