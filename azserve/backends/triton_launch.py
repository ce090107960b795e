"""Start a local ``tritonserver`` from the nvidia-pytriton wheel (tests, benchmarks, CPU runs).

The wheel ships the server binary, the python backend and one python-backend stub per Python
version, but no ready-made backend directory. ``start_triton`` builds one in a work directory
(the python backend plus the stub of the running interpreter) and sets up the environment the
stub needs:

- ``LD_LIBRARY_PATH`` starts with this interpreter's ``LIBDIR`` and the wheel's
  ``nvidia_pytriton.libs``, else the stub links the system's libpython and fails;
- ``PATH`` starts with this interpreter's ``bin`` directory, because the stub takes its Python
  (and so torch, numpy<2 and azserve) from the first ``python3`` on PATH;
- each server run gets its own shared-memory prefix, so concurrent servers never collide in
  ``/dev/shm``; servers are stopped with SIGTERM, and ``stop`` then removes the shm files of
  that run that Triton left (stubs still finalising when its exit timeout ends, or a SIGKILL).

``python -m azserve.backends.triton_launch REPO`` runs one in the foreground.
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
import os
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

_PYTHON_BACKEND_FILES = ("libtriton_python.so", "triton_python_backend_utils.py")
_shm_counter = itertools.count()


class TritonStartError(RuntimeError):
    """``tritonserver`` is missing or did not become ready; the message ends with its log tail."""


@dataclass(frozen=True)
class TritonDist:
    """The pieces of the nvidia-pytriton wheel a server needs."""

    binary: Path
    """``tritonserver`` executable."""
    python_backend: Path
    """Directory holding ``libtriton_python.so`` and ``triton_python_backend_utils.py``."""
    stub: Path
    """``triton_python_backend_stub`` built for the running Python version."""
    libs: Path
    """``nvidia_pytriton.libs``: the server's bundled shared libraries."""


def find_tritonserver() -> TritonDist:
    """Locate the wheel's server, python backend and stub; raise ``TritonStartError`` if absent."""
    spec = importlib.util.find_spec("pytriton")  # no import: pytriton's own init is not needed
    if spec is None or not spec.submodule_search_locations:
        raise TritonStartError("nvidia-pytriton is not installed (pip install 'azserve[triton]')")
    root = Path(next(iter(spec.submodule_search_locations)))
    server = root / "tritonserver"
    py = f"{sys.version_info.major}.{sys.version_info.minor}"
    dist = TritonDist(
        binary=server / "bin" / "tritonserver",
        python_backend=server / "backends" / "python",
        stub=server / "python_backend_stubs" / py / "triton_python_backend_stub",
        libs=root.parent / "nvidia_pytriton.libs",
    )
    for path in (
        dist.binary,
        dist.stub,
        dist.libs,
        *(dist.python_backend / f for f in _PYTHON_BACKEND_FILES),
    ):
        if not path.exists():
            raise TritonStartError(f"nvidia-pytriton is incomplete: {path} not found")
    return dist


