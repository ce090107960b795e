"""Game rules against OpenSpiel as an oracle; encoding, symmetries, parsing; the solver."""

from __future__ import annotations

import numpy as np
import pytest

from actors.games import ConnectFour, Game, TicTacToe, make_game
from actors.games.solver import TicTacToeSolver

GAMES = [TicTacToe(), ConnectFour()]
ORACLE_NAMES = {"tictactoe": "tic_tac_toe", "connect4": "connect_four"}


def board_string(game: Game, s) -> str:
    """Rows top first, 'x' first player, 'o' second, '.' empty, built from ``encode``."""
    obs = game.encode(s)
    first, second = (obs[0], obs[1]) if game.to_play(s) == 0 else (obs[1], obs[0])
    chars = np.where(first == 1, "x", np.where(second == 1, "o", "."))
    return "\n".join("".join(row) for row in chars)


# A Connect Four game that fills the board without four in a row (found by random play).
C4_DRAW = [5, 5, 5, 0, 5, 4, 4, 6, 6, 3, 5, 1, 3, 5, 2, 1, 2, 3, 0, 4, 1]
C4_DRAW += [4, 3, 0, 2, 2, 2, 1, 0, 0, 0, 2, 1, 6, 1, 3, 4, 4, 3, 6, 6, 6]


def check_game(game: Game, oracle, moves: list[int]) -> float:
    """Play ``moves`` (until the end) in both implementations, comparing every step."""
    s, ref = game.initial_state(), oracle.new_initial_state()
    for a in moves:
        assert not game.is_terminal(s) and not ref.is_terminal()
        assert game.to_play(s) == ref.current_player()
        assert board_string(game, s) == str(ref).strip()
        legal = game.legal_actions(s)
        assert legal == ref.legal_actions()
        assert np.array_equal(np.flatnonzero(game.legal_mask(s)), legal)
        s = game.apply(s, a)
        ref.apply_action(a)
    assert game.is_terminal(s) and ref.is_terminal()
    assert board_string(game, s) == str(ref).strip()
    assert game.legal_actions(s) == []
    assert game.terminal_value(s) == ref.returns()[game.to_play(s)]
    return game.terminal_value(s)


@pytest.mark.parametrize(
    ("game", "num_games"),
    [(TicTacToe(), 2000), (ConnectFour(), 1000)],
    ids=["tictactoe", "connect4"],
)
def test_rules_match_openspiel(game: Game, num_games: int) -> None:
    pyspiel = pytest.importorskip("pyspiel")
    oracle = pyspiel.load_game(ORACLE_NAMES[game.name])
    rng = np.random.default_rng(0)
    outcomes = set()
    for _ in range(num_games):
        ref = oracle.new_initial_state()
        moves = []
        # OpenSpiel plays a random game; ours replays it, compared at every step.
        while not ref.is_terminal():
            a = int(rng.choice(ref.legal_actions()))
            moves.append(a)
            ref.apply_action(a)
        outcomes.add(check_game(game, oracle, moves))
    assert -1.0 in outcomes
    if game.name == "tictactoe":
        assert 0.0 in outcomes


def test_connect4_full_board_draw() -> None:
    pyspiel = pytest.importorskip("pyspiel")
    game = ConnectFour()
    assert check_game(game, pyspiel.load_game("connect_four"), C4_DRAW) == 0.0


@pytest.mark.parametrize("game", GAMES, ids=lambda g: g.name)
def test_encode_is_from_side_to_move(game: Game) -> None:
    s0 = game.initial_state()
    obs0 = game.encode(s0)
    assert obs0.dtype == np.uint8 and obs0.shape == game.obs_shape and obs0.sum() == 0
    s1 = game.apply(s0, 0)
    obs1 = game.encode(s1)
    # The first player's stone is now the opponent's (plane 1), bottom left in Connect Four.
    assert obs1[0].sum() == 0 and obs1[1].sum() == 1
    assert obs1[1, game.obs_shape[1] - 1 if game.name == "connect4" else 0, 0] == 1
    s2 = game.apply(s1, 1)
    obs2 = game.encode(s2)
    assert np.array_equal(obs2[0], obs1[1])
    batch = game.encode_batch([s0, s1, s2])
    assert batch.dtype == np.uint8 and batch.shape == (3, *game.obs_shape)
    assert np.array_equal(batch[2], obs2)


