"""The MCTS-solver in the Gumbel search (``mcts.solver`` with ``mcts.algorithm = "gumbel"``):
the compiled and the Python forms agree move for move, proofs included; won positions are
converted at low simulation counts where the plain search misses them; at the root a proven win
is played, proven losses leave sequential halving, proven values complete Q; what it proves is
never wrong. Off, the search is the one of before (tests/test_compiled_gumbel.py)."""

from __future__ import annotations

import asyncio
import dataclasses
from math import nan
from typing import Any

import numpy as np
import pytest

import actors.gumbel as gumbel_module
from actors.compiled_mcts import CompiledGumbel
from actors.games import ConnectFour, Game, State, TicTacToe, make_game
from actors.games.compiled import compiled_available, core, core_rules
from actors.games.solver import TicTacToeSolver
from actors.gumbel import GumbelSearch, completed_q
from actors.nodes import Node
from actors.search import GumbelMoves, GumbelResult, MCTSConfig, Proof
from actors.searches import make_search
from tests.test_compiled_mcts import assert_same, hashed
from tests.test_mcts_solver import MATE_IN_1, MATE_IN_2, assert_same_proof, forced_mates, play

TTT, C4 = TicTacToe(), ConnectFour()
CORES = ["python", "compiled"] if compiled_available(C4) else ["python"]
both = pytest.mark.skipif(len(CORES) < 2, reason="actors._mcts_core was not built")

MATE_IN_2_GUMBEL = "8/k1K4R/2p5/1pPp4/pP1P4/P7/8/8 w - - 26 94"
"""White mates in two (1. Rh8, only), not in one: a mate-in-2 position of the chess
benchmark (actors/games/chess/benchmark.jsonl.gz) that ``hashed``'s priors lead the plain Gumbel
search away from at ``MATE_IN_2_SIMS`` simulations."""
MATE_IN_2_SIMS = 100


def gumbel(**knobs: Any) -> MCTSConfig:
    """A Gumbel config, the solver on unless ``knobs`` say otherwise."""
    return MCTSConfig(**{"algorithm": "gumbel", "solver": True, **knobs})


def uniform(game: Game) -> Any:
    """No network: zero logits (uniform priors) and value 0 everywhere."""
    logits = np.zeros(game.num_actions, dtype=np.float32)

    async def evaluate(obs: np.ndarray) -> tuple[np.ndarray, float]:
        return logits, 0.0

    return evaluate


def searcher(game: Game, core_name: str, **knobs: Any) -> Any:
    config = dataclasses.replace(gumbel(temperature=0.0, **knobs), core=core_name)
    rng = np.random.default_rng(0)
    if core_name == "python":
        return GumbelSearch(game, config, rng)
    return CompiledGumbel(game, config, rng)


def solve(game: Game, state: State, core_name: str, sims: int, evaluate: Any,
          **knobs: Any) -> tuple[Any, int, GumbelResult]:  # fmt: skip
    """(the search, the move it plays, its result) after one search of ``state`` from a fresh
    tree, without root noise."""
    search = searcher(game, core_name, num_simulations=sims, **knobs)
    result = asyncio.run(search.search(state, evaluate, False))
    return search, search.choose(result, 1 << 30)[1], result


# --- won positions converted where the plain search misses them ------------------------------


@pytest.fixture(scope="module")
def chess() -> Game:
    if not compiled_available(C4):
        pytest.skip("chess needs the compiled core")
    return make_game("chess")


@pytest.mark.parametrize("core_name", CORES)
@pytest.mark.parametrize("sims", [8, 16])
def test_chess_mate_in_one_is_converted_where_the_plain_search_misses_it(
    chess: Game, core_name: str, sims: int
) -> None:
    """An untrained net's misleading priors and values (``hashed``): the plain search plays
    what they favour, the solver the mate it proved, its search stopped at once."""
    state, evaluate = chess.from_position(MATE_IN_1), hashed(actions=chess.num_actions)
    search, move, result = solve(chess, state, core_name, sims, evaluate)
    assert chess.uci(state, move) == "a1a8"
    assert (result.proof.value, result.proof.plies) == (1.0, 1)
    assert search.report().root_visits - 1 < sims
    _, plain, plain_result = solve(chess, state, core_name, sims, evaluate, solver=False)
    assert chess.uci(state, plain) != "a1a8" and plain_result.proof is None


