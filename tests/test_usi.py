"""``azserve usi``: the real command (a tiny random-weights shogi checkpoint) driven as shogi GUIs
and tournament managers drive an engine, line by line: the handshake, positions, every kind of
``go`` (clocks with byoyomi and increments, nodes, infinite, ponder), ``stop`` and ``ponderhit``,
``isready`` while searching, ``gameover``, malformed input answered without a crash, and a whole
game played move by move to its end. The session's logic (ponder, the order of input read
during a search, mate scores, resigning, playing past our ply cap) is also checked in process
on a uniform evaluator, without a net."""

from __future__ import annotations

import subprocess
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from actors.games.chess.rules import Chess
from actors.games.shogi.rules import Shogi
from actors.search import MCTSConfig
from azserve.config.schema import load_config, to_dict
from azserve.engines.commands import ProtocolError, clock_ms
from azserve.engines.search import EngineSearch, engine_mcts
from azserve.engines.uci import Engine
from azserve.engines.usi import OPTIONS, Limits, Loaded, UsiEngine, parse_go
from learner.checkpoint import save_checkpoint
from learner.trainer import Trainer
from tests.test_cli import azserve_cmd
from tests.test_uci import Uci, chess_checkpoint

pytestmark = pytest.mark.usefixtures("torch_one_thread")

REPO = Path(__file__).resolve().parents[1]
MATE_IN_ONE = "4k4/9/4G4/9/9/9/9/9/4K4 b G 1"
"""Sente drops G*5b: mate (the gold on 5c guards it; every square of the king's is covered)."""
MATED = "4k4/4G4/4G4/9/9/9/9/9/4K4 w - 1"
"""Gote to move, mated."""


def shogi_checkpoint(directory: Path, plies: int = 320) -> Path:
    """A learner checkpoint of a one-block, 8-channel shogi net (no earlier positions)."""
    cfg = load_config(
        REPO / "configs" / "shogi.toml",
        [
            "net.blocks=1",
            "net.channels=8",
            "backend.torch.compile=none",
            f"game=shogi(max_plies={plies},history=0)",
        ],
    )
    trainer = Trainer(replace(cfg.net, seed=5), replace(cfg.trainer, device="cpu"))
    return save_checkpoint(directory / "checkpoints", 40, 5, trainer.state_dict(), to_dict(cfg))


class Usi(Uci):
    """``azserve usi`` as a subprocess, read line by line on a thread (as a GUI does)."""

    def __init__(self, checkpoint: Path, *extra: str) -> None:
        import queue
        import threading

        self.p = subprocess.Popen(
            [*azserve_cmd(), "usi", "--checkpoint", str(checkpoint), "--sims", "4", *extra],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            bufsize=1,
        )
        self.lines: queue.Queue[str] = queue.Queue()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def best(self, timeout: float = 60.0) -> tuple[str, list[str]]:
        """The next ``bestmove``'s move and the info lines before it."""
        out = self.until("bestmove", timeout)
        return out[-1].split()[1], [x for x in out if x.startswith("info depth")]


def _moves(game: Shogi, sfen: str | None, moves: list[str]) -> Any:
    s = game.initial_state() if sfen is None else game.from_sfen(sfen)
    for m in moves:
        s = game.apply(s, game.parse_usi(s, m))
    return s


