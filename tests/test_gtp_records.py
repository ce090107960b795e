"""The GTP engine in-process (a scripted move source: the tests are about the protocol):
handicap placement against the real GnuGo's, time controls and the time genmove may spend,
resignation, and SGF: our writer read back by our reader (``loadsgf``), GnuGo-written SGF
loaded to the same position GnuGo holds."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import pytest

from actors.games.go.rules import Go
from actors.games.go.sgf import SgfError, parse_nodes, read
from azserve.engines.gtp.board import GtpError, free_handicap_points, handicap_points
from azserve.engines.gtp.clock import MIN_SECONDS, SAFETY, Clock
from azserve.engines.gtp.engine import Engine
from tests.test_gtp import Scripted

GNUGO = shutil.which("gnugo") or shutil.which("gnugo", path="/usr/games")
needs_gnugo = pytest.mark.skipif(
    GNUGO is None,
    reason="GnuGo not installed (Debian: apt-get install gnugo; make test installs it as root)",
)


def gnugo_session(commands: list[str]) -> list[str]:
    """GnuGo's replies (the text after ``= ``) to ``commands``."""
    assert GNUGO is not None
    p = subprocess.run(
        [GNUGO, "--mode", "gtp", "--level", "0", "--chinese-rules"],
        input="\n".join([*commands, "quit"]) + "\n", capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    blocks = [b.strip() for b in p.stdout.split("\n\n") if b.strip()]
    assert all(b.startswith("=") for b in blocks), blocks
    return [b[1:].strip() for b in blocks]


@needs_gnugo
@pytest.mark.parametrize(("size", "stones"), [(9, 2), (9, 5), (9, 9), (13, 6), (13, 7),
                                              (19, 3), (19, 8), (7, 4), (10, 4)])  # fmt: skip
def test_fixed_handicap_matches_gnugo(size: int, stones: int) -> None:
    theirs = gnugo_session([f"boardsize {size}", f"fixed_handicap {stones}"])[1].split()
    go = Go(size)
    ours = [go.format_move(p) for p in handicap_points(size, stones)]
    assert sorted(ours) == sorted(theirs)


def test_handicap_commands() -> None:
    e = Engine(Scripted([]))
    assert e.reply("fixed_handicap 3") == "= C3 G7 C7\n\n"
    assert e.board.state.color == 1 and len(e.board.stones(0)) == 3  # white to move
    assert e.reply("fixed_handicap 2") == "? board not empty\n\n"
    assert e.reply("clear_board") == "=\n\n"
    out = e.reply("place_free_handicap 12") or ""
    points = out.removeprefix("= ").split()
    assert len(set(points)) == 12 and {"C3", "G7", "C7", "G3", "E5"} <= set(points)
    assert len(free_handicap_points(19, 30)) == 30
    with pytest.raises(GtpError, match="invalid number of stones"):
        free_handicap_points(9, 81)
    assert e.reply("clear_board") == "=\n\n"
    assert e.reply("set_free_handicap D4 D4").startswith("? bad vertex list")
    assert e.reply("set_free_handicap D4 pass").startswith("? bad vertex list")
    assert e.reply("set_free_handicap D4 F6 J9") == "=\n\n"
    assert sorted(e.board.stones(0)) == sorted(
        e.board.game.parse_move(v) for v in ("D4", "F6", "J9")
    )


def test_the_clock_gives_each_move_its_share() -> None:
    c = Clock()
    assert c.allowance(0, 81) is None  # no time settings: no limit
    c.time_settings(["300", "0", "0"])  # absolute: 5 minutes
    assert c.allowance(0, 81) == pytest.approx(300 / 40.5)
    c.time_left(0, ["30", "0"])
    assert c.allowance(0, 10) == pytest.approx(30 / 10)  # at least MIN_MOVES moves to share
    c.time_left(0, ["0", "0"])
    assert c.allowance(0, 10) == MIN_SECONDS
    c.time_settings(["0", "30", "5"])  # Canadian from the start: 30 s for 5 stones
    assert c.allowance(1, 81) == pytest.approx(30 / 5 * SAFETY)
    c.time_left(1, ["10", "2"])
    assert c.allowance(1, 81) == pytest.approx(10 / 2 * SAFETY)
    c.kgs_time_settings(["byoyomi", "0", "10", "3"])  # Japanese byo-yomi, no main time
    assert c.allowance(0, 81) == pytest.approx(10 * SAFETY)
    c.time_settings(["0", "1", "0"])  # GTP's "no time limit"
    assert c.allowance(0, 81) is None
    for bad in (["1"], ["x", "0", "0"], ["1", "2", "1.5"], ["inf", "0", "0"]):
        with pytest.raises(GtpError, match="syntax error"):
            c.time_settings(bad)
    with pytest.raises(GtpError, match="unknown time system"):
        c.kgs_time_settings(["hourglass", "5"])


def test_genmove_spends_the_clock_and_resigns_below_the_threshold() -> None:
    src = Scripted([40, 41, 42], winrate=0.5)
    e = Engine(src, sims=50, resign=0.1)
    assert e.reply("genmove b") == "= E5\n\n"
    assert src.asked[-1] == (0, 50, None)  # no clock: the full budget, no deadline
    assert e.reply("time_settings 100 0 0") == "=\n\n"
    before = time.monotonic()
    assert e.reply("genmove w") == "= F5\n\n"
    color, visits, deadline = src.asked[-1]
    assert color == 1 and visits == 50 and deadline is not None
    assert before < deadline <= time.monotonic() + 100 / 39.5
    src.winrate = 0.05  # below --resign 0.1
    assert e.reply("genmove b") == "= resign\n\n"
    assert len(e.board.moves) == 2  # a resignation is not a move
    keep = Engine(Scripted([42], winrate=0.05), sims=50)  # --resign 0: never
    assert keep.reply("genmove b") == "= G5\n\n"


def test_our_sgf_reads_back_with_comments_setup_and_names(tmp_path: Path) -> None:
    src = Scripted([40, 30])
    e = Engine(src, name="azserve", version="0.1.0-go9-step40-wdeadbeef")
    for line in ["komi 6.5", "fixed_handicap 2", "play w D5", "play w D6", "genmove b",
                 "genmove w", "play b pass"]:  # fmt: skip
        assert (e.reply(line) or "").startswith("="), line
    path = tmp_path / "game.sgf"
    assert e.reply(f"printsgf {path}") == "=\n\n"
    text = path.read_text()
    assert "PB[azserve 0.1.0-go9-step40-wdeadbeef]" in text and "PW[azserve" in text
    assert "DT[" in text and "HA[2]" in text and "KM[6.5]" in text
    rec = read(text)
    assert rec.size == 9 and rec.komi == 6.5 and rec.handicap == 2
    assert sorted(p for _, p in rec.setup) == sorted(handicap_points(9, 2))
    assert [c for c, _ in rec.moves] == [1, 1, 0, 1, 0]  # white twice: colours kept
    assert rec.moves[2] == (0, 40) and rec.moves[4] == (0, None)
    assert rec.comments[2].startswith("win rate 50.0%") and rec.comments[0] == ""
    again = Engine(Scripted([]))
    assert again.reply(f"loadsgf {path}") == "=\n\n"
    assert again.board.state == e.board.state and again.board.game.komi == 6.5
    assert again.reply(f"loadsgf {path} 3") == "=\n\n"  # the position before move 3
    assert len(again.board.moves) == 2 and again.board.state.color == 0


def test_the_sgf_reader_follows_the_main_line_and_refuses_what_it_cannot_read() -> None:
    text = "(;GM[1]SZ[9]C[a \\] b\\\\]AB[aa:bb]; B[ee]C[first] (;W[ff];B[]) (;W[gg]))"
    nodes = parse_nodes(text)
    assert [sorted(n) for n in nodes] == [["AB", "C", "GM", "SZ"], ["B", "C"], ["W"], ["B"]]
    rec = read(text)
    assert rec.info["C"] == "a ] b\\" and len(rec.setup) == 4
    assert rec.moves == [(0, 40), (1, 3 * 9 + 5), (0, None)]  # ff = F4
    for bad, why in [("nothing", "no '\\(;'"), ("(;GM[2])", "not a Go record"),
                     ("(;SZ[30])", "2..25"), ("(;SZ[9];B[zz])", "off the 9x9"),
                     ("(;SZ[9];B[ee]", "a '\\)' is missing"), ("(;C[open)", "']' is missing")]:  # fmt: skip
        with pytest.raises(SgfError, match=why):
            read(bad)
    e = Engine(Scripted([]))
    assert e.reply("loadsgf /dev/null").startswith("? cannot load file '/dev/null': not SGF")


@needs_gnugo
def test_gnugo_written_sgf_loads_to_gnugos_position(tmp_path: Path) -> None:
    path = tmp_path / "gnugo.sgf"
    cmds = ["boardsize 9", "komi 5.5", "fixed_handicap 3", "genmove w", "genmove b",
            "genmove w", "play b pass", "genmove w", f"printsgf {path}",
            "list_stones black", "list_stones white"]  # fmt: skip
    out = gnugo_session(cmds)
    black, white = set(out[-3].split()), set(out[-2].split())  # then quit's reply
    e = Engine(Scripted([]))
    assert e.reply(f"loadsgf {path}") == "=\n\n", path.read_text()
    fmt = e.board.game.format_move
    assert {fmt(p) for p in e.board.stones(0)} == black
    assert {fmt(p) for p in e.board.stones(1)} == white
    assert e.board.game.komi == 5.5
