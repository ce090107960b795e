"""Every code block of README.md runs as written, in README order, in a fresh directory that
looks like a checkout (the repository's .venv, Makefile, configs, data and tests, linked).

Two things come from the environment, never from editing a block: the budget (``AZSERVE_SET``,
the documented extra ``--set`` overrides: a few learner steps and a small evaluation instead
of 8 or 60 minutes; ``TESTS`` narrows ``make test`` to one quick test, since the suite would
include this file) and the endpoint (``server.bind`` and ``AZSERVE_SERVER`` name a free
loopback port instead of 5555, which another process may hold). The sandbox's pyproject.toml is
older than .venv, as after ``make venv``, so ``make`` never reinstalls into the shared venv.

``sh`` and ``python`` blocks run; ``text`` blocks (sample output, the tree) are shown only.
A block's background jobs (``azserve serve ... &``) live until the module's end.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.conftest import free_tcp_port

# One worker runs every block (--dist loadgroup): a block runs the ones before it first, so a
# block on the other worker ran make train and the Connect Four block again (56 s, not 10).
pytestmark = [pytest.mark.slow, pytest.mark.timeout(300), pytest.mark.xdist_group("readme")]

REPO = Path(__file__).resolve().parents[1]
BLOCK = re.compile(r"^```(\w*)\n(.*?)^```\s*$", re.M | re.S)
RUN = {"sh", "python"}
SHOWN = {"text"}
LINKED = (".venv", "Makefile", "configs", "data", "scripts", "tests")
# The blocks' commands as written, on a small budget; no inductor compile of the Connect Four
# net (a minute or more with a cold cache: a start-up cost tests/test_compiled.py covers).
BUDGET = (
    "backend.torch.compile=none "
    "train.steps=3 train.eval_every_s=0 actors.games=16 mcts.num_simulations=4 "
    "replay.min_size=64 trainer.batch_size=32 eval.sims=0 eval.match_games=2 eval.match_sims=2 "
    "eval.c4_limit=8 server.status_interval_s=0"
)


def readme_blocks() -> list[tuple[str, str]]:
    """(language, body) of every fenced block of README.md, in order."""
    return BLOCK.findall((REPO / "README.md").read_text())


RUNNABLE = [(i, lang, body) for i, (lang, body) in enumerate(readme_blocks()) if lang in RUN]


@dataclass
class Sandbox:
    """A checkout-like directory and the blocks already run in it."""

    root: Path
    env: dict[str, str]
    done: dict[int, str] = field(default_factory=dict)
    """Block index -> its output."""
    groups: list[int] = field(default_factory=list)
    """Process groups of the blocks' shells (their background jobs included)."""

    def run_through(self, index: int) -> str:
        """Run every runnable block up to ``index`` not run yet; the output of ``index``."""
        for i, lang, body in RUNNABLE:
            if i > index:
                break
            if i not in self.done:
                self.done[i] = self._run(i, lang, body)
        return self.done[index]

    def _run(self, i: int, lang: str, body: str) -> str:
        if lang == "python":
            script = self.root / f"block{i}.py"
            script.write_text(body)
            argv = [str(self.root / ".venv" / "bin" / "python"), str(script)]
        else:
            argv = ["bash", "-euo", "pipefail", "-c", body]
        log = self.root / f"block{i}.log"
        with log.open("w") as out:
            p = subprocess.Popen(
                argv,
                cwd=self.root,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
            self.groups.append(p.pid)
            try:
                code = p.wait(timeout=150)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)  # nothing of a stuck block outlives the test
                p.wait()
                raise
        text = log.read_text(errors="replace")
        assert code == 0, f"README block {i} ({lang}) exited {code}:\n{body}\n--- output:\n{text}"
        assert "Traceback" not in text, f"README block {i}:\n{text}"
        return text


