"""``azserve uci``: the real command (a tiny random-weights chess checkpoint) driven as
cutechess-cli drives an engine: the handshake, positions, every kind of ``go``, ``stop`` during
an infinite search, ``isready`` while searching, malformed input answered without a crash, and
a whole game played move by move to its end."""

from __future__ import annotations

import queue
import subprocess
import threading
from dataclasses import replace
from pathlib import Path

import pytest

from actors.games.chess.rules import Chess
from azserve.config.schema import load_config, to_dict
from azserve.engines.uci import OPTIONS, Limits, UciError, centipawns, depth_nodes, parse_go
from learner.checkpoint import save_checkpoint
from learner.trainer import Trainer
from tests.test_cli import azserve_cmd

pytestmark = pytest.mark.usefixtures("torch_one_thread")

REPO = Path(__file__).resolve().parents[1]


def chess_checkpoint(directory: Path, plies: int = 256) -> Path:
    """A learner checkpoint of a one-block, 8-channel chess net."""
    cfg = load_config(
        REPO / "configs" / "chess.toml",
        [
            "net.blocks=1",
            "net.channels=8",
            "backend.torch.compile=none",
            f"game=chess(max_plies={plies},history=1)",
        ],
    )
    trainer = Trainer(replace(cfg.net, seed=5), replace(cfg.trainer, device="cpu"))
    return save_checkpoint(directory / "checkpoints", 40, 5, trainer.state_dict(), to_dict(cfg))


