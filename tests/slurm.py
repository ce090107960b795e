"""A real one-node Slurm on this machine for cluster tests: munged, slurmctld and slurmd with a
private config and state directory, as root (CI installs Debian's ``slurm-wlm`` and ``munge``:
``scripts/system_deps.sh``). ``slurm_cluster`` (fixture) yields the environment in which
``salloc``/``srun`` reach it; everything is stopped after the test. Skips with the reason when
Slurm is not installed or this is not root."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

DAEMONS = ("munged", "slurmctld", "slurmd")


def unavailable() -> str | None:
    if os.geteuid() != 0:
        return "Slurm's daemons need root"
    missing = [d for d in (*DAEMONS, "munge", "salloc", "srun") if shutil.which(d) is None]
    if missing:
        return f"Slurm is not installed ({', '.join(missing)} missing: scripts/system_deps.sh)"
    if not Path("/etc/munge/munge.key").exists():
        return "no /etc/munge/munge.key (munge's package makes it)"
    return None


def _conf(root: Path, host: str) -> str:
    return f"""ClusterName=azserve-test
SlurmctldHost={host}(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldLogFile={root}/slurmctld.log
SlurmdLogFile={root}/slurmd.log
SlurmctldPort=16817
SlurmdPort=16818
ReturnToService=2
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
NodeName={host} NodeAddr=127.0.0.1 CPUs={os.cpu_count()} State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE
"""


@pytest.fixture
def slurm_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    reason = unavailable()
    if reason:
        pytest.skip(reason)
    root = tmp_path_factory.mktemp("slurm")
    for d in ("state", "spool"):
        (root / d).mkdir()
    host = socket.gethostname().split(".")[0]
    conf = root / "slurm.conf"
    conf.write_text(_conf(root, host))
    env = dict(os.environ, SLURM_CONF=str(conf))
    for d in ("/run/munge", "/var/log/munge", "/var/lib/munge"):
        Path(d).mkdir(parents=True, exist_ok=True)
    started: list[int] = []
    # A socket file alone proves nothing: a munged killed without its clean-up (a machine's
    # earlier session, a container snapshot) leaves it behind, and every credential then fails
    # with "Connection refused". Ask the daemon for one; start our own where none answers.
    if not _munge_answers():
        subprocess.run(["munged", "--force", "--num-threads=4"], check=True, capture_output=True)
        started.append(_pid_of("munged"))
        if not _munge_answers():
            pytest.fail("munged started but does not answer `munge -n` (see /var/log/munge)")
    subprocess.run(["slurmctld", "-f", str(conf)], check=True, env=env, capture_output=True)
    subprocess.run(["slurmd", "-f", str(conf)], check=True, env=env, capture_output=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            r = subprocess.run(["sinfo", "-h", "-o", "%t"], env=env, capture_output=True, text=True)
            if r.returncode == 0 and r.stdout.strip() in ("idle", "mix", "alloc"):
                break
            if time.monotonic() > deadline:
                log = (
                    (root / "slurmctld.log").read_text()
                    if (root / "slurmctld.log").exists()
                    else ""
                )
                pytest.fail(f"Slurm did not come up: {r.stdout} {r.stderr}\n{log[-2000:]}")
            time.sleep(0.5)
        yield env
    finally:
        for pidfile in ("slurmd.pid", "slurmctld.pid"):
            try:
                os.kill(int((root / pidfile).read_text()), signal.SIGTERM)
            except (OSError, ValueError):
                pass
        for pid in started:
            try:
                os.kill(pid, signal.SIGTERM)
            except OSError:
                pass
        time.sleep(1)


def _munge_answers() -> bool:
    try:
        r = subprocess.run(["munge", "-n"], capture_output=True, timeout=10)
    except subprocess.TimeoutExpired:
        return False
    return r.returncode == 0


def _pid_of(name: str) -> int:
    r = subprocess.run(["pgrep", "-n", "-x", name], capture_output=True, text=True)
    return int(r.stdout.strip() or 0)