def test_a_usi_session_with_the_real_command(tmp_path: Path) -> None:
    shogi = Shogi(max_plies=320, history=0)
    engine = Usi(shogi_checkpoint(tmp_path / "run"))
    try:
        engine.send("usi")
        hello = engine.until("usiok", timeout=10)  # before the net: no wait for loading
        assert any(line.startswith("id name azserve") for line in hello)
        assert "option name ResignValue type spin default 99999 min 0 max 99999" in hello
        # what every USI GUI sends first: taken quietly
        engine.send("setoption name USI_Hash value 256")
        engine.send("setoption name USI_Ponder value true")
        engine.send("isready")
        assert engine.until("readyok") == ["readyok"]
        engine.send("usinewgame")
        engine.send("position startpos moves 7g7f 3c3d")
        engine.send("go nodes 12")
        best, info = engine.best()
        s = _moves(shogi, None, ["7g7f", "3c3d"])
        shogi.parse_usi(s, best)  # legal for sente, or ValueError
        assert info and " nodes 12 " in info[-1] and " score cp " in info[-1]
        assert info[-1].split(" pv ")[1].split()[0] == best
        # the clocks as shogi GUIs give them: byoyomi, increments (Fischer), sudden death
        for go in [
            "go btime 0 wtime 0 byoyomi 300",
            "go btime 60000 wtime 60000 byoyomi 200",
            "go btime 2000 wtime 2000 binc 100 winc 100",
            "go btime 1500 wtime 100",
        ]:
            engine.send(go)
            shogi.parse_usi(s, engine.best()[0])
        # an infinite search ends on stop, answering isready meanwhile
        engine.send("position sfen lnsgkgsnl/1r5b1/ppppppppp/9/9/9/PPPPPPPPP/1B5R1/LNSGKGSNL w - 1")
        engine.send("go infinite")
        engine.send("isready")
        engine.until("readyok")
        engine.send("stop")
        gote = shogi.from_sfen("lnsgkgsnl/1r5b1/ppppppppp/9/9/9/PPPPPPPPP/1B5R1/LNSGKGSNL w - 1")
        shogi.parse_usi(gote, engine.best()[0])
        # pondering: no bestmove until ponderhit (then the go's limits) or stop
        for end in ("ponderhit", "stop"):
            engine.send("go ponder btime 0 wtime 0 byoyomi 200")
            engine.send("isready")
            engine.until("readyok")
            engine.send(end)
            shogi.parse_usi(gote, engine.best()[0])
        # malformed input: answered, the last good position kept
        for bad, why in [
            ("position sfen 9/9/9 b - 1", "9 rows"),
            ("position startpos moves 7g7e", "illegal"),
            ("position startpos moves 7g7f xx", "not a USI move"),
            ("position somewhere", "startpos or sfen"),
            ("go nodes lots", "not a whole number"),
            ("go byoyomi -5", "negative"),
            ("go sideways", "unknown limit"),
            ("setoption name Batch value 0", "not in 1..256"),
            ("gameover maybe", "win, lose or draw"),
            ("flip", "unknown command"),
        ]:
            engine.send(bad)
            line = engine.until("info string error")[-1]
            assert why in line, (bad, line)
        engine.send("setoption name Hash value 64")
        assert "unknown option 'Hash'" in engine.until("info string")[-1]
        engine.send("go nodes 4")
        shogi.parse_usi(gote, engine.best()[0])
        # a mate in one: found, and scored as a mate (in plies)
        engine.send(f"position sfen {MATE_IN_ONE}")
        engine.send("go nodes 300")
        best, info = engine.best()
        assert best == "G*5b" and " score mate 1 " in info[-1]
        # mated: resign; a tsume search: not implemented, said so
        engine.send(f"position sfen {MATED}")
        engine.send("go nodes 4")
        assert engine.until("bestmove")[-2:] == [
            "info string the game is over in this position (mate)",
            "bestmove resign",
        ]
        engine.send("go mate 5")
        assert engine.until("checkmate")[-1] == "checkmate notimplemented"
        engine.send("gameover lose")
        engine.send("usinewgame")
        engine.send("position startpos")
        engine.send("go nodes 4")
        shogi.parse_usi(shogi.initial_state(), engine.best()[0])
        assert engine.close() == 0
    finally:
        engine.shutdown()


