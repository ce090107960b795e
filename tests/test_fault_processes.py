"""Faults of whole processes: ``kill -9`` of the server, the learner, an actor, by hand and
under the ``azserve train`` supervisor. Real processes on private ipc endpoints, the real CLI,
the tic-tac-toe config shrunk to seconds; each test asserts recovery by itself within a bound
and the accounting it can check exactly."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from actors.main import SUMMARY_TAG
from learner.checkpoint import list_checkpoints, load_checkpoint
from learner.runlog import read_metrics

pytestmark = [pytest.mark.faults, pytest.mark.slow, pytest.mark.timeout(240)]

REPO = Path(__file__).resolve().parents[1]
TTT = REPO / "configs" / "tictactoe.toml"
FAST = [
    "actors.games=32",
    "actors.status_interval_s=1",
    "actors.version_wait_s=30",
    "mcts.num_simulations=8",
    "client.retry_after_s=0.5",
    "client.request_timeout_s=30",
    "replay.min_size=100",
    "trainer.batch_size=32",
    "trainer.publish_every=5",
    "trainer.device=cpu",
    "learner.status_interval_s=0.5",
    "learner.log_every=5",
    "checkpoint.keep_last=100",
    "server.status_interval_s=0",
    "server.max_versions=16",  # publishing every 5 steps: many versions are pinned at once
]


def wait_until(predicate: Callable[[], bool], timeout_s: float, what: str) -> float:
    """Seconds it took."""
    t0 = time.monotonic()
    deadline = t0 + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"not within {timeout_s:g} s: {what}"
        time.sleep(0.2)
    return time.monotonic() - t0


def record(fault: str, **figures: object) -> None:
    """Append the figures of one fault to ``$AZSERVE_FAULT_REPORT`` (docs/reliability.md)."""
    path = os.environ.get("AZSERVE_FAULT_REPORT")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps({"fault": fault, **figures}) + "\n")


class Rig:
    """Server, learner and one actor process started by hand, as on separate hosts."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.run_dir = tmp / "run"
        self.sets = [*FAST, f"server.bind=ipc://{tmp}/s", f"learner.bind=ipc://{tmp}/l"]
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.starts: dict[str, int] = {}

    def argv(self, role: str) -> list[str]:
        cmd = {"server": ["serve"], "learner": ["learn", "--run-dir", str(self.run_dir)]}
        args = cmd.get(role, ["actors"])
        if role == "learner" and self.starts.get(role):
            args.append("--resume")
        sets = [a for s in self.sets for a in ("--set", s)]
        return [sys.executable, "-m", "azserve.cli.main", *args, "--config", str(TTT), *sets]

    def start(self, role: str) -> None:
        n = self.starts.get(role, 0)
        log = (self.tmp / f"{role}-{n}.log").open("wb")
        self.procs[role] = subprocess.Popen(
            self.argv(role), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )
        log.close()
        self.starts[role] = n + 1

    def kill9(self, role: str) -> None:
        self.procs[role].kill()  # SIGKILL: no handler, no cleanup
        self.procs[role].wait()

    def alive(self, role: str) -> bool:
        return self.procs[role].poll() is None

    def log(self, role: str, n: int = 0) -> str:
        return (self.tmp / f"{role}-{n}.log").read_text(errors="replace")

    def rows(self) -> list[dict[str, object]]:
        path = self.run_dir / "metrics.jsonl"
        return read_metrics(path) if path.exists() else []

    def last(self, key: str) -> int:
        rows = self.rows()
        return int(rows[-1][key]) if rows else -1  # type: ignore[call-overload]

    def stop(self, role: str, sig: int = signal.SIGTERM, timeout_s: float = 60) -> int:
        proc = self.procs[role]
        if proc.poll() is None:
            proc.send_signal(sig)
        return proc.wait(timeout_s)

    def close(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Rig]:
    r = Rig(tmp_path)
    yield r
    r.close()


def actor_summary(text: str) -> dict[str, object]:
    (line,) = [ln for ln in text.splitlines() if SUMMARY_TAG in ln]
    return json.loads(line.split(SUMMARY_TAG, 1)[1])


def test_server_kill9_and_restart_by_hand(rig: Rig) -> None:
    for role in ("server", "learner", "actors"):
        rig.start(role)
    wait_until(lambda: rig.last("version") >= 2 and rig.last("games") >= 20, 120, "training")
    g = rig.last("games")
    before = wait_until(lambda: rig.last("games") >= g + 30, 120, "30 games before the kill")
    games_at_kill, version_at_kill = rig.last("games"), rig.last("version")
    rig.kill9("server")
    time.sleep(2.0)
    rig.start("server")  # a fresh server: version 0 only, no leases, no queues
    after = wait_until(lambda: rig.last("games") >= games_at_kill + 30, 120, "30 games after")
    # Self-play goes on by itself: games keep arriving, new versions keep being published.
    wait_until(lambda: rig.last("version") > version_at_kill, 120, "a new version after it")
    assert rig.alive("actors") and rig.alive("learner")
    assert "server restarted" in rig.log("actors")  # the client saw it and resent
    # Exact accounting: stop the actor first (it drains), then the learner (final checkpoint).
    assert rig.stop("actors") == 0
    summary = actor_summary(rig.log("actors"))
    assert summary["undelivered"] == 0 and summary["sent"] == summary["acked"]
    # The learner restored the versions the games were pinned to: none was given up.
    assert summary["abandoned"] == {}, summary
    assert rig.stop("learner", signal.SIGINT) == 0
    final = load_checkpoint(list_checkpoints(rig.run_dir / "checkpoints")[-1][1])
    assert final.meta.extra["games"] == summary["acked"]  # every acked game stored, once
    record(
        "server kill -9, restarted by hand after 2 s",
        seconds_for_30_games_before_the_kill=round(before, 1),
        seconds_for_30_games_from_the_kill=round(after + 2.0, 1),
        abandoned=summary["abandoned"],
        duplicates_dropped=rig.rows()[-1].get("duplicates_dropped"),
        acked=summary["acked"],
        stored=final.meta.extra["games"],
    )


