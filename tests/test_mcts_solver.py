"""The MCTS-solver (``mcts.solver``): on positions with a known result and a uniform evaluator
(no network), the search proves the result, plays the winning move and reports the proof, in
Python and compiled alike; what it proves is never wrong; off, it changes nothing."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import numpy as np
import pytest

from actors.compiled_mcts import CompiledMCTS
from actors.games import ConnectFour, Game, State, TicTacToe, make_game
from actors.games.compiled import compiled_available
from actors.games.solver import TicTacToeSolver
from actors.mcts import MCTS
from actors.search import MCTSConfig, SearchResult
from tests.test_compiled_mcts import hashed

TTT, C4 = TicTacToe(), ConnectFour()
CORES = ["python", "compiled"] if compiled_available(C4) else ["python"]

MATE_IN_1 = "6k1/5ppp/8/8/8/8/8/R5K1 w - - 0 1"
"""White mates by Ra8 (a1a8), a back-rank mate."""
MATE_IN_2 = "k7/8/2K5/8/8/8/8/7R w - - 0 1"
"""White mates in two (1. Kb6 Kb8 2. Rh8#, or 1. Kc7 Ka7 2. Ra1#), not in one."""


def uniform(game: Game) -> Any:
    """No network: zero logits (uniform priors) and value 0 everywhere."""
    logits = np.zeros(game.num_actions, dtype=np.float32)

    async def evaluate(obs: np.ndarray) -> tuple[np.ndarray, float]:
        return logits, 0.0

    return evaluate


def searcher(game: Game, core_name: str, **knobs: Any) -> Any:
    config = MCTSConfig(core=core_name, dirichlet_fraction=0.0, temperature=0.0, **knobs)
    rng = np.random.default_rng(0)
    return MCTS(game, config, rng) if core_name == "python" else CompiledMCTS(game, config, rng)


def solve(
    game: Game, state: State, core_name: str, sims: int, **knobs: Any
) -> tuple[Any, int, Any]:
    """(the search, the move it plays, its result) after one search of ``state`` from a fresh
    tree, without root noise."""
    search = searcher(game, core_name, num_simulations=sims, **knobs)
    result = asyncio.run(search.search(state, uniform(game), False))
    return search, search.choose(result, 1 << 30)[1], result


def play(game: Game, moves: list[int]) -> State:
    state = game.initial_state()
    for a in moves:
        state = game.apply(state, a)
    return state


def forced_mates(game: Game, state: State, plies: int) -> set[int]:
    """The moves at ``state`` that force a win within ``plies`` plies, by exhaustive search."""
    out = set()
    for a in game.legal_actions(state):
        child = game.apply(state, a)
        if game.is_terminal(child):
            if game.terminal_value(child) < 0:
                out.add(a)
        elif plies >= 3 and all(
            not game.is_terminal(g := game.apply(child, b)) and forced_mates(game, g, plies - 2)
            for b in game.legal_actions(child)
        ):
            out.add(a)
    return out


# --- known wins, losses and draws -----------------------------------------------------------


@pytest.mark.parametrize("core_name", CORES)
def test_connect_four_win_in_one_is_proven_and_played(core_name: str) -> None:
    state = play(C4, [0, 0, 1, 1, 2, 2])  # X: three on the bottom row; O: three above it
    search, move, result = solve(C4, state, core_name, 16, solver=True)
    assert move == 3
    assert result.proof.value == 1.0 and result.proof.plies == 1
    assert result.proof.values[3] == 1.0 and result.proof.action_plies[3] == 1
    report = search.report()
    assert report.proof.value == 1.0 and report.proof.plies == 1
    assert report.proof.values[list(report.actions).index(3)] == 1.0
    assert report.root_visits - 1 < 16  # a win in one: nothing shorter, the search stopped


@pytest.mark.parametrize("core_name", CORES)
def test_connect_four_win_in_three_is_proven_and_played(core_name: str) -> None:
    state = play(C4, [1, 1, 2, 2])  # X to move: d makes two open threats (a and e)
    assert forced_mates(C4, state, 1) == set() and forced_mates(C4, state, 3) == {3}
    search, move, result = solve(C4, state, core_name, 100, solver=True)
    assert move == 3
    assert (result.proof.value, result.proof.plies) == (1.0, 3)
    report = search.report()
    assert (report.proof.value, report.proof.plies) == (1.0, 3)
    # Without the solver the same search proves nothing (and at 50 simulations, where the
    # solver proves nothing yet either, neither finds the move: the proof is what it sees).
    plain, _, plain_result = solve(C4, state, core_name, 100)
    assert plain_result.proof is None and plain.report().proof is None
    unsolved = solve(C4, state, core_name, 50, solver=True)[2]
    assert unsolved.proof.value is None and unsolved.proof.plies == -1


@pytest.mark.parametrize("core_name", CORES)
def test_tic_tac_toe_forced_win_is_proven(core_name: str) -> None:
    state = play(TTT, [0, 1, 2, 3])  # X O X / O . . : X forks with 4 (or 8)
    search, move, result = solve(TTT, state, core_name, 60, solver=True)
    assert move in TicTacToeSolver().optimal_actions(state) == {4, 8}
    assert (result.proof.value, result.proof.plies) == (1.0, 3)


@pytest.mark.parametrize("core_name", CORES)
def test_tic_tac_toe_forced_draw_is_proven_and_reported(core_name: str) -> None:
    state = play(TTT, [0, 1, 2, 3, 5])  # O to move: only 8 holds the draw
    search, move, result = solve(TTT, state, core_name, 100, solver=True)
    assert move == 8
    assert result.proof.value == 0.0
    report = search.report()
    assert report.proof.value == 0.0
    got = dict(zip(report.actions.tolist(), report.proof.values.tolist()))
    assert got == {4: -1.0, 6: -1.0, 7: -1.0, 8: 0.0}
    assert report.proof.action_plies.min() >= 1


@pytest.mark.parametrize("core_name", CORES)
def test_a_proven_loss_plays_the_longest_defence(core_name: str) -> None:
    # X to move (X X O / . . O / . . .) loses: blocking 8 loses in four plies (O forks),
    # anything else in two.
    state = play(TTT, [0, 2, 1, 5])
    search, move, result = solve(TTT, state, core_name, 200, solver=True)
    assert (result.proof.value, result.proof.plies) == (-1.0, 4)
    assert move == 8


@pytest.mark.parametrize("core_name", CORES)
def test_a_won_root_searches_on_for_a_shorter_win(core_name: str) -> None:
    # X to move (X O O / X . . / . . .): 6 wins at once, 4, 5 and 8 in three plies. A prior
    # that hides 6 lets the wins in three be proven first; the search goes on and plays 6.
    state = play(TTT, [0, 1, 3, 2])
    root, hidden = TTT.encode(state).tobytes(), np.zeros(TTT.num_actions, np.float32)
    hidden[6] = -8.0
    flat = np.zeros(TTT.num_actions, np.float32)

    async def evaluate(obs: np.ndarray) -> tuple[np.ndarray, float]:
        return (hidden if obs.tobytes() == root else flat), 0.0

    search = searcher(TTT, core_name, num_simulations=400, solver=True)
    result = asyncio.run(search.search(state, evaluate, False))
    assert (result.proof.value, result.proof.plies) == (1.0, 1)
    assert search.choose(result, 1 << 30)[1] == 6
    assert set(np.flatnonzero(result.proof.action_plies == 3).tolist()) <= {4, 5, 8}
    assert (result.proof.action_plies == 3).any()  # a win in three was proven before 6


@pytest.fixture(scope="module")
def chess() -> Game:
    if not compiled_available(C4):
        pytest.skip("chess needs the compiled core")
    return make_game("chess")


@pytest.mark.parametrize("core_name", CORES)
def test_chess_mate_in_one_is_proven_and_played(chess: Game, core_name: str) -> None:
    state = chess.from_position(MATE_IN_1)
    search, move, result = solve(chess, state, core_name, 32, solver=True)
    assert chess.uci(state, move) == "a1a8"
    assert (result.proof.value, result.proof.plies) == (1.0, 1)
    assert search.report().proof.value == 1.0


@pytest.mark.parametrize("core_name", CORES)
def test_chess_mate_in_two_is_proven_and_played(chess: Game, core_name: str) -> None:
    state = chess.from_position(MATE_IN_2)
    mates = forced_mates(chess, state, 3)
    assert mates and not forced_mates(chess, state, 1)
    sims = 1200
    search, move, result = solve(chess, state, core_name, sims, solver=True)
    assert move in mates
    assert (result.proof.value, result.proof.plies) == (1.0, 3)
    assert (search.report().proof.value, search.report().proof.plies) == (1.0, 3)
    plain = solve(chess, state, core_name, sims)[2]
    assert plain.proof is None


# --- soundness, and the two forms agree -----------------------------------------------------


def test_every_proof_on_tic_tac_toe_is_right() -> None:
    """Every reachable tic-tac-toe position, searched with the solver: a proven root (or root
    action) has its exact minimax value; a proven win or draw is played as such."""
    exact = TicTacToeSolver()
    core_name = CORES[-1]
    proven = 0
    for state in exact.reachable_nonterminal_states():
        search, move, result = solve(TTT, state, core_name, 40, solver=True)
        proof = result.proof
        values = exact.action_values(state)
        for a, v in values.items():
            if proof.action_plies[a] >= 0:
                assert proof.values[a] == v, TTT.render(state)
        if proof.value is not None:
            proven += 1
            assert proof.value == exact.value(state), TTT.render(state)
        if proof.value is not None and proof.value >= 0:
            assert values[move] == proof.value, TTT.render(state)
    assert proven > 1500


async def _lockstep(game: Game, config: MCTSConfig, seed: int) -> int:
    """A self-play game with the Python and the compiled solver side by side: equal results,
    proofs, reports and moves at every move."""
    py = MCTS(game, dataclasses.replace(config, core="python"), np.random.default_rng(seed))
    cc = CompiledMCTS(game, dataclasses.replace(config, core="compiled"),
                      np.random.default_rng(seed))  # fmt: skip
    evaluate = hashed()
    state, move, proofs = game.initial_state(), 0, 0
    while not game.is_terminal(state):
        a: SearchResult = await py.search(state, evaluate, True)
        b: SearchResult = await cc.search(state, evaluate, True)
        np.testing.assert_array_equal(a.visits, b.visits)
        assert a.root_value == b.root_value and a.num_evaluations == b.num_evaluations
        assert_same_proof(a.proof, b.proof)
        ra, rb = py.report(), cc.report()
        np.testing.assert_array_equal(ra.visits, rb.visits)
        np.testing.assert_array_equal(ra.values, rb.values)
        assert ra.pvs == rb.pvs and ra.nodes == rb.nodes
        assert_same_proof(ra.proof, rb.proof)
        action = py.choose(a, move)[1]
        assert cc.choose(b, move)[1] == action
        proofs += a.proof.value is not None
        state = game.apply(state, action)
        py.advance(action)
        cc.advance(action)
        move += 1
    return proofs


def assert_same_proof(a: Any, b: Any) -> None:
    assert a.value == b.value and a.plies == b.plies
    np.testing.assert_array_equal(a.values, b.values)
    np.testing.assert_array_equal(a.action_plies, b.action_plies)


@pytest.mark.skipif(len(CORES) < 2, reason="actors._mcts_core was not built")
@pytest.mark.parametrize(
    "knobs",
    [
        {"num_simulations": 60},
        {"num_simulations": 48, "leaves_in_flight": 4},
        {"num_simulations": 30, "leaves_in_flight": 8, "virtual_loss": 3.0, "reuse_tree": False},
    ],
    ids=["one_leaf", "in_flight", "in_flight_no_reuse"],
)
@pytest.mark.parametrize("game", [C4, TTT], ids=["connect4", "tictactoe"])
async def test_python_and_compiled_solvers_agree(game: Game, knobs: dict[str, Any]) -> None:
    proofs = 0
    for seed in range(3):
        proofs += await _lockstep(game, MCTSConfig(solver=True, **knobs), seed)
    assert proofs > 0


@pytest.mark.skipif(len(CORES) < 2, reason="actors._mcts_core was not built")
async def test_pooled_solver_games_are_the_per_leaf_games() -> None:
    """The search pool drives solver trees as their own coroutines do (a proven root's search
    ends with no leaf to ask for), the evaluation cache answering in C included."""
    from tests.test_searchpool import _games, counts, same

    cfg, seeds = MCTSConfig(num_simulations=24, solver=True, no_resign_fraction=0.5), [0, 1, 2]
    want, want_stats, _, _ = await _games(cfg, seeds, False, 8, 2, "python")
    got, got_stats, _, _ = await _games(cfg, seeds, True, 8, 2, "compiled")
    for a, b in zip(want, got, strict=True):
        same(a, b)
    assert counts(want_stats) == counts(got_stats)


# --- off changes nothing; the knob's checks -------------------------------------------------


def test_off_reports_no_proof() -> None:
    """Off, no proof (the Gumbel search's solver: tests/test_gumbel_solver.py)."""
    search, _, result = solve(TTT, play(TTT, [0, 1, 2, 3]), "python", 30)
    assert result.proof is None and search.report().proof is None
