"""A new user's mistakes meet one line each: bad invocations of the real ``azserve`` exit
non-zero with one line on stderr naming the problem, never a traceback; ``serve --checkpoint``
alone serves the checkpoint at its saved version; ``azserve status`` prints the contract;
``--help`` shows defaults and an example, ``--version`` the package version."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from azserve import SyncClient
from azserve.cli.main import EXAMPLES, build_parser, main, package_version
from azserve.config.schema import load_config, to_dict
from azserve.errors import RemoteError
from learner.checkpoint import save_checkpoint
from learner.trainer import Trainer
from tests.test_cli import REPO, TTT, Proc, azserve_cmd, wait_serving

pytestmark = pytest.mark.slow


def checkpoint(directory: Path, game: str, step: int, version: int) -> Path:
    """A learner checkpoint of a small net of ``game``, carrying its config."""
    cfg = load_config(
        REPO / "configs" / f"{game}.toml",
        ["net.blocks=1", "net.channels=8", "backend.torch.compile=none"],
    )
    trainer = Trainer(replace(cfg.net, seed=3), replace(cfg.trainer, device="cpu"))
    return save_checkpoint(directory, step, version, trainer.state_dict(), to_dict(cfg))


def bad_invocations(tmp_path: Path) -> list[tuple[list[str], str]]:
    """(argv, a phrase its one line of stderr must contain), with the files they name; every
    subcommand has at least one, its first a cheap one (the real-process test runs it)."""
    ttt = checkpoint(tmp_path / "ttt", "tictactoe", 40, 5)
    c4 = checkpoint(tmp_path / "c4", "connect4", 40, 5)
    garbage = tmp_path / "weights.safetensors"
    garbage.write_bytes(b"\xff" * 64)
    (tmp_path / "empty").mkdir()
    held = tmp_path / "held"
    held.mkdir()
    (held / "config.toml").write_text("")
    a_file = tmp_path / "a-file"
    a_file.write_text("not a directory\n")
    typo = tmp_path / "typo.toml"
    typo.write_text('game = "tictactoe"\n[sever]\nbind = "tcp://127.0.0.1:5555"\n')
    run = str(tmp_path / "run")
    ttt_run = ["--config", "tictactoe", "--run-dir", run]
    cluster = str(REPO / "configs" / "cluster" / "ssh.toml")
    return [
        (["bogus"], "invalid choice: 'bogus'"),
        (["trian"], "invalid choice: 'trian'; did you mean 'train'?"),
        (["serve", "--config", str(TTT), "--log-level", "foo"], "choose from DEBUG"),
        (["serve"], "pass --checkpoint"),
        (["serve", "--checkpoint", str(garbage)], f"{garbage}: not a safetensors"),
        (["serve", "--checkpoint", str(c4), "--config", "tictactoe"], "holds a connect4 (obs [2, 6, 7]"),
        (["serve", "--checkpoint", str(tmp_path / "empty")], "no checkpoint"),
        (["serve", "--checkpoint", str(ttt), "--weights-version", "-1"], "allowed 0 to"),
        (["serve", "--config", str(TTT), "--set", "server.max_batch_sise=8"], "did you mean 'max_batch_size'?"),
        (["serve", "--config", str(typo)], "sever: unknown key; did you mean 'server'?"),
        (["serve", "--config", str(tmp_path / "empty")], "is a directory, not a TOML file"),
        (["status", "tcp://127.0.0.1:1", "--timeout", "0.3"], "is a server running there"),
        (["status", "tcp://127.0.0.1:9", "--timeout", "0.3"], "no reply"),
        (["status", "not-an-endpoint"], "not-an-endpoint"),
        (["keys"], "required: --dir"),
        (["keys", "--dir", str(tmp_path / "k"), "--name", "a", "b"], "not both"),
        (["actors", "--config", "tictactoe", "--set", "actors.gmaes=4"], "did you mean 'games'?"),
        (["learn", "--config", "tictactoe", "--run-dir", str(a_file)], "is a file, not a directory"),
        (["learn", "--config", "tictactoe", "--run-dir", run, "--rank", "1"], "--rank needs --rendezvous"),
        (["learn", "--config", "tictactoe", "--run-dir", run, "--rank", "0"], "allowed 1 to 255"),
        (["train", *ttt_run, "--set", "learner.processes=3"], "must divide by it"),
        (["train", *ttt_run, "--minutes", "-1"], "allowed >= 0"),
        (["train", *ttt_run, "--steps", "x"], "expected an integer"),
        (["train", "--config", "tictactoe", "--run-dir", "/proc/azserve/run"], "/proc/azserve"),
        (["train", "--config", "tictactoe", "--run-dir", str(held)], "already holds a run"),
        (["train", "--config", "tictactoe", "--run-dir", str(a_file)], "is a file, not a directory"),
        (["train", "--config", "tictactoe", "--run-dir", str(a_file / "x")], f"is under {a_file}, a file"),
        (["train", "--config", "nope", "--run-dir", run], "shipped configs: chess, chess-all, chess-features, chess-movesleft, chess-solver, chess-wdl, connect4, "),
        (["train", "--config", "conect4", "--run-dir", run], "did you mean 'connect4'?"),
        (["compare", *ttt_run, "--minutes", "-2"], "allowed > 0"),
        (["compare", *ttt_run, "--minutes", "0"], "allowed > 0"),
        (["compare", *ttt_run, "--minutes", "1", "--log-level", "bogus"], "choose from DEBUG"),
        (["compare", *ttt_run, "--minutes", "1", "--keep-every", "0"], "allowed >= 1"),
        (["compare", *ttt_run, "--config", "connect4", "--minutes", "1"], "plays connect4"),
        (["compare", *ttt_run, "--label", "a", "--label", "b", "--minutes", "1"], "--label given 2 times"),
        (["tune", *ttt_run, "--search", "mcts.num_simulations=8,x", "--hours", "1"], "--search mcts.num_simulations=x: mcts.num_simulations: expected an integer"),
        (["tune", *ttt_run, "--search", "mcts.num_simulations=", "--hours", "1"], "--search mcts.num_simulations=: no values"),
        (["tune", "--run-dir", run, "--resume"], "--resume: no tune in"),
        (["analyze", "--checkpoint", str(ttt), "--sims", "-5"], "allowed 0 to 1,048,576"),
        (["analyze", "--checkpoint", str(ttt), "--input", str(tmp_path / "missing")], "missing"),
        (["play", "--checkpoint", str(ttt), "--game", "xiangqi"], "invalid choice: 'xiangqi'"),
        (["eval", "--checkpoint", str(ttt), "--sims", "-1"], "allowed 0 to 1,048,576"),
        (["eval", "--checkpoint", str(ttt), "--positions", "x.tsv"], "positions are for connect4"),
        (["eval", "--checkpoint", str(c4), "--positions", str(tmp_path / "no.tsv")], "no.tsv"),
        (["eval", "--checkpoint", str(tmp_path / "empty")], "no checkpoint"),
        (["eval", "--checkpoint", str(ttt), "--games", "-3"], "allowed 0 to 100,000"),
        (["gtp", "--checkpoint", str(ttt)], "azserve gtp plays Go; this checkpoint plays tictactoe"),
        (["gtp", "--checkpoint", str(ttt), "--sims", "-2"], "allowed 0 to 1,048,576"),
        (["uci", "--checkpoint", str(ttt)], "azserve uci plays chess; this checkpoint plays tictactoe"),
        (["uci", "--checkpoint", str(ttt), "--sims", "-2"], "allowed 0 to 1,048,576"),
        (["usi", "--checkpoint", str(ttt)], "azserve usi plays shogi; this checkpoint plays tictactoe"),
        (["usi", "--checkpoint", str(ttt), "--sims", "-2"], "allowed 0 to 1,048,576"),
        (["match", "--checkpoint", str(ttt), "--opponent", "x", "--games", "0"], "allowed 1 to 100,000"),
        (["match", "--checkpoint", str(ttt), "--opponent", "openspiel-mcts:0", "--out", str(tmp_path / "m")], "SIMS must be at least 1"),
        (["match", "--checkpoint", str(ttt), "--opponent", "openspiel-mcts:x", "--out", str(tmp_path / "m")], "expected openspiel-mcts:SIMS"),
        (["ladder", str(tmp_path / "empty")], "no checkpoint"),
        (["ladder", str(tmp_path / "ttt"), str(tmp_path / "c4")], "the runs play different games"),
        (["ladder", str(tmp_path / "ttt"), "--anchor", "openspiel-mcts:0"], "SIMS must be at least 1"),
        (["ladder", str(tmp_path / "ttt"), "--anchor", "random", "--anchor", "random"], "an anchor is given twice"),
        (["ladder", str(tmp_path / "ttt"), "--games", "0"], "allowed 1 to 1,000,000"),
        (["web", str(tmp_path / "no-such-run")], "no such run directory"),
        (["web", str(a_file)], "a file, not a run directory"),
        (["bench"], "required: BENCH"),
        (["bench", "serve", "--config", "tictactoe", "--duration", "-1"], "allowed > 0"),
        (["bench", "serve", "--config", "tictactoe", "--processes", "0"], "allowed 1 to 256"),
        (["bench", "selfplay", "--config", "tictactoe", "--sweep", "sims=0"], "expected sims=N"),
        (["bench", "selfplay", "--config", "tictactoe", "--duration", "0"], "allowed > 0"),
        (["bench", "swap", "--config", "tictactoe", "--swaps", "0"], "allowed 1 to 10,000"),
        (["bench", "swap", "--config", "tictactoe", "--coroutines", "0"], "allowed 1 to 65,536"),
        (["bench", "soak", "--config", "tictactoe", "--games", "0"], "allowed 1 to 1,048,576"),
        (["bench", "soak", "--config", "tictactoe", "--minutes", "-1"], "allowed > 0"),
        (["bench", "soak", "--config", "tictactoe", "--minutes", "0.5", "--window-s", "100"], "fewer than two windows"),
        (["bench", "chaos", "--config", "tictactoe", "--interval", "60,20"], "expected LO,HI seconds with 0 < LO <= HI"),
        (["bench", "chaos", "--config", "tictactoe", "--minutes", "0"], "allowed > 0"),
        (["launch", *ttt_run, "--cluster", "/dev/null"], "cluster file /dev/null: not a regular file"),
        (["launch", *ttt_run, "--cluster", str(tmp_path / "no.toml")], "cluster file not found"),
        (["launch", *ttt_run, "--cluster", cluster, "--minutes", "-1"], "allowed >= 0"),
        (["launch", "--config", "tictactoe", "--cluster", cluster, "--run-dir", str(a_file), "--dry-run"], "is a file"),
    ]  # fmt: skip


def command_of(argv: list[str]) -> str:
    """The (sub)command an argv invokes: ``serve``, ``bench serve``, ..."""
    if argv[0] == "bench" and len(argv) > 1 and not argv[1].startswith("-"):
        return f"bench {argv[1]}"
    return argv[0]


def subcommands() -> list[str]:
    """Every subcommand the parser knows, ``bench serve`` and its siblings included."""
    from azserve.cli.main import subcommand

    parser = build_parser()
    top = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    out = []
    for name in top.choices:
        out.append(name)
        inner = subcommand(parser, name)
        assert inner is not None
        subs = [a for a in inner._actions if isinstance(a, argparse._SubParsersAction)]
        out += [f"{name} {n}" for n in (subs[0].choices if subs else [])]
    return out


def test_bad_invocations_are_one_line_without_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """In-process through ``main``, the console script's entry point: nothing escapes it; and
    every subcommand has its bad invocations here."""
    monkeypatch.delenv("AZSERVE_SET", raising=False)
    cases = bad_invocations(tmp_path)
    missing = set(subcommands()) - {command_of(argv) for argv, _ in cases}
    assert not missing, f"subcommands without a bad invocation: {sorted(missing)}"
    for argv, phrase in cases:
        try:
            code = main(argv)
        except SystemExit as exc:  # argparse's own exit, after its one line
            code = exc.code  # type: ignore[assignment]
        captured = capsys.readouterr()
        lines = captured.err.strip().splitlines()
        assert code not in (0, None), (argv, captured)
        assert len(lines) == 1 and phrase in lines[0], (argv, captured.err)
        assert "Traceback" not in captured.err and "StatusRequest" not in captured.err, argv


def test_bad_invocations_of_the_real_command(tmp_path: Path) -> None:
    """The first bad invocation of every subcommand as a real process: one line, no traceback,
    non-zero exit."""
    cases: dict[str, tuple[list[str], str]] = {}
    for argv, phrase in bad_invocations(tmp_path):
        cases.setdefault(command_of(argv), (argv, phrase))
    env = {k: v for k, v in os.environ.items() if k != "AZSERVE_SET"}
    # Side by side: each pays the interpreter's start-up, not the sum of them.
    procs = [
        subprocess.Popen(
            azserve_cmd(*argv),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
            cwd=tmp_path,
            env=env,
        )
        for argv, _ in cases.values()
    ]
    for (argv, phrase), p in zip(cases.values(), procs):
        out, err = p.communicate(timeout=200)
        lines = err.strip().splitlines()
        assert p.returncode != 0, (argv, out, err)
        assert "Traceback" not in err, (argv, err)
        assert len(lines) == 1 and phrase in lines[0], (argv, err)


def test_compare_stops_on_a_child_config_error_and_writes_no_summary(tmp_path: Path) -> None:
    """A config the parent accepts but the server refuses (float16 on a CPU): exit 2, the
    candidate's run has no summary.json, and a rerun trains it again instead of skipping it."""
    argv = ["compare", "--config", "tictactoe", "--run-dir", str(tmp_path / "ab")]
    argv += ["--minutes", "1", "--no-progress", "--set", "backend.dtype=float16"]
    argv += ["--set", "backend.device=cpu"]
    p = subprocess.run(
        azserve_cmd(*argv), capture_output=True, text=True, timeout=200, cwd=tmp_path
    )
    assert p.returncode == 2, (p.stdout, p.stderr)
    last = p.stderr.strip().splitlines()[-1]
    assert "config error: tictactoe: a process of its run refused the config" in last, p.stderr
    assert "not supported on CPU" in p.stderr  # the child's own line, shown by the supervisor
    assert "Traceback" not in p.stderr
    assert not (tmp_path / "ab" / "tictactoe" / "summary.json").exists()
    assert not (tmp_path / "ab" / "compare.json").exists()


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
    assert "Every subcommand takes --config" not in " ".join(top.split())
    assert set(subcommands()) <= set(EXAMPLES), set(subcommands()) - set(EXAMPLES)
    for name, example in EXAMPLES.items():
        with pytest.raises(SystemExit):
            parser.parse_args([*name.split(), "--help"])
        text = capsys.readouterr().out
        assert "``" not in text, name
        assert f"example:\n  {example}" in text, name
    with pytest.raises(SystemExit):
        parser.parse_args(["train", "--help"])
    assert "(default: INFO)" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        parser.parse_args(["launch", "--help"])
    assert "--hosts" not in capsys.readouterr().out  # a flag that no longer exists
    with pytest.raises(SystemExit) as exit_info:
        parser.parse_args(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.strip() == f"azserve {package_version()}"
    assert package_version()[0].isdigit()


def test_defaults_are_printed_once() -> None:
    """No option's help says its default by hand as well as through the formatter."""
    from azserve.cli.main import subcommand

    for name in ["", *subcommands()]:
        p = subcommand(build_parser(), name) if name else build_parser()
        assert p is not None
        formatter = p._get_formatter()
        for action in p._actions:
            if action.help:
                text = formatter._expand_help(action)
                assert text.count("default") <= 1, (name, action.option_strings, text)


def example_argv(example: str) -> list[str]:
    """An example's azserve arguments (after a pipe, when it has one)."""
    words = shlex.split(example.rsplit("|", 1)[-1])
    assert words[0] == "azserve", example
    return words[1:]


def test_every_example_parses_and_dry_runs_run(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Every example shown in a --help parses; a --dry-run example runs from the checkout."""
    monkeypatch.chdir(REPO)
    monkeypatch.delenv("AZSERVE_SET", raising=False)
    for name, example in EXAMPLES.items():
        args = build_parser().parse_args(example_argv(example))
        invoked = f"{args.command} {getattr(args, 'bench', None) or ''}".strip()
        assert f"{invoked} ".startswith(f"{name} "), (name, example)  # its own subcommand
        if "--dry-run" in example:
            assert main(example_argv(example)) == 0, example
            out = capsys.readouterr().out
            assert "learner" in out and "actor-" in out, out


@pytest.mark.parametrize(
    "cluster", sorted(p.name for p in (REPO / "configs" / "cluster").glob("*.toml"))
)
def test_dry_run_of_every_shipped_cluster_file_works_anywhere(
    cluster: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:  # fmt: skip
    """Outside any Slurm allocation and Ray cluster: the plan, every role in it, and nothing
    started or written."""
    for var in ("SLURM_JOB_NODELIST", "SLURM_NODELIST", "AZSERVE_SET"):
        monkeypatch.delenv(var, raising=False)
    run_dir = tmp_path / "run"
    argv = ["launch", "--config", "connect4", "--run-dir", str(run_dir), "--dry-run"]
    assert main([*argv, "--cluster", str(REPO / "configs" / "cluster" / cluster)]) == 0
    captured = capsys.readouterr()
    assert "server-" in captured.out and "learner" in captured.out and "actor-" in captured.out
    assert captured.err == ""
    assert not run_dir.exists()
    if cluster == "slurm.toml":
        assert "not inside a Slurm allocation: the plan on 3 placeholder nodes" in captured.out
        assert "--nodelist=NODE2" in captured.out


def test_shipped_config_names_resolve_outside_the_checkout(tmp_path: Path) -> None:
    p = subprocess.run(
        [sys.executable, "-c", "from azserve.config.presets import resolve_config as r; "
         "print(r('connect4')); print(r('configs/tictactoe.toml'))"],
        capture_output=True, text=True, cwd=tmp_path, timeout=60,
    )  # fmt: skip
    assert p.returncode == 0, p.stderr
    c4, ttt = p.stdout.split()
    assert Path(c4).read_text() == (REPO / "configs" / "connect4.toml").read_text()
    assert Path(ttt).read_text() == (REPO / "configs" / "tictactoe.toml").read_text()


@pytest.mark.parametrize("name", sorted(p.stem for p in (REPO / "configs").glob("*.toml")))
def test_every_config_ships_and_loads_by_name(name: str, tmp_path: Path) -> None:
    """Each file of configs/ ships in the package (a symlink in azserve/configs/, copied into
    a wheel) and ``--config NAME`` loads it, from any directory."""
    import importlib.util
    import tomllib

    from actors.games import BUILTIN_GAMES
    from azserve.config.presets import resolve_config, shipped_configs

    assert name in shipped_configs(), f"configs/{name}.toml: no link in azserve/configs/"
    path = resolve_config(name)
    assert Path(path).read_text() == (REPO / "configs" / f"{name}.toml").read_text()
    game = tomllib.loads(Path(path).read_text()).get("game", "tictactoe")
    module = BUILTIN_GAMES.get(game, "").partition(":")[0]
    if module and importlib.util.find_spec(module) is None:
        pytest.skip(f"{game}: {module} is not in this checkout yet")
    cfg = load_config(path)
    assert cfg.game == game
