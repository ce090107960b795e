"""Chess's compiled rules (actors/core/games/chess.c) against oracles nobody here wrote: the
published perft counts (the Chess Programming Wiki's perft page) and OpenSpiel's chess, move by
move over random games (the same legal moves through the action map, the same FEN after every
move, the same terminal states and results); then the draw rules one by one, FEN in and out,
and the planes.

``AZSERVE_CHESS_GAMES`` sets the random games against OpenSpiel (1,000 by default; 10,000 for
the reported run). Perft runs the start position to depth 5 and Kiwipete to depth 4 (seconds
each, bulk-counted); deeper runs of positions 3, 4 and 6 are marked slow.
"""

from __future__ import annotations

import os
import random

import numpy as np
import pytest

from actors.games import make_game
from actors.games.chess.rules import START_FEN, Chess, ChessState
from actors.games.compiled import core
from actors.search import MCTSConfig

pytestmark = pytest.mark.skipif(core is None, reason="actors._mcts_core was not built")

KIWIPETE = "r3k2r/p1ppqpb1/bn2pnp1/3PN3/1p2P3/2N2Q1p/PPPBBPPP/R3K2R w KQkq - 0 1"
POSITION_3 = "8/2p5/3p4/KP5r/1R3p1k/8/4P1P1/8 w - - 0 1"
POSITION_4 = "r3k2r/Pppp1ppp/1b3nbN/nP6/BBP1P3/q4N2/Pp1P2PP/R2Q1RK1 w kq - 0 1"
POSITION_5 = "rnbq1k1r/pp1Pbppp/2p5/8/2B5/8/PPP1NnPP/RNBQK2R w KQ - 1 8"
POSITION_6 = "r4rk1/1pp1qppp/p1np1n2/2b1p1B1/2B1P1b1/P1NP1N2/1PP1QPPP/R4RK1 w - - 0 10"
CHUNKS = 8  # 125 games each by default: well inside the per-test timeout on a busy machine
GAMES = int(os.environ.get("AZSERVE_CHESS_GAMES", "1000"))


def perft(game: Chess, s: ChessState, depth: int) -> int:
    """Leaf nodes of the legal-move tree (bulk-counted at the last ply; game ends ignored, as
    perft counts them)."""
    rules = game._rules
    acts = rules.legal(s.blob, b"")
    if depth == 1:
        return len(acts)
    return sum(_perft_blob(rules, rules.play(s.blob, b"", a)[0], depth - 1) for a in acts)


def _perft_blob(rules, blob: bytes, depth: int) -> int:  # type: ignore[no-untyped-def]
    acts = rules.legal(blob, b"")
    if depth == 1:
        return len(acts)
    return sum(_perft_blob(rules, rules.play(blob, b"", a)[0], depth - 1) for a in acts)


@pytest.fixture(scope="module")
def chess() -> Chess:
    return Chess(max_plies=10000, history=2)


@pytest.mark.parametrize(
    ("fen", "depth", "nodes"),
    [
        (START_FEN, 4, 197_281),
        (START_FEN, 5, 4_865_609),
        (KIWIPETE, 4, 4_085_603),
        (POSITION_3, 5, 674_624),
        (POSITION_4, 4, 422_333),
        (POSITION_5, 3, 62_379),
        (POSITION_6, 3, 89_890),
    ],
    ids=["start4", "start5", "kiwipete4", "position3", "position4", "position5", "position6"],
)
def test_perft_matches_the_published_counts(chess: Chess, fen: str, depth: int, nodes: int) -> None:
    s = chess.from_fen(fen)
    assert perft(chess, s, depth) == nodes


@pytest.mark.slow
@pytest.mark.parametrize(
    ("fen", "depth", "nodes"),
    [(POSITION_3, 6, 11_030_083), (POSITION_4, 5, 15_833_292), (POSITION_6, 4, 3_894_594)],
    ids=["position3-6", "position4-5", "position6-4"],
)
def test_deep_perft(chess: Chess, fen: str, depth: int, nodes: int) -> None:
    assert perft(chess, chess.from_fen(fen), depth) == nodes


