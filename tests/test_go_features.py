"""Go's input features (``go9-features``): the liberty, ko and last-move planes at a known
position, in the pure-Python reference and the compiled core alike (the move-by-move check over
random games is tests/test_core_rules.py's, with the other games)."""

from __future__ import annotations

import numpy as np
import pytest

from actors.games import make_game
from actors.games.compiled import core, core_rules
from actors.games.go.features import PLANES, GoFeatures


def rc(row: int, col: int) -> int:
    return row * 9 + col


# White a stone at B2 with black around it (A2, B1, B3); white walls C2's other sides (C1, C3,
# D2); black plays elsewhere (J9), white fills B2, black takes it from C2: a ko at B2.
MOVES = [rc(2, 1), rc(2, 2), rc(0, 1), rc(0, 2), rc(1, 0), rc(1, 3), rc(8, 8), rc(1, 1), rc(1, 2)]


def plane_at(obs: np.ndarray, plane: int, row: int, col: int) -> int:
    """The plane's value at board (row, col): the planes show the top row first."""
    return int(obs[plane, 8 - row, col])


def test_the_ko_point_liberties_and_last_moves_at_a_known_position() -> None:
    game = make_game("go9-features")
    assert isinstance(game, GoFeatures) and game.obs_shape == (PLANES, 9, 9) == (11, 9, 9)
    s = game.from_moves(MOVES)
    assert s.ko == rc(1, 1) and s.last == (rc(1, 2), rc(1, 1), rc(8, 8))
    assert rc(1, 1) not in game.legal_actions(s), "retaking at once repeats the board"
    obs = game.encode(s)
    np.testing.assert_array_equal(obs[:4], make_game("go9").encode(s)[:4])  # go9's planes
    ko = np.zeros((9, 9), np.uint8)
    ko[8 - 1, 1] = 1
    np.testing.assert_array_equal(obs[7], ko)
    for k, (row, col) in enumerate([(1, 2), (1, 1), (8, 8)]):
        assert obs[8 + k].sum() == 1 and plane_at(obs, 8 + k, row, col) == 1
    # Liberties: one for the taking stone C2 and white's C1; two for B1, white's C3, and J9
    # in its corner; three or more for A2 and B3 (B2 is empty again) and white's D2.
    want = {4: [(1, 2), (0, 2)], 5: [(0, 1), (2, 2), (8, 8)], 6: [(1, 0), (2, 1), (1, 3)]}
    for plane, points in want.items():
        assert obs[plane].sum() == len(points), plane
        assert all(plane_at(obs, plane, row, col) == 1 for row, col in points), plane
    stones = obs[0] | obs[1]
    np.testing.assert_array_equal(obs[4] + obs[5] + obs[6], stones)
    # Any other move ends the ko; a pass shows in no last-move plane.
    after = game.apply(s, game.pass_action)
    assert after.ko == -1 and after.last[0] == game.pass_action
    assert game.encode(after)[8].sum() == 0 and game.encode(after)[7].sum() == 0


@pytest.mark.skipif(core is None, reason="actors._mcts_core was not built")
def test_the_compiled_core_encodes_the_known_position_as_the_reference() -> None:
    game = make_game("go9-features")
    rules = core_rules(game)
    s = game.initial_state()
    for a in MOVES:
        blob, history = game.core_state(s)
        nxt, _, _ = rules.play(blob, history, a)
        s = game.apply(s, a)
        assert nxt == game.core_state(s)[0]
    blob, history = game.core_state(s)
    assert rules.encode(blob) == game.encode(s).tobytes()
    assert rc(1, 1) not in rules.legal(blob, history)
    with pytest.raises(ValueError, match="bad ko point or last moves"):
        rules.encode(blob[:-8] + (81).to_bytes(2, "little") + blob[-6:])  # ko on a stone
    # Without features, go9's blob and planes are what they were.
    go9 = make_game("go9")
    assert len(core_rules(go9).encode(go9.core_state(go9.initial_state())[0])) == 4 * 81