def venv_prerequisites() -> list[str]:
    """The files (and folders) the Makefile's venv target depends on, as make expands them
    (the compiled core's sources are a wildcard)."""
    db = subprocess.run(
        ["make", "-pq", "-C", str(REPO), ".venv/bin/azserve"], capture_output=True, text=True
    ).stdout
    for line in db.splitlines():
        if line.startswith(".venv/bin/azserve:"):
            return line.split(":", 1)[1].split()
    raise AssertionError("Makefile has no $(BIN)/azserve target")


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sandbox]:
    root = tmp_path_factory.mktemp("readme")
    for name in LINKED:
        (root / name).symlink_to(REPO / name)
    # The venv target's prerequisites, older than .venv: set up already.
    for name in venv_prerequisites():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        if (REPO / name).is_dir():  # a folder of sources: a file added or removed rebuilds
            (root / name).mkdir(exist_ok=True)
        else:
            shutil.copy(REPO / name, root / name)
        os.utime(root / name, (0, 0))
    port = free_tcp_port()
    env = dict(os.environ)
    env.update(
        AZSERVE_SET=f"{BUDGET} server.bind=tcp://127.0.0.1:{port}",
        AZSERVE_SERVER=f"tcp://127.0.0.1:{port}",
        TESTS="tests/test_first_hour_cli.py::test_help_shows_defaults_and_an_example_and_version",
        PYTHONDONTWRITEBYTECODE="1",
    )
    box = Sandbox(root, env)
    yield box
    for pgid in box.groups:
        try:
            os.killpg(pgid, signal.SIGTERM)
        except ProcessLookupError:
            pass


def test_every_block_is_runnable_or_shown() -> None:
    langs = [lang for lang, _ in readme_blocks()]
    assert langs and set(langs) <= RUN | SHOWN, langs
    assert {"sh", "python"} <= set(langs)


@pytest.mark.parametrize(("index", "lang", "body"), RUNNABLE, ids=[str(i) for i, _, _ in RUNNABLE])
def test_readme_block_runs(sandbox: Sandbox, index: int, lang: str, body: str) -> None:
    out = sandbox.run_through(index)
    # What each kind of block promises, beyond exiting 0 without a traceback:
    if "make train" in body:
        assert "make train: a fresh run in runs/tictactoe" in out
        assert (sandbox.root / "runs" / "tictactoe" / "report.png").stat().st_size > 10_000
    if "--config connect4" in body:
        assert list((sandbox.root / "runs" / "c4" / "checkpoints").glob("ckpt-*.safetensors"))
    if "analyze" in body:
        assert '"id": 1' in out and '"visits"' in out
    if "azserve status" in body:
        assert '"obs_shape": [' in out
    if lang == "python":
        assert "version " in out and "asyncio: best reply" in out


def test_make_train_resumes_or_starts_a_numbered_run(tmp_path: Path) -> None:
    """The Makefile's choice, with a stand-in for ``azserve`` that records its arguments and
    leaves a config.toml in its run directory (as a real run does)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    stub = bin_dir / "azserve"
    stub.write_text(
        "#!/bin/sh\n"
        'echo "azserve $*"\n'
        'while [ $# -gt 0 ]; do [ "$1" = --run-dir ] && mkdir -p "$2" && touch "$2/config.toml"; '
        "shift; done\n"
    )
    stub.chmod(0o755)

    def make(*extra: str) -> str:
        p = subprocess.run(
            ["make", "-s", "-C", str(REPO), "train", f"BIN={bin_dir}", "-o", f"{bin_dir}/azserve",
             f"RUN_DIR={tmp_path / 'runs' / 'ttt'}", *extra],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert p.returncode == 0, p.stderr
        return p.stdout

    run = tmp_path / "runs" / "ttt"
    first = make()
    assert f"a fresh run in {run}\n" in first and "--resume" not in first
    again = make()
    assert f"resuming the run in {run}" in again and "--resume" in again
    fresh = make("FRESH=1")
    assert f"a fresh run in {run}-2\n" in fresh
    assert f"a fresh run in {run}-3\n" in make("FRESH=1")
