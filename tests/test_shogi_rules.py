"""Shogi's compiled rules (actors/core/games/shogi.c) against oracles nobody here wrote: the
published perft counts (the start position's, and positions with drops and promotions from
public perft suites) and cshogi, move by move over random games (the same legal moves, the
same SFEN after every move, check, mate, and the repetition verdicts); then the rules one by
one (nifu, dead squares, forced and optional promotion, uchifuzume, sennichite and perpetual
check, the ply cap), SFEN and USI in and out, the action map and the planes.

``AZSERVE_SHOGI_GAMES`` sets the random games against cshogi (1,000 by default, each capped at
``LOCKSTEP_PLIES``; the slow test plays 10,000 longer ones).
"""

from __future__ import annotations

import os
import random
from collections import Counter

import numpy as np
import pytest

from actors.games import make_game
from actors.games.compiled import core
from actors.games.shogi.rules import START_SFEN, Shogi, ShogiState

pytestmark = pytest.mark.skipif(core is None, reason="actors._mcts_core was not built")

MATSURI = "l6nl/5+P1gk/2np1S3/p1p4Pp/3P2Sp1/1PPb2P1P/P5GS1/R8/LN4bKL w GR5pnsg 1"
MAX_MOVES = "R8/2K1S1SSk/4B4/9/9/9/9/9/1L1L1L3 b RBGSNLP3g3n17p 1"  # 593 legal moves
PROMOTED = "k+n7/sg7/9/9/9/9/+r5K1g/7L1/2LN1R1+Bb b RBGSNLP 1"
MIDGAME_B = "l7l/3s5/prnp2kp1/2p1Gppnp/1P7/PnPP1P3/3BP2PP/1S1G5/LN1K1G1+rL b SBG3ps 91"
MIDGAME_W = "8l/1l+R2P3/p2pBG1pp/kps1p4/Nn1P2G2/P1P1P2PP/1PS6/1KSG3+r1/LN2+p3L w Sbgn3p 124"
ALL_IN_HAND = "9/9/9/3k5/9/5K3/9/9/9 b RB2G2S2N2L9Prb2g2s2n2l9p 1"
CHUNKS = 8
GAMES = int(os.environ.get("AZSERVE_SHOGI_GAMES", "1000"))
LOCKSTEP_PLIES = 96
"""The cap of the normal suite's random games (random shogi rarely mates: uncapped games
average about 400 plies); the slow test's games run to 320."""


def perft(game: Shogi, s: ShogiState, depth: int) -> int:
    """Leaf nodes of the legal-move tree (bulk-counted at the last ply; game ends ignored, as
    perft counts them)."""
    return _perft_blob(game._rules, s.blob, depth)


def _perft_blob(rules, blob: bytes, depth: int) -> int:  # type: ignore[no-untyped-def]
    acts = rules.legal(blob, b"")
    if depth == 1:
        return len(acts)
    return sum(_perft_blob(rules, rules.play(blob, b"", a)[0], depth - 1) for a in acts)


@pytest.fixture(scope="module")
def shogi() -> Shogi:
    return Shogi(max_plies=10000, history=0)


# Published counts: the start position's (every perft table), the others from a public suite
# of shogi perft positions (drops, promotions, the 593-move position).
@pytest.mark.parametrize(
    ("sfen", "depth", "nodes"),
    [
        (START_SFEN, 1, 30),
        (START_SFEN, 2, 900),
        (START_SFEN, 3, 25_470),
        (START_SFEN, 4, 719_731),
        (MATSURI, 3, 4_809_015),
        (MAX_MOVES, 2, 105_677),
        (PROMOTED, 3, 414_441),
        (MIDGAME_B, 3, 2_067_680),
        (MIDGAME_W, 3, 2_552_846),
        (ALL_IN_HAND, 2, 248_257),
    ],
    ids=[
        "start1",
        "start2",
        "start3",
        "start4",
        "matsuri3",
        "max-moves2",
        "promoted3",
        "midgame-b3",
        "midgame-w3",
        "all-in-hand2",
    ],
)
def test_perft_matches_the_published_counts(
    shogi: Shogi, sfen: str, depth: int, nodes: int
) -> None:
    assert perft(shogi, shogi.from_sfen(sfen), depth) == nodes


