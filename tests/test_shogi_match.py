"""Shogi against engines nobody here wrote: the USI player spec, the greedy mover on shogi, and
real Fairy-Stockfish (installed by scripts/system_deps.sh, as Stockfish and GnuGo are) playing
whole games refereed by our rules: against ``azserve usi`` (the engine a shogi GUI would run)
and through ``azserve match``, every game's CSA record replayed move by move in cshogi."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from actors.games import make_game
from actors.games.shogi.rules import Shogi
from azserve.arena.players import RESIGN, RandomPlayer, make_player, parse_spec
from azserve.arena.players.greedy import GreedyPlayer
from azserve.arena.players.usi import UsiPlayer
from azserve.arena.referee import GameRecord, play_game, record_text
from azserve.config.player_spec import parse_usi_spec
from azserve.errors import ConfigError
from tests.test_cli import azserve_cmd
from tests.test_usi import MATE_IN_ONE, shogi_checkpoint

pytestmark = pytest.mark.usefixtures("torch_one_thread")

FSF = shutil.which("fairy-stockfish") or shutil.which("fairy-stockfish", path="/usr/games")
needs_fsf = pytest.mark.skipif(
    FSF is None, reason="fairy-stockfish not installed (scripts/system_deps.sh installs it)"
)
WEAKEST = "fairy-stockfish;Skill Level=-20;byoyomi=20"


def test_usi_specs() -> None:
    assert parse_usi_spec("fairy-stockfish;Skill Level=-20;USI_Hash=16;byoyomi=50") == (
        "fairy-stockfish",
        {"Skill Level": "-20", "USI_Hash": "16"},
        {"byoyomi": 50},
    )
    assert parse_usi_spec("fairy-stockfish")[2] == {"byoyomi": 100}
    assert parse_usi_spec("yaneuraou;nodes=1000;depth=3")[2] == {"nodes": 1000, "depth": 3}
    assert parse_spec("usi:fairy-stockfish;movetime=30") == ("usi", "fairy-stockfish;movetime=30")
    for bad, why in [
        ("usi:", "needs the engine's command line"),
        ("usi:fairy-stockfish;Skill Level", "not NAME=VALUE"),
        ("usi:fairy-stockfish;byoyomi=soon", "not a whole number"),
        ("usi:fairy-stockfish;byoyomi=0", "at least 1"),
    ]:
        with pytest.raises(ConfigError, match=why):
            parse_spec(bad)
    with pytest.raises(ConfigError, match="not found on PATH"):
        make_player("usi:no-such-engine-here", 0)


def test_usi_player_reads_bestmove() -> None:
    """The player's reading of ``bestmove`` (no engine needed): USI moves, a resignation, and a
    declaration our rules did not make (never a legal action: the referee forfeits it)."""
    shogi = Shogi(max_plies=100, history=0)
    player = UsiPlayer.__new__(UsiPlayer)
    player.game, player.limits = shogi, {"byoyomi": 50}
    s = shogi.initial_state()
    assert player.read_move(s, "7g7f") == shogi.parse_usi(s, "7g7f")
    assert player.read_move(s, "resign") == RESIGN
    assert player.read_move(s, "win") not in shogi.legal_actions(s)
    assert player.read_move(s, "5e5d") not in shogi.legal_actions(s)  # well formed, illegal
    with pytest.raises(ValueError, match="not a USI move"):
        player.read_move(s, "e2e4")
    assert player.go_line() == "go btime 0 wtime 0 byoyomi 50"
    player.limits = {"nodes": 100}
    assert player.go_line() == "go nodes 100"


def test_greedy_takes_material_and_mates_in_shogi() -> None:
    shogi = Shogi(max_plies=100, history=0)
    greedy = GreedyPlayer(0)
    greedy.new_game(shogi)
    # sente's rook on 2h can take gote's rook on 2b (promoting: the most material)
    s = shogi.from_sfen("4k4/7r1/9/9/9/9/9/7R1/4K4 b - 1")
    assert shogi.usi(s, greedy.genmove(0, s)) == "2h2b+"
    s = shogi.from_sfen(MATE_IN_ONE)
    assert shogi.usi(s, greedy.genmove(0, s)) == "G*5b"
    assert shogi.material(shogi.initial_state(), 0) == 0
    with pytest.raises(ConfigError, match="plays chess and shogi"):
        GreedyPlayer(0).new_game(make_game("othello"))


def test_each_engine_player_refuses_the_other_game() -> None:
    """A USI engine plays shogi, a UCI engine chess: refused before a word is sent (``true``
    stands in for the engine)."""
    for spec, game, why in [
        ("usi:true", make_game("chess"), "usi:true plays shogi, not chess"),
        ("uci:true", make_game("shogi"), "uci:true plays chess, not shogi"),
    ]:
        player = make_player(spec, 0)
        try:
            with pytest.raises(ConfigError, match=why):
                player.new_game(game)
        finally:
            player.close()


def test_greedy_beats_random_under_the_referee() -> None:
    shogi = Shogi(max_plies=160, history=0)
    r = play_game(shogi, GreedyPlayer(1), RandomPlayer(2))
    _played_by_the_rules(shogi, r)
    assert r.winner == 0  # greedy takes what random leaves hanging, and mates
    _replays_in_cshogi(shogi, record_text(shogi, r, ("greedy", "random")), r)


def _played_by_the_rules(shogi: Shogi, r: GameRecord) -> None:
    assert r.reason not in ("forfeit", "disputed"), (r.reason, r.why)
    s = shogi.initial_state()
    for a in r.moves:
        assert a in shogi.legal_actions(s)
        s = shogi.apply(s, a)
    assert s.over or r.reason == "resign"


def _replays_in_cshogi(shogi: Shogi, text: str, r: GameRecord) -> None:
    """The CSA record read by cshogi (an implementation nobody here wrote): every move legal
    there, the same moves as ours, the same final position, the end written down."""
    cshogi = pytest.importorskip("cshogi")
    from cshogi import CSA

    parsed = CSA.Parser.parse_str(text)[0]
    board = cshogi.Board()
    s = shogi.initial_state()
    assert len(parsed.moves) == len(r.moves)
    for m, a in zip(parsed.moves, r.moves):
        assert board.is_legal(m), (cshogi.move_to_usi(m), board.sfen())
        assert cshogi.move_to_usi(m) == shogi.usi(s, a)
        board.push(m)
        s = shogi.apply(s, a)
    assert board.sfen().split()[:3] == shogi.to_sfen(s).split()[:3]
    ending = {"resign": "%TORYO"}.get(r.reason) or {
        "mate": "%TSUMI",
        "ply cap": "%HIKIWAKE",
        "declaration": "%KACHI",
    }.get(shogi.end_reason(s), "%SENNICHITE")
    assert parsed.endgame == ending, (parsed.endgame, shogi.end_reason(s))


@needs_fsf
def test_azserve_usi_plays_fairy_stockfish_to_the_end(tmp_path: Path) -> None:
    """Both sides are USI engines in their own processes (ours: ``azserve usi`` on a tiny
    random-weights checkpoint, 4 nodes a move, capped at 120 plies; theirs: Fairy-Stockfish at
    its weakest), refereed by our rules, each colour once; the records replay in cshogi."""
    shogi = Shogi(max_plies=120, history=0)
    checkpoint = shogi_checkpoint(tmp_path / "run", plies=120)
    ours = UsiPlayer(
        " ".join([*azserve_cmd(), "usi", "--checkpoint", str(checkpoint), "--sims", "4"])
        + ";nodes=4"
    )
    theirs = UsiPlayer(WEAKEST)
    try:
        for first, second in ((ours, theirs), (theirs, ours)):
            r = play_game(shogi, first, second)
            _played_by_the_rules(shogi, r)
            text = record_text(shogi, r, (first.name, second.name))
            _replays_in_cshogi(shogi, text, r)
    finally:
        ours.close()
        theirs.close()


@needs_fsf
def test_match_against_fairy_stockfish_writes_csa(tmp_path: Path) -> None:
    checkpoint = shogi_checkpoint(tmp_path / "run", plies=100)
    out = tmp_path / "match"
    p = subprocess.run(
        [
            *azserve_cmd(),
            "match",
            "--checkpoint",
            str(checkpoint),
            "--opponent",
            f"usi:{WEAKEST}",
            "--games",
            "2",
            "--sims",
            "2",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    summary = json.loads((out / "match.json").read_text())
    assert summary["games"] == 2 and summary["forfeits"] == {"ours": 0, "theirs": 0}
    assert summary["disputed"] == 0
    assert summary["as_sente"]["games"] == summary["as_gote"]["games"] == 1
    assert set(summary["results"]) <= {"sente wins", "gote wins", "draw"}
    games = sorted(out.glob("game-*.csa"))
    assert len(games) == 2
    shogi = Shogi(max_plies=100, history=0)
    cshogi = pytest.importorskip("cshogi")
    from cshogi import CSA

    for path in games:
        parsed = CSA.Parser.parse_file(str(path))[0]
        board, s = cshogi.Board(), shogi.initial_state()
        for m in parsed.moves:
            assert board.is_legal(m)
            s = shogi.apply(s, shogi.parse_usi(s, cshogi.move_to_usi(m)))
            board.push(m)
        ended = ("%TSUMI", "%HIKIWAKE", "%SENNICHITE", "%KACHI")
        assert (s.over and parsed.endgame in ended) or parsed.endgame == "%TORYO"
    assert "N-usi:fairy-stockfish" in games[0].read_text()
    assert "N+usi:fairy-stockfish" in games[1].read_text()