def test_the_engine_plays_a_whole_game_against_itself(tmp_path: Path) -> None:
    """As a tournament manager does: ``position startpos moves ...`` with every move so far,
    then ``go``; each bestmove is legal, until the game ends (the checkpoint's ply cap: 40)."""
    shogi = Shogi(max_plies=40, history=0)
    engine = Usi(shogi_checkpoint(tmp_path / "run", plies=40))
    try:
        engine.send("usi")
        engine.until("usiok")
        engine.send("isready")
        engine.until("readyok")
        engine.send("usinewgame")
        s, moves = shogi.initial_state(), []
        while not s.over:
            engine.send("position startpos" + (" moves " + " ".join(moves) if moves else ""))
            engine.send("go btime 0 wtime 0 byoyomi 50" if len(moves) % 2 else "go nodes 3")
            best = engine.best()[0]
            s = shogi.apply(s, shogi.parse_usi(s, best))
            moves.append(best)
        assert len(moves) <= 40
        # past our cap the GUI referees: the engine plays on from the position
        engine.send("position startpos moves " + " ".join(moves))
        engine.send("go nodes 3")
        out = engine.until("bestmove")
        assert any("playing on from the position" in line for line in out)
        again = shogi.from_sfen(" ".join(shogi.to_sfen(s).split()[:3]) + " 1")
        shogi.parse_usi(again, out[-1].split()[1])
        engine.send("gameover draw")
        assert engine.close() == 0
    finally:
        engine.shutdown()


