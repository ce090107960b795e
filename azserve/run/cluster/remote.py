"""The far end of a launched process: ``python -m azserve.run.cluster.remote`` on the host.

It writes the process's config to a file unique to the run (``$TMPDIR/azserve-RUN/NAME.toml``),
starts ``azserve`` in its own process group, and ties the process's life to the launcher's:

- each line on stdin names a signal (``SIGINT``, ``SIGTERM``, ``SIGKILL``) to forward, which
  is how the launcher stops a remote learner with SIGINT (a checkpoint) through ssh or srun;
- end of stdin (the launcher exited, was killed, or the ssh connection dropped) or SIGHUP/
  SIGTERM to this watchdog sends SIGTERM to the process group, then SIGKILL after a grace
  period, so nothing outlives the launcher;
- the watchdog exits with the process's exit code and removes the config file.

Standard library only: actor hosts need no torch, and start-up stays fast.
"""

from __future__ import annotations

import argparse
import base64
import os
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

PLACEHOLDER = "{config}"
SIGNALS = {"SIGINT": signal.SIGINT, "SIGTERM": signal.SIGTERM, "SIGKILL": signal.SIGKILL}


def _parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="azserve.run.cluster.remote")
    p.add_argument("--run-id", required=True, help="unique id of the launch")
    p.add_argument("--name", required=True, help="process name in the run")
    p.add_argument("--config-b64", required=True, help="the process's config, base64 TOML")
    p.add_argument("--env", action="append", default=[], help="KEY=VALUE for the process")
    p.add_argument("--grace-s", type=float, default=60.0, help="SIGTERM to SIGKILL")
    p.add_argument("azserve", nargs=argparse.REMAINDER, help="-- then the azserve arguments")
    return p.parse_args(argv)


def _die_with_parent(parent: int) -> Callable[[], None] | None:
    """In the child: SIGTERM when the watchdog dies, even by SIGKILL (Linux's
    PR_SET_PDEATHSIG; Ray kills a dead worker's children that way). None elsewhere."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)

    def set_pdeathsig() -> None:
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
        if os.getppid() != parent:  # the watchdog died before prctl took effect
            os.kill(os.getpid(), signal.SIGTERM)

    return set_pdeathsig


def main(argv: list[str] | None = None) -> int:
    args = _parse(sys.argv[1:] if argv is None else argv)
    rest = args.azserve[1:] if args.azserve[:1] == ["--"] else args.azserve
    run_dir = Path(tempfile.gettempdir()) / f"azserve-{args.run_id}"
    run_dir.mkdir(parents=True, exist_ok=True)
    cfg_path = run_dir / f"{args.name}.toml"
    cfg_path.write_bytes(base64.b64decode(args.config_b64))
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    for item in args.env:
        key, _, value = item.partition("=")
        env[key] = value
    # A process started by a Ray worker inherits SIGINT ignored (and maybe blocked): reset
    # both, or the learner would never see the SIGINT that asks it for a checkpoint.
    signal.pthread_sigmask(signal.SIG_SETMASK, [])
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)
    cmd = [sys.executable, "-m", "azserve.cli.main"]
    cmd += [str(cfg_path) if a == PLACEHOLDER else a for a in rest]
    proc = subprocess.Popen(
        cmd,
        env=env,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
        preexec_fn=_die_with_parent(os.getpid()),
    )

    def signal_group(sig: int) -> None:
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass

    def end(reason: str) -> None:
        if proc.poll() is not None:
            return
        print(f"[watchdog] {reason}: stopping {args.name}", file=sys.stderr, flush=True)
        signal_group(signal.SIGTERM)
        try:
            proc.wait(args.grace_s)
        except subprocess.TimeoutExpired:
            signal_group(signal.SIGKILL)

    def read_commands() -> None:
        for line in sys.stdin:
            sig = SIGNALS.get(line.strip())
            if sig is not None:
                signal_group(sig)
        end("the launcher is gone (end of stdin)")

    for sig in (signal.SIGHUP, signal.SIGTERM, signal.SIGINT):
        signal.signal(
            sig, lambda s, _f: threading.Thread(target=end, args=(signal.Signals(s).name,)).start()
        )
    threading.Thread(target=read_commands, daemon=True, name="commands").start()
    code = proc.wait()
    signal_group(signal.SIGKILL)  # anything the process left behind in its group
    cfg_path.unlink(missing_ok=True)
    try:
        run_dir.rmdir()  # the last process of the run on this host removes the directory
    except OSError:
        pass
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main())
