"""The engines read the solver's proofs (``mcts.solver``; docs/mcts.md, "Proven results"): a
proven root ends ``EngineSearch.run`` (at once with a budget; an open-ended search idles
instead of spinning empty slices), the move is the proof's on every path (sliced Gumbel
included; never a proven loss while a move is open), UCI scores ``mate N`` in moves and USI in
plies, the analysis JSON carries the proof; with the solver off nothing changes. Units on a
uniform evaluator, the sessions in-process, and the real ``azserve uci`` (driven by
python-chess), ``azserve usi`` and ``analyze`` on tiny random-weights checkpoints."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from actors.games import make_game
from actors.games.compiled import compiled_available
from actors.games.tictactoe import TicTacToe
from actors.search import MCTSConfig, Proof, SearchReport
from azserve.arena.agent import agent_from_checkpoint
from azserve.engines.analyze import analyze_lines
from azserve.engines.search import EngineSearch, engine_mcts, proven_move, settled
from tests.test_analyze import line as ttt_line
from tests.test_mcts_solver import MATE_IN_1, MATE_IN_2, forced_mates
from tests.test_uci import chess_checkpoint
from tests.test_usi import MATE_IN_ONE, Session, Usi, shogi_checkpoint

pytestmark = pytest.mark.usefixtures("torch_one_thread")

MATED_IN_1 = "k7/8/1K6/8/8/8/8/7R b - - 0 1"
"""Black to move is mated in one move (two plies): 1... Kb8 2. Rh8#."""
TTT = TicTacToe()
TTT_BLOCK = [0, 4, 1, 2]
"""X to move must block at 6 (O threatens 2-4-6): every other move is lost in two plies."""


@pytest.fixture(scope="module")
def chess() -> Any:
    if not compiled_available(make_game("connect4")):
        pytest.skip("chess needs the compiled core")
    return make_game("chess")


def uniform(game: Any) -> Any:
    logits = np.zeros(game.num_actions, np.float32)

    async def evaluate(obs: np.ndarray) -> tuple[np.ndarray, float]:
        return logits, 0.0

    return evaluate


def liking(game: Any, action: int) -> Any:
    """A net that loves ``action`` wherever it is legal: the search visits it most."""
    logits = np.zeros(game.num_actions, np.float32)
    logits[action] = 12.0

    async def evaluate(obs: np.ndarray) -> tuple[np.ndarray, float]:
        return logits, 0.0

    return evaluate


def engine(evaluate: Any, algorithm: str = "puct", solver: bool = True) -> EngineSearch:
    return EngineSearch(evaluate, engine_mcts(MCTSConfig(solver=solver), algorithm=algorithm))


def run(
    search: EngineSearch, game: Any, state: Any, sims: int | None, seconds: float | None
) -> Any:
    deadline = None if seconds is None else time.monotonic() + seconds
    return asyncio.run(search.run(game, state, sims, deadline))


# --- EngineSearch.run -------------------------------------------------------------------------


@pytest.mark.parametrize("algorithm", ["puct", "gumbel"])
@pytest.mark.parametrize("fen,plies", [(MATE_IN_1, 1), (MATE_IN_2, 3)], ids=["mate1", "mate2"])
def test_a_proven_root_ends_a_budgeted_search(
    chess: Any, algorithm: str, fen: str, plies: int
) -> None:
    """A mate proven is played at once: the search stops long before its budget (a deadline:
    Gumbel's sliced path too), with a mating move; searched again, one slice."""
    state = chess.from_position(fen)
    search = engine(uniform(chess), algorithm)
    start = time.monotonic()
    progress = run(search, chess, state, 100_000, 60.0)
    assert time.monotonic() - start < 20 and progress.simulations < 5_000
    proof = progress.report.proof
    assert (proof.value, proof.plies) == (1.0, plies)
    assert progress.best in forced_mates(chess, state, plies)
    again = run(search, chess, state, 100_000, 60.0)  # the kept tree: proven from the start
    assert again.simulations <= 64 and again.best in forced_mates(chess, state, plies)


def test_an_open_ended_search_of_a_settled_root_stops(chess: Any) -> None:
    """A mate in one leaves nothing to learn: an open-ended search (no budget, no deadline)
    ends after its first slice instead of running MAX_VISITS worth of empty slices."""
    state = chess.from_position(MATE_IN_1)
    search = engine(uniform(chess))
    first = run(search, chess, state, None, None)
    assert first.simulations <= 32 and chess.uci(state, first.best) == "a1a8"
    assert run(search, chess, state, None, None).simulations <= 32


