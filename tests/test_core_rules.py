"""The compiled core's rules of games (actors/core/games/): refusals of bad input, Go sized at
run time, superko from the history; and ``play_in_lockstep``, the move-by-move check of a
game's compiled rules against its pure-Python reference over random games (the same legal
actions, successor states byte for byte, terminal flags, values and encoded planes), which
tests/test_game_registry.py runs for every file of actors/core/games/.
tests/test_openspiel_rules.py checks the references and the compiled rules against OpenSpiel."""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pytest

from actors.games import Game, make_game
from actors.games.compiled import core, core_rules

pytestmark = pytest.mark.skipif(core is None, reason="actors._mcts_core was not built")

GAMES = {
    "tictactoe": 300,
    "connect4": 300,
    "othello": 200,
    "go9": 40,
    "go9-features": 40,
    "go13": 8,
    "go19": 3,
    "go13-features": 4,
    "go19-features": 2,
    "chess": 10,  # its reference is the compiled rules (tests/test_chess_rules.py: oracles)
    "shogi": 4,  # its reference is the compiled rules (tests/test_shogi_rules.py: oracles)
}
"""Random games per game in tests/test_game_registry.py's lockstep (AZSERVE_RULES_SCALE
multiplies them for a long run); a game not listed plays ``DEFAULT_GAMES``."""

DEFAULT_GAMES = 20


def lockstep_games(name: str) -> int:
    """How many random games ``play_in_lockstep`` plays of the built-in game ``name``."""
    return GAMES.get(name, DEFAULT_GAMES) * int(os.environ.get("AZSERVE_RULES_SCALE", "1"))


def play_in_lockstep(game: Game, rules: Any, games: int, seed: int = 7) -> int:
    """``games`` random games of ``game`` (the Python reference) and its compiled ``rules``
    (a ``Rules`` of the core) at once, asserting at every position the same planes, legal
    actions, successor state (byte for byte), terminal flag and value. Returns the positions
    checked."""
    name = game.name
    rng = np.random.default_rng(seed)
    positions = 0
    for g in range(games):
        s, moves = game.initial_state(), []
        while True:
            blob, history = game.core_state(s)
            where = f"{name} game {g}, moves {moves}:\n{game.render(s)}"
            assert rules.encode(blob) == game.encode(s).tobytes(), where
            legal = list(game.legal_actions(s))
            assert rules.legal(blob, history) == legal, where
            positions += 1
            a = int(rng.choice(legal))
            nxt, terminal, value = rules.play(blob, history, a)
            s = game.apply(s, a)
            moves.append(a)
            assert nxt == game.core_state(s)[0], where + f"\nafter {a}"
            assert terminal == game.is_terminal(s), where + f"\nafter {a}"
            if terminal:
                assert value == game.terminal_value(s), where + f"\nafter {a}"
                break
    return positions


def test_the_core_refuses_bad_blobs_and_illegal_moves() -> None:
    go = make_game("go9")
    rules = core_rules(go)
    blob, history = go.core_state(go.initial_state())
    with pytest.raises(ValueError, match="go9: a state blob of 3 bytes, expected 85"):
        rules.legal(b"abc", b"")
    with pytest.raises(ValueError, match="not a Go position"):
        rules.legal(b"\x07" + blob[1:], b"")
    with pytest.raises(ValueError, match="not whole boards"):
        rules.legal(blob, history + b"x")
    with pytest.raises(ValueError, match="unsupported game xiangqi .*knows chess, connect4, go"):
        core.Rules("xiangqi")
    with pytest.raises(ValueError, match="board size must be a whole number in 2..25"):
        core.Rules("go", 26, 7.5)
    with pytest.raises(TypeError, match="at most 3 parameters"):
        core.Rules("go", 9, 7.5, 1, 0)
    with pytest.raises(ValueError, match="features must be 0 or 1"):
        core.Rules("go", 9, 7.5, 2)
    s = go.apply(go.initial_state(), 40)
    with pytest.raises(ValueError, match="go9: action 40 is illegal"):
        rules.play(*go.core_state(s), 40)
    c4 = make_game("connect4")
    with pytest.raises(ValueError, match="connect4 keeps no history"):
        core_rules(c4).legal(c4.core_state(c4.initial_state())[0], b"\0" * 81)


@pytest.mark.parametrize("size", [2, 5, 9, 13, 19, 25])
def test_go_rules_are_sized_at_run_time(size: int) -> None:
    """Go's compiled rules take the board's size and komi from the game: their sizes, and a
    komi that decides an empty board's score."""
    from actors.games.go.rules import Go

    for komi in (7.5, -0.5):
        game = Go(size, komi)
        rules = core_rules(game)
        assert (rules.label, rules.game) == (f"go{size}", "go")
        assert rules.num_actions == game.num_actions == size * size + 1
        assert rules.obs_size == 4 * size * size and rules.max_plies == 2 * size * size
        s = game.apply(game.apply(game.initial_state(), size * size), size * size)
        blob, history = game.core_state(game.apply(game.initial_state(), size * size))
        _, terminal, value = rules.play(blob, history, size * size)
        # Two passes on an empty board: komi decides, for the side to move (black) there.
        assert terminal and value == game.terminal_value(s) == (-1.0 if komi > 0 else 1.0)


def test_superko_comes_from_the_history() -> None:
    """The compiled rules refuse a move that recreates an earlier board by the history they are
    given: the same position with an empty history allows it."""
    go = make_game("go9")
    n = go.size  # type: ignore[attr-defined]
    # Random games until the reference refuses a move by superko alone; an empty history then
    # allows it, the game's history refuses it again.
    rng = np.random.default_rng(3)
    for _ in range(400):
        s = go.initial_state()
        while not go.is_terminal(s):
            blob, history = go.core_state(s)
            legal = set(go.legal_actions(s))
            free = set(core_rules(go).legal(blob, b""))
            if free - legal:
                assert free - legal <= {a for a in range(n * n) if blob[a] == 0}
                assert set(core_rules(go).legal(blob, history)) == legal
                return
            s = go.apply(s, int(rng.choice(sorted(legal))))
    pytest.fail("no superko refusal in 400 random games")
