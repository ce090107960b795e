"""``azserve gtp`` driven as GUIs and referees drive it, through the real command: what GoGui's
twogtp sends (handicap, time settings, dead-stone scoring), what Sabaki sends (setup stones of
both colours, out-of-turn moves, engine analysis), what Lizzie sends (``lz-analyze`` and
``kata-analyze`` streams, stopped by the next command), and bad input (garbage, a 20 MB line,
bad komi, vertices off the board) answered with a GTP error while the engine keeps answering.
The replies are parsed as those programs parse them."""

from __future__ import annotations

import queue
import re
import subprocess
import threading
from pathlib import Path

import pytest

from actors.games.go.rules import Go
from tests.test_cli import azserve_cmd
from tests.test_gtp import go_checkpoint, replies

pytestmark = pytest.mark.usefixtures("torch_one_thread")

GO = Go(9)
# Lizzie's and Sabaki's reading of an lz-analyze line: one ``info`` block per move.
LZ_INFO = re.compile(
    r"info move (\S+) visits (\d+) winrate (\d+) prior (\d+) order (\d+) pv ((?:\S+ ?)+?)"
    r"(?= info |$)"
)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("gtp") / "run"
    go_checkpoint(run)
    return run


def run_session(checkpoint: Path, lines: list[str], *flags: str) -> list[str]:
    p = subprocess.run(
        azserve_cmd("gtp", "--checkpoint", str(checkpoint), "--sims", "4", *flags),
        input="\n".join([*lines, "quit"]) + "\n", capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert p.returncode == 0, p.stderr
    return replies(p.stdout)


def test_a_twogtp_game_with_handicap_time_and_scoring(checkpoint: Path) -> None:
    """GoGui's twogtp: identity, size, komi, fixed handicap, time settings and the clock before
    each genmove, the opponent's moves (passes here), then final_score and the dead stones."""
    session = [
        "protocol_version", "name", "version", "boardsize 9", "clear_board", "komi 0.5",
        "fixed_handicap 2", "time_settings 60 0 0", "time_left w 60 0", "genmove w",
        "play b pass", "time_left w 59 0", "genmove w", "play b pass", "genmove w",
        "final_score", "final_status_list dead", "showboard",
    ]  # fmt: skip
    r = run_session(checkpoint, session)
    assert r[0] == "= 2" and r[1] == "= azserve" and "-go9-features-step40-w" in r[2]
    assert r[3:6] == ["=", "=", "="]
    assert sorted(r[6].removeprefix("= ").split()) == ["C3", "G7"]
    assert r[7] == r[8] == "="
    ours = [r[9], r[12], r[14]]
    for reply in ours:
        move = reply.removeprefix("= ")
        assert move not in ("C3", "G7") and GO.parse_move(move) >= 0, reply
    assert r[10] == r[11] == r[13] == "="
    assert re.fullmatch(r"= (B\+|W\+)\d+(\.\d)?|= 0", r[15]), r[15]
    board = r[17]
    rows = {int(line.split()[0]): line.split()[1:10] for line in board.split("\n")[2:11]}
    for vertex in r[16].removeprefix("=").split():  # the dead are stones on the board
        assert rows[int(vertex[1:])]["ABCDEFGHJ".index(vertex[0])] in "XO", vertex
    assert len(r) == 19


def test_sabaki_setup_stones_out_of_turn_and_analysis(checkpoint: Path) -> None:
    """Sabaki loads a position by playing its stones in any order (two black in a row), sets
    handicap stones with set_free_handicap, and asks for genmove_analyze."""
    session = [
        "name", "version", "protocol_version", "list_commands", "boardsize 9", "clear_board",
        "komi 6.5", "set_free_handicap D4 F6 D6", "play w E5", "play w C5", "play b E3",
        "play b E7", "genmove_analyze w 1", "showboard", "undo", "play w A1",
        "genmove_analyze b", "clear_board", "play w E5", "genmove w",
    ]  # fmt: skip
    r = run_session(checkpoint, session)
    assert "genmove_analyze" in r[3] and "kata-analyze" in r[3]
    assert r[4:12] == ["="] * 8
    lines = r[12].split("\n")
    assert lines[0] == "=" and lines[-1].startswith("play ")
    move = lines[-1].removeprefix("play ")
    for info in lines[1:-1]:
        assert LZ_INFO.findall(info), info
    assert "X" in r[13] and "O" in r[13]
    assert r[14] == r[15] == "="
    last = r[16].split("\n")
    assert last[0] == "=" and last[-1].startswith("play ") and len(last) == 2  # no interval
    assert r[17] == r[18] == "="
    assert r[19] != "= E5" and r[19].startswith("= ")  # white to move twice: legal, not E5
    assert move != "E5"


def test_bad_input_gets_a_gtp_error_and_the_engine_keeps_answering(checkpoint: Path) -> None:
    huge = "play b " + "A" * 20_000_000
    garbage = "\x01\x02 zzz \x7f ]]]"
    session = [
        "komi nan", "komi inf", "komi -1e9", "komi 7.5x", "komi 100", "komi -6.5",
        "play b Z9", "play b A10", "play b 40", "play b D", "play x D4", "play b",
        huge, garbage, "5 genmove purple", "lz-analyze b 10 frob 3", "kata-analyze 10 maxmoves",
        "fixed_handicap 1", "fixed_handicap 10", "time_settings -5 0 0", "time_left b x 0",
        "loadsgf /no/such/file.sgf", "boardsize 9x", "final_status_list", "9 name",
    ]  # fmt: skip
    p = subprocess.run(
        azserve_cmd("gtp", "--checkpoint", str(checkpoint), "--sims", "2"),
        input="\n".join([*session, "quit"]) + "\n", capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip
    assert p.returncode == 0, p.stderr
    assert len(p.stdout) < 10_000  # the 20 MB line is never echoed
    r = replies(p.stdout)
    assert r[0] == "? syntax error: komi 'nan' must be a finite number in -81..81"
    assert r[1].startswith("? syntax error: komi 'inf'")
    assert r[2].startswith("? syntax error: komi '-1e9'")
    assert r[3] == "? syntax error: komi '7.5x' is not a number"
    assert r[4].startswith("? syntax error: komi '100'")
    assert r[5] == "="
    assert r[6].startswith("? invalid vertex 'Z9'") and "off the 9x9 board" in r[6]
    assert r[7].startswith("? invalid vertex 'A10'") and "off the 9x9 board" in r[7]
    assert r[8].startswith("? invalid vertex '40'")
    assert r[9].startswith("? invalid vertex 'D'")
    assert r[10].startswith("? invalid color 'x'")
    assert r[11].startswith("? syntax error: expected play COLOR VERTEX")
    assert r[12] == "? line too long"
    assert r[13].startswith("? unknown command")
    assert r[14].startswith("?5 invalid color 'purple'")
    assert r[15] == "? syntax error: unknown analysis key 'frob'"
    assert r[16] == "? syntax error: 'maxmoves' has no value"
    assert r[17].startswith("? invalid number of stones")
    assert r[18].startswith("? invalid number of stones: 9x9 takes 2..9")
    assert r[19].startswith("? syntax error: main time '-5'")
    assert r[20].startswith("? syntax error: time 'x'")
    assert r[21].startswith("? cannot load file '/no/such/file.sgf'")
    assert r[22].startswith("? unacceptable size")
    assert r[23].startswith("? syntax error: expected final_status_list")
    assert r[24] == "=9 azserve"
    assert r[25] == "="  # quit
    assert len(r) == 26


class Live:
    """A running ``azserve gtp`` driven line by line, as a GUI does: its stdout read by a
    thread, each read bounded so that a hang fails the test instead of blocking it."""

    def __init__(self, checkpoint: Path) -> None:
        self.proc = subprocess.Popen(
            azserve_cmd("gtp", "--checkpoint", str(checkpoint), "--sims", "8"),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            text=True, bufsize=1,
        )  # fmt: skip
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put("<eof>")

    def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def line(self) -> str:
        out = self.lines.get(timeout=120)
        assert out != "<eof>", "the engine exited"
        return out

    def close(self) -> None:
        self.send("quit")
        self.proc.wait(timeout=60)
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                pipe.close()


def test_lizzie_analysis_streams_until_the_next_command(checkpoint: Path) -> None:
    """Lizzie: ``lz-analyze 5`` streams info lines (moves legal, visits growing, win rates and
    priors in 0..10000, each pv starting with its move) until any next command, which is then
    answered; ``kata-analyze`` the same with floats; a bare newline ends a stream too."""
    live = Live(checkpoint)
    try:
        live.send("play b E5")
        assert live.line() == "=" and live.line() == ""
        live.send("lz-analyze 5")
        assert live.line() == "="
        state = GO.apply(GO.initial_state(), GO.parse_move("E5"))
        totals = []
        for _ in range(3):
            infos = LZ_INFO.findall(live.line())
            assert infos
            for k, (move, visits, winrate, prior, order, pv) in enumerate(infos):
                assert int(visits) >= 1
                assert GO.parse_move(move) in GO.legal_actions(state)
                assert 0 <= int(winrate) <= 10000 and 0 <= int(prior) <= 10000
                assert int(order) == k and pv.split()[0] == move
            totals.append(sum(int(i[1]) for i in infos))
        assert totals == sorted(totals) and totals[-1] > 0
        live.send("name")  # any command ends the stream, then gets its answer
        while (line := live.line()) != "":
            assert line.startswith("info move ")
        assert live.line() == "= azserve" and live.line() == ""
        live.send("kata-analyze w 5 maxmoves 3")
        assert live.line() == "="
        line = live.line()
        blocks = line.split("info ")[1:]
        assert 1 <= len(blocks) <= 3
        for block in blocks:
            fields = block.split()
            values = dict(zip(fields[0:12:2], fields[1:12:2]))
            assert 0.0 <= float(values["winrate"]) <= 1.0
            assert 0.0 <= float(values["prior"]) <= 1.0
            assert "scoreLead" not in values  # the net has no score head
        live.send("")  # a raw newline stops a stream
        while (line := live.line()) != "":
            assert line.startswith("info move ")
        live.send("final_score")
        assert live.line().startswith("= B+") and live.line() == ""
    finally:
        live.close()
