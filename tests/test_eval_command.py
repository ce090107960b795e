"""``azserve eval``: one checkpoint scored as training scores it at its end, as JSON: Connect
Four's mistake rates by benchmark set, tic-tac-toe's optimal-move share, a match against
random play for the other games. Tiny random-weights checkpoints and cut-down sets keep it
quick."""

from __future__ import annotations

import importlib.util
import json
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from actors.games import BUILTIN_GAMES
from actors.games.connect4_benchmark import SET_NAMES
from azserve.cli.main import main
from azserve.config.schema import load_config, to_dict
from learner.checkpoint import save_checkpoint
from learner.trainer import Trainer
from tests.test_cli import azserve_cmd

pytestmark = pytest.mark.usefixtures("torch_one_thread")

REPO = Path(__file__).resolve().parents[1]


def checkpoint(directory: Path, game: str) -> Path:
    """A learner checkpoint (step 40, version 5) of a one-block net of ``game``."""
    cfg = load_config(
        REPO / "configs" / f"{game}.toml",
        [
            "net.blocks=1",
            "net.channels=8",
            "net.global_pool_channels=4",
            "backend.torch.compile=none",
        ],
    )
    trainer = Trainer(replace(cfg.net, seed=3), replace(cfg.trainer, device="cpu"))
    return save_checkpoint(directory / "checkpoints", 40, 5, trainer.state_dict(), to_dict(cfg))


def run_eval(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[dict, str]:
    assert main(["eval", *argv]) == 0
    captured = capsys.readouterr()
    return json.loads(captured.out), captured.err


def test_connect4_mistake_rates_by_set_as_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    checkpoint(tmp_path / "run", "connect4")
    out = tmp_path / "scores.json"
    args = ["--checkpoint", str(tmp_path / "run"), "--sims", "2", "--limit", "40"]
    result, err = run_eval(capsys, *args, "--json", str(out))
    assert json.loads(out.read_text()) == result
    assert result["game"] == "connect4" and result["sims"] == 2
    assert result["step"] == 40 and result["version"] == 5
    c4 = result["connect4"]
    assert c4["positions"] == 40
    for label in ("policy", "mcts"):
        assert 0.0 <= c4[label]["overall"] <= 1.0
        assert set(c4[label]) - {"overall"} <= set(SET_NAMES.values())
    assert "vs_random" not in result  # a benchmark game plays no match unless asked
    assert "azserve eval: connect4, 2 sims, mistakes: raw policy" in err

    # Another positions file, in the same format: the first rows of the shipped one.
    rows = (REPO / "data" / "connect4" / "move_scores.tsv").read_text().splitlines()
    mine = tmp_path / "mine.tsv"
    mine.write_text("\n".join(rows[:11]) + "\n")
    result, _ = run_eval(capsys, "--checkpoint", str(tmp_path / "run"), "--sims", "0",
                         "--positions", str(mine))  # fmt: skip
    assert result["connect4"]["positions"] == 10 and "mcts" not in result["connect4"]
    assert result["positions_file"] == str(mine)


def test_tictactoe_optimality_and_a_match_against_random(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ckpt = checkpoint(tmp_path, "tictactoe")
    result, _ = run_eval(capsys, "--checkpoint", str(ckpt), "--sims", "0", "--games", "4")
    t = result["tictactoe"]
    assert t["positions"] == 4520 and 0.0 <= t["policy_optimal"] <= 1.0
    assert "mcts_optimal" not in t  # --sims 0: the raw policy only
    assert sum(result["vs_random"].values()) == 4 and result["match_games"] == 4


@pytest.mark.parametrize(("config", "game"), [("othello", "othello"), ("go9", "go9-features")])
def test_other_games_play_random(
    config: str, game: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    module = BUILTIN_GAMES[game].partition(":")[0]
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{game}: {module} is not in this checkout yet")
    checkpoint(tmp_path, config)
    result, err = run_eval(capsys, "--checkpoint", str(tmp_path), "--sims", "0", "--games", "2")
    assert result["game"] == game and sum(result["vs_random"].values()) == 2
    assert "connect4" not in result and "tictactoe" not in result
    assert "vs random" in err


@pytest.mark.slow
def test_the_real_command_prints_json(tmp_path: Path) -> None:
    checkpoint(tmp_path / "run", "connect4")
    argv = ["eval", "--checkpoint", str(tmp_path / "run"), "--sims", "0", "--limit", "20"]
    p = subprocess.run(azserve_cmd(*argv), capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["connect4"]["positions"] == 20
    assert p.stderr.startswith("azserve eval: connect4, 0 sims")


@pytest.mark.slow
def test_eval_reproduces_the_training_runs_own_final_scores(tmp_path: Path) -> None:
    """The scores a run's final evaluation wrote into eval.jsonl, and azserve eval of the same
    checkpoint afterwards: the same numbers (one evaluator, deterministic search)."""
    from tests.conftest import quick_train_argv

    run_dir = tmp_path / "run"
    argv = [*quick_train_argv("tictactoe", run_dir, "eval.sims=8"), "--steps", "30"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    final = [json.loads(line) for line in (run_dir / "eval.jsonl").read_text().splitlines()][-1]
    assert final["full"] is True
    out = tmp_path / "scores.json"
    p = subprocess.run(azserve_cmd("eval", "--checkpoint", str(run_dir), "--json", str(out)),
                       capture_output=True, text=True, timeout=300)  # fmt: skip
    assert p.returncode == 0, p.stderr[-2000:]
    scores = json.loads(out.read_text())
    assert (scores["step"], scores["version"], scores["sims"]) == (
        final["step"],
        final["version"],
        8,
    )
    assert scores["tictactoe"] == final["tictactoe"]


def test_evaluations_run_eager_unless_told_to_compile() -> None:
    """``eval.compile`` (default ``none``): an evaluation is too short to repay a compile;
    ``backend`` keeps the run's ``backend.torch.compile``; self-play's backend is untouched."""
    from azserve.arena.agent import eval_backend
    from azserve.config.schema import load_config

    cfg = load_config(None, ["backend.torch.compile=inductor"])
    assert eval_backend(cfg).torch.compile == "none"
    assert cfg.backend.torch.compile == "inductor"
    assert eval_backend(load_config(None, ["eval.compile=backend"])).torch.compile == "auto"
    jit = load_config(None, ["eval.compile=jit", "backend.threads=2"])
    assert eval_backend(jit).torch.compile == "jit" and eval_backend(jit).threads == 2
