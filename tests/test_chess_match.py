"""Chess against engines nobody here wrote: a UCI player spec, the greedy mover, PGN, and real
Stockfish (installed by scripts/system_deps.sh, as GnuGo is) playing whole games refereed by
our rules: against ``azserve uci`` (the engine a GUI would run) and through ``azserve match``."""

from __future__ import annotations

import json
import random
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from actors.games import make_game
from actors.games.chess.pgn import pgn
from actors.games.chess.rules import Chess
from azserve.arena.players import RandomPlayer, make_player, parse_spec
from azserve.arena.players.uci import GreedyPlayer, UciPlayer
from azserve.arena.referee import GameRecord, play_game
from azserve.config.player_spec import parse_uci_spec
from azserve.errors import ConfigError
from tests.test_cli import azserve_cmd
from tests.test_uci import chess_checkpoint

pytestmark = pytest.mark.usefixtures("torch_one_thread")

STOCKFISH = shutil.which("stockfish") or shutil.which("stockfish", path="/usr/games")
needs_stockfish = pytest.mark.skipif(
    STOCKFISH is None, reason="stockfish not installed (scripts/system_deps.sh installs it)"
)
WEAKEST = "stockfish;Skill Level=0;movetime=20"


def test_uci_specs() -> None:
    assert parse_uci_spec("stockfish;Skill Level=0;UCI_LimitStrength=true;movetime=50") == (
        "stockfish",
        {"Skill Level": "0", "UCI_LimitStrength": "true"},
        {"movetime": 50},
    )
    assert parse_uci_spec("stockfish -x")[2] == {"movetime": 100}
    assert parse_spec("uci:stockfish;nodes=100") == ("uci", "stockfish;nodes=100")
    assert parse_spec("greedy") == ("greedy", "")
    for bad, why in [
        ("uci:", "needs the engine's command line"),
        ("uci:stockfish;Skill Level", "not NAME=VALUE"),
        ("uci:stockfish;movetime=fast", "not a whole number"),
        ("uci:stockfish;nodes=0", "at least 1"),
    ]:
        with pytest.raises(ConfigError, match=why):
            parse_spec(bad)
    with pytest.raises(ConfigError, match="not found on PATH"):
        make_player("uci:no-such-engine-here", 0)


def test_greedy_takes_material_and_mates() -> None:
    chess = Chess()
    greedy = GreedyPlayer(0)
    greedy.new_game(chess)
    s = chess.from_fen("4k3/8/8/3q4/8/8/3R4/4K3 w - - 0 1")
    assert chess.uci(s, greedy.genmove(0, s)) == "d2d5"
    s = chess.from_fen("6k1/5ppp/8/8/8/8/8/R3K3 w Q - 0 1")
    assert chess.uci(s, greedy.genmove(0, s)) == "a1a8"
    with pytest.raises(ConfigError, match="plays chess"):
        GreedyPlayer(0).new_game(make_game("othello"))


def test_pgn_of_a_game_between_greedy_and_random() -> None:
    chess = Chess(max_plies=120)
    r = play_game(chess, GreedyPlayer(1), RandomPlayer(2))
    text = pgn(chess, r, "greedy", "random", date="2026-12-05")
    assert '[White "greedy"]' in text and '[Date "2026.12.05"]' in text
    assert text.rstrip().endswith({0: "1-0", 1: "0-1", None: "1/2-1/2"}[r.winner])
    assert "1. " in text and all(len(line) <= 79 for line in text.splitlines())
    # the SAN is OpenSpiel's (an implementation nobody here wrote)
    pyspiel = pytest.importorskip("pyspiel")
    o = pyspiel.load_game("chess").new_initial_state()
    s, sans = chess.initial_state(), []
    for a in r.moves:
        sans.append(o.action_to_string(chess.openspiel_action(s, a)))
        o.apply_action(chess.openspiel_action(s, a))
        s = chess.apply(s, a)
    words = text.split("\n\n", 1)[1].split()
    assert [w for w in words if not w[0].isdigit()] == sans  # move numbers and result aside