@pytest.mark.long
@pytest.mark.parametrize(
    ("sfen", "depth", "nodes"),
    [
        (START_SFEN, 5, 19_861_490),
        (MAX_MOVES, 3, 53_393_368),
        (PROMOTED, 4, 13_033_326),
        (ALL_IN_HAND, 3, 112_911_856),
    ],
    ids=["start5", "max-moves3", "promoted4", "all-in-hand3"],
)
def test_deep_perft(shogi: Shogi, sfen: str, depth: int, nodes: int) -> None:
    assert perft(shogi, shogi.from_sfen(sfen), depth) == nodes


# --- lockstep with cshogi ------------------------------------------------------------------


def _usi_tables(game: Shogi) -> list[list[str]]:
    """USI text of every action, for each side to move (an action's move depends on the side
    only): None where it leaves the board."""
    tables = []
    for sfen in (START_SFEN, START_SFEN.replace(" b ", " w ")):
        s = game.from_sfen(sfen)
        row = []
        for a in range(game.num_actions):
            try:
                row.append(game.usi(s, a))
            except ValueError:
                row.append("")
        tables.append(row)
    return tables


def play_against_cshogi(game: Shogi, games: int, seed: int) -> Counter[str]:
    """``games`` random games, our rules and cshogi's in step, asserting at every position the
    same SFEN, legal moves (as USI), check (the core's flag, kept in the next position's
    window, and ``in_check`` on every 8th position), mate, the entering-king declaration
    (cshogi's ``is_nyugyoku``: random games hardly ever reach one) and the repetition verdicts;
    returns how the games ended.

    The movers: uniform, or (half the games) undoing their own last move four times in five,
    so that positions repeat, or (a quarter) taking a mate in one where cshogi finds one, or
    (an eighth, undoing too) giving check four times in five, repeating a check. The
    repetition oracle is cshogi's position keys and checks: the fourth occurrence ends the
    game, lost by a side that checked with every move since the first (shogi.c's rule); when
    that side loses, cshogi's own verdict (``is_draw``, on the last cycle) agrees."""
    cshogi = pytest.importorskip("cshogi")
    usi = _usi_tables(game)
    rng = random.Random(seed)
    ends: Counter[str] = Counter()
    for n in range(games):
        undo, mates, checks = n % 2 == 1, n % 4 == 0, n % 8 == 3
        s, board = game.initial_state(), cshogi.Board()
        keys, checks, moves = [board.zobrist_hash()], [board.is_check()], []
        while True:
            where = f"game {seed}/{n} after {' '.join(moves)}"
            assert game.to_sfen(s) == board.sfen(), where
            stood = keys.count(keys[-1])
            planes = game.encode(s)
            assert [bool(planes[42 + k, 0, 0]) for k in range(3)] == [
                stood >= 2,
                stood >= 3,
                stood >= 4,
            ], where
            if stood >= 4:
                first = keys.index(keys[-1])
                # checks[j]: the side to move at position j is in check (the move into it
                # checked); the last mover made the moves into j = last, last - 2, ...
                last = len(keys) - 1
                movers = all(checks[j] for j in range(last, first, -2))
                others = all(checks[j] for j in range(last - 1, first, -2))
                want = 1.0 if movers and not others else -1.0 if others and not movers else 0.0
                assert s.over and s.value == want, where
                verdict = board.is_draw()
                if want == 1.0:
                    assert verdict == cshogi.REPETITION_WIN, where
                elif want == -1.0:
                    assert verdict == cshogi.REPETITION_LOSE, where
                else:
                    assert verdict in (cshogi.REPETITION_DRAW, cshogi.REPETITION_WIN,
                                       cshogi.REPETITION_LOSE), where  # fmt: skip
                ends["perpetual check" if want else "sennichite"] += 1
                assert game.end_reason(s) == ("perpetual check" if want else "sennichite")
                break
            if board.is_nyugyoku():
                assert s.over and s.value == 1.0 and game.end_reason(s) == "declaration", where
                ends["declaration"] += 1
                break
            if board.is_game_over():
                assert s.over and s.value == -1.0 and game.end_reason(s) == "mate", where
                ends["mate"] += 1
                break
            if game.ply(s) >= game.max_plies:
                assert s.over and s.value == 0.0 and game.end_reason(s) == "ply cap", where
                ends["ply cap"] += 1
                break
            assert not s.over, where
            theirs = sorted(cshogi.move_to_usi(m) for m in board.legal_moves)
            acts = game.legal_actions(s)
            side = usi[game.to_play(s)]
            assert sorted(side[a] for a in acts) == theirs, where
            if len(moves) % 8 == 0:
                assert game.in_check(s) == board.is_check(), where
            text = _choose(rng, theirs, moves, board, cshogi, undo, mates, checks)
            a = acts[[side[x] for x in acts].index(text)]
            before = s
            s = game.apply(s, a)
            window = s.blob[98] - 1  # the position just left, its check in bit 0
            assert bool(s.blob[100 + 8 * window] & 1) == board.is_check(), where
            board.push_usi(text)
            moves.append(text)
            keys.append(board.zobrist_hash())
            checks.append(board.is_check())
            assert before.blob[81] != s.blob[81]
    return ends