def test_each_engine_refuses_the_other_game(tmp_path: Path) -> None:
    """``azserve usi`` plays shogi, ``azserve uci`` chess: each checkpoint's game is checked
    once loaded (``Loading``), exit status 2 and one line saying why."""
    runs = [
        ("usi", chess_checkpoint(tmp_path / "chess", plies=40), "plays shogi; this checkpoint plays chess"),
        ("uci", shogi_checkpoint(tmp_path / "shogi", plies=40), "plays chess; this checkpoint plays shogi"),
    ]  # fmt: skip
    for command, checkpoint, why in runs:
        p = subprocess.run(
            [*azserve_cmd(), command, "--checkpoint", str(checkpoint)],
            input=f"{command}\nisready\n",
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert p.returncode == 2 and why in p.stderr, (command, p.returncode, p.stderr[-500:])
        assert f"{command}ok" in p.stdout


def test_go_limits() -> None:
    assert parse_go(["nodes", "100"], True) == Limits(nodes=100)
    assert parse_go(["movetime", "1000"], True).movetime_ms == 1000 - 30
    # byoyomi: the whole of it, less the overhead, with nothing else on the clock
    assert parse_go(["btime", "0", "wtime", "0", "byoyomi", "1000"], True).movetime_ms == 970
    assert parse_go(["byoyomi", "500"], False).movetime_ms == 470
    # sente reads btime, gote wtime
    clock = ["btime", "60000", "wtime", "1000", "binc", "0", "winc", "100"]
    assert parse_go(clock, True).movetime_ms == clock_ms(60000, 0, 30, 30) == 1970
    assert parse_go(clock, False).movetime_ms == clock_ms(1000, 100, 30, 30) == 78.33333333333334
    assert parse_go(["btime", "-20", "wtime", "0"], True).movetime_ms == 1.0  # flagged: at once
    assert parse_go(["infinite"], True).infinite
    ponder = parse_go(["ponder", "btime", "0", "wtime", "0", "byoyomi", "200"], True)
    assert ponder.ponder and ponder.movetime_ms == 170
    depth = parse_go(["depth", "5"], True)
    assert depth.nodes == 256 and "go depth 5: searching 256 nodes" in depth.note
    for bad in (["nodes"], ["nodes", "-1"], ["byoyomi", "x"], ["fast"], ["mate", "3"]):
        with pytest.raises(ProtocolError):
            parse_go(bad, True)
    resign = next(o for o in OPTIONS if o.name == "ResignValue")
    assert resign.parse("300") == 300
    with pytest.raises(ProtocolError, match="not in 0..99999"):
        resign.parse("-1")


# --- the session in process, on a uniform evaluator ---------------------------------------


class Session:
    """A UsiEngine (or ``uci``: the UCI dialect of the same session, on chess) on a uniform
    evaluator (no net), its output kept, its input queued."""

    def __init__(self, plies: int = 320, nodes: int = 8, uci: bool = False) -> None:
        self.game: Any = Chess(max_plies=plies, history=0) if uci else Shogi(plies, history=0)

        async def uniform(obs: np.ndarray) -> tuple[np.ndarray, float]:
            return np.zeros(self.game.num_actions, np.float32), 0.0

        mcts = engine_mcts(MCTSConfig(num_simulations=nodes))
        loaded = Loaded(self.game, EngineSearch(uniform, mcts), nodes, "puct")
        self.out: list[str] = []
        self.input: list[str | None] = []  # None: nothing has come yet at that poll
        dialect = Engine if uci else UsiEngine
        self.engine = dialect(lambda: loaded, self.out.append, self._poll)

    def _poll(self) -> str | None:
        return self.input.pop(0) if self.input else None

    def run(self, *lines: str, during: tuple[str | None, ...] = ()) -> list[str]:
        """The output of ``lines`` (the last a ``go``), ``during`` read while it searches (what
        it leaves unread, after it)."""
        self.out.clear()
        self.input[:] = during
        for line in lines:
            self.engine.command(line)
        while self.input:  # what the search left unread, as ``serve`` reads it next
            line = self.input.pop(0)
            if line is not None:
                self.engine.command(line)
        return list(self.out)


def test_ponder_waits_for_ponderhit_or_stop() -> None:
    usi = Session()
    # pondering: the go's limits (nodes 40) do not count; 20 slices pass before the stop
    out = usi.run("position startpos", "go ponder nodes 40", during=(None,) * 20 + ("stop",))
    info = [x for x in out if x.startswith("info depth")]
    assert out[-1].startswith("bestmove") and int(info[-1].split(" nodes ")[1].split()[0]) > 600
    # ponderhit: the limits count from then (40 nodes more), isready answered meanwhile
    out = usi.run("position startpos", "go ponder nodes 40", during=("isready", "ponderhit"))
    assert out[0] == "readyok" and out[-1].startswith("bestmove")
    info = [x for x in out if x.startswith("info depth")]
    assert int(info[-1].split(" nodes ")[1].split()[0]) >= 40  # counted from the ponderhit


def test_uci_ponders_the_same_way() -> None:
    """The session is shared: ``azserve uci``'s ``go ponder`` waits for ``ponderhit`` or
    ``stop`` too (it used to search its limits at once)."""
    uci = Session(uci=True)
    out = uci.run("position startpos", "go ponder nodes 40", during=(None,) * 20 + ("stop",))
    info = [x for x in out if x.startswith("info depth")]
    assert out[-1].startswith("bestmove") and int(info[-1].split(" nodes ")[1].split()[0]) > 600
    out = uci.run("position startpos moves e2e4", "go ponder movetime 50", during=("ponderhit",))
    uci.game.parse_uci(_chess_after(uci.game, "e2e4"), out[-1].split()[1])


def _chess_after(chess: Chess, move: str) -> Any:
    s = chess.initial_state()
    return chess.apply(s, chess.parse_uci(s, move))


def test_input_read_during_a_search_keeps_its_order() -> None:
    """A ``stop`` ends the search it came during, and only that one: a later ``go``'s own
    ``stop`` (read in the same poll) ends the later search, as a fast GUI's input does."""
    usi = Session()
    out = usi.run(
        "position startpos",
        "go infinite",
        during=("stop", "position startpos moves 7g7f", "go infinite", "isready", "stop"),
    )
    said = [x.split()[0] for x in out if not x.startswith("info")]
    assert said == ["bestmove", "readyok", "bestmove"]
    gote = _moves(usi.game, None, ["7g7f"])
    usi.game.parse_usi(gote, out[-1].split()[1])  # the second search was gote's


def test_a_quit_waiting_behind_an_infinite_search_ends_it() -> None:
    """Lines read during one search wait their turn; the ``go infinite`` among them must still
    see the ``stop`` and ``quit`` that waited behind it (it once searched for ever: found by
    tests/test_fuzz_engines.py's USI stream, ``go infinite``, ``go btime 10 wtime 10``,
    ``go infinite``, ``quit``)."""
    for dialect in (Session(), Session(uci=True)):
        out = dialect.run("go infinite", during=("go nodes 4", "go infinite", "isready", "quit"))
        said = [x.split()[0] for x in out if not x.startswith("info")]
        assert said == ["readyok", "bestmove", "bestmove", "bestmove"], out
        assert dialect.engine.done  # and the quit, last, ended the session


def test_a_stop_after_a_later_go_is_that_ones() -> None:
    """A ``stop`` read during a search but after a later ``go`` ends the later search, not the
    running one (which ends by its own limits): the later ``go infinite`` is not left without
    its stop."""
    for dialect in (Session(), Session(uci=True)):
        out = dialect.run("go nodes 40", during=("go infinite", "isready", "stop"))
        said = [x.split()[0] for x in out if not x.startswith("info")]
        assert sorted(said) == ["bestmove", "bestmove", "readyok"], out
        first = out.index(next(x for x in out if x.startswith("bestmove")))
        info = [x for x in out[:first] if x.startswith("info depth")]
        assert int(info[-1].split(" nodes ")[1].split()[0]) >= 40, out  # not stopped early


def test_mate_scores_resigning_and_declaring() -> None:
    usi = Session()
    out = usi.run(f"position sfen {MATE_IN_ONE}", "go nodes 64")
    assert out[-1] == "bestmove G*5b" and " score mate 1 " in out[-2]
    # a resignation threshold: a lost position's score is at or below it
    out = usi.run(
        "setoption name ResignValue value 1000", f"position sfen {MATE_IN_ONE}", "go nodes 64"
    )
    assert out[-1] == "bestmove G*5b"  # winning: no resignation
    usi.engine.command("setoption name ResignValue value 0")
    out = usi.run("position startpos", "go nodes 8")
    assert out[-1] == "bestmove resign"  # 0: resign at a score of 0 or less (the uniform net)
    # an entering king the side to move may declare: bestmove win
    declare = "4K4/9/9/9/9/9/gggg1ssss/1r5b1/4k4 w 9p 1"  # 10 pieces in the zone, 27 points
    out = usi.run(f"position sfen {declare}", "go nodes 8")
    assert out[-1] == "bestmove win"


def test_past_our_ply_cap_the_engine_plays_on() -> None:
    """In USI the GUI referees: where our cap (here 6 plies) ended the game the engine goes on
    from the position (read afresh: move 1), and an SFEN's move number past the cap is too."""
    usi = Session(plies=6)
    moves = "7g7f 3c3d 2g2f 8c8d 2f2e 8d8e 6i7h 4a3b"
    out = usi.run(f"position startpos moves {moves}", "go nodes 8")
    assert "info string error" not in " ".join(out)
    s = _moves(Shogi(max_plies=100, history=0), None, moves.split())
    again = usi.game.from_sfen(
        " ".join(Shogi(max_plies=100, history=0).to_sfen(s).split()[:3]) + " 1"
    )
    usi.game.parse_usi(again, out[-1].split()[1])
    out = usi.run(
        "position sfen lnsgkgsnl/1r5b1/ppppppppp/9/9/9/PPPPPPPPP/1B5R1/LNSGKGSNL b - 200",
        "go nodes 8",
    )
    usi.game.parse_usi(usi.game.initial_state(), out[-1].split()[1])