def test_san_matches_openspiel_over_random_games() -> None:
    pyspiel = pytest.importorskip("pyspiel")
    chess = Chess(max_plies=400)
    rng = random.Random(3)
    for _ in range(5):
        s, o = chess.initial_state(), pyspiel.load_game("chess").new_initial_state()
        while not s.over:
            for a in chess.legal_actions(s):
                assert chess.san(s, a) == o.action_to_string(chess.openspiel_action(s, a))
            a = rng.choice(chess.legal_actions(s))
            o.apply_action(chess.openspiel_action(s, a))
            s = chess.apply(s, a)


def _no_illegal_move(chess: Chess, r: GameRecord) -> None:
    assert r.reason != "forfeit" and r.reason != "disputed", (r.reason, r.why)
    s = chess.initial_state()
    for a in r.moves:
        assert a in chess.legal_actions(s)
        s = chess.apply(s, a)
    assert s.over


@needs_stockfish
def test_azserve_uci_plays_stockfish_to_the_end(tmp_path: Path) -> None:
    """Both sides are UCI engines in their own processes (ours: ``azserve uci`` on a tiny
    random-weights checkpoint, capped at 120 plies), refereed by our rules, each colour once."""
    chess = Chess(max_plies=120, history=1)
    checkpoint = chess_checkpoint(tmp_path / "run", plies=120)
    ours = UciPlayer(
        " ".join([*azserve_cmd(), "uci", "--checkpoint", str(checkpoint), "--sims", "2"])
    )
    theirs = UciPlayer(WEAKEST)
    try:
        for white, black in ((ours, theirs), (theirs, ours)):
            r = play_game(chess, white, black)
            _no_illegal_move(chess, r)
    finally:
        ours.close()
        theirs.close()


@needs_stockfish
def test_match_against_stockfish_writes_pgn(tmp_path: Path) -> None:
    checkpoint = chess_checkpoint(tmp_path / "run", plies=80)
    out = tmp_path / "match"
    p = subprocess.run(
        [
            *azserve_cmd(),
            "match",
            "--checkpoint",
            str(checkpoint),
            "--opponent",
            f"uci:{WEAKEST}",
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
    # Chess's colours and results, as PGN names them (White moves first).
    assert summary["as_white"]["games"] == summary["as_black"]["games"] == 1
    assert set(summary["results"]) <= {"1-0", "0-1", "1/2-1/2"}
    games = sorted(out.glob("game-*.pgn"))
    assert len(games) == 2
    assert '[White "uci:' in games[1].read_text() and '[Black "uci:' in games[0].read_text()


def test_azserve_play_reads_san_and_uci_under_the_referee(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``azserve play`` on a chess checkpoint: the hint is chess's, the person's ``e4`` (SAN)
    and ``g1f3`` (UCI) are played, a bad move is explained and asked again, the agent's moves
    are shown in SAN, and ``q`` resigns the game the referee then scores as PGN does."""
    import argparse

    from azserve.engines.terminal import run_play

    checkpoint = chess_checkpoint(tmp_path / "run", plies=40)
    typed = iter(["e4", "g1f3", "Zz9", "q"])
    monkeypatch.setattr("builtins.input", lambda prompt="": next(typed))
    args = argparse.Namespace(checkpoint=str(checkpoint), config=None, overrides=[], game=None,
                              sims=2, first="human")  # fmt: skip
    assert run_play(args) == 0
    out = capsys.readouterr().out
    assert "moves are SAN (e4, Nf3, O-O) or UCI (e2e4, e7e8q)" in out and "columns" not in out
    assert "you are white, moving first" in out
    assert "'Zz9' is not a legal move here" in out
    said = re.findall(r"agent plays (\S+)", out)
    assert len(said) == 2 and all(re.fullmatch(r"[a-hNBRQKO][a-h1-8x=+#O-]*", m) for m in said)
    assert "0-1: the agent wins, by resignation" in out
    # The board after the person's two moves: a pawn on e4 and a knight on f3.
    assert "4 . . . . P . . ." in out and "3 . . . . . N . ." in out
