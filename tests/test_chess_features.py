"""Chess's feature planes (``chess(features=1)``, computed in actors/core/games/chess.c) against
python-chess, a reference nobody here wrote: at every position of random games, the squares
each side attacks, the pieces hanging (attacked, not defended), check, the material by piece
type and the number of legal moves, plane for plane and cell for cell; then positions whose
values are known by hand (a hanging queen, a lone legal move out of check, mate, the most legal
moves known) and the encoding with the flag off left as it was.

``AZSERVE_CHESS_FEATURE_GAMES`` sets the random games (200 by default).
"""

from __future__ import annotations

import os
import random

import numpy as np
import pytest

from actors.games import make_game
from actors.games.chess.rules import FEATURE_PLANES, START_FEN, Chess, ChessState
from actors.games.compiled import core

chess_lib = pytest.importorskip("chess")  # python-chess, the test extra

pytestmark = pytest.mark.skipif(core is None, reason="actors._mcts_core was not built")

CHUNKS = 4  # 50 games each by default: a few seconds apiece
GAMES = int(os.environ.get("AZSERVE_CHESS_FEATURE_GAMES", "200"))
PIECE_TYPES = (chess_lib.PAWN, chess_lib.KNIGHT, chess_lib.BISHOP, chess_lib.ROOK, chess_lib.QUEEN)
NAMES = [
    "mover attacks",
    "opponent attacks",
    "mover hanging",
    "opponent hanging",
    "check",
    *(f"mover {chess_lib.piece_name(t)}s" for t in PIECE_TYPES),
    *(f"opponent {chess_lib.piece_name(t)}s" for t in PIECE_TYPES),
    "legal moves",
]


@pytest.fixture(scope="module")
def game() -> Chess:
    return Chess(max_plies=512, history=1, features=1)


def reference(board: chess_lib.Board) -> np.ndarray:
    """The 16 feature planes of ``board`` as python-chess sees it, ``uint8 [16, 8, 8]`` (the
    layout in chess.c's ``encode_features``), from the side to move's view."""
    us = board.turn
    out = np.zeros((FEATURE_PLANES, 64), np.uint8)

    def mark(plane: int, squares: chess_lib.SquareSet) -> None:
        for sq in squares:
            rank = chess_lib.square_rank(sq)
            row = 7 - rank if us == chess_lib.WHITE else rank
            out[plane, row * 8 + chess_lib.square_file(sq)] = 1

    def count(plane: int, n: int) -> None:
        out[plane, : min(n, 64)] = 1

    for plane, color in enumerate((us, not us)):
        attacked = chess_lib.SquareSet()
        for sq in chess_lib.SquareSet(board.occupied_co[color]):
            attacked |= board.attacks(sq)
        mark(plane, attacked)
        # Hanging, asked another way: by the attackers of each square, not the union above.
        hanging = chess_lib.SquareSet(
            sq
            for t in PIECE_TYPES
            for sq in board.pieces(t, color)
            if board.is_attacked_by(not color, sq) and not board.is_attacked_by(color, sq)
        )
        mark(2 + plane, hanging)
        for k, t in enumerate(PIECE_TYPES):
            count(5 + 5 * plane + k, 8 * len(board.pieces(t, color)))
    out[4] = board.is_check()
    count(15, board.legal_moves.count())
    return out.reshape(FEATURE_PLANES, 8, 8)


def check_position(game: Chess, s: ChessState, board: chess_lib.Board, where: str) -> None:
    planes = game.encode(s)[-FEATURE_PLANES:]
    want = reference(board)
    for k, name in enumerate(NAMES):
        assert np.array_equal(planes[k], want[k]), (
            f"{where}, {board.fen()}: plane {k} ({name})\ncore:\n{planes[k]}\npython-chess:\n"
            f"{want[k]}"
        )