def random_moves(game: Game, rng: np.random.Generator, max_len: int) -> list[int]:
    s, moves = game.initial_state(), []
    while not game.is_terminal(s) and len(moves) < max_len:
        a = int(rng.choice(game.legal_actions(s)))
        moves.append(a)
        s = game.apply(s, a)
    return moves


@pytest.mark.parametrize(
    ("game", "count"), [(TicTacToe(), 8), (ConnectFour(), 2)], ids=["tictactoe", "connect4"]
)
def test_symmetries_map_boards_and_policies_consistently(game: Game, count: int) -> None:
    a_count = game.num_actions
    # Each symmetry's action permutation, read off by transforming one-hot policies.
    eye = np.eye(a_count, dtype=np.float32)
    dummy = np.zeros((a_count, *game.obs_shape), dtype=np.uint8)
    perms = [p.argmax(axis=1) for _, p in game.symmetries(dummy, eye)]
    assert len(perms) == count
    assert np.array_equal(perms[0], np.arange(a_count))
    assert len({tuple(p) for p in perms}) == count
    rng = np.random.default_rng(1)
    for _ in range(50):
        moves = random_moves(game, rng, max_len=int(rng.integers(1, 12)))
        s = game.from_moves(moves)
        obs = game.encode_batch([s, game.initial_state()])
        policy = rng.random((2, a_count)).astype(np.float32)
        pairs = game.symmetries(obs, policy)
        assert np.array_equal(pairs[0][0], obs) and np.array_equal(pairs[0][1], policy)
        for perm, (sym_obs, sym_policy) in zip(perms, pairs, strict=True):
            assert sym_obs.dtype == np.uint8 and sym_obs.shape == obs.shape
            assert sym_policy.dtype == np.float32 and sym_policy.shape == policy.shape
            # Replaying the mapped moves gives the mapped board, and action a's probability
            # moves to the image of a.
            mapped = game.from_moves([int(perm[a]) for a in moves])
            assert np.array_equal(sym_obs[0], game.encode(mapped))
            assert np.array_equal(sym_policy[:, perm], policy)


def test_connect4_mirror_is_left_right() -> None:
    game = ConnectFour()
    obs = game.encode(game.from_moves([0, 1]))[None]
    policy = np.arange(7, dtype=np.float32)[None]
    (_, _), (m_obs, m_policy) = game.symmetries(obs, policy)
    assert m_obs[0, 0, 5, 6] == 1 and m_obs[0, 1, 5, 5] == 1
    assert m_policy.tolist() == [[6, 5, 4, 3, 2, 1, 0]]


@pytest.mark.parametrize("game", GAMES, ids=lambda g: g.name)
def test_parse_and_format_moves(game: Game) -> None:
    for a in range(game.num_actions):
        assert game.parse_move(game.format_move(a)) == a
    assert game.parse_move(" 3 ") == 3
    for bad in ["", "x", "1.5", "-1", str(game.num_actions)]:
        with pytest.raises(ValueError, match=game.name):
            game.parse_move(bad)
    with pytest.raises(ValueError):
        game.format_move(game.num_actions)