@pytest.mark.parametrize("core_name", CORES)
def test_chess_mate_in_two_is_converted_where_the_plain_search_misses_it(
    chess: Game, core_name: str
) -> None:
    state = chess.from_position(MATE_IN_2_GUMBEL)
    mates = forced_mates(chess, state, 3)
    assert mates and not forced_mates(chess, state, 1)
    evaluate = hashed(actions=chess.num_actions)
    search, move, result = solve(chess, state, core_name, MATE_IN_2_SIMS, evaluate)
    assert move in mates
    assert (result.proof.value, result.proof.plies) == (1.0, 3)
    plain = solve(chess, state, core_name, MATE_IN_2_SIMS, evaluate, solver=False)[1]
    assert plain not in mates


@pytest.mark.parametrize("core_name", CORES)
def test_connect_four_and_tic_tac_toe_wins_are_converted(core_name: str) -> None:
    for game, state, win, sims in [
        (C4, play(C4, [0, 0, 1, 1, 2, 2]), 3, 8),  # X: three on the bottom row, d wins
        (TTT, play(TTT, [0, 1, 3, 2]), 6, 16),  # X O O / X . . : 6 wins at once
    ]:
        _, move, result = solve(game, state, core_name, sims, hashed())
        assert move == win and (result.proof.value, result.proof.plies) == (1.0, 1)
        _, plain, _ = solve(game, state, core_name, sims, hashed(), solver=False)
        assert plain != win


# --- the root: wins played, losses dropped, draws exact ---------------------------------------


@pytest.mark.parametrize("core_name", CORES)
def test_connect_four_win_in_three_is_proven_and_played(core_name: str) -> None:
    state = play(C4, [1, 1, 2, 2])  # X to move: d makes two open threats (a and e)
    search, move, result = solve(C4, state, core_name, 400, uniform(C4))
    assert move == 3 and (result.proof.value, result.proof.plies) == (1.0, 3)
    assert (search.report().proof.value, search.report().proof.plies) == (1.0, 3)


@pytest.mark.parametrize("core_name", CORES)
def test_a_proven_loss_plays_the_longest_defence(core_name: str) -> None:
    # X to move (X X O / . . O / . . .) loses: blocking 8 loses in four plies (O forks),
    # anything else in two.
    _, move, result = solve(TTT, play(TTT, [0, 2, 1, 5]), core_name, 200, uniform(TTT))
    assert (result.proof.value, result.proof.plies) == (-1.0, 4)
    assert move == 8


@pytest.mark.parametrize("core_name", CORES)
def test_a_forced_draw_is_proven_and_its_losses_never_survive(core_name: str) -> None:
    state = play(TTT, [0, 1, 2, 3, 5])  # O to move: only 8 holds the draw
    search, move, result = solve(TTT, state, core_name, 100, uniform(TTT))
    assert move == 8 and result.proof.value == 0.0
    report = search.report()
    got = dict(zip(report.actions.tolist(), report.proof.values.tolist()))
    assert got == {4: -1.0, 6: -1.0, 7: -1.0, 8: 0.0}
    assert np.isfinite(result.scores).tolist() == [a == 8 for a in range(9)]


@pytest.mark.parametrize("core_name", CORES)
def test_a_won_root_searches_on_for_a_shorter_win(core_name: str) -> None:
    """X to move (X O O / X . . / . . .): 6 wins at once, 4, 5 and 8 in three plies. A prior
    that leaves 6 out of the four sampled actions lets the wins in three be proven first; the
    search goes on among the unproven moves, brings 6 in, proves it and plays it."""
    state = play(TTT, [0, 1, 3, 2])
    root, hidden = TTT.encode(state).tobytes(), np.zeros(TTT.num_actions, np.float32)
    hidden[6] = -8.0
    flat = np.zeros(TTT.num_actions, np.float32)

    async def evaluate(obs: np.ndarray) -> tuple[np.ndarray, float]:
        return (hidden if obs.tobytes() == root else flat), 0.0

    _, move, result = solve(TTT, state, core_name, 400, evaluate, num_sampled_actions=4)
    assert (result.proof.value, result.proof.plies) == (1.0, 1) and move == 6
    assert (result.proof.action_plies == 3).any()  # a win in three was proven before 6


def _root(proven: list[float | None], won: bool = False) -> Node:
    """A root whose children are proven (their exact value for their own mover) or not."""
    root = Node(None)
    root.actions = list(range(len(proven)))
    root.children = []
    for v in proven:
        child = Node(None)
        child.proven, child.plies = v, (-1 if v is None else 2)
        root.children.append(child)
    if won:
        root.proven, root.plies = 1.0, 3
    return root


