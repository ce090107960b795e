"""The compiled core's table of games (actors/_games.c) against the pure-Python references, move
by move over random games: the same legal actions, successor states (byte for byte), terminal
flags, values and encoded planes. tests/test_openspiel_rules.py checks the references (and,
through ``CoreRules`` here, the compiled rules) against OpenSpiel."""

from __future__ import annotations

import os

import numpy as np
import pytest

from actors.compiled_mcts import core, core_name
from actors.games import make_game

pytestmark = pytest.mark.skipif(core is None, reason="actors._mcts_core was not built")

GAMES = {"tictactoe": 300, "connect4": 300, "othello": 200, "go9": 40}
"""Random games per game (AZSERVE_RULES_SCALE multiplies them for a long run)."""


def _games(name: str) -> int:
    return GAMES[name] * int(os.environ.get("AZSERVE_RULES_SCALE", "1"))


@pytest.mark.parametrize("name", sorted(GAMES))
def test_the_core_plays_every_game_as_its_reference(name: str) -> None:
    game = make_game(name)
    cname = core_name(game)
    assert cname in core.GAMES
    rng = np.random.default_rng(7)
    positions = 0
    for g in range(_games(name)):
        s, moves = game.initial_state(), []
        while True:
            blob, history = game.core_state(s)
            where = f"{name} game {g}, moves {moves}:\n{game.render(s)}"
            assert core.game_encode(cname, blob) == game.encode(s).tobytes(), where
            legal = list(game.legal_actions(s))
            assert core.game_legal(cname, blob, history) == legal, where
            positions += 1
            a = int(rng.choice(legal))
            nxt, terminal, value = core.game_play(cname, blob, history, a)
            s = game.apply(s, a)
            moves.append(a)
            assert nxt == game.core_state(s)[0], where + f"\nafter {a}"
            assert terminal == game.is_terminal(s), where + f"\nafter {a}"
            if terminal:
                assert value == game.terminal_value(s), where + f"\nafter {a}"
                break
    assert positions > _games(name)


def test_the_core_refuses_bad_blobs_and_illegal_moves() -> None:
    go = make_game("go9")
    blob, history = go.core_state(go.initial_state())
    with pytest.raises(ValueError, match="go9: a state blob of 3 bytes, expected 85"):
        core.game_legal("go9", b"abc", b"")
    with pytest.raises(ValueError, match="not a Go 9x9 position"):
        core.game_legal("go9", b"\x07" + blob[1:], b"")
    with pytest.raises(ValueError, match="not whole boards"):
        core.game_legal("go9", blob, history + b"x")
    with pytest.raises(ValueError, match="unsupported game chess .*knows connect4, tictactoe"):
        core.game_legal("chess", blob, b"")
    s = go.apply(go.initial_state(), 40)
    with pytest.raises(ValueError, match="go9: action 40 is illegal"):
        core.game_play("go9", *go.core_state(s), 40)
    c4 = make_game("connect4")
    with pytest.raises(ValueError, match="connect4 keeps no history"):
        core.game_legal("connect4", c4.core_state(c4.initial_state())[0], b"\0" * 81)


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
            free = set(core.game_legal("go9", blob, b""))
            if free - legal:
                assert free - legal <= {a for a in range(n * n) if blob[a] == 0}
                assert set(core.game_legal("go9", blob, history)) == legal
                return
            s = go.apply(s, int(rng.choice(sorted(legal))))
    pytest.fail("no superko refusal in 400 random games")
