"""Child processes of a run: started with their logs in files, watched, stopped in order."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections import deque
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Child:
    """One child process running an ``azserve`` subcommand."""

    name: str
    argv: list[str]
    log_path: Path
    env: dict[str, str]
    proc: subprocess.Popen[bytes] | None = None
    restarts: int = 0
    log_offset: int | None = None
    """Size of the log when this run first started the child (logs append across runs)."""

    stdin = subprocess.DEVNULL
    """The child's stdin (``subprocess.PIPE`` for a watchdog's command channel)."""

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = self.log_path.open("ab")
        if self.log_offset is None:
            self.log_offset = log.tell()
        self.proc = subprocess.Popen(
            self.argv,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=self.env,
            stdin=self.stdin,
            start_new_session=True,  # Ctrl-C reaches the supervisor only; it stops children in order
        )
        log.close()

    def poll(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def send(self, sig: int) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)

    def wait(self, timeout: float) -> int | None:
        """Exit code, or None if still running after ``timeout``."""
        if self.proc is None:
            return 0
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def stop(self, timeout: float, sig: int = signal.SIGTERM) -> int:
        """Signal, wait, then kill if it did not stop."""
        self.send(sig)
        code = self.wait(timeout)
        if code is None:
            assert self.proc is not None
            self.proc.kill()
            code = self.proc.wait()
        return code

    def log_since_start(self) -> list[str]:
        """The log lines written since this run first started the child."""
        try:
            with self.log_path.open("rb") as f:
                f.seek(self.log_offset or 0)
                return f.read().decode(errors="replace").splitlines()
        except OSError:
            return []

    def tail(self, lines: int = 20) -> str:
        try:
            with self.log_path.open("rb") as f:
                return b"".join(deque(f, maxlen=lines)).decode(errors="replace")
        except OSError:
            return ""


def azserve_argv(*args: str) -> list[str]:
    """The command line that runs ``azserve ARGS`` with this interpreter."""
    return [sys.executable, "-m", "azserve.cli.main", *args]


def child_env(torch_threads: int) -> dict[str, str]:
    """Environment for a child: thread pools sized so that processes do not oversubscribe."""
    env = dict(os.environ)
    n = str(max(1, torch_threads))
    env.update(OMP_NUM_THREADS=n, MKL_NUM_THREADS=n, OPENBLAS_NUM_THREADS=n, PYTHONUNBUFFERED="1")
    return env