def test_halving_skips_proven_losses_and_the_nearest_open_move_steps_in() -> None:
    choose = gumbel_module._solver_root_action
    g, logits, sigma = [0.0] * 4, [0.0, -1.0, -2.0, -3.0], [0.0] * 4
    # Move 0 is proven lost for the root's mover (won for its child's): never chosen.
    root = _root([1.0, None, None, 0.0])
    assert choose(root, [1, 1, 1, 1], 1, g, logits, sigma) == 1  # the plain rule among 1, 2, 3
    assert choose(root, [2, 2, 1, 0], 2, g, logits, sigma) == 1
    # Only move 0 has the count asked for: the open move nearest below it steps in ...
    assert choose(root, [3, 4, 2, 2], 3, g, logits, sigma) == 2
    # ... or failing that the one nearest above it.
    assert choose(root, [0, 5, 4, 6], 3, g, logits, sigma) == 2
    # A proven draw stays open (its exact value is its Q); at a won root only unproven moves.
    assert choose(_root([1.0, 1.0, None, 0.0]), [0, 0, 1, 0], 0, g, logits, sigma) == 3
    won = _root([-1.0, None, 1.0, 0.0], won=True)
    assert gumbel_module._open(won) == [False, True, False, False]
    assert choose(won, [5, 0, 0, 0], 0, g, logits, sigma) == 1


def test_completed_q_takes_the_proven_values() -> None:
    prior, n, w = [0.25, 0.25, 0.5], [2, 3, 0], [1.0, 0.6, 0.0]
    exact = [nan, -1.0, nan]
    assert completed_q(0.1, prior, n, w, 50.0, 0.1, exact) == completed_q(
        0.1, prior, n, [1.0, -3.0, 0.0], 50.0, 0.1
    )
    assert completed_q(0.1, prior, n, w, 50.0, 0.1, [nan] * 3) == completed_q(
        0.1, prior, n, w, 50.0, 0.1
    )


def test_the_target_opening_never_samples_a_proven_loss() -> None:
    moves = GumbelMoves(TTT, gumbel(gumbel_opening="target"), np.random.default_rng(0))
    policy = np.zeros(9, np.float32)
    policy[[0, 1, 2]] = [0.7, 0.2, 0.1]
    values = np.full(9, nan)
    values[0] = -1.0
    proof = Proof(None, -1, values, np.where(np.isnan(values), -1, 2))
    scores = np.full(9, -np.inf)
    scores[1] = 0.0
    result = GumbelResult(np.zeros(9, np.int64), 0.0, policy, 1, policy, scores, np.zeros(9),
                          proof=proof)  # fmt: skip
    assert {moves.choose(result, 0)[1] for _ in range(200)} == {1, 2}
    np.testing.assert_array_equal(moves.choose(result, 0)[0], policy)  # the target as it was


# --- soundness, and the two forms agree -------------------------------------------------------


async def test_every_proof_on_tic_tac_toe_is_right() -> None:
    """Every reachable tic-tac-toe position, searched with the solver: a proven root (or root
    action) has its exact minimax value; a proven win or draw is played as such."""
    exact, evaluate = TicTacToeSolver(), uniform(TTT)
    proven = 0
    for state in exact.reachable_nonterminal_states():
        search = searcher(TTT, CORES[-1], num_simulations=40)
        result = await search.search(state, evaluate, False)
        move = search.choose(result, 1 << 30)[1]
        proof, values = result.proof, exact.action_values(state)
        for a, v in values.items():
            if proof.action_plies[a] >= 0:
                assert proof.values[a] == v, TTT.render(state)
        if proof.value is not None:
            proven += 1
            assert proof.value == exact.value(state), TTT.render(state)
            if proof.value >= 0:
                assert values[move] == proof.value, TTT.render(state)
    assert proven > 3500