class Uci:
    """The engine as a subprocess, read line by line on a thread (as a GUI does)."""

    def __init__(self, checkpoint: Path) -> None:
        self.p = subprocess.Popen(
            [*azserve_cmd(), "uci", "--checkpoint", str(checkpoint), "--sims", "4"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            bufsize=1,
        )
        self.lines: queue.Queue[str] = queue.Queue()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.p.stdout is not None
        for line in self.p.stdout:
            self.lines.put(line.rstrip("\n"))

    def send(self, line: str) -> None:
        assert self.p.stdin is not None
        self.p.stdin.write(line + "\n")
        self.p.stdin.flush()

    def until(self, prefix: str, timeout: float = 60.0) -> list[str]:
        """Lines up to and including the first that starts with ``prefix``."""
        out = []
        while True:
            try:
                line = self.lines.get(timeout=timeout)
            except queue.Empty:
                raise AssertionError(f"no {prefix!r} line; got {out}") from None
            out.append(line)
            if line.startswith(prefix):
                return out

    def close(self) -> int:
        """``quit``: the exit status."""
        self.send("quit")
        return self.p.wait(timeout=30)

    def shutdown(self) -> None:
        """Killed if still running; every pipe closed."""
        if self.p.poll() is None:
            self.p.kill()
            self.p.wait()
        self.reader.join(timeout=10)
        for pipe in (self.p.stdin, self.p.stdout, self.p.stderr):
            if pipe is not None:
                pipe.close()


def test_a_uci_session_with_the_real_command(tmp_path: Path) -> None:
    chess = Chess(max_plies=256, history=1)
    engine = Uci(chess_checkpoint(tmp_path / "run"))
    try:
        engine.send("uci")
        hello = engine.until("uciok")
        assert any(line.startswith("id name azserve") for line in hello)
        engine.send("isready")
        engine.until("readyok")
        engine.send("ucinewgame")
        engine.send("position startpos moves e2e4 e7e5 g1f3")
        engine.send("go nodes 12")
        out = engine.until("bestmove")
        s = chess.initial_state()
        for m in ["e2e4", "e7e5", "g1f3"]:
            s = chess.apply(s, chess.parse_uci(s, m))
        best = out[-1].split()[1]
        chess.parse_uci(s, best)  # legal for black, or ValueError
        info = [line for line in out if line.startswith("info depth")]
        assert info and " nodes 12 " in info[-1] and " score cp " in info[-1]
        pv = info[-1].split(" pv ")[1].split()
        assert pv[0] == best
        engine.send("go nodes 12")  # the same position again: 12 more, counted afresh
        again = [line for line in engine.until("bestmove") if line.startswith("info depth")]
        assert " nodes 12 " in again[-1]
        # an infinite search ends on stop, answering isready meanwhile
        engine.send(
            "position fen r3k2r/p1ppqpb1/bn2pnp1/3PN3/1p2P3/2N2Q1p/PPPBBPPP/R3K2R w KQkq - 0 1"
        )
        engine.send("go infinite")
        engine.send("isready")
        engine.until("readyok")
        engine.send("stop")
        out = engine.until("bestmove")
        kiwi = chess.from_fen(
            "r3k2r/p1ppqpb1/bn2pnp1/3PN3/1p2P3/2N2Q1p/PPPBBPPP/R3K2R w KQkq - 0 1"
        )
        chess.parse_uci(kiwi, out[-1].split()[1])
        for go in ["go movetime 200", "go wtime 2000 btime 2000 winc 10 binc 10 movestogo 5"]:
            engine.send(go)
            chess.parse_uci(kiwi, engine.until("bestmove")[-1].split()[1])
        # malformed input: answered, the last good position kept
        for bad, why in [
            ("position fen 8/8/8 w - - 0 1", "8 ranks"),
            ("position startpos moves e2e5", "illegal"),
            ("position startpos moves e2e4 xx", "not a UCI move"),
            ("position somewhere", "startpos or fen"),
            ("go nodes lots", "not a whole number"),
            ("go sideways", "unknown limit"),
            ("flip", "unknown command"),
        ]:
            engine.send(bad)
            line = engine.until("info string error")[-1]
            assert why in line, (bad, line)
        engine.send("go nodes 4")
        chess.parse_uci(kiwi, engine.until("bestmove")[-1].split()[1])
        # a finished game: no move to give
        engine.send("position fen 7k/6Q1/6K1/8/8/8/8/8 b - - 0 1")
        engine.send("go nodes 4")
        assert engine.until("bestmove")[-1] == "bestmove 0000"
        assert engine.close() == 0
    finally:
        engine.shutdown()


def test_the_engine_plays_a_whole_game_against_itself(tmp_path: Path) -> None:
    """As cutechess-cli does: ``position startpos moves ...`` with every move so far, then
    ``go``; each bestmove is legal, until the game ends (the checkpoint's ply cap: 40)."""
    chess = Chess(max_plies=40, history=1)
    engine = Uci(chess_checkpoint(tmp_path / "run", plies=40))
    try:
        engine.send("uci")
        engine.until("uciok")
        engine.send("ucinewgame")
        s, moves = chess.initial_state(), []
        while not s.over:
            engine.send("position startpos" + (" moves " + " ".join(moves) if moves else ""))
            engine.send("go nodes 3")
            best = engine.until("bestmove")[-1].split()[1]
            s = chess.apply(s, chess.parse_uci(s, best))
            moves.append(best)
        assert len(moves) <= 40
        assert engine.close() == 0
    finally:
        engine.shutdown()


def test_go_limits() -> None:
    assert parse_go(["nodes", "100"], True) == Limits(nodes=100)
    assert parse_go(["movetime", "1000"], True).movetime_ms == 1000 - 30
    clock = parse_go(["wtime", "60000", "btime", "1000", "winc", "0", "binc", "100"], False)
    assert clock.movetime_ms is not None and 0 < clock.movetime_ms <= 500
    assert parse_go(["infinite"], True).infinite
    for bad in (["nodes"], ["nodes", "-1"], ["fast"]):
        with pytest.raises(UciError):
            parse_go(bad, True)
    assert centipawns(0.0) == 0 and centipawns(0.5) == 111 and centipawns(-1.0) < -10000


def test_depth_and_mate_become_node_budgets() -> None:
    assert depth_nodes(1) == 16 and depth_nodes(5) == 256 and depth_nodes(40) == 2**17
    depth = parse_go(["depth", "5"], True)
    assert depth.nodes == 256 and "go depth 5: searching 256 nodes" in depth.note
    mate = parse_go(["mate", "2"], True)  # 3 plies
    assert mate.nodes == depth_nodes(3) and "proves no mate" in mate.note
    assert parse_go(["depth", "5", "nodes", "100"], True).nodes == 100  # the smaller budget
    assert OPTIONS[0].parse("12") == 12
    with pytest.raises(UciError, match="not in 1..256"):
        next(o for o in OPTIONS if o.name == "Batch").parse("0")
    with pytest.raises(UciError, match="expected one of"):
        next(o for o in OPTIONS if o.name == "Algorithm").parse("alphabeta")


def test_python_chess_drives_the_engine_with_its_default_timeout(tmp_path: Path) -> None:
    """python-chess's ``popen_uci`` (10 s for ``uciok``): the handshake comes before the net is
    loaded; the options are announced and taken; depth and mate are node budgets."""
    pytest.importorskip("chess")
    import chess.engine

    checkpoint = chess_checkpoint(tmp_path / "run")
    cmd = [*azserve_cmd(), "uci", "--checkpoint", str(checkpoint), "--sims", "4"]
    engine = chess.engine.SimpleEngine.popen_uci(cmd)
    try:
        assert engine.id["name"].startswith("azserve")
        assert {"Nodes", "Batch", "Algorithm", "MoveOverhead"} <= set(engine.options)
        engine.configure({"Batch": 4, "Algorithm": "puct"})
        board = chess.Board()
        board.push_uci("e2e4")
        info = engine.analyse(board, chess.engine.Limit(nodes=24))
        assert info["nodes"] == 24 and info["nps"] > 0 and info["pv"][0] in board.legal_moves
        played = engine.play(board, chess.engine.Limit(depth=2))
        assert played.move in board.legal_moves
        played = engine.play(board, chess.engine.Limit(mate=1))
        assert played.move in board.legal_moves
    finally:
        engine.quit()


def test_setoption_and_unknown_options_over_the_pipe(tmp_path: Path) -> None:
    engine = Uci(chess_checkpoint(tmp_path / "run"))
    try:
        engine.send("uci")
        hello = engine.until("uciok", timeout=10)  # before the net: no wait for compiling
        assert "option name Batch type spin default 8 min 1 max 256" in hello
        engine.send("setoption name Hash value 64")
        assert "unknown option 'Hash'" in engine.until("info string")[-1]
        engine.send("setoption name Batch value 999")
        assert "not in 1..256" in engine.until("info string error")[-1]
        engine.send("setoption name Nodes value 6")
        engine.send("go")  # no limits: the Nodes option
        out = engine.until("bestmove")
        assert " nodes 6 " in [line for line in out if line.startswith("info depth")][-1]
        engine.send("go depth 1")
        out = engine.until("bestmove")
        assert (
            out[0] == "info string go depth 1: searching 16 nodes (a tree search has no "
            "depth limit; 2**(plies+3) nodes)"
        )
        assert " nodes 16 " in out[-2]
        assert engine.close() == 0
    finally:
        engine.shutdown()
