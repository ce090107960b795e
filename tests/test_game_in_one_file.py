"""A game added the way docs/games.md says, in one file and nothing else: the doc's own Nim file
and config, written to a fresh directory, load by path, play by the contract, and train with
``azserve train`` (server, actors and learner all loading the file)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import numpy as np
import pytest

from actors.games import make_game
from azserve.config.schema import load_config
from learner.checkpoint import latest_checkpoint, load_checkpoint
from tests.conftest import quick_train_argv

REPO = Path(__file__).resolve().parents[1]


def doc_block(first_line: str) -> str:
    """The fenced block of docs/games.md whose first line is ``first_line``."""
    text = (REPO / "docs" / "games.md").read_text()
    for block in re.findall(r"```[a-z]*\n(.*?)```", text, flags=re.S):
        if block.startswith(first_line + "\n"):
            return block
    raise AssertionError(f"docs/games.md has no block starting {first_line!r}")


@pytest.fixture
def nim_dir(tmp_path: Path) -> Path:
    (tmp_path / "nim.py").write_text(doc_block("# nim.py"))
    (tmp_path / "nim.toml").write_text(doc_block("# nim.toml"))
    return tmp_path


def test_the_file_loads_by_path_and_plays_by_the_contract(
    nim_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(nim_dir)
    game = make_game("nim.py:Nim")
    assert make_game(f"{nim_dir / 'nim.py'}:Nim").name == "nim"
    rng = np.random.default_rng(0)
    for _ in range(50):
        s, plies = game.initial_state(), 0
        while not game.is_terminal(s):
            assert game.encode(s).shape == game.obs_shape
            s = game.apply(s, int(rng.choice(game.legal_actions(s))))
            plies += 1
        assert game.terminal_value(s) == -1.0 and game.to_play(s) == plies % 2
    cfg = load_config("nim.toml")  # the net's shape comes from the game
    assert (cfg.net.obs_shape, cfg.net.num_actions) == ((1, 1, 12), 3)
    with pytest.raises(ValueError, match="has no Game subclass named Nope"):
        make_game("nim.py:Nope")
    with pytest.raises(ValueError, match="no such file"):
        make_game("missing.py:Nim")


@pytest.mark.slow
def test_the_one_file_game_trains(nim_dir: Path) -> None:
    run_dir = nim_dir / "run"
    argv = [*quick_train_argv("nim.toml", run_dir), "--steps", "40"]
    done = subprocess.run(argv, cwd=nim_dir, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    ckpt = latest_checkpoint(run_dir / "checkpoints")
    assert ckpt is not None, done.stdout[-3000:]
    meta = load_checkpoint(ckpt).meta
    assert meta.step >= 40 and meta.version >= 4
    assert meta.config["game"] == "nim.py:Nim"