def test_illegal_moves_raise() -> None:
    ttt, c4 = TicTacToe(), ConnectFour()
    for game, s, a in [
        (ttt, ttt.from_moves([4]), 4),
        (ttt, ttt.initial_state(), 9),
        (ttt, ttt.initial_state(), -1),
        (c4, c4.from_moves([2] * 6), 2),
        (c4, c4.initial_state(), 7),
        (c4, c4.initial_state(), -1),
    ]:
        with pytest.raises(ValueError, match="illegal"):
            game.apply(s, a)
    over = ttt.from_moves([0, 3, 1, 4, 2])
    assert ttt.is_terminal(over) and ttt.terminal_value(over) == -1.0
    with pytest.raises(ValueError, match="ended"):
        ttt.apply(over, 8)
    with pytest.raises(ValueError, match="not terminal"):
        c4.terminal_value(c4.initial_state())


def test_from_moves_names_the_bad_move() -> None:
    ttt, c4 = TicTacToe(), ConnectFour()
    with pytest.raises(ValueError, match=r"#2 \(0\) is illegal"):
        ttt.from_moves([0, 1, 0])
    with pytest.raises(ValueError, match=r"#5 \(8\) comes after the game ended"):
        ttt.from_moves([0, 3, 1, 4, 2, 8])
    with pytest.raises(ValueError, match=r"#6"):
        c4.from_moves([0] * 7)


def test_wins_and_draws() -> None:
    ttt = TicTacToe()
    draw = ttt.from_moves([0, 1, 2, 4, 3, 5, 7, 6, 8])
    assert ttt.is_terminal(draw) and ttt.terminal_value(draw) == 0.0
    c4 = ConnectFour()
    # Four on the rising diagonal from the bottom left, completed by X's last move.
    diagonal = c4.from_moves([0, 1, 1, 2, 2, 3, 2, 3, 3, 6, 3])
    assert c4.is_terminal(diagonal) and c4.terminal_value(diagonal) == -1.0
    assert not c4.is_terminal(c4.from_moves([0, 1, 1, 2, 2, 3, 2, 3, 3, 6]))


def test_render_and_registry() -> None:
    ttt = TicTacToe()
    assert ttt.render(ttt.from_moves([0, 4])) == "X . .\n. O .\n. . ."
    c4 = ConnectFour()
    lines = c4.render(c4.from_moves([3, 3])).splitlines()
    assert lines[-2] == ". . . X . . ." and lines[-3] == ". . . O . . ." and len(lines) == 7
    assert isinstance(make_game("connect4"), ConnectFour)
    assert isinstance(make_game("tictactoe"), TicTacToe)
    with pytest.raises(
        ValueError,
        match="known games: chess, connect4, go13, go13-features, go19, go19-features, go9, go9-features, "
        "othello, shogi, tictactoe",
    ):
        make_game("xiangqi")
    with pytest.raises(ValueError, match="cannot import no_such_module"):
        make_game("no_such_module:Game")
    with pytest.raises(ValueError, match="has no Game subclass named Path"):
        make_game("pathlib:Path")


@pytest.fixture(scope="module")
def solver() -> TicTacToeSolver:
    return TicTacToeSolver()


def test_solver_counts_and_empty_board(solver: TicTacToeSolver) -> None:
    game = solver.game
    assert solver.value(game.initial_state()) == 0
    assert solver.optimal_actions(game.initial_state()) == set(range(9))
    assert len(solver.reachable_states()) == 5478
    states = solver.reachable_nonterminal_states()
    assert len(states) == 4520 and len(set(states)) == 4520
    assert not any(game.is_terminal(s) for s in states)


@pytest.mark.parametrize(
    ("moves", "value", "optimal"),
    [
        ([0], 0, {4}),  # a corner opening must be answered in the centre
        ([4], 0, {0, 2, 6, 8}),  # a centre opening must be answered in a corner
        ([1], 0, {0, 2, 4, 7}),  # an edge opening: adjacent corners, centre, opposite edge
        ([0, 1, 3, 4], 1, {6}),  # X completes the left column
        ([0, 4, 1], 0, {2}),  # O must block the top row
        ([0, 4, 8, 2], 1, {6}),  # X must block O's diagonal, which forks 3 and 7
    ],
)
def test_solver_hand_checked_positions(
    solver: TicTacToeSolver, moves: list[int], value: int, optimal: set[int]
) -> None:
    s = solver.game.from_moves(moves)
    assert solver.value(s) == value
    assert solver.optimal_actions(s) == optimal


