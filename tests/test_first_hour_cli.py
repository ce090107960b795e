"""A new user's mistakes meet one line each: bad invocations of the real ``azserve`` exit
non-zero with one line on stderr naming the problem, never a traceback; ``serve --checkpoint``
alone serves the checkpoint at its saved version; ``azserve status`` prints the contract;
``--help`` shows defaults and an example, ``--version`` the package version."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from azserve import SyncClient
from azserve.app.cli import EXAMPLES, build_parser, main, package_version
from azserve.app.schema import load_config, to_dict
from azserve.errors import RemoteError
from learner.checkpoint import save_checkpoint
from learner.trainer import Trainer
from tests.test_cli import REPO, TTT, Proc, azserve_cmd, wait_serving

pytestmark = pytest.mark.slow


def checkpoint(directory: Path, game: str, step: int, version: int) -> Path:
    """A learner checkpoint of a small net of ``game``, carrying its config."""
    cfg = load_config(REPO / "configs" / f"{game}.toml", ["net.blocks=1", "net.channels=8"])
    trainer = Trainer(replace(cfg.net, seed=3), replace(cfg.trainer, device="cpu"))
    return save_checkpoint(directory, step, version, trainer.state_dict(), to_dict(cfg))


def bad_invocations(tmp_path: Path) -> list[tuple[list[str], str]]:
    """(argv, a phrase its one line of stderr must contain), with the files they name."""
    ttt = checkpoint(tmp_path / "ttt", "tictactoe", 40, 5)
    c4 = checkpoint(tmp_path / "c4", "connect4", 40, 5)
    garbage = tmp_path / "weights.safetensors"
    garbage.write_bytes(b"\xff" * 64)
    (tmp_path / "empty").mkdir()
    held = tmp_path / "held"
    held.mkdir()
    (held / "config.toml").write_text("")
    run = str(tmp_path / "run")
    return [
        (["serve", "--config", str(TTT), "--log-level", "foo"], "choose from DEBUG"),
        (["bogus"], "invalid choice: 'bogus'"),
        (["serve"], "pass --checkpoint"),
        (["serve", "--checkpoint", str(garbage)], f"{garbage}: not a safetensors"),
        (["serve", "--checkpoint", str(c4), "--config", "tictactoe"], "holds a connect4 (obs [2, 6, 7]"),
        (["serve", "--checkpoint", str(tmp_path / "empty")], "no checkpoint"),
        (["serve", "--checkpoint", str(ttt), "--weights-version", "-1"], "allowed 0 to"),
        (["analyze", "--checkpoint", str(ttt), "--input", str(tmp_path / "missing")], "missing"),
        (["analyze", "--checkpoint", str(ttt), "--sims", "-5"], "allowed 0 to 1,048,576"),
        (["play", "--checkpoint", str(ttt), "--game", "chess"], "invalid choice: 'chess'"),
        (["train", "--config", "tictactoe", "--run-dir", run, "--minutes", "-1"], "allowed >= 0"),
        (["train", "--config", "tictactoe", "--run-dir", run, "--steps", "x"], "expected an integer"),
        (["train", "--config", "tictactoe", "--run-dir", "/proc/azserve/run"], "/proc/azserve"),
        (["train", "--config", "tictactoe", "--run-dir", str(held)], "already holds a run"),
        (["train", "--config", "nope", "--run-dir", run], "shipped configs: connect4, tictactoe"),
        (["status", "tcp://127.0.0.1:9", "--timeout", "0.3"], "no reply"),
        (["status", "not-an-endpoint"], "not-an-endpoint"),
    ]  # fmt: skip


def test_bad_invocations_are_one_line_without_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """In-process through ``main``, the console script's entry point: nothing escapes it."""
    for argv, phrase in bad_invocations(tmp_path):
        try:
            code = main(argv)
        except SystemExit as exc:  # argparse's own exit, after its one line
            code = exc.code  # type: ignore[assignment]
        captured = capsys.readouterr()
        lines = captured.err.strip().splitlines()
        assert code not in (0, None), (argv, captured)
        assert len(lines) == 1 and phrase in lines[0], (argv, captured.err)