def test_settled_and_proven_move_units() -> None:
    """``proven_move`` on a report: a proven win imposes its move over the most visited; an
    open root never plays a proven loss; a proven draw plays among its drawing moves.
    ``settled``: any proof ends a budgeted search; an open-ended one only a final proof."""
    nan = float("nan")

    def report(
        visits: list[int], values: list[float], plies: list[int], value: Any, root_plies: int
    ) -> SearchReport:
        proof = Proof(value, root_plies, np.array(values), np.array(plies, np.int64))
        return SearchReport(
            np.array([3, 5, 7]), np.array(visits, np.int64), np.zeros(3),
            np.array([0.5, 0.3, 0.2], np.float32), ((3,), (5,), (7,)), sum(visits) + 1, 0.0, 9,
            proof=proof,
        )  # fmt: skip

    win = report([10, 4, 1], [nan, nan, 1.0], [-1, -1, 3], 1.0, 3)
    assert win.pv[0] == 3 and proven_move(win) == 7
    open_root = report([10, 4, 1], [-1.0, nan, nan], [2, -1, -1], None, -1)
    assert proven_move(open_root) == 5
    draw = report([1, 10, 2], [0.0, -1.0, 0.0], [4, 2, 6], 0.0, 4)
    assert proven_move(draw) == 7
    assert settled(win.proof, open_ended=False) and not settled(win.proof, open_ended=True)
    assert settled(draw.proof, open_ended=True) and not settled(open_root.proof, False)
    won_out = report([10, 4, 1], [-1.0, -1.0, 1.0], [2, 2, 3], 1.0, 3)
    assert settled(won_out.proof, open_ended=True)  # every move proven: nothing left


@pytest.mark.parametrize("algorithm,seconds", [("puct", None), ("gumbel", 60.0)])
def test_a_proven_lost_move_is_not_played(algorithm: str, seconds: float | None) -> None:
    """The net loves a losing move (3: O then completes 2-4-6), which the search without the
    solver plays; with it, 3 is proven lost and the engine plays another (PUCT's choose;
    Gumbel's sliced path, ``proven_move``)."""
    state = TTT.from_moves(TTT_BLOCK)
    sims = 64 if algorithm == "puct" else 128  # Gumbel: two slices, the second sliced
    progress = run(engine(liking(TTT, 3), algorithm), TTT, state, sims, seconds)
    r = progress.report
    i = int(np.flatnonzero(r.actions == 3)[0])
    assert r.proof.values[i] == -1.0
    assert progress.best != 3 and r.proof.values[r.actions == progress.best][0] != -1.0
    plain = run(engine(liking(TTT, 3), algorithm, solver=False), TTT, state, sims, seconds)
    assert plain.best == 3


# --- the sessions in-process ------------------------------------------------------------------


def session(uci: bool) -> Session:
    """``tests.test_usi.Session`` (a uniform evaluator), the solver on."""
    s = Session(uci=uci)
    s.engine.loaded.search.configure(solver=True)
    return s


def info_lines(out: list[str]) -> list[str]:
    return [x for x in out if x.startswith("info depth")]


def nodes(info: str) -> int:
    return int(info.split(" nodes ")[1].split()[0])


def test_uci_scores_mates_in_moves_and_plays_them_at_once(chess: Any) -> None:
    uci = session(uci=True)
    start = time.monotonic()
    out = uci.run(f"position fen {MATE_IN_1}", "go movetime 60000")
    assert time.monotonic() - start < 20  # not the minute
    assert out[-1] == "bestmove a1a8" and " score mate 1 " in info_lines(out)[-1]
    out = uci.run(f"position fen {MATE_IN_2}", "go wtime 600000 btime 600000")
    assert " score mate 2 " in info_lines(out)[-1]
    state = chess.from_position(MATE_IN_2)
    assert chess.parse_uci(state, out[-1].split()[1]) in forced_mates(chess, state, 3)
    out = uci.run(f"position fen {MATED_IN_1}", "go nodes 5000")
    assert " score mate -1 " in info_lines(out)[-1] and out[-1] == "bestmove a8b8"
    out = uci.run(f"position fen {MATE_IN_1}", "go mate 1")
    assert out[0].endswith("2**(plies+3) nodes; a proven mate ends it)")
    assert out[-1] == "bestmove a1a8" and " score mate 1 " in info_lines(out)[-1]


def test_go_infinite_on_a_proven_root_reports_and_idles() -> None:
    """``go infinite`` on a mate in one: the mate is shown before the ``stop`` and the search
    idles (one slice of nodes, not MAX_VISITS of empty slices); ``bestmove`` after the stop."""
    uci = session(uci=True)
    out = uci.run(f"position fen {MATE_IN_1}", "go infinite", during=(None,) * 30 + ("stop",))
    assert out[-1] == "bestmove a1a8"
    infos = info_lines(out)
    assert " score mate 1 " in infos[-1] and nodes(infos[-1]) <= 32


def test_usi_scores_mates_in_plies_from_the_proof() -> None:
    usi = session(uci=False)
    out = usi.run(f"position sfen {MATE_IN_ONE}", "go nodes 100000")
    assert out[-1] == "bestmove G*5b" and " score mate 1 " in info_lines(out)[-1]
    assert nodes(info_lines(out)[-1]) < 100_000  # stopped once proven


def test_with_the_solver_off_the_session_is_as_before() -> None:
    """The same ``go``s without the solver: every budget is spent and the scores are as
    before (UCI: centipawns; USI: the PV-based mate)."""
    uci = Session(uci=True)
    out = uci.run(f"position fen {MATE_IN_1}", "go nodes 64")
    assert nodes(info_lines(out)[-1]) == 64 and " score cp " in info_lines(out)[-1]
    usi = Session()
    out = usi.run(f"position sfen {MATE_IN_ONE}", "go nodes 64")
    assert nodes(info_lines(out)[-1]) == 64 and " score mate 1 " in info_lines(out)[-1]