def free_port() -> int:
    """A loopback TCP port that is free right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _backend_dir(dist: TritonDist, workdir: Path) -> Path:
    """``workdir/backends/python`` = the wheel's python backend + this interpreter's stub."""
    backends = workdir / "backends"
    python = backends / "python"
    python.mkdir(parents=True, exist_ok=True)
    for src in (*(dist.python_backend / f for f in _PYTHON_BACKEND_FILES), dist.stub):
        dst = python / src.name
        if not dst.exists():
            dst.symlink_to(src)
    return backends


def _server_env(dist: TritonDist) -> dict[str, str]:
    env = dict(os.environ)
    libdir = sysconfig.get_config_var("LIBDIR") or ""
    ld = [p for p in (libdir, str(dist.libs), env.get("LD_LIBRARY_PATH", "")) if p]
    env["LD_LIBRARY_PATH"] = ":".join(ld)
    # Not resolved: a venv's bin/python is a symlink, and the venv is what must come first.
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '')}"
    return env


class TritonProcess:
    """A running ``tritonserver`` (explicit model control, gRPC only) and its log file.

    Create with ``start_triton``. ``stop()`` ends the process (SIGTERM, then waits);
    ``restart()`` starts it again on the same ports; ``close()`` also removes the work
    directory. Usable as a context manager.
    """

    def __init__(
        self,
        dist: TritonDist,
        repo_dir: Path,
        workdir: Path,
        owns_workdir: bool,
        grpc_port: int,
        extra_args: tuple[str, ...],
        ready_timeout_s: float,
    ) -> None:
        self.dist = dist
        self.repo_dir = repo_dir
        self.workdir = workdir
        self.grpc_port = grpc_port
        self.log_path = workdir / "tritonserver.log"
        self._owns_workdir = owns_workdir
        self._extra_args = extra_args
        self._ready_timeout_s = ready_timeout_s
        self._backends = _backend_dir(dist, workdir)
        self._env = _server_env(dist)
        self._proc: subprocess.Popen[bytes] | None = None
        self._shm_prefix = ""

    @property
    def grpc_url(self) -> str:
        """``host:port`` for ``backend.triton.url`` and tritonclient."""
        return f"127.0.0.1:{self.grpc_port}"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def command(self) -> list[str]:
        """The full command line of the current run."""
        return [
            str(self.dist.binary),
            f"--model-repository={self.repo_dir}",
            "--model-control-mode=explicit",
            # Saves ~2.5 s per load_model: azserve writes complete configs.
            "--disable-auto-complete-config",
            f"--backend-directory={self._backends}",
            f"--backend-config=python,shm-region-prefix-name={self._shm_prefix}",
            "--grpc-address=127.0.0.1",
            f"--grpc-port={self.grpc_port}",
            "--allow-http=false",
            "--allow-metrics=false",
            "--allow-gpu-metrics=false",
            # In-flight requests get this long to finish on SIGTERM (default 30 s).
            "--exit-timeout-secs=5",
            *self._extra_args,
        ]

    def start(self) -> None:
        """Start the process and wait until it reports ready; raise ``TritonStartError`` if not."""
        if self.running():
            raise RuntimeError("tritonserver already running")
        # The trailing "_" keeps one prefix from being the start of another (x1 vs x10).
        self._shm_prefix = f"azserve{os.getpid()}x{next(_shm_counter)}_"
        with open(self.log_path, "ab") as log:
            self._proc = subprocess.Popen(
                self.command(),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self._env,
                cwd=self.workdir,
            )
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise

    def _wait_ready(self) -> None:
        import tritonclient.grpc as grpcclient  # optional dependency (azserve[triton])
        from tritonclient.utils import InferenceServerException

        deadline = time.monotonic() + self._ready_timeout_s
        with grpcclient.InferenceServerClient(self.grpc_url) as client:
            while True:
                assert self._proc is not None
                if self._proc.poll() is not None:
                    raise TritonStartError(
                        f"tritonserver exited with code {self._proc.returncode}:\n{self.log_tail()}"
                    )
                try:
                    if client.is_server_ready(client_timeout=1.0):
                        return
                except InferenceServerException:
                    pass  # not listening yet
                if time.monotonic() > deadline:
                    raise TritonStartError(
                        f"tritonserver not ready after {self._ready_timeout_s:.0f} s:\n"
                        f"{self.log_tail()}"
                    )
                time.sleep(0.1)

    def stop(self, timeout_s: float = 30.0) -> None:
        """SIGTERM and wait (SIGKILL only if stuck), then remove this run's leftover shm files."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        # Triton frees a stub's region only once the stub has finalised (~3 s with torch here);
        # on an exit timeout it leaves them. The prefix is unique to this run, so this is safe.
        if self._shm_prefix:  # an empty prefix would match every file
            for leftover in Path("/dev/shm").glob(f"{self._shm_prefix}*"):
                leftover.unlink(missing_ok=True)

    def restart(self) -> None:
        """Stop (if running) and start again on the same port and repository."""
        self.stop()
        self.start()

    def close(self) -> None:
        """Stop, and remove the work directory if ``start_triton`` created it."""
        self.stop()
        if self._owns_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def log_tail(self, lines: int = 30) -> str:
        """The last ``lines`` lines of the server's combined stdout/stderr."""
        try:
            text = self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def __enter__(self) -> TritonProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def start_triton(
    repo_dir: str | os.PathLike[str],
    *,
    grpc_port: int | None = None,
    workdir: str | os.PathLike[str] | None = None,
    extra_args: tuple[str, ...] = (),
    ready_timeout_s: float = 60.0,
) -> TritonProcess:
    """Start ``tritonserver`` on ``repo_dir`` (explicit model control, nothing loaded yet).

    ``repo_dir`` is created if missing. ``grpc_port`` defaults to a free loopback port; ``workdir`` (backend dir, log) to a new temp
    directory that ``close()`` removes. Raises ``TritonStartError`` (with the log tail) if the
    binary is missing or the server does not become ready.
    """
    dist = find_tritonserver()
    Path(repo_dir).mkdir(parents=True, exist_ok=True)
    owns = workdir is None
    wd = Path(tempfile.mkdtemp(prefix="azserve-triton-") if workdir is None else workdir)
    wd.mkdir(parents=True, exist_ok=True)
    proc = TritonProcess(
        dist,
        Path(repo_dir).resolve(),
        wd,
        owns,
        grpc_port or free_port(),
        tuple(extra_args),
        ready_timeout_s,
    )
    try:
        proc.start()
    except BaseException:
        proc.close()
        raise
    return proc


def main(argv: list[str] | None = None) -> int:
    """Run a server in the foreground until SIGINT/SIGTERM; arguments after the repository
    that this parser does not know go to tritonserver (later flags override earlier ones)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("repository", help="model repository (= backend.triton.repository)")
    ap.add_argument("--grpc-port", type=int, default=8001)
    args, extra = ap.parse_known_args(argv)
    server = start_triton(args.repository, grpc_port=args.grpc_port, extra_args=tuple(extra))
    print(f"tritonserver ready at {server.grpc_url} (pid {server.pid}, log {server.log_path})")
    # SIGTERM must reach the finally below, or the server would outlive this process.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        while server.running():
            time.sleep(0.5)
        print(f"tritonserver exited:\n{server.log_tail()}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0
    finally:
        server.close()


if __name__ == "__main__":
    sys.exit(main())
