"""Dead stones and the score at the end of a Go game (``final_score``, ``final_status_list``):
the Monte Carlo status estimate against the real GnuGo's own scoring of the same finished
games, dead stones left on the board included (skipped, saying why, only where GnuGo is not
installed: scripts/system_deps.sh installs it)."""

from __future__ import annotations

import random
import shutil
import subprocess

import pytest

from actors.games.go import status as go_status
from actors.games.go.rules import Go
from azserve.engines.gtp.engine import Engine
from tests.test_gtp import Scripted

GNUGO = shutil.which("gnugo") or shutil.which("gnugo", path="/usr/games")
needs_gnugo = pytest.mark.skipif(
    GNUGO is None,
    reason="GnuGo not installed (Debian: apt-get install gnugo; make test installs it as root)",
)


class GnuGo:
    """A GnuGo process under area rules, *without* --capture-all-dead: it passes with dead
    stones on the board and removes them when it scores."""

    def __init__(self, seed: int = 0, level: int = 1) -> None:
        assert GNUGO is not None
        argv = [GNUGO, "--mode", "gtp", "--level", str(level), "--chinese-rules",
                "--positional-superko", "--seed", str(seed)]  # fmt: skip
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def send(self, command: str) -> str:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        lines = []
        while True:
            line = self.proc.stdout.readline()
            assert line, f"gnugo exited on {command!r}"
            if not line.strip() and lines:
                break
            if line.strip():
                lines.append(line.rstrip("\n"))
        text = "\n".join(lines)
        assert text.startswith("="), (command, text)
        return text[1:].strip()

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                pipe.close()


def dead_stone_opening(go: Go) -> list[str]:
    """Black walls column E, white column F, then a lone white stone at B5 deep in black's
    area: dead to any Go player, alive to Tromp-Taylor as the stones stand."""
    moves = []
    for row in range(1, 10):
        moves += [f"E{row}", f"F{row}"]
    return [*moves, "pass", "B5", "pass", "pass"]


def engine_after(moves: list[str]) -> Engine:
    e = Engine(Scripted([]))
    for i, m in enumerate(moves):
        assert e.reply(f"play {'bw'[i % 2]} {m}") == "=\n\n", m
    return e


def chains(text: str) -> set[frozenset[str]]:
    """A final_status_list reply as a set of chains (each a set of vertices)."""
    body = text.removeprefix("=").strip()
    return {frozenset(line.split()) for line in body.split("\n") if line.strip()}


def test_a_lone_stone_in_the_opponents_area_is_dead_and_scored_as_such() -> None:
    go = Go(9)
    e = engine_after(dead_stone_opening(go))
    assert go.format_score(e.board.state) == "W+35.5"  # as the stones stand: B5 spoils 36 points
    assert e.reply("final_score") == "= B+1.5\n\n"
    assert chains(e.reply("final_status_list dead") or "") == {frozenset({"B5"})}
    alive = chains(e.reply("final_status_list alive") or "")
    assert frozenset(f"E{r}" for r in range(1, 10)) in alive
    assert frozenset(f"F{r}" for r in range(1, 10)) in alive
    assert e.reply("final_status_list seki") == "=\n\n"
    assert e.reply("final_status_list bogus").startswith("? syntax error: status 'bogus'")


def test_two_eyed_groups_live_and_the_estimate_is_seeded() -> None:
    """A white group with two real eyes inside black's area lives; the same position always
    gets the same ownership."""
    go = Go(9)
    board = bytearray([1] * 81)  # black everywhere, with two eyes at E5 and F6
    white = ["B1", "D1", "E1", *(f"{c}{r}" for c in "ABCDE" for r in (2, 3))]
    for v in white:
        board[go.parse_move(v)] = 2
    for v in ["A1", "C1", "E5", "F6"]:  # white's two eyes, black's two
        board[go.parse_move(v)] = 0
    owned = go_status.ownership(9, bytes(board), playouts=40, seed=1)
    again = go_status.ownership(9, bytes(board), playouts=40, seed=1)
    assert (owned == again).all()
    status = {c.color: c.status for c in go_status.chain_statuses(9, bytes(board), owned)}
    assert status == {1: "alive", 2: "alive"}


@needs_gnugo
def test_final_score_agrees_with_gnugo_with_a_dead_group_left_on_the_board() -> None:
    go = Go(9)
    moves = dead_stone_opening(go)
    gnugo = GnuGo()
    try:
        gnugo.send("boardsize 9")
        gnugo.send("komi 7.5")
        for i, m in enumerate(moves):
            gnugo.send(f"play {'bw'[i % 2]} {m}")
        theirs = gnugo.send("final_score")
        their_dead = chains("= " + gnugo.send("final_status_list dead"))
    finally:
        gnugo.close()
    e = engine_after(moves)
    assert theirs == "B+1.5"
    assert e.reply("final_score") == f"= {theirs}\n\n"
    assert chains(e.reply("final_status_list dead") or "") == their_dead


@needs_gnugo
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_final_score_agrees_with_gnugo_on_finished_games(seed: int) -> None:
    """GnuGo plays both sides from a few random opening moves until both pass (dead stones
    stay on the board: no --capture-all-dead); our engine, told the same moves, scores the
    game as GnuGo does, the dead stones the same."""
    go = Go(9)
    gnugo = GnuGo(seed)
    e = Engine(Scripted([]))
    rng = random.Random(seed)
    s = go.initial_state()
    try:
        gnugo.send("boardsize 9")
        gnugo.send("komi 7.5")
        while not go.is_terminal(s):
            color = "bw"[s.color]
            if s.ply < 4:
                move = go.format_move(rng.choice(go.legal_actions(s)[:-1]))
                gnugo.send(f"play {color} {move}")
            else:
                move = gnugo.send(f"genmove {color}")
            if move.lower() == "resign":
                pytest.skip(f"GnuGo resigned in game {seed}: nothing to score")
            s = go.apply(s, go.parse_move(move))
            assert e.reply(f"play {color} {move}") == "=\n\n"
        theirs = gnugo.send("final_score")
        their_dead = chains("= " + gnugo.send("final_status_list dead"))
    finally:
        gnugo.close()
    assert e.reply("final_score") == f"= {theirs}\n\n"
    ours = chains(e.reply("final_status_list dead") or "")
    assert ours == their_dead
