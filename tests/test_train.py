"""``azserve train`` end to end, as a subprocess with tiny budgets: a run's outputs, resuming it
(steps and versions continue), refusing to overwrite a run, Ctrl-C, and a crashed child."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from azserve.config.schema import load_config
from learner.checkpoint import latest_checkpoint, list_checkpoints, load_checkpoint
from learner.runlog import read_metrics
from learner.trainer import Trainer

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
TTT = REPO / "configs" / "tictactoe.toml"
TINY = [
    "replay.min_size=200",
    "trainer.publish_every=10",
    "trainer.batch_size=64",
    "actors.games=32",
    "mcts.num_simulations=8",
    "eval.match_games=2",
    "eval.sims=4",
    "eval.match_sims=2",
    "train.eval_every_s=0",
    "train.status_interval_s=1",
    "learner.status_interval_s=1",
]


def train_cmd(run_dir: Path, *args: str) -> list[str]:
    script = Path(sys.executable).with_name("azserve")
    head = [str(script)] if script.exists() else [sys.executable, "-m", "azserve.cli.main"]
    sets = [a for s in TINY for a in ("--set", s)]
    return [
        *head,
        "train",
        "--config",
        str(TTT),
        "--run-dir",
        str(run_dir),
        "--no-progress",
        *sets,
        *args,
    ]


class Run:
    """One ``azserve train`` process, its output in files."""

    def __init__(self, argv: list[str], out: Path) -> None:
        self.out_path, self.err_path = out.with_suffix(".out"), out.with_suffix(".err")
        with self.out_path.open("wb") as o, self.err_path.open("wb") as e:
            self.popen = subprocess.Popen(
                argv, stdout=o, stderr=e, stdin=subprocess.DEVNULL, cwd=REPO
            )
        self.seen: set[int] = set()  # pids of its children, for teardown

    @property
    def output(self) -> str:
        return self.out_path.read_text(errors="replace") + self.err_path.read_text(errors="replace")

    def wait(self, timeout: float) -> int:
        try:
            return self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"azserve train did not finish in {timeout} s:\n{self.output}"
            ) from None

    def children(self) -> dict[int, str]:
        """pid -> command line of the supervisor's live children."""
        out = {}
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if int(fields[1]) == self.popen.pid and fields[0] != "Z":
                out[int(entry.name)] = cmdline
        self.seen.update(out)
        return out

    def until(self, what: str, predicate: Callable[[], bool], timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            assert self.popen.poll() is None, (
                f"train exited ({self.popen.returncode}) before {what}:\n{self.output}"
            )
            assert time.monotonic() < deadline, f"no {what} in {timeout} s:\n{self.output}"
            self.children()
            time.sleep(0.25)

    def kill(self) -> None:
        self.children()
        for pid in [self.popen.pid, *self.seen]:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        self.popen.wait()


@pytest.fixture
def start(tmp_path: Path) -> Iterator[Callable[..., Run]]:
    """``start(run_dir, *args)`` -> Run; supervisors and their children are killed at teardown."""
    runs: list[Run] = []

    def go(run_dir: Path, *args: str) -> Run:
        run = Run(train_cmd(run_dir, *args), tmp_path / f"train{len(runs)}")
        runs.append(run)
        return run

    yield go
    for run in runs:
        run.kill()


def rows_of(run_dir: Path) -> list[dict]:
    path = run_dir / "metrics.jsonl"
    return read_metrics(path) if path.exists() else []


def checkpoint_versions(run_dir: Path) -> dict[int, int]:
    return {
        step: load_checkpoint(p).meta.version
        for step, p in list_checkpoints(run_dir / "checkpoints")
    }


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.timeout(300)
def test_train_resume_refuse_and_interrupt(start, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"

    # 1. A complete run to an exact step budget.
    first = start(run_dir, "--steps", "20")
    assert first.wait(timeout=150) == 0, first.output
    assert "stopped: step budget of 20 reached" in first.output
    cfg = load_config(run_dir / "config.toml")  # the resolved config, loadable as is
    assert cfg.trainer.batch_size == 64 and cfg.train.steps == 20 and cfg.learner.max_steps == 20
    ckpts = list_checkpoints(run_dir / "checkpoints")
    assert ckpts and ckpts[-1][0] == 20
    v20 = load_checkpoint(ckpts[-1][1]).meta.version
    rows = rows_of(run_dir)
    assert rows and rows[-1]["step"] == 20
    for r in rows:
        assert {"time", "step", "version", "games", "positions"} <= set(r), r
    # Rows come at log_every steps and at each learner status line (also while it waits).
    assert [r["step"] for r in rows] == sorted(r["step"] for r in rows)
    assert list((run_dir / "tb").glob("events.out.tfevents.*"))
    evals = [json.loads(line) for line in (run_dir / "eval.jsonl").read_text().splitlines()]
    assert evals[-1]["step"] == 20 and evals[-1]["full"] is True
    assert evals[-1]["tictactoe"]["positions"] == 4520
    assert sum(evals[-1]["vs_random"].values()) == 2
    assert (run_dir / "report.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # The autopilot (on by default) sized the games before the actor started, within
    # actors.games = 32, and its rows stay out of the learner's (docs/autopilot.md).
    pilot = read_metrics(run_dir / "metrics.jsonl", "autopilot")
    assert pilot and pilot[0]["action"] == "start" and pilot[0]["games"] == 32
    assert json.loads((run_dir / "summary.json").read_text())["autopilot"]["games"] <= 32
    assert {p.name for p in (run_dir / "logs").iterdir()} >= {
        "server.log",
        "learner.log",
        "actor-0.log",
    }
    old_rows, old_versions = rows, checkpoint_versions(run_dir)
    old_games = rows[-1]["games"]

    # 2. Resume with a larger budget; meanwhile a plain start in the same dir is refused. Its
    # final evaluation (400 games, no time limit without a time budget) outlasts any test.
    resumed = start(
        run_dir, "--resume", "--steps", "100000", "--set", "eval.sims=0",
        "--set", "eval.match_games=400", "--set", "eval.match_sims=64",
    )  # fmt: skip
    refused = start(run_dir, "--steps", "20")
    assert refused.wait(timeout=120) == 1
    assert f"{run_dir} already holds a run: pass --resume" in refused.output
    assert "Traceback" not in refused.output

    # 3. Ctrl-C once the resumed run has trained and published a new version.
    resumed.until(
        "progress after resuming", lambda: list_checkpoints(run_dir / "checkpoints")[-1][0] >= 30
    )
    children = resumed.children()
    assert len(children) == 3, children  # server, learner, one actor process
    resumed.popen.send_signal(signal.SIGINT)
    # A second Ctrl-C stops the final evaluation's games; the report and summary still come.
    resumed.until("the final evaluation", lambda: "final evaluation of " in resumed.output)
    assert "Ctrl-C again stops the final evaluation's games" in resumed.output
    resumed.popen.send_signal(signal.SIGINT)
    assert resumed.wait(timeout=60) == 130, resumed.output
    assert "final evaluation stopped (Ctrl-C)" in resumed.output
    assert json.loads((run_dir / "summary.json").read_text())["stop_reason"].startswith(
        "interrupted"
    )
    assert "stopped: interrupted (Ctrl-C)" in resumed.output
    assert "stopping (interrupted (Ctrl-C))..." in resumed.output
    assert f"resumed from step 20, version {v20} " in resumed.output
    assert not [pid for pid in children if alive(pid)]

    rows = rows_of(run_dir)
    assert rows[: len(old_rows)] == old_rows
    new = rows[len(old_rows) :]
    # Steps continue from the checkpoint, never from 0; rows written while the resumed learner
    # waits for its first batch repeat the resumed step.
    last_old = old_rows[-1]["step"]
    assert new and all(r["step"] >= last_old for r in new)
    assert new[-1]["step"] > last_old
    steps = [r["step"] for r in rows]
    assert steps == sorted(steps) and steps[-1] >= 30
    versions = [r["version"] for r in rows]
    assert versions == sorted(versions)
    assert new[-1]["games"] > old_games  # game totals continue too
    # No version number names two different weights: one step per version, growing together.
    seen = {**old_versions, **checkpoint_versions(run_dir)}
    by_step = [seen[s] for s in sorted(seen)]
    assert by_step == sorted(by_step) and len(set(by_step)) == len(by_step), seen
    assert max(seen.values()) > max(old_versions.values())
    # The resumed server served the checkpoint's version from its start.
    server_log = (run_dir / "logs" / "server.log").read_text()
    assert f"(latest version {old_versions[20]})" in server_log

    # The stop left a checkpoint of the final state, and it loads into a trainer.
    last = latest_checkpoint(run_dir / "checkpoints")
    assert last is not None
    ckpt = load_checkpoint(last)
    assert ckpt.meta.step >= rows[-1]["step"]
    trainer = Trainer(cfg.net, cfg.trainer)
    trainer.load_state_dict(ckpt.trainer_state())
    assert trainer.step_count == ckpt.meta.step and ckpt.meta.version >= 1
    assert "checkpoint: " in (run_dir / "logs" / "learner.log").read_text()


@pytest.mark.timeout(240)
def test_crashed_child_is_reported_and_the_run_stops(start, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    no_eval = ["--set", "eval.sims=0", "--set", "eval.match_games=0"]
    run = start(run_dir, "--steps", "100000", "--set", "train.restart_children=false", *no_eval)
    run.until("training", lambda: len(rows_of(run_dir)) >= 1)
    children = run.children()
    (server_pid,) = [pid for pid, cmd in children.items() if " serve " in cmd]
    os.kill(server_pid, signal.SIGKILL)

    assert run.wait(timeout=150) == 1, run.output
    out = run.output
    assert "server exited with code -9; last log lines:" in out
    tail = out.split("server exited with code -9", 1)[1]
    assert "serving model 'default'" in tail  # the server log's last lines
    assert "stopped: server crashed (exit -9)" in out
    assert not [pid for pid in children if alive(pid)]
    # The learner was stopped in order and left its checkpoint.
    assert "checkpoint: " in (run_dir / "logs" / "learner.log").read_text()
    assert latest_checkpoint(run_dir / "checkpoints") is not None


@pytest.mark.timeout(240)
def test_run_schedule_anneals_over_the_end_of_the_time_budget(start, tmp_path: Path) -> None:
    # Without a time budget the schedule is refused before anything starts, naming the keys.
    bare = start(
        tmp_path / "bare", "--steps", "20", "--set", "train.minutes=0",
        "--set", "trainer.lr_schedule=run",
    )  # fmt: skip
    assert bare.wait(timeout=60) == 2, bare.output
    assert "trainer.lr_schedule: 'run' anneals over the time budget" in bare.output
    assert "train.minutes is 0" in bare.output and "Traceback" not in bare.output

    run_dir = tmp_path / "run"
    sets = [
        "trainer.lr_schedule=run",
        "trainer.lr_anneal_fraction=0.5",
        "trainer.lr_final_ratio=0.1",
    ]
    run = start(run_dir, "--minutes", "0.5", *(a for s in sets for a in ("--set", s)))
    assert run.wait(timeout=180) == 0, run.output
    assert "time budget of 0.5 min reached" in run.output
    cfg = load_config(run_dir / "config.toml")
    start_s, end_s = cfg.trainer.run_start_unix, cfg.trainer.run_end_unix
    assert end_s - start_s == pytest.approx(30.0)
    rows = [r for r in rows_of(run_dir) if "lr" in r]
    peak = cfg.trainer.lr
    before = [r["lr"] for r in rows if r["time"] < start_s + 14.0]
    during = [r["lr"] for r in rows if r["time"] > start_s + 16.0]
    assert before and all(lr == pytest.approx(peak) for lr in before), rows
    assert len(during) >= 2 and during == sorted(during, reverse=True), during
    assert during[-1] < 0.5 * peak and min(during) >= 0.1 * peak - 1e-12
