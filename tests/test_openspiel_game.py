"""``game = "openspiel:NAME"``: any two-player, perfect-information OpenSpiel game behind the
``Game`` contract, searched by the pure-Python MCTS and trained by ``azserve train``."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest

pyspiel = pytest.importorskip("pyspiel")

from actors.games import make_game  # noqa: E402
from actors.mcts import MCTS  # noqa: E402
from actors.search import MCTSConfig  # noqa: E402
from learner.checkpoint import latest_checkpoint  # noqa: E402
from tests.conftest import quick_train_argv  # noqa: E402


@pytest.mark.parametrize(
    "name", ["tic_tac_toe", "breakthrough(rows=5,columns=5)", "hex(board_size=4)"]
)
def test_random_games_follow_openspiel(name: str) -> None:
    game = make_game(f"openspiel:{name}")
    ref = pyspiel.load_game(name)
    assert game.num_actions == ref.num_distinct_actions()
    rng = np.random.default_rng(1)
    for _ in range(30):
        s, st = game.initial_state(), ref.new_initial_state()
        while not st.is_terminal():
            assert game.legal_actions(s) == st.legal_actions()
            assert game.to_play(s) == st.current_player()
            planes = game.encode(s)
            assert planes.dtype == np.uint8 and planes.shape == game.obs_shape
            assert np.array_equal(
                planes.ravel(), np.asarray(st.observation_tensor(), dtype=np.uint8)
            )
            a = int(rng.choice(st.legal_actions()))
            s2 = game.apply(s, a)
            st.apply_action(a)
            assert s2 != s and game.apply(s, a) == s2 and hash(game.apply(s, a)) == hash(s2)
            s = s2
        assert game.is_terminal(s) and game.legal_actions(s) == []
        r = st.returns()
        p = game.to_play(s)
        assert game.terminal_value(s) == pytest.approx((r[p] - r[1 - p]) / 2)
        with pytest.raises(ValueError, match="the game is over"):
            game.apply(s, 0)


def test_illegal_moves_and_unsuited_games_get_a_reason() -> None:
    game = make_game("openspiel:tic_tac_toe")
    s = game.apply(game.initial_state(), 4)
    with pytest.raises(ValueError, match="action 4 is not legal here"):
        game.apply(s, 4)
    with pytest.raises(ValueError, match="has chance nodes, hides information"):
        make_game("openspiel:kuhn_poker")
    with pytest.raises(ValueError, match="has chance nodes"):
        make_game("openspiel:backgammon")
    with pytest.raises(ValueError, match="is simultaneous-move"):
        make_game("openspiel:matrix_rps")
    with pytest.raises(ValueError, match="move twice in a row"):
        make_game("openspiel:checkers")  # multiple jumps: the same side moves again
    with pytest.raises(ValueError, match="openspiel:no_such_game"):
        make_game("openspiel:no_such_game")


def test_fractional_planes_are_scaled_into_uint8() -> None:
    chess = make_game("openspiel:chess")  # move clocks are fractions in [0, 1]
    s = chess.initial_state()
    s = chess.apply(s, chess.legal_actions(s)[0])
    planes = chess.encode(s)
    assert planes.shape == (20, 8, 8) and set(np.unique(planes)) <= set(range(256))
    assert 255 in planes  # a piece plane: 1.0 -> 255


async def test_the_python_search_finds_a_win() -> None:
    game = make_game("openspiel:tic_tac_toe")
    # X on 0 and 1, O on 3 and 4; X to move wins at 2.
    s = game.initial_state()
    for a in (0, 3, 1, 4):
        s = game.apply(s, a)

    async def evaluate(obs: np.ndarray) -> tuple[np.ndarray, float]:
        return np.zeros(game.num_actions, dtype=np.float32), 0.0

    mcts = MCTS(game, MCTSConfig(num_simulations=200), np.random.default_rng(0))
    result = await mcts.search(s, evaluate, add_noise=False)
    assert int(np.argmax(result.visits)) == 2


@pytest.mark.slow
def test_an_openspiel_game_trains(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    sets = ['game="openspiel:tic_tac_toe"', "replay.min_size=200", "actors.games=32"]
    argv = [*quick_train_argv("tictactoe", run_dir, *sets), "--steps", "30"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert latest_checkpoint(run_dir / "checkpoints") is not None, done.stdout[-3000:]
    assert 'game = "openspiel:tic_tac_toe"' in (run_dir / "config.toml").read_text()