def test_solver_lost_position(solver: TicTacToeSolver) -> None:
    # X holds a corner and the centre, O took an edge: X's threat at 8 plus a fork wins.
    s = solver.game.from_moves([0, 1, 4])
    assert solver.value(s) == -1
    assert set(solver.action_values(s).values()) == {-1}
    assert solver.optimal_actions(s) == set(solver.game.legal_actions(s))
    with pytest.raises(ValueError, match="not reachable"):
        solver.value(solver.game.from_moves([0, 1, 4])._replace(ply=0))


# -- results and records: the hooks the referee, match, ladder and ``azserve play`` call ----

RECORDED = ["tictactoe", "connect4", "othello", "go9", "chess(max_plies=80)"]


def random_game(game: Game, seed: int, plies: int = 10_000) -> list[int]:
    rng = np.random.default_rng(seed)
    s, moves = game.initial_state(), []
    while not game.is_terminal(s) and len(moves) < plies:
        a = int(rng.choice(game.legal_actions(s)))
        moves.append(a)
        s = game.apply(s, a)
    return moves


@pytest.mark.parametrize("spec", RECORDED)
def test_every_game_writes_its_own_record_and_reads_back_its_moves(spec: str) -> None:
    """``Game.record``: SGF for Go (read back by our reader), PGN for chess (read back by
    python-chess where installed), text otherwise (read back by ``parse_move``); a game going
    on is a record too."""
    game = make_game(spec)
    moves = random_game(game, 1)
    end = game.from_moves(moves)
    result = game.score_text(end)
    text = game.record(moves, ("Ann", "Bob"), result, "score", "a note", "2026-12-06", "test")
    assert "Ann" in text and "Bob" in text and "2026" in text
    if game.record_suffix == ".sgf":
        from actors.games.go.sgf import read

        rec = read(text)
        assert [p if p is not None else game.pass_action for _, p in rec.moves] == moves
        assert rec.info["RE"] == result and rec.info["PB"] == "Ann" and rec.info["C"] == "a note"
    elif game.record_suffix == ".pgn":
        chess = pytest.importorskip("chess.pgn")
        import io

        parsed = chess.read_game(io.StringIO(text))
        assert parsed is not None and not parsed.errors
        assert parsed.headers["White"] == "Ann" and parsed.headers["Result"] == result
        s, ucis = game.initial_state(), []
        for a in moves:
            ucis.append(game.uci(s, a))  # type: ignore[attr-defined]
            s = game.apply(s, a)
        assert [m.uci() for m in parsed.mainline_moves()] == ucis
    else:
        assert game.record_suffix == ".txt"
        assert f"# result: {result} (score)" in text
        assert [game.parse_move(w) for w in text.splitlines()[-1].split()] == moves
    going_on = game.record(moves[:3], ("Ann", "Bob"))
    assert going_on.strip() and result not in going_on.split("\n", 1)[0]