def test_learner_kill9_and_resume_by_hand(rig: Rig) -> None:
    for role in ("server", "learner", "actors"):
        rig.start(role)
    wait_until(lambda: rig.last("version") >= 3, 120, "three versions published")
    rig.kill9("learner")
    before = {
        load_checkpoint(p).meta.version: s for s, p in list_checkpoints(rig.run_dir / "checkpoints")
    }
    top = max(before)
    rig.start("learner")  # --resume: the newest readable checkpoint
    back = wait_until(lambda: rig.last("version") >= top + 1, 120, "a new version after it")
    wait_until(lambda: rig.last("version") >= top + 2, 120, "new versions after the resume")
    assert rig.alive("actors") and rig.alive("server")
    after = [
        (s, load_checkpoint(p).meta.version)
        for s, p in list_checkpoints(rig.run_dir / "checkpoints")
    ]
    versions = [v for _, v in after]
    assert versions == sorted(versions) and len(set(versions)) == len(versions)  # never reused
    assert all(before[v] == s for s, v in after if v in before)  # a number names one step
    steps = [int(r["step"]) for r in rig.rows()]  # type: ignore[call-overload]
    assert steps == sorted(steps)  # metrics never go backwards
    assert "resumed from" in rig.log("learner", 1)
    assert rig.stop("actors") == 0
    summary = actor_summary(rig.log("actors"))
    assert summary["undelivered"] == 0
    assert rig.stop("learner", signal.SIGINT) == 0
    final = load_checkpoint(list_checkpoints(rig.run_dir / "checkpoints")[-1][1])
    # Games the killed learner acked after its last checkpoint came back from its journal.
    lost = int(summary["acked"]) - int(final.meta.extra["games"])  # type: ignore[call-overload]
    assert lost == 0, summary
    record(
        "learner kill -9, restarted by hand with --resume",
        seconds_to_next_version_after_restart=round(back, 1),
        abandoned=summary["abandoned"],
        duplicates_dropped=rig.rows()[-1].get("duplicates_dropped"),
        acked=summary["acked"],
        stored=final.meta.extra["games"],
        acked_but_lost_with_the_killed_learner=lost,
    )


def test_supervised_run_recovers_from_kill9_of_every_role(tmp_path: Path) -> None:
    """``azserve train --set train.restart_children=true``: the server, the learner and the
    actor process each killed with SIGKILL once; the run reaches its step budget by itself
    and its summary counts the restarts."""
    run_dir = tmp_path / "run"
    sets = [a for s in [*FAST, "train.restart_children=true", "train.status_interval_s=1",
                        "train.eval_every_s=0", "eval.match_games=0", "eval.sims=0"]
            for a in ("--set", s)]  # fmt: skip
    argv = [sys.executable, "-m", "azserve.cli.main", "train", "--config", str(TTT),
            "--run-dir", str(run_dir), "--steps", "150", "--no-progress", *sets]  # fmt: skip
    log = (tmp_path / "train.log").open("wb")
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    log.close()
    try:

        def version() -> int:
            path = run_dir / "metrics.jsonl"
            rows = read_metrics(path) if path.exists() else []
            return int(rows[-1]["version"]) if rows else -1

        recovery = {}
        for role in ("server", "learner", "actor-0"):
            v = version()
            wait_until(lambda v=v: version() >= v + 2, 120, f"progress before killing {role}")
            pid = child_pid(proc.pid, role)
            os.kill(pid, signal.SIGKILL)
            v = version()
            recovery[role] = round(wait_until(lambda v=v: version() > v, 120, "recovery"), 1)
        assert proc.wait(timeout=180) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    out = (tmp_path / "train.log").read_text()
    assert "step budget of 150 reached" in out
    # the supervisor's accounting line (timestamped when its output is not a terminal)
    summary = [ln for ln in out.splitlines() if re.match(r"(\S+ )?games: ", ln)][-1]
    for role in ("server", "learner", "actor-0"):
        assert f"'{role}': 1" in summary, summary
    # the killed actor process's 32 games in play are counted, with their reason
    books = json.loads((run_dir / "summary.json").read_text())
    assert books["games_abandoned"].get("process died in play") == 32, books
    steps = [int(r["step"]) for r in read_metrics(run_dir / "metrics.jsonl")]
    assert steps == sorted(steps)
    versions = [
        load_checkpoint(p).meta.version for _, p in list_checkpoints(run_dir / "checkpoints")
    ]
    assert versions == sorted(versions) and len(set(versions)) == len(versions)
    record("supervised kill -9 of each role", seconds_to_next_version=recovery, summary=summary)


def child_pid(parent: int, role: str) -> int:
    """The pid of the supervisor's child running ``role`` (found by its command line)."""
    needle = {"server": "serve", "learner": "learn", "actor-0": "actors"}[role]
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmd = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == parent and len(cmd) > 3 and cmd[3].decode() == needle:
            return int(entry.name)
    raise AssertionError(f"no {role} child of {parent}")