@pytest.mark.parametrize("chunk", range(CHUNKS))
def test_random_games_agree_with_python_chess(game: Chess, chunk: int) -> None:
    """Every position of random games, the start and the last included; python-chess plays
    the same moves beside them (its FEN checked against ours now and then)."""
    rng = random.Random(1000 + chunk)
    positions = 0
    for n in range(-(-GAMES // CHUNKS)):
        s, board, moves = game.initial_state(), chess_lib.Board(), []
        while True:
            where = f"game {chunk}/{n} after {moves}"
            check_position(game, s, board, where)
            positions += 1
            if len(moves) % 40 == 0:
                assert board.fen(en_passant="xfen") == game.to_fen(s), where
            if s.over:
                break
            a = rng.choice(game.legal_actions(s))
            moves.append(game.uci(s, a))
            board.push_uci(moves[-1])
            s = game.apply(s, a)
    assert positions > 20 * GAMES // CHUNKS


@pytest.mark.parametrize(
    ("fen", "known"),
    [
        # The start: 22 squares attacked by each side, 20 moves, every piece at home.
        (START_FEN, {"mover attacks": 22, "opponent attacks": 22, "legal moves": 20}),
        # Black's queen on g5, attacked by the bishop on c1 and defended by nothing.
        (
            "rnb1kbnr/pppp1ppp/8/4p1q1/3P4/8/PPP1PPPP/RNBQKBNR w KQkq - 1 3",
            {"opponent hanging": [(3, 6)], "mover hanging": [], "mover queens": 8},
        ),
        # In check from a lone queen beside the king: taking it is the only move.
        (
            "4k3/8/8/8/8/8/4q3/4K3 w - - 0 1",
            {"check": 64, "legal moves": 1, "opponent hanging": [(6, 4)], "opponent queens": 8},
        ),
        # Black to move (the planes turned): white's knight on d5, attacked by the rook.
        (
            "3rk3/8/8/3N4/8/8/8/4K3 b - - 0 1",
            {"opponent hanging": [(4, 3)], "mover hanging": [], "check": 0, "mover rooks": 8},
        ),
        # Fool's mate: in check, no move.
        (
            "rnb1kbnr/pppp1ppp/8/4p3/6Pq/5P2/PPPPP2P/RNBQKBNR w KQkq - 1 3",
            {"check": 64, "legal moves": 0},
        ),
        # 218 legal moves, the most known: the count fills its plane.
        (
            "R6R/3Q4/1Q4Q1/4Q3/2Q4Q/Q4Q2/pp1Q4/kBNN1KB1 w - - 0 1",
            {"legal moves": 64, "mover queens": 64, "opponent pawns": 16},
        ),
    ],
    ids=["start", "hanging-queen", "lone-move", "black-to-move", "mate", "218-moves"],
)
def test_positions_with_known_values(game: Chess, fen: str, known: dict) -> None:
    """Hand-counted values (cells set, or the (row, column) cells of a square plane), and
    python-chess's planes for the rest."""
    s = game.from_fen(fen)
    planes = game.encode(s)[-FEATURE_PLANES:]
    for name, value in known.items():
        plane = planes[NAMES.index(name)]
        if isinstance(value, list):
            assert sorted(zip(*np.nonzero(plane), strict=True)) == value, name
        else:
            assert plane.sum() == value, name
    check_position(game, s, chess_lib.Board(fen), fen)


def test_the_flag_adds_planes_and_changes_nothing_else() -> None:
    """Off (the default), the shape, the rules' parameters and the planes are those of
    before; on, the same planes come first and the state's bytes are the same."""
    plain, feat = make_game("chess(history=1)"), make_game("chess(history=1,features=1)")
    assert isinstance(plain, Chess) and isinstance(feat, Chess)
    assert plain.obs_shape == (35, 8, 8) and plain.core_params == (512.0, 1.0)
    assert feat.obs_shape == (35 + FEATURE_PLANES, 8, 8) and feat.core_params == (512, 1, 1)
    assert make_game("chess").obs_shape == (119, 8, 8)
    rng = random.Random(5)
    s = plain.initial_state()
    assert feat.initial_state() == s
    for _ in range(30):
        obs = feat.encode(s)
        assert np.array_equal(obs[:35], plain.encode(s)) and obs.max() == 1
        s = plain.apply(s, rng.choice(plain.legal_actions(s)))
    assert np.array_equal(feat.encode_batch([s])[0], feat.encode(s))
    with pytest.raises(ValueError, match="features must be 0 or 1"):
        Chess(features=2)


async def test_both_encodings_meet_on_one_ladder() -> None:
    """configs/chess.toml's game and chess-features.toml's are refereed as the plain game at
    their cap and history (not ``chess``, whose states keep 7 earlier positions), whose states
    the features net's search reads; Go's encodings keep the game of their rules."""
    from actors.search import MCTSConfig
    from actors.searches import make_search
    from azserve.arena.ladder.schedule import referee_spec

    plain, feat = "chess(max_plies=256,history=1)", "chess(max_plies=256,history=1,features=1)"
    assert referee_spec({feat: "b", plain: "a"}) == plain
    assert referee_spec({"go9": "a", "go9-features": "b"}) == "go9"
    referee, game = make_game(plain), make_game(feat)
    s = referee.initial_state()
    for m in ["e2e4", "e7e5", "d1h5"]:
        s = referee.apply(s, referee.parse_uci(s, m))

    async def evaluate(obs: np.ndarray) -> tuple[np.ndarray, float]:
        assert obs.shape == game.obs_shape
        return np.zeros(game.num_actions, np.float32), 0.0

    rng = np.random.default_rng(0)
    search = make_search(game, MCTSConfig(num_simulations=8, core="compiled"), rng)
    result = await search.search(s, evaluate, add_noise=False)
    assert result.visits.sum() > 0
