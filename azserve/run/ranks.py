"""The data-parallel learner's other ranks on rank 0's host: ``azserve learn`` with
``learner.processes = N`` starts ranks 1..N-1 as child processes (``azserve learn --rank R
--rendezvous ADDR``, the same resolved config), and they die with it (``PR_SET_PDEATHSIG``).
A rank that exits breaks the group: rank 0's next collective fails and the learner exits
non-zero, for its supervisor to restart (learner/distributed.py)."""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

log = logging.getLogger("azserve.ranks")

_PR_SET_PDEATHSIG = 1


def loopback_rendezvous() -> str:
    """A free loopback port of this host, as a rendezvous address."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"tcp://127.0.0.1:{s.getsockname()[1]}"


def _die_with_parent() -> None:  # pragma: no cover - runs in the child before exec
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except OSError:
        pass  # not Linux: the rank still exits when the group breaks


def start_ranks(
    config: Path, run_dir: str, world: int, rendezvous: str, log_level: str
) -> list[subprocess.Popen[bytes]]:
    """Ranks 1..world-1 of this learner, sharing its stdout and stderr (so its log)."""
    procs = []
    for rank in range(1, world):
        argv = [
            sys.executable, "-m", "azserve.cli.main", "learn", "--config", str(config),
            "--run-dir", run_dir, "--rank", str(rank), "--rendezvous", rendezvous,
            "--log-level", log_level,
        ]  # fmt: skip
        procs.append(subprocess.Popen(argv, preexec_fn=_die_with_parent, env=dict(os.environ)))
    log.info("started ranks 1..%d of %d (pids %s) at %s", world - 1, world,
             [p.pid for p in procs], rendezvous)  # fmt: skip
    return procs


def stop_ranks(procs: list[subprocess.Popen[bytes]], timeout_s: float = 30.0) -> list[int]:
    """Wait for the ranks (told to stop by rank 0) to exit; kill those that do not. Their
    exit codes."""
    codes = []
    for p in procs:
        try:
            codes.append(p.wait(timeout=timeout_s))
        except subprocess.TimeoutExpired:
            p.kill()
            codes.append(p.wait())
    return codes


__all__ = ["loopback_rendezvous", "start_ranks", "stop_ranks"]