@pytest.mark.parametrize("chunk", range(CHUNKS))
def test_random_games_agree_with_openspiel(chess: Chess, chunk: int) -> None:
    """Legal moves (through openspiel_action), the FEN after each move, terminal states and
    results; every kind of ending turns up (mate, stalemate or insufficient material,
    repetition, the 50-move rule)."""
    pyspiel = pytest.importorskip("pyspiel")
    osg = pyspiel.load_game("chess")
    rng = random.Random(chunk)
    ends: dict[str, int] = {}
    games = -(-GAMES // CHUNKS)
    for n in range(games):
        s, o, moves = chess.initial_state(), osg.new_initial_state(), []
        while not s.over:
            where = f"game {chunk}/{n} after {moves}"
            assert chess.to_fen(s) == str(o), where
            assert not o.is_terminal(), where
            acts = chess.legal_actions(s)
            assert sorted(chess.openspiel_action(s, a) for a in acts) == o.legal_actions(), where
            if len(moves) % 32 == 0:
                assert chess.encode(s).max() <= 1, where
            a = rng.choice(acts)
            moves.append(chess.uci(s, a))
            o.apply_action(chess.openspiel_action(s, a))
            s = chess.apply(s, a)
        assert o.is_terminal(), f"game {chunk}/{n}: we end it after {moves}, OpenSpiel does not"
        white = s.value if chess.to_play(s) == 0 else -s.value
        assert white == o.returns()[1]  # OpenSpiel's player 1 is white
        kind = (
            "mate"
            if s.value
            else "repetition"
            if o.is_repetition_draw()
            else "fifty"
            if s.blob[67] >= 100
            else "other draw"
        )
        ends[kind] = ends.get(kind, 0) + 1
    if games >= 100:
        assert set(ends) == {"mate", "repetition", "fifty", "other draw"}, ends


def test_threefold_repetition_ends_the_game() -> None:
    chess = Chess()
    s = chess.initial_state()
    shuffle = ["g1f3", "g8f6", "f3g1", "f6g8"]
    for i, m in enumerate(shuffle * 2):
        assert not s.over, i
        s = chess.apply(s, chess.parse_uci(s, m))
    assert s.over and s.value == 0.0  # the start position, a third time
    assert chess.encode(s)[12:14].all()  # stood twice, three times


def test_the_fifty_move_rule_draws_but_mate_comes_first() -> None:
    chess = Chess()
    s = chess.from_fen("7k/8/8/8/8/8/8/K5R1 w - - 99 80")
    quiet = chess.apply(s, chess.parse_uci(s, "g1g2"))
    assert quiet.over and quiet.value == 0.0
    s = chess.from_fen("7k/8/6K1/8/8/8/8/R7 w - - 99 80")
    mate = chess.apply(s, chess.parse_uci(s, "a1a8"))
    assert mate.over and mate.value == -1.0  # black to move, mated on the 100th ply
    s = chess.from_fen("7k/8/8/8/8/8/8/K5R1 w - - 100 80")
    assert s.over


def test_insufficient_material_and_stalemate() -> None:
    chess = Chess()
    assert chess.from_fen("8/8/4k3/8/8/3NK3/8/8 w - - 0 1").over  # K+N v K
    assert chess.from_fen("8/1b6/4k3/8/8/3BK3/8/8 w - - 0 1").over  # bishops on one colour
    assert not chess.from_fen("8/2b5/4k3/8/8/3BK3/8/8 w - - 0 1").over  # on both colours
    s = chess.from_fen("8/8/4k3/8/8/3rK3/8/8 w - - 0 1")
    bare = chess.apply(s, chess.parse_uci(s, "e3d3"))
    assert bare.over and bare.value == 0.0
    stalemate = chess.from_fen("7k/5Q2/6K1/8/8/8/8/8 b - - 0 1")
    assert stalemate.over and stalemate.value == 0.0
    mated = chess.from_fen("7k/6Q1/6K1/8/8/8/8/8 b - - 0 1")
    assert mated.over and mated.value == -1.0


def test_the_ply_cap_is_a_draw() -> None:
    chess = Chess(max_plies=4)
    s = chess.initial_state()
    for m in ["e2e4", "e7e5", "g1f3"]:
        s = chess.apply(s, chess.parse_uci(s, m))
        assert not s.over
    s = chess.apply(s, chess.parse_uci(s, "b8c6"))
    assert s.over and s.value == 0.0


def test_promotions_castling_and_en_passant_as_actions() -> None:
    chess = Chess()
    s = chess.from_fen("r3k3/7P/8/8/8/8/6p1/4K2R b Kq - 0 1")
    moves = {chess.uci(s, a) for a in chess.legal_actions(s)}
    assert {"g2g1q", "g2g1r", "g2g1b", "g2g1n", "g2h1q", "g2h1n", "e8c8"} <= moves
    under = chess.parse_uci(s, "g2h1n")
    assert under % 73 == 64 + 0 * 3 + 2  # a knight, towards file h
    after = chess.apply(s, chess.parse_uci(s, "e8c8"))
    assert chess.to_fen(after) == "2kr4/7P/8/8/8/8/6p1/4K2R w K - 1 2"
    # white's h7 pawn, from white's view, and black's g2 pawn, from black's, on the 7th rank
    assert chess.parse_uci(after, "h7h8r") // 73 == 6 * 8 + 7
    assert under // 73 == 6 * 8 + 6
    ep = chess.from_fen("4k3/8/8/8/3p4/8/4P3/4K3 w - - 0 1")
    ep = chess.apply(ep, chess.parse_uci(ep, "e2e4"))
    assert chess.to_fen(ep) == "4k3/8/8/8/3pP3/8/8/4K3 b - e3 0 1"
    took = chess.apply(ep, chess.parse_uci(ep, "d4e3"))
    assert chess.to_fen(took) == "4k3/8/8/8/8/4p3/8/4K3 w - - 0 2"


def test_the_action_map_matches_openspiels_move_parser() -> None:
    pyspiel = pytest.importorskip("pyspiel")
    chess = Chess()
    for fen in [START_FEN, KIWIPETE, POSITION_4, "r3k3/7P/8/8/8/8/6p1/4K2R b Kq - 0 1"]:
        s = chess.from_fen(fen)
        o = pyspiel.load_game("chess").new_initial_state(fen)
        for a in chess.legal_actions(s):
            assert chess.openspiel_action(s, a) == o.parse_move_to_action(chess.uci(s, a))


def test_fen_round_trips_and_bad_fens_say_why() -> None:
    chess = Chess()
    for fen in [START_FEN, KIWIPETE, POSITION_3, POSITION_4, POSITION_5, POSITION_6]:
        assert chess.to_fen(chess.from_fen(fen)) == fen
    # an en-passant square no pawn can take on is dropped, as OpenSpiel and FEN writers do
    assert " - " in chess.to_fen(chess.from_fen("4k3/8/8/8/4P3/8/8/4K3 b - e3 0 1"))
    bad = {
        "8/8/8/8/8/8/8/8 w - - 0 1": "exactly one king",
        "rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP w KQkq - 0 1": "8 ranks",
        "rnbqkbnr/pppppppp/9/8/8/8/PPPPPPPP/RNBQKBNR w KQkq - 0 1": "not 8 squares",
        "rnbqkbnr/ppppXppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq - 0 1": "bad rank",
        START_FEN.replace(" w ", " x "): "side to move",
        START_FEN.replace("KQkq", "KQkqX"): "castling field",
        "4k3/8/8/8/8/8/8/4K3 w K - 0 1": "without its king and rook",
        START_FEN.replace(" 0 1", " 101 1"): "halfmove clock",
        "4k2R/8/8/8/8/8/8/4K3 w - - 0 1": "not to move is in check",
        "P3k3/8/8/8/8/8/8/4K3 w - - 0 1": "first or last rank",
        "e2e4": "6 fields",
    }
    for fen, why in bad.items():
        with pytest.raises(ValueError, match=why):
            chess.from_fen(fen)
    with pytest.raises(ValueError, match="illegal"):
        chess.parse_uci(chess.initial_state(), "e2e5")
    with pytest.raises(ValueError, match="not a UCI move"):
        chess.parse_uci(chess.initial_state(), "e2")
    with pytest.raises(ValueError, match="history"):
        Chess(history=16)


def test_planes_from_the_side_to_moves_view_with_earlier_positions() -> None:
    chess = make_game("chess")
    assert isinstance(chess, Chess) and chess.obs_shape == (14 * 8 + 7, 8, 8)
    assert chess.num_actions == 4672
    s0 = chess.initial_state()
    obs = chess.encode(s0)
    assert obs[0, 6].all() and obs[0].sum() == 8  # white's pawns on the second row from below
    assert obs[6 + 5, 0, 4] == 1  # black's king, top row, file e
    assert not obs[14:112].any()  # no earlier positions yet
    const = obs[112:, 0, 0]
    assert list(const) == [0, 0, 1, 1, 1, 1, 0]  # white, ply 0, all castling, clock 0
    assert obs.max() == 1  # the server takes 0/1 planes only
    late = chess.from_fen("4k3/8/8/8/8/8/8/4K2R w K - 50 129")  # ply 256 of 512, clock 50
    planes = chess.encode(late)
    assert planes[113].sum() == 32 and planes[113].flat[31] == 1 and planes[118].sum() == 32
    assert planes[114].all() and not planes[115:118].any()
    s1 = chess.apply(s0, chess.parse_uci(s0, "e2e4"))
    obs1 = chess.encode(s1)
    assert obs1[0, 6].all()  # black's pawns, now the mover's, second row from below
    assert obs1[6 + 0, 3, 4] == 1  # white's e4 pawn seen from black: row 3, file e
    earlier = obs1[14:28]
    assert earlier[6 + 0, 1].all()  # the start: white's pawns, from black's view, on row 1
    assert earlier[12].all() == 0 and obs1[112, 0, 0] == 1
    assert np.array_equal(chess.encode_batch([s0, s1])[1], obs1)


async def test_the_compiled_search_plays_into_a_threefold_repetition() -> None:
    """Every evaluated position a win for its side to move: one ply before a threefold
    repetition, the draw (terminal in the tree, valued 0) is the best the side to move can get,
    and the compiled search finds and plays it. The repetition keys travel in each node's own
    state (chess.c), so a path's repetitions are found as the game's are."""
    from actors.search import MCTSConfig
    from actors.searches import make_search

    chess = Chess(max_plies=64, history=1)
    s = chess.initial_state()
    for m in ["g1f3", "g8f6", "f3g1", "f6g8", "g1f3", "g8f6", "f3g1"]:
        s = chess.apply(s, chess.parse_uci(s, m))
    draw = chess.parse_uci(s, "f6g8")
    assert chess.apply(s, draw).over

    async def evaluate(obs: np.ndarray) -> tuple[np.ndarray, float]:
        return np.zeros(chess.num_actions, np.float32), 1.0

    search = make_search(
        chess, MCTSConfig(num_simulations=100, core="compiled"), np.random.default_rng(0)
    )
    assert type(search).__name__.startswith("Compiled")
    result = await search.search(s, evaluate, add_noise=False)
    assert int(np.argmax(result.visits)) == draw
    assert result.visits[draw] > result.visits.sum() / 2


def test_a_built_in_game_takes_its_parameters_in_the_spec() -> None:
    chess = make_game("chess(max_plies=100, history=0)")
    assert isinstance(chess, Chess) and chess.max_plies == 100 and chess.obs_shape == (21, 8, 8)
    for spec, why in [
        ("chess(depth=3)", "chess takes max_plies, history, features"),
        ("chess(history=one)", "is not a number"),
        ("chess(history=1", "expected NAME"),
        ("chess(1)", "not key=value"),
        ("connect4(rows=7)", "connect4 takes no parameters"),
        ("chess(history=99)", "0..15"),
    ]:
        with pytest.raises(ValueError, match=why):
            make_game(spec)


def test_cap_score_is_the_material_lead_of_a_draw_at_the_cap() -> None:
    """Only a game drawn at ``max_plies`` has a cap score: the side to move's material lead
    (P1 N3 B3 R5 Q9), which self-play may turn into a result (``mcts.cap_win_margin``)."""
    chess = Chess(max_plies=3, history=0)
    s = chess.initial_state()
    for m in ["e2e4", "d7d5", "e4d5"]:
        assert chess.cap_score(s) is None  # not over
        s = chess.apply(s, chess.parse_uci(s, m))
    assert s.over and s.value == 0.0 and chess.cap_score(s) == -1.0  # black, a pawn down
    four = Chess(max_plies=4, history=0)
    s = four.initial_state()
    for m in ["e2e4", "d7d5", "e4d5", "d8d5"]:
        s = four.apply(s, four.parse_uci(s, m))
    assert s.over and four.cap_score(s) == 0.0  # a pawn each
    # A rook and a queen against a bishop and a knight: 14 - 6, white to move at the cap.
    heavy = Chess(max_plies=200, history=0)
    s = heavy.from_fen("4k3/2b5/8/8/8/8/5n2/R3K2Q b - - 0 100")  # ply 199
    s = heavy.apply(s, heavy.parse_uci(s, "c7b6"))
    assert s.over and s.value == 0.0 and heavy.cap_score(s) == 8.0
    # Mated on the cap's own ply: the mate stands, no cap score.
    odd = Chess(max_plies=199, history=0)
    s = odd.from_fen("7k/8/6K1/8/8/8/8/5Q2 w - - 0 100")  # ply 198
    s = odd.apply(s, odd.parse_uci(s, "f1f8"))
    assert s.over and s.value == -1.0 and odd.cap_score(s) is None
    # Drawn before the cap (stalemate): no cap score either.
    stalemate = heavy.from_fen("7k/5Q2/6K1/8/8/8/8/8 b - - 0 1")
    assert stalemate.over and heavy.cap_score(stalemate) is None


def test_self_play_results_at_the_cap() -> None:
    """``game_result``: a draw at the cap goes to the side ahead by ``cap_win_margin`` or
    more, as the first player's result (``adjudicated_value`` of a win); a resignation, a
    mate and a smaller lead are as before; 0 turns it off. Repetition and 50-move draws only
    with ``adjudicate_repetitions``."""
    from actors.finished import game_result

    def cfg(margin: float, value: float = 1.0, repetitions: bool = False) -> MCTSConfig:
        return MCTSConfig(cap_win_margin=margin, adjudicated_value=value,
                          adjudicate_repetitions=repetitions)  # fmt: skip

    chess = Chess(max_plies=3, history=0)
    s = chess.initial_state()
    for m in ["e2e4", "d7d5", "e4d5"]:  # black to move at the cap, a pawn down
        s = chess.apply(s, chess.parse_uci(s, m))
    assert game_result(chess, s, None) == (0.0, False)
    assert game_result(chess, s, None, cfg(0.0)) == (0.0, False)
    assert game_result(chess, s, None, cfg(1.0)) == (1.0, True)  # white, the first, wins
    assert game_result(chess, s, None, cfg(1.0, 0.5)) == (0.5, True)
    assert game_result(chess, s, None, cfg(1.5)) == (0.0, False)
    assert game_result(chess, s, 0, cfg(1.0)) == (-1.0, False)  # white resigned: it stands
    odd = Chess(max_plies=199, history=0)
    mate = odd.from_fen("7k/8/6K1/8/8/8/8/5Q2 w - - 0 100")
    mate = odd.apply(mate, odd.parse_uci(mate, "f1f8"))
    assert game_result(odd, mate, None, cfg(1.0, 0.5)) == (1.0, False)  # a mate is worth 1
    stalemate = odd.from_fen("7k/5Q2/6K1/8/8/8/8/8 b - - 0 1")
    assert game_result(odd, stalemate, None, cfg(1.0, 1.0, True)) == (0.0, False)
    # Threefold repetition with black a rook up: adjudicated only when asked.
    game = Chess(max_plies=256, history=0)
    s = game.from_fen("4k3/8/8/3r4/8/8/8/4K3 w - - 0 1")
    for m in ["e1f1", "e8f8", "f1e1", "f8e8"] * 2:
        s = game.apply(s, game.parse_uci(s, m))
    assert s.over and s.value == 0.0 and game.cap_score(s) is None
    assert game.cap_score(s, repetitions=True) == -5.0  # white to move, a rook down
    assert game_result(game, s, None, cfg(3.0)) == (0.0, False)
    assert game_result(game, s, None, cfg(3.0, 0.5, True)) == (-0.5, True)
    # The 50-move rule, a rook up: adjudicated; a dead position (a lone bishop) never.
    fifty = game.from_fen("4k3/8/8/8/8/8/8/R3K3 w - - 99 80")
    fifty = game.apply(fifty, game.parse_uci(fifty, "a1a2"))
    assert fifty.over and game.cap_score(fifty, repetitions=True) == -5.0  # black to move
    dead = game.from_fen("4k3/8/8/8/8/8/8/2B1K3 w - - 0 1")
    assert dead.over and game.cap_score(dead, repetitions=True) is None
    with pytest.raises(ValueError, match="cap_win_margin must be >= 0"):
        MCTSConfig(cap_win_margin=-1.0)
    with pytest.raises(ValueError, match="adjudicated_value must be in"):
        MCTSConfig(adjudicated_value=0.0)


def test_the_dead_position_rule_is_the_cores() -> None:
    """``cap_score`` never adjudicates a dead position: its insufficient-material rule gives
    the compiled core's verdict on every set of up to three minor pieces (both bishops'
    colours, knights, both sides)."""
    from itertools import combinations

    from actors.games.chess.rules import _sufficient_material

    chess = Chess(max_plies=256, history=0)
    pieces = [(2, "B"), (5, "B"), (1, "N"), (6, "N"), (58, "b"), (61, "b"), (57, "n"), (62, "n")]
    checked = 0
    for k in range(4):
        for chosen in combinations(pieces, k):
            board = ["."] * 64
            board[4], board[60] = "K", "k"
            for sq, p in chosen:
                board[sq] = p
            ranks = ["".join(board[r * 8 : r * 8 + 8]) for r in range(7, -1, -1)]
            fen = "/".join(ranks).replace("........", "8") + " w - - 0 1"
            for n in range(7, 0, -1):
                fen = fen.replace("." * n, str(n))
            s = chess.from_fen(fen)
            mine = _sufficient_material(np.frombuffer(s.blob, np.uint8, 64))
            assert mine == (not s.over), fen
            checked += 1
    assert checked == 93