def _choose(rng, legal, moves, board, cshogi, undo, mates, checks):  # type: ignore[no-untyped-def]
    """The random mover's move (``play_against_cshogi``)."""
    if mates and rng.random() < 0.5:
        mate = board.mate_move_in_1ply()
        if mate and cshogi.move_to_usi(mate) in legal:  # it may name a move that is not
            return cshogi.move_to_usi(mate)
    if checks and rng.random() < 0.8:  # a check, undoing the last one where it can
        giving = []
        for m in board.legal_moves:
            board.push(m)
            if board.is_check():
                giving.append(cshogi.move_to_usi(m))
            board.pop()
        if len(moves) >= 4 and moves[-4] in giving:
            return moves[-4]
        if giving:
            return rng.choice(giving)
    if undo and len(moves) >= 2 and rng.random() < 0.8:
        mine = moves[-2]
        back = mine[2:4] + mine[0:2]
        if "*" not in mine and "+" not in mine and back in legal:
            return back
    return rng.choice(legal)


@pytest.mark.parametrize("chunk", range(CHUNKS))
def test_random_games_agree_with_cshogi(chunk: int) -> None:
    game = Shogi(max_plies=LOCKSTEP_PLIES, history=1)
    games = -(-GAMES // CHUNKS)
    ends = play_against_cshogi(game, games, seed=chunk)
    assert sum(ends.values()) == games
    if games >= 100:
        assert {"mate", "sennichite", "ply cap"} <= set(ends), ends


@pytest.mark.long
@pytest.mark.timeout(3600)
def test_ten_thousand_random_games_agree_with_cshogi() -> None:
    game = Shogi(max_plies=320, history=0)
    ends = play_against_cshogi(game, 10_000, seed=1000)
    assert {"mate", "sennichite", "perpetual check", "ply cap"} <= set(ends), ends


# --- the rules one by one ------------------------------------------------------------------


def _moves(game: Shogi, sfen: str) -> set[str]:
    s = game.from_sfen(sfen)
    return {game.usi(s, a) for a in game.legal_actions(s)}


def test_drops_keep_nifu_and_never_land_where_a_piece_could_not_move(shogi: Shogi) -> None:
    moves = _moves(shogi, "4k4/9/9/9/9/9/4P4/9/4K4 b PLN 1")
    drops = {m for m in moves if "*" in m}
    assert not {m for m in drops if m.startswith("P*5")}  # a pawn of ours on file 5
    assert "P*4e" in drops and "P*4b" in drops and "P*4a" not in drops
    assert "L*4b" in drops and "L*4a" not in drops
    assert "N*4c" in drops and not {m for m in drops if m[0] == "N" and m[3] in "ab"}
    gote = _moves(shogi, "4k4/9/9/9/9/9/9/9/4K4 w pln 1")
    assert "p*4h" in {m.lower() for m in gote} and "P*4i" not in gote and "N*4h" not in gote
    assert "P*4h" in gote  # USI writes every dropped piece in upper case


def test_promotion_is_optional_in_the_zone_and_forced_where_a_piece_could_not_move(
    shogi: Shogi,
) -> None:
    moves = _moves(shogi, "4k4/2P6/9/P3S3N/9/9/9/9/4K4 b - 1")
    assert {"9d9c", "9d9c+"} <= moves  # a pawn entering the zone: either
    assert "7b7a+" in moves and "7b7a" not in moves  # onto the last row: forced
    assert "1d2b+" in moves and "1d2b" not in moves  # a knight, two rows from it: forced
    assert {"5d5c", "5d4c", "5d5c+", "5d4c+"} <= moves  # a silver into the zone
    assert {"5e4c", "5e4c+"} <= _moves(shogi, "4k4/9/9/9/4N4/9/9/9/4K4 b - 1")
    out = _moves(shogi, "4k4/9/4S4/9/9/9/9/9/4K4 b - 1")
    assert {"5c4d", "5c4d+"} <= out  # a silver leaving the zone may promote too
    assert not {m for m in _moves(shogi, "4k4/9/4G4/9/9/9/9/9/4K4 b - 1") if "+" in m}


def test_a_pawn_drop_may_not_mate_but_a_pawn_move_and_other_drops_may(shogi: Shogi) -> None:
    assert "P*9b" not in _moves(shogi, "kl7/1p7/1G7/9/9/9/9/9/4K4 b P 1")
    assert "P*9b" in _moves(shogi, "k8/1p7/1G7/9/9/9/9/9/4K4 b P 1")  # 8a free: not mate
    s = shogi.from_sfen("kl7/1p7/1G7/9/9/9/9/9/4K4 b L 1")
    mate = shogi.apply(s, shogi.parse_usi(s, "L*9b"))
    assert mate.over and mate.value == -1.0 and shogi.end_reason(mate) == "mate"
    s = shogi.from_sfen("kl7/1p7/PG7/9/9/9/9/9/4K4 b - 1")
    push = shogi.apply(s, shogi.parse_usi(s, "9c9b"))
    assert push.over and push.value == -1.0


def test_fourfold_repetition_is_a_draw() -> None:
    shogi = Shogi(max_plies=512, history=1)
    s = shogi.initial_state()
    shuffle = ["5i5h", "5a5b", "5h5i", "5b5a"]
    for i, m in enumerate(shuffle * 3):
        assert not s.over, i
        s = shogi.apply(s, shogi.parse_usi(s, m))
    assert s.over and s.value == 0.0 and shogi.end_reason(s) == "sennichite"
    assert shogi.encode(s)[42:45].all()  # stood twice, three times, four times
    assert shogi.to_sfen(s) == START_SFEN.replace(" 1", " 13")


def test_perpetual_check_loses() -> None:
    shogi = Shogi(max_plies=512, history=0)
    s = shogi.from_sfen("4k4/R8/9/9/9/9/9/9/4K4 b - 1")
    cycle = ["9b9a", "5a5b", "9a9b", "5b5a"]
    for m in cycle * 3:
        assert not s.over
        s = shogi.apply(s, shogi.parse_usi(s, m))
    # sente checked with every move since the position first stood: sente, to move, loses
    assert s.over and s.value == -1.0 and shogi.end_reason(s) == "perpetual check"
    assert shogi.winner(s) == 1


# Entering kings: sente's king in gote's camp with 12 pieces there worth 28 points (+R +R +B +B
# 5 each, 8 others 1 each); gote's, 11 pieces worth 27 (gote needs one point fewer).
DECLARE_B = "+R+R+B+B5/4K4/GGSS+P+P+P+P1/9/9/9/9/9/4k4 b - 1"
DECLARE_W = "4K4/9/9/9/9/9/+r+r+b+b5/4k4/ggss+p+p+p2 w - 1"


def test_an_entering_king_declares_and_wins_as_cshogi_judges(shogi: Shogi) -> None:
    """The side to move wins where CSA's 27-point rule lets it declare (cshogi's
    ``is_nyugyoku`` agrees on each position): 28 points for sente, 27 for gote, pieces in hand
    counted, 10 pieces in the zone, the king there and not in check."""
    cshogi = pytest.importorskip("cshogi")
    cases = {
        DECLARE_B: True,
        DECLARE_B.replace("+P+P+P+P1", "+P+P+P2"): False,  # 27 points: sente needs 28
        DECLARE_B.replace("+P+P+P+P1", "+P+P+P2").replace(" - ", " P "): True,  # a pawn in hand
        DECLARE_B.replace(" b ", " w "): False,  # gote to move: sente declares on its turn
        DECLARE_W: True,
        DECLARE_W.replace("+p+p+p2", "+p+p3").replace(" - ", " p "): True,  # 10 pieces, 27
        DECLARE_W.replace("+p+p+p2", "+p+p3"): False,  # 26 points
        "+R+R+B+B5/9/GGSS+P+P+P+P1/4K4/9/9/9/9/4k4 b - 1": False,  # the king outside
        "+R+R+B+B5/4K4/GGSS+P+P+P+P1/9/9/9/9/9/3k4r w - 1": False,  # gote to move
        "+R+R+B+B5/4K3r/GGSS+P+P+P+P1/9/9/9/9/9/4k4 b - 1": False,  # in check
        "+R+R+B+B5/4K4/GGS4P1/9/9/9/9/9/4k4 b S4P 1": False,  # 8 pieces in the zone, 28 points
    }
    for sfen, wins in cases.items():
        s = shogi.from_sfen(sfen)
        assert cshogi.Board(sfen).is_nyugyoku() == wins, sfen
        assert (s.over and s.value == 1.0) == wins, sfen
        assert shogi.end_reason(s) == ("declaration" if wins else ""), sfen
    # reached in play: gote moves, and sente, to move, may declare
    s = shogi.from_sfen(DECLARE_B.replace(" b ", " w "))
    s = shogi.apply(s, shogi.parse_usi(s, "5i5h"))
    assert s.over and s.value == 1.0 and shogi.winner(s) == 0
    assert shogi.end_reason(s) == "declaration"
    assert shogi.record([], result="").endswith("PI\n+\n")


def test_the_ply_cap_is_a_draw_and_mate_on_the_cap_stands() -> None:
    shogi = Shogi(max_plies=4, history=0)
    s = shogi.initial_state()
    for m in ["7g7f", "3c3d", "8h2b+"]:
        s = shogi.apply(s, shogi.parse_usi(s, m))
        assert not s.over
    s = shogi.apply(s, shogi.parse_usi(s, "3a2b"))
    assert s.over and s.value == 0.0 and shogi.end_reason(s) == "ply cap"
    late = Shogi(max_plies=10, history=0)
    s = late.from_sfen("kl7/1p7/1G7/9/9/9/9/9/4K4 b L 10")  # ply 9
    mate = late.apply(s, late.parse_usi(s, "L*9b"))
    assert mate.over and mate.value == -1.0 and late.end_reason(mate) == "mate"
    assert late.from_sfen("4k4/9/9/9/9/9/9/9/4K4 b - 11").over


def test_sfen_round_trips_and_bad_sfens_say_why(shogi: Shogi) -> None:
    for sfen in [START_SFEN, MATSURI.replace("GR5pnsg", "RGgsn5p"), MAX_MOVES, PROMOTED]:
        assert shogi.to_sfen(shogi.from_sfen(sfen)) == sfen
    assert shogi.to_sfen(shogi.from_sfen(MATSURI)).endswith(" w RGgsn5p 1")  # hands reordered
    assert shogi.to_sfen(shogi.from_sfen(START_SFEN.removesuffix(" 1"))) == START_SFEN
    bad = {
        "9/9/9/9/9/9/9/9/9 b - 1": "exactly one king",
        "lnsgkgsnl/1r5b1/ppppppppp/9/9/9/PPPPPPPPP/1B5R1 b - 1": "9 rows",
        "lnsgkgsnl/1r5b1/ppppppppp/9/9/9/PPPPPPPPP/1B5R2/LNSGKGSNL b - 1": "not 9 squares",
        "lnsgkgsnl/1r5b1/ppppppppp/9/9/9/PPPPXPPPP/1B5R1/LNSGKGSNL b - 1": "bad row",
        "4k4/9/9/9/9/9/9/9/4+K4 b - 1": "cannot be promoted",
        START_SFEN.replace(" b ", " x "): "side to move",
        START_SFEN.replace(" - ", " 2Q "): "bad hand",
        START_SFEN.replace(" - ", " 19P "): "bad hand",
        "4k4/9/9/9/9/9/9/9/4K4 b 5G 1": "in hand than the set has",
        "4k4/9/9/9/9/9/9/9/4KG3 b 18P4L4N4S2B2R4G 1": "more than the set's 40 pieces",
        "4k4/9/9/9/9/9/4P4/4P4/4K4 b - 1": "two unpromoted pawns",
        "4k3P/9/9/9/9/9/9/9/4K4 b - 1": "could never move",
        "4k4/9/9/9/9/9/9/n8/4K4 w - 1": "could never move",
        "4k4/4R4/9/9/9/9/9/9/4K4 b - 1": "not to move is in check",
        START_SFEN.replace(" 1", " 0"): "move number",
        "7g7f": "4 fields",
    }
    for sfen, why in bad.items():
        with pytest.raises(ValueError, match=why):
            shogi.from_sfen(sfen)
    with pytest.raises(ValueError, match="illegal"):
        shogi.parse_usi(shogi.initial_state(), "7g7e")
    with pytest.raises(ValueError, match="not a USI move"):
        shogi.parse_usi(shogi.initial_state(), "7g")
    with pytest.raises(ValueError, match="history"):
        Shogi(history=16)


def test_the_action_map_is_alphazeros_from_the_movers_view(shogi: Shogi) -> None:
    s = shogi.initial_state()
    assert shogi.num_actions == 81 * 139 == 11_259
    a = shogi.parse_usi(s, "7g7f")
    assert a == (6 * 9 + 2) * 139 + 0  # from 7g (row 6, col 2), north, one square
    gote = shogi.apply(s, a)
    assert shogi.parse_usi(gote, "3c3d") == a  # the same move from gote's side
    drops = shogi.from_sfen("4k4/9/9/9/9/9/9/9/4K4 b PG 1")
    assert shogi.parse_usi(drops, "P*5e") == 40 * 139 + 132
    assert shogi.parse_usi(drops, "G*5e") == 40 * 139 + 138
    promo = shogi.from_sfen("4k4/9/9/P8/9/9/9/9/4K4 b - 1")
    assert shogi.parse_usi(promo, "9d9c+") == shogi.parse_usi(promo, "9d9c") + 66
    bishop = shogi.apply(s, a)
    bishop = shogi.apply(bishop, shogi.parse_usi(bishop, "3c3d"))
    assert shogi.parse_usi(bishop, "8h2b+") == (7 * 9 + 1) * 139 + 66 + 1 * 8 + 5  # NE, 6
    assert shogi.parse_usi(bishop, "8i7g") == (8 * 9 + 1) * 139 + 65  # a knight, to col 2
    assert shogi.format_move_at(s, a) == "7g7f" and shogi.parse_move_at(s, str(a)) == a


def test_planes_from_the_side_to_moves_view_with_hands_and_earlier_positions() -> None:
    shogi = make_game("shogi")
    assert isinstance(shogi, Shogi) and shogi.obs_shape == (45 * 8 + 2, 9, 9)
    s0 = shogi.initial_state()
    obs = shogi.encode(s0)
    assert obs.max() == 1  # the server takes 0/1 planes only
    assert obs[0, 6].all() and obs[0].sum() == 9  # sente's pawns, third row from below
    assert obs[7, 8, 4] == 1 and obs[14 + 7, 0, 4] == 1  # the kings
    assert obs[5, 7, 7] == 1 and obs[4, 7, 1] == 1  # rook on 2h, bishop on 8h
    assert not obs[45:360].any() and not obs[360:].any()  # no history; sente; ply 0
    s1 = shogi.apply(s0, shogi.parse_usi(s0, "7g7f"))
    obs1 = shogi.encode(s1)
    assert obs1[0, 6].all()  # gote's pawns, now the mover's, third row from below
    assert obs1[14, 3, 6] == 1  # sente's 7f pawn from gote's view: row 3, col 6
    assert obs1[360].all() and obs1[361].sum() == 0  # gote to move; 1 ply of 512
    assert obs1[45 + 14, 2].all()  # the start, earlier, from gote's view
    hands = shogi.from_sfen("4k4/9/9/9/9/9/9/9/4K4 w 2Pb3p 1")
    planes = shogi.encode(hands)
    assert planes[28].sum() == 3 and planes[28].flat[:3].all()  # gote's own 3 pawns
    assert planes[28 + 4].sum() == 1  # its bishop
    assert planes[35].sum() == 2  # the opponent's 2 pawns


def test_records_are_csa_that_cshogi_reads_back() -> None:
    cshogi = pytest.importorskip("cshogi")
    from cshogi import CSA

    shogi = Shogi(max_plies=512, history=0)
    rng = random.Random(3)
    s, moves = shogi.initial_state(), []
    while not s.over and len(moves) < 120:
        a = rng.choice(shogi.legal_actions(s))
        moves.append(a)
        s = shogi.apply(s, a)
    text = shogi.record(moves, ("us", "them"), "gote wins", "resign", date="2026-12-06")
    parsed = CSA.Parser.parse_str(text)[0]
    assert parsed.names == ["us", "them"] and parsed.endgame == "%TORYO"
    assert parsed.sfen == START_SFEN
    s = shogi.initial_state()
    for a, m in zip(moves, parsed.moves, strict=True):
        assert cshogi.move_to_usi(m) == shogi.usi(s, a)
        s = shogi.apply(s, a)
    assert shogi.usi_position(moves[:2]) == "startpos moves " + " ".join(
        cshogi.move_to_usi(m) for m in parsed.moves[:2]
    )
    assert shogi.record([], result="").endswith("PI\n+\n")


async def test_the_compiled_search_finds_a_mate_in_one() -> None:
    from actors.search import MCTSConfig
    from actors.searches import make_search

    shogi = Shogi(max_plies=64, history=1)
    s = shogi.from_sfen("kl7/1p7/1G7/9/9/9/9/9/4K4 b L 1")

    async def evaluate(obs: np.ndarray) -> tuple[np.ndarray, float]:
        return np.zeros(shogi.num_actions, np.float32), 0.0

    search = make_search(
        shogi, MCTSConfig(num_simulations=400, core="compiled"), np.random.default_rng(0)
    )
    assert type(search).__name__.startswith("Compiled")
    result = await search.search(s, evaluate, add_noise=False)
    best = int(np.argmax(result.visits))
    after = shogi.apply(s, best)
    assert after.over and after.value == -1.0, shogi.usi(s, best)


def test_shogi_takes_its_parameters_in_the_spec() -> None:
    shogi = make_game("shogi(max_plies=100, history=0)")
    assert isinstance(shogi, Shogi) and shogi.max_plies == 100 and shogi.obs_shape == (47, 9, 9)
    with pytest.raises(ValueError, match="shogi takes max_plies, history"):
        make_game("shogi(depth=3)")


def test_cap_score_is_the_material_lead_of_a_draw_at_the_cap() -> None:
    """Only a draw at ``max_plies`` (or, asked, by sennichite) has a cap score: the side to
    move's material lead, board and hand (P1 L3 N4 S5 G6 B8 R10), which self-play may turn
    into a result (``mcts.cap_win_margin``)."""
    shogi = Shogi(max_plies=4, history=0)
    s = shogi.initial_state()
    for m in ["7g7f", "3c3d", "8h2b+"]:
        s = shogi.apply(s, shogi.parse_usi(s, m))
        assert shogi.cap_score(s) is None  # not over
    s = shogi.apply(s, shogi.parse_usi(s, "3a2b"))  # bishops traded, sente to move
    assert s.over and shogi.cap_score(s) == 0.0
    three = Shogi(max_plies=3, history=0)
    s = three.initial_state()
    for m in ["7g7f", "3c3d", "8h2b+"]:
        s = three.apply(s, three.parse_usi(s, m))
    assert s.over and three.cap_score(s) == -18.0  # gote to move: 8h2b+ won a bishop, promoted
    big = Shogi(max_plies=10, history=0)
    mate = big.from_sfen("kl7/1p7/1G7/9/9/9/9/9/4K4 b L 10")
    mate = big.apply(mate, big.parse_usi(mate, "L*9b"))
    assert mate.over and big.cap_score(mate) is None  # a mate keeps its result
    s = Shogi(max_plies=512, history=0)
    rep = s.from_sfen("4k4/9/9/9/9/9/9/9/4K4 b R 1")
    for m in ["5i5h", "5a5b", "5h5i", "5b5a"] * 3:
        rep = s.apply(rep, s.parse_usi(rep, m))
    assert s.end_reason(rep) == "sennichite" and s.cap_score(rep) is None
    assert s.cap_score(rep, repetitions=True) == 10.0  # sente to move, a rook in hand
