"""Our Go (9x9, 13x13, 19x19) and Othello rules against OpenSpiel's (an implementation nobody here wrote), move
by move over random games: the same legal actions at every position, the same board after
every move (checked every few moves and at the end), the same terminal states and the same
outcomes.

Both of our implementations are checked: the compiled rules (actors/core/games/, through
``core_rules(game).legal`` / ``.play``, the rules the search plays by) over 2,500 games of Go
9x9 and Othello in ``make test`` and 10,000 in ``make test-long`` (fewer at 13x13 and 19x19,
whose games are long), and the pure-Python references over a smaller share (they are the same
rules: tests/test_core_rules.py checks them against each other byte for byte).
``AZSERVE_OPENSPIEL_GAMES`` sets the short form's count of 9x9 and Othello games (the others
scale with it).

The one difference on purpose (docs/games.md): OpenSpiel's Go forbids only the simple ko, lets
a move recreate an older board and then ends the game there as a draw; ours forbids every such
move (positional superko). So at a position where OpenSpiel lists more moves than we do, each
extra one must recreate an earlier board (checked), and is counted; the random games only
play moves legal under both rules.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass, field

import numpy as np
import pytest

from actors.games import make_game
from actors.games.compiled import core, core_rules

pyspiel = pytest.importorskip(
    "pyspiel", reason="open-spiel is a test dependency: pip install -e '.[test]'"
)

LONG_GAMES = {"go9": 10000, "othello": 10000, "go13": 300, "go19": 40}
"""The long form's games (``make test-long``); the short form plays a quarter of them (47 s of
Go 9x9 alone at 10,000 games in ``make test``, 2026-12-07)."""
SCALE = float(os.environ.get("AZSERVE_OPENSPIEL_GAMES", "2500")) / 10000
COMPILED_GAMES = {name: max(1, round(n * SCALE)) for name, n in LONG_GAMES.items()}
PYTHON_GAMES = {"go9": 150, "othello": 400, "go13": 12, "go19": 3}
BOARD_EVERY = 16
"""Compare the whole board every this many moves (and at the end)."""


@dataclass
class Tally:
    games: int = 0
    positions: int = 0
    superko_positions: int = 0
    superko_moves: int = 0
    outcomes: dict[float, int] = field(default_factory=dict)


def go_size(name: str) -> int:
    """The board size of a Go game's name (go13: 13), 0 for any other game."""
    return int(name[2:]) if name.startswith("go") else 0


def openspiel_game(name: str):  # type: ignore[no-untyped-def]
    if go_size(name):
        return pyspiel.load_game("go", {"board_size": go_size(name), "komi": 7.5})
    return pyspiel.load_game("othello")


def theirs_board(name: str, st) -> bytes:  # type: ignore[no-untyped-def]
    """OpenSpiel's board in our compiled layout's cells: Go 0/1/2 per cell (row 0 at the
    bottom, as both number it); Othello 0 empty, 1 black, 2 white (row 0 at the top)."""
    if n := go_size(name):
        t = np.asarray(st.observation_tensor(0), dtype=np.float32).reshape(4, n * n)
        return ((t[0] > 0) * 1 + (t[1] > 0) * 2).astype(np.uint8).tobytes()
    # Player 0's (black's) view: empty, black's discs, white's.
    t = np.asarray(st.observation_tensor(0), dtype=np.float32).reshape(3, 64)
    return ((t[1] > 0) * 1 + (t[2] > 0) * 2).astype(np.uint8).tobytes()


def ours_board(name: str, blob: bytes) -> bytes:
    if n := go_size(name):
        return blob[: n * n]
    black = int.from_bytes(blob[:8], "little")
    white = int.from_bytes(blob[8:16], "little")
    return bytes((black >> c & 1) + 2 * (white >> c & 1) for c in range(64))


def _check(name: str, games: int, compiled: bool, seed: int) -> Tally:
    """``games`` random games in lockstep with OpenSpiel; every assertion names the game and
    its moves so a failure replays."""
    game = make_game(name)
    spiel = openspiel_game(name)
    rules = core_rules(game) if compiled else None
    cells = go_size(name) ** 2
    rng = random.Random(seed)
    tally = Tally()
    for g in range(games):
        st = spiel.new_initial_state()
        s = game.initial_state()
        blob, _ = game.core_state(s)
        boards: list[bytes] = []  # the boards that stood before (Go's superko)
        seen = set()
        moves: list[int] = []
        while True:
            where = f"{name} game {g} (seed {seed}), moves {moves}"
            history = b"".join(boards)
            ours = rules.legal(blob, history) if rules else list(game.legal_actions(s))
            theirs = sorted(st.legal_actions())
            tally.positions += 1
            if ours != theirs:
                extra = set(theirs) - set(ours)
                assert cells and set(ours) <= set(theirs), (where, ours, theirs)
                for a in extra:  # each must recreate a board that stood before
                    after = st.child(a)
                    assert theirs_board(name, after) in seen, (where, a)
                tally.superko_positions += 1
                tally.superko_moves += len(extra)
            a = ours[rng.randrange(len(ours))]
            moves.append(a)
            if cells:
                seen.add(blob[:cells])
                boards.append(blob[:cells])
            st.apply_action(a)
            if rules:
                blob, terminal, value = rules.play(blob, history, a)
            else:
                s = game.apply(s, a)
                blob = game.core_state(s)[0]
                terminal = game.is_terminal(s)
                value = game.terminal_value(s) if terminal else 0.0
            assert terminal == st.is_terminal(), where
            if terminal or len(moves) % BOARD_EVERY == 0:
                assert ours_board(name, blob) == theirs_board(name, st), where
            if terminal:
                mover = blob[cells] if cells else blob[16]  # the side to move at the end
                black_value = value if mover == 0 else -value
                assert black_value == st.returns()[0], (where, value, st.returns())
                tally.outcomes[black_value] = tally.outcomes.get(black_value, 0) + 1
                break
        tally.games += 1
    return tally


@pytest.mark.skipif(core is None, reason="actors._mcts_core was not built")
@pytest.mark.parametrize("name", ["go9", "go13", "go19", "othello"])
def test_compiled_rules_agree_with_openspiel(name: str, record_property) -> None:  # type: ignore[no-untyped-def]
    tally = _check(name, COMPILED_GAMES[name], compiled=True, seed=2026)
    record_property("tally", str(tally))  # a str: pytest-xdist sends reports between processes
    print(f"\n{name}: {tally}")
    assert tally.games == COMPILED_GAMES[name]
    assert len(tally.outcomes) >= 2  # both sides win some random games
    if go_size(name):
        # Superko differences are rare in random play.
        assert tally.superko_positions < tally.positions / 100


@pytest.mark.long
@pytest.mark.timeout(1200)
@pytest.mark.skipif(core is None, reason="actors._mcts_core was not built")
@pytest.mark.parametrize("name", ["go9", "othello"])
def test_compiled_rules_agree_with_openspiel_over_ten_thousand_games(name: str) -> None:
    tally = _check(name, LONG_GAMES[name], compiled=True, seed=2027)
    print(f"\n{name}: {tally}")
    assert tally.games == LONG_GAMES[name] and len(tally.outcomes) >= 2
    if go_size(name):
        assert tally.superko_positions < tally.positions / 100


@pytest.mark.parametrize("name", ["go9", "go13", "go19", "othello"])
def test_python_rules_agree_with_openspiel(name: str) -> None:
    tally = _check(name, PYTHON_GAMES[name], compiled=False, seed=11)
    print(f"\n{name} (Python reference): {tally}")
    assert tally.games == PYTHON_GAMES[name] and len(tally.outcomes) >= 2