def test_each_game_scores_its_end_in_its_own_words() -> None:
    """``score_text``: Go's area with komi, Othello's discs, chess's PGN result, the winner by
    the side names otherwise; ``result_text`` for the games not scored at their end."""
    go = make_game("go9")
    assert go.score_text(go.from_moves([go.pass_action, go.pass_action])) == "W+7.5"
    assert go.score_text(go.from_moves([40, go.pass_action, go.pass_action])) == "B+73.5"
    assert [go.result_text(1, "resign"), go.result_text(0, "forfeit"), go.result_text(None)] == [
        "W+R", "B+F", "0"
    ]  # fmt: skip
    assert go.result_text(None, "disputed") == "Void"
    othello = make_game("othello")
    end = othello.from_moves(random_game(othello, 2))
    black, white = othello.discs(end)  # type: ignore[attr-defined]
    assert othello.score_text(end).endswith(f" {black}-{white}")
    assert othello.score_text(end).startswith(
        "draw" if black == white else "black wins" if black > white else "white wins"
    )
    ttt = TicTacToe()
    assert ttt.sides == ("first", "second")
    assert ttt.score_text(ttt.from_moves([0, 3, 1, 4, 2])) == "first wins"
    assert ttt.score_text(ttt.from_moves([0, 1, 2, 4, 3, 5, 7, 6, 8])) == "draw"
    assert ttt.result_text(1, "resign") == "second wins"
    assert ttt.result_text(None, "disputed") == "void"
    chess = make_game("chess")
    fools_mate = chess.from_moves(
        [chess.parse_move_at(s, m) for s, m in _chess_line(chess, "f3 e5 g4 Qh4#")]
    )
    assert chess.score_text(fools_mate) == "0-1" and chess.winner(fools_mate) == 1
    assert chess.result_text(None) == "1/2-1/2" and chess.result_text(None, "disputed") == "*"


def _chess_line(chess: Game, sans: str) -> list[tuple[object, str]]:
    """(position, SAN) of each move of a line of SAN from the start."""
    s, out = chess.initial_state(), []
    for san in sans.split():
        out.append((s, san))
        s = chess.apply(s, chess.parse_move_at(s, san))
    return out


def test_the_games_name_their_sides_protocols_and_how_a_move_is_typed() -> None:
    go, chess, c4 = make_game("go9"), make_game("chess"), make_game("connect4")
    assert (go.sides, go.protocols, go.record_suffix) == (("black", "white"), ("gtp",), ".sgf")
    assert make_game("go9-features").protocols == ("gtp",)
    assert (chess.sides, chess.protocols, chess.record_suffix) == (
        ("white", "black"), ("uci",), ".pgn"
    )  # fmt: skip
    assert make_game("othello").sides == ("black", "white")
    assert (c4.sides, c4.protocols, c4.record_suffix) == (("first", "second"), (), ".txt")
    helps = {name: make_game(name).move_help() for name in ("tictactoe", "connect4", "go9")}
    assert helps["connect4"] == "columns 0-6, left to right"
    assert "cells 0-8" in helps["tictactoe"] and "pass" in helps["go9"]
    assert "e2e4" in chess.move_help() and "Nf3" in chess.move_help()


def test_chess_reads_moves_as_san_uci_or_numbers() -> None:
    chess = make_game("chess")
    s = chess.initial_state()
    e4 = chess.parse_move_at(s, "e4")
    assert chess.parse_move_at(s, "e2e4") == chess.parse_move_at(s, str(e4)) == e4
    assert chess.format_move_at(s, e4) == "e4" and chess.format_move(e4) == str(e4)
    assert chess.format_move_at(s, chess.parse_move_at(s, "g1f3")) == "Nf3"
    for bad in ("e5", "Ke2", "e2e5", "xyz", ""):
        with pytest.raises(ValueError, match="chess"):
            chess.parse_move_at(s, bad)
    # castling (O-O or 0-0), captures with or without x, promotions with or without =
    s = chess.from_fen("r3k2r/1P6/8/3p4/4P3/8/8/R3K2R w KQkq - 0 1")  # type: ignore[attr-defined]
    assert chess.format_move_at(s, chess.parse_move_at(s, "0-0")) == "O-O"
    assert chess.parse_move_at(s, "O-O-O") == chess.parse_move_at(s, "e1c1")
    assert chess.parse_move_at(s, "exd5") == chess.parse_move_at(s, "ed5")
    assert chess.format_move_at(s, chess.parse_move_at(s, "bxa8Q")) == "bxa8=Q+"
    assert chess.parse_move_at(s, "b8=N") == chess.parse_move_at(s, "b7b8n")