# --- the real commands ------------------------------------------------------------------------


def test_python_chess_reads_the_mates_of_azserve_uci(tmp_path: Path) -> None:
    """``azserve uci --set mcts.solver=true`` on a random net, through python-chess: a mate in
    one and a mate in two are scored as mates (a longer mate may be the first proven: it is
    played at once too) and played long before the time budget; python-chess checks that
    every reply is then mated within the moves the score said."""
    pytest.importorskip("chess")
    import chess
    import chess.engine

    from tests.test_cli import azserve_cmd

    checkpoint = chess_checkpoint(tmp_path / "run")
    cmd = [*azserve_cmd(), "uci", "--checkpoint", str(checkpoint), "--set", "mcts.solver=true"]
    engine = chess.engine.SimpleEngine.popen_uci(cmd)
    try:
        for fen, shortest in ((MATE_IN_1, 1), (MATE_IN_2, 2)):
            board = chess.Board(fen)
            start = time.monotonic()
            result = engine.play(board, chess.engine.Limit(time=120), info=chess.engine.INFO_SCORE)
            assert time.monotonic() - start < 60, fen  # played at once, not after 2 minutes
            mate = result.info["score"].relative.mate()
            assert mate is not None and mate >= shortest, result.info
            if shortest == 1:
                assert mate == 1
            board.push(result.move)
            _mated_within(engine, board, mate - 1)
    finally:
        engine.quit()


def _mated_within(engine: Any, board: Any, moves: int) -> None:
    """``board``'s side to move is mated within ``moves`` more moves of the engine, whatever it
    replies (each answer scored as a mate that close)."""
    import chess.engine

    if board.is_checkmate():
        return
    assert moves > 0, board.fen()
    for reply in list(board.legal_moves):
        board.push(reply)
        result = engine.play(board, chess.engine.Limit(nodes=20_000), info=chess.engine.INFO_SCORE)
        mate = result.info["score"].relative.mate()
        assert mate is not None and 0 < mate <= moves, (board.fen(), result.info)
        board.push(result.move)
        _mated_within(engine, board, mate - 1)
        board.pop()
        board.pop()


def test_azserve_usi_reports_a_proven_tsume(tmp_path: Path) -> None:
    """``azserve usi --set mcts.solver=true``: a mate in one (a tsume) scored ``mate 1`` from
    the proof and played, the search stopped once proven."""
    engine = Usi(shogi_checkpoint(tmp_path / "run"), "--set", "mcts.solver=true")
    try:
        engine.send("usi")
        engine.until("usiok", timeout=10)
        engine.send("isready")
        engine.until("readyok", timeout=120)
        engine.send(f"position sfen {MATE_IN_ONE}")
        engine.send("go nodes 100000")
        best, out = engine.best()
        info = info_lines(out)[-1]
        assert best == "G*5b" and " score mate 1 " in info and nodes(info) < 100_000, out
        assert engine.close() == 0
    finally:
        engine.shutdown()


def test_the_analysis_json_carries_the_proof(tmp_path: Path) -> None:
    """``azserve analyze`` with the solver: the root's proof and the proven moves beside the
    visits, the move the proof's; without it no such field."""
    checkpoint = _ttt_checkpoint(tmp_path)
    _, agent = agent_from_checkpoint(str(checkpoint), overrides=["mcts.solver=true"])
    # X (0, 1) to move wins at 2 at once; O's threat is elsewhere
    (row,) = analyze_lines([ttt_line(1, [0, 4, 1, 8])], agent, "tictactoe", 200)
    assert row["move"] == 2
    assert row["proven"] == {"result": "win", "value": 1.0, "plies": 1}
    wins = [m for m in row["proven_moves"] if m["result"] == "win" and m["plies"] == 1]
    assert [m["move"] for m in wins] == [2]
    json.dumps(row)  # plain JSON
    (unsolved,) = analyze_lines([ttt_line(2, [])], agent, "tictactoe", 8)
    assert unsolved["proven"] is None and isinstance(unsolved["proven_moves"], list)
    _, plain = agent_from_checkpoint(str(checkpoint))
    (row,) = analyze_lines([ttt_line(1, [0, 4, 1, 8])], plain, "tictactoe", 200)
    assert "proven" not in row and "proven_moves" not in row


def _ttt_checkpoint(tmp_path: Path) -> Path:
    from dataclasses import replace

    from azserve.config.schema import load_config, to_dict
    from learner.checkpoint import save_checkpoint
    from learner.trainer import Trainer
    from tests.test_analyze import TTT as TTT_CONFIG

    cfg = load_config(TTT_CONFIG)
    trainer = Trainer(replace(cfg.net, seed=3), replace(cfg.trainer, device="cpu"))
    return save_checkpoint(tmp_path / "ckpt", 10, 1, trainer.state_dict(), to_dict(cfg))