def test_bad_invocations_of_the_real_command(tmp_path: Path) -> None:
    """A few of them as real processes: one line, no traceback, non-zero exit."""
    every = bad_invocations(tmp_path)
    cases = [every[i] for i in (0, 3, 12)]
    # Side by side: each pays the interpreter's start-up, not the sum of them.
    procs = [
        subprocess.Popen(
            azserve_cmd(*argv),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
            cwd=tmp_path,
        )
        for argv, _ in cases
    ]
    for (argv, phrase), p in zip(cases, procs):
        out, err = p.communicate(timeout=100)
        lines = err.strip().splitlines()
        assert p.returncode != 0, (argv, out, err)
        assert "Traceback" not in err, (argv, err)
        assert len(lines) == 1 and phrase in lines[0], (argv, err)


def test_analyze_into_a_closed_pipe_is_quiet(tmp_path: Path) -> None:
    ckpt = checkpoint(tmp_path, "tictactoe", 10, 1)
    lines = "".join(json.dumps({"id": i, "moves": [i % 9]}) + "\n" for i in range(2000))
    cmd = " ".join(azserve_cmd("analyze", "--checkpoint", str(ckpt), "--sims", "0"))
    p = subprocess.run(
        f"{cmd} 2>{tmp_path / 'err'} | head -1",
        shell=True,
        input=lines,
        capture_output=True,
        text=True,
        timeout=100,
    )
    assert json.loads(p.stdout)["id"] == 0
    assert (tmp_path / "err").read_text() == ""


def test_serve_a_run_dir_alone_and_status(tmp_path: Path) -> None:
    checkpoint(tmp_path / "run" / "checkpoints", "tictactoe", 40, 5)
    newest = checkpoint(tmp_path / "run" / "checkpoints", "tictactoe", 80, 9)
    endpoint = f"ipc://{tmp_path}/s.ipc"
    server = Proc(
        azserve_cmd(
            "serve", "--checkpoint", str(tmp_path / "run"), "--set", f"server.bind={endpoint}"
        ),
        tmp_path,
        "serve",
    )
    try:
        wait_serving(server, endpoint)
        status = subprocess.run(
            azserve_cmd("status", endpoint), capture_output=True, text=True, timeout=60
        )
        assert status.returncode == 0, status.stderr
        st = json.loads(status.stdout)
        assert st["max_batch_size"] == 256 and st["max_queued_rows"] == 1 << 16
        assert st["obs_shape"] == [2, 3, 3] and st["obs_dtype"] == "uint8"
        assert st["num_actions"] == 9
        with SyncClient(endpoint, timeout_s=10) as c:
            assert c.ping().latest == 9  # the newest checkpoint, at the version it was saved at
            # Planes are 0/1 and floats finite: anything else is refused, and counted.
            bad = np.full((1, 2, 3, 3), 2, np.uint8)
            with pytest.raises(RemoteError, match="BadValue"):
                c.evaluate(bad)
            with pytest.raises(RemoteError, match="BadValue"):
                c.evaluate(np.full((1, 2, 3, 3), np.nan, np.float32))
            _, _, version = c.evaluate(np.zeros((1, 2, 3, 3), np.uint8))
            assert version == 9 and c.status()["errors"] == 2
        assert f"serving {newest} as version 9" in server.stderr
    finally:
        server.kill()


def test_help_shows_defaults_and_an_example_and_version(capsys: pytest.CaptureFixture[str]) -> None:
    parser = build_parser()
    with pytest.raises(SystemExit):
        parser.parse_args(["--help"])
    top = capsys.readouterr().out
    assert "``" not in top and "COMMAND" in top
    for name, example in EXAMPLES.items():
        with pytest.raises(SystemExit):
            parser.parse_args([name, "--help"])
        text = capsys.readouterr().out
        assert "``" not in text, name
        assert f"example:\n  {example}" in text, name
    with pytest.raises(SystemExit):
        parser.parse_args(["train", "--help"])
    assert "(default: INFO)" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exit_info:
        parser.parse_args(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.strip() == f"azserve {package_version()}"
    assert package_version()[0].isdigit()


def test_shipped_config_names_resolve_outside_the_checkout(tmp_path: Path) -> None:
    p = subprocess.run(
        [sys.executable, "-c", "from azserve.app.presets import resolve_config as r; "
         "print(r('connect4')); print(r('configs/tictactoe.toml'))"],
        capture_output=True, text=True, cwd=tmp_path, timeout=60,
    )  # fmt: skip
    assert p.returncode == 0, p.stderr
    c4, ttt = p.stdout.split()
    assert Path(c4).read_text() == (REPO / "configs" / "connect4.toml").read_text()
    assert Path(ttt).read_text() == (REPO / "configs" / "tictactoe.toml").read_text()