async def _lockstep(game: Game, config: MCTSConfig, seed: int, evaluate: Any) -> int:
    """A self-play game with the Python and the compiled solver side by side, noise and fast
    searches as in tests/test_compiled_mcts.py's play_lockstep: equal results, proofs, reports,
    targets and moves at every move. The proven roots met."""
    py = GumbelSearch(game, dataclasses.replace(config, core="python"),
                      np.random.default_rng(seed))  # fmt: skip
    cc = make_search(game, dataclasses.replace(config, core="compiled"),
                     np.random.default_rng(seed))  # fmt: skip
    assert isinstance(cc, CompiledGumbel)
    state, move, proofs = game.initial_state(), 0, 0
    while not game.is_terminal(state):
        noise, sims = move % 3 != 2, (None if move % 4 else 1 + move % 7)
        a = await py.search(state, evaluate, noise, sims)
        b = await cc.search(state, evaluate, noise, sims)
        assert_same(a, b)
        ra, rb = py.report(), cc.report()
        np.testing.assert_array_equal(ra.visits, rb.visits)
        np.testing.assert_array_equal(ra.values, rb.values)
        assert ra.pvs == rb.pvs and ra.nodes == rb.nodes
        assert_same_proof(ra.proof, rb.proof)
        target, action = py.choose(a, move)
        target_b, action_b = cc.choose(b, move)
        assert action_b == action
        np.testing.assert_array_equal(target, target_b)
        proofs += a.proof.value is not None
        state = game.apply(state, action)
        py.advance(action)
        cc.advance(action)
        move += 1
    return proofs


CONFIGS = {
    "default": gumbel(num_simulations=16),
    "many_sims": gumbel(num_simulations=64, num_sampled_actions=4),
    "hundred": gumbel(num_simulations=100),
    "no_reuse": gumbel(num_simulations=24, reuse_tree=False, temperature=0.0),
    "target_opening": gumbel(
        num_simulations=16, gumbel_opening="target", temperature=2.0, temperature_moves=30
    ),
}


@both
@pytest.mark.parametrize("name", sorted(CONFIGS))
@pytest.mark.parametrize("game", [C4, TTT], ids=["connect4", "tictactoe"])
async def test_python_and_compiled_solvers_agree(game: Game, name: str) -> None:
    proofs = 0
    for seed in range(3):
        proofs += await _lockstep(game, CONFIGS[name], seed, hashed())
    assert proofs > 0


@both
async def test_the_agreeing_games_take_every_solver_path(monkeypatch: Any) -> None:
    """The lockstep games meet what only the solver does at the root: a scheduled count held
    by proven losses only (the nearest open move steps in), a won root searched on."""
    seen = {"stand_in": 0, "won": 0}
    choose = gumbel_module._solver_root_action

    def spy(root: Node, counts: list[int], want: int, *rest: Any) -> int:
        i = choose(root, counts, want, *rest)
        seen["stand_in"] += counts[i] != want
        seen["won"] += root.proven is not None
        return i

    monkeypatch.setattr(gumbel_module, "_solver_root_action", spy)
    for seed in range(4):
        await _lockstep(TTT, CONFIGS["hundred"], seed, hashed())
    assert seen["stand_in"] > 0 and seen["won"] > 0


@both
@pytest.mark.parametrize("game_name", ["othello", "go9"])
async def test_othello_and_go_solvers_agree(game_name: str) -> None:
    await _lockstep(make_game(game_name), CONFIGS["default"], 1, hashed())


@both
@pytest.mark.parametrize("fen", [MATE_IN_1, MATE_IN_2], ids=["mate_in_1", "mate_in_2"])
async def test_chess_searches_agree(chess: Game, fen: str) -> None:
    state, evaluate = chess.from_position(fen), hashed(actions=chess.num_actions)
    for noise in (False, True):
        searches = [searcher(chess, c, num_simulations=300) for c in CORES]
        a, b = [await s.search(state, evaluate, noise) for s in searches]
        assert_same(a, b)
        assert_same_proof(searches[0].report().proof, searches[1].report().proof)
        assert searches[0].choose(a, 0)[1] == searches[1].choose(b, 0)[1]


@both
async def test_pooled_solver_games_are_the_per_leaf_games() -> None:
    """The search pool drives Gumbel solver trees as their own coroutines do (a proven root's
    search ends with no leaf to ask for), the evaluation cache answering in C included."""
    from tests.test_searchpool import _games, counts, same

    cfg, seeds = gumbel(num_simulations=24, no_resign_fraction=0.5), [0, 1, 2]
    want, want_stats, _, _ = await _games(cfg, seeds, False, 8, 2, "python")
    got, got_stats, _, _ = await _games(cfg, seeds, True, 8, 2, "compiled")
    for a, b in zip(want, got, strict=True):
        same(a, b)
    assert counts(want_stats) == counts(got_stats)


def test_the_solver_is_accepted_with_gumbel() -> None:
    assert gumbel().solver
    if core is not None:
        knobs = {name: getattr(MCTSConfig(), name) for name in core.KNOBS}
        core.Tree(core_rules(TTT), "gumbel", **{**knobs, "solver": True})
