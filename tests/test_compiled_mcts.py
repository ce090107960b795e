"""The compiled MCTS against the pure-Python one (the oracle): same seed and evaluator, the same
visit counts, root values, priors, evaluations, chosen moves and training targets, bit for bit."""

from __future__ import annotations

import asyncio
import dataclasses
import zlib
from typing import Any

import numpy as np
import pytest

from actors.compiled_mcts import CompiledMCTS
from actors.games import ConnectFour, Game, TicTacToe, make_game
from actors.games.compiled import compiled_available, live_trees
from actors.mcts import MCTS
from actors.search import MCTSConfig, SearchResult, dirichlet
from actors.searches import make_search
from actors.selfplay import SelfPlayStats, play_game

pytestmark = pytest.mark.skipif(
    not compiled_available(ConnectFour()), reason="actors._mcts_core was not built"
)

TTT, C4 = TicTacToe(), ConnectFour()


def hashed(
    dtype: Any = np.float32,
    value_type: Any = np.float32,
    spread: float = 2.0,
    actions: int | None = None,
):
    """A deterministic evaluator: pseudo-random logits and value seeded by the position's bytes,
    so both searches see the same network whatever order they ask in. ``actions`` is the policy
    width (by default guessed from the board's shape, ``ACTIONS``: chess needs it given)."""

    async def evaluate(obs: np.ndarray) -> tuple[np.ndarray, Any]:
        g = np.random.default_rng(zlib.crc32(obs.tobytes()))
        logits = (g.standard_normal(actions or _actions(obs)) * spread).astype(dtype)
        return logits, value_type(g.uniform(-1, 1))

    return evaluate


def _actions(obs: np.ndarray) -> int:
    return ACTIONS[obs.shape[-2:]]


ACTIONS = {(6, 7): 7, (3, 3): 9, (8, 8): 65, (9, 9): 82, (13, 13): 170, (19, 19): 362}
"""The policy width of each game's board (Connect Four, tic-tac-toe, Othello, Go 9x9, 13x13,
19x19), by its planes' height and width (callers may add planes: tests/test_searchpool.py)."""


CONFIGS = {
    "default": MCTSConfig(num_simulations=40),
    "in_flight": MCTSConfig(num_simulations=48, leaves_in_flight=4, virtual_loss=1.0),
    "in_flight_vl3": MCTSConfig(num_simulations=30, leaves_in_flight=8, virtual_loss=3.0),
    "no_reuse": MCTSConfig(num_simulations=25, reuse_tree=False, fpu_reduction=0.0),
    "root_fpu": MCTSConfig(num_simulations=60, root_fpu_reduction=0.4, c_puct=2.5),
    "one_sim": MCTSConfig(num_simulations=1),
    "no_noise_frac": MCTSConfig(num_simulations=20, dirichlet_fraction=0.0, temperature=0.0),
    "solver": MCTSConfig(num_simulations=40, solver=True),
    "solver_in_flight": MCTSConfig(num_simulations=48, leaves_in_flight=4, solver=True),
}


def assert_same(a: SearchResult, b: SearchResult) -> None:
    """Two searches' results are equal, bit for bit (Gumbel's arrays too)."""
    np.testing.assert_array_equal(a.visits, b.visits)
    assert a.root_value == b.root_value
    np.testing.assert_array_equal(a.root_prior, b.root_prior)
    assert a.num_evaluations == b.num_evaluations
    assert (a.proof is None) == (b.proof is None)
    if a.proof is not None:  # the solver's (tests/test_mcts_solver.py)
        assert (a.proof.value, a.proof.plies) == (b.proof.value, b.proof.plies)
        np.testing.assert_array_equal(a.proof.values, b.proof.values)
        np.testing.assert_array_equal(a.proof.action_plies, b.proof.action_plies)
    for name in ("policy", "scores", "gumbel"):  # GumbelResult's
        if hasattr(a, name):
            x, y = getattr(a, name), getattr(b, name)
            assert x.dtype == y.dtype and x.shape == y.shape, name
            np.testing.assert_array_equal(x, y, err_msg=name)


async def play_lockstep(game: Game, py: Any, cc: Any, evaluate: Any) -> int:
    """Play one self-play game with the Python search ``py`` and the compiled ``cc`` side by
    side (same seed); assert equal results, moves and targets at every move. The moves."""
    state, move = game.initial_state(), 0
    while not game.is_terminal(state):
        noise = move % 3 != 2  # some searches without noise: the clean priors come back
        sims = None if move % 4 else 1 + move % 7  # playout caps: some fast searches
        a = await py.search(state, evaluate, noise, sims)
        b = await cc.search(state, evaluate, noise, sims)
        assert_same(a, b)
        target, action = py.choose(a, move)
        target_b, action_b = cc.choose(b, move)
        assert action_b == action
        np.testing.assert_array_equal(target, target_b)
        if move % 5 == 4:  # a second search of the same root, as after a version retry
            assert_same(
                await py.search(state, evaluate, True), await cc.search(state, evaluate, True)
            )
        state = game.apply(state, action)
        py.advance(action)
        cc.advance(action)
        move += 1
    return move


async def _play_lockstep(game: Game, cfg: MCTSConfig, seed: int, evaluate: Any) -> int:
    py = MCTS(game, dataclasses.replace(cfg, core="python"), np.random.default_rng(seed))
    cc = make_search(game, dataclasses.replace(cfg, core="compiled"), np.random.default_rng(seed))
    assert isinstance(cc, CompiledMCTS)
    return await play_lockstep(game, py, cc, evaluate)


@pytest.mark.parametrize("name", sorted(CONFIGS))
@pytest.mark.parametrize("game", [C4, TTT], ids=["connect4", "tictactoe"])
async def test_whole_games_match_the_python_search(game: Game, name: str) -> None:
    moves = 0
    for seed in range(3):
        moves += await _play_lockstep(game, CONFIGS[name], seed, hashed())
    assert moves >= 3 * 5


@pytest.mark.parametrize("name", ["default", "in_flight_vl3", "no_reuse", "solver"])
@pytest.mark.parametrize("game_name", ["othello", "go9", "go13"])
async def test_whole_games_of_othello_and_go_match_the_python_search(
    game_name: str, name: str
) -> None:
    """Long games with passes (and Go's superko along the tree's paths and the game's
    history): one whole game each."""
    game = make_game(game_name)
    assert await _play_lockstep(game, CONFIGS[name], 1, hashed()) >= 20


@pytest.mark.parametrize(
    "dtype, value_type",
    [
        (np.float64, float),
        (np.float32, float),
        (np.float64, np.float64),
        (np.float16, float),
        (">f4", float),
    ],
)
async def test_other_logit_and_value_types_match(dtype: Any, value_type: Any) -> None:
    await _play_lockstep(C4, CONFIGS["in_flight"], 7, hashed(dtype, value_type, spread=6.0))


async def test_play_game_targets_match() -> None:
    """Whole self-play games through ``play_game``: identical observations, policy targets,
    outcomes and results (the training data), resignation included."""

    class Client:
        latest_version = 3

        def pin_latest(self) -> Any:
            import contextlib

            return contextlib.nullcontext(3)

        def evaluate(self, obs: np.ndarray, version: int) -> Any:
            return hashed()(obs)

    capped = MCTSConfig(num_simulations=30, full_search_fraction=0.5, fast_simulations=5)
    for seed, base in enumerate(
        [MCTSConfig(num_simulations=30, resign_threshold=-0.6, no_resign_fraction=0.3)] * 6
        + [capped] * 3
        + [MCTSConfig(algorithm="gumbel", num_simulations=16, temperature=3.0)] * 3
    ):
        games = []
        for core in ("python", "compiled"):
            cfg = dataclasses.replace(base, core=core)
            stats = SelfPlayStats()
            games.append(await play_game(C4, cfg, Client(), np.random.default_rng(seed), stats))  # type: ignore[arg-type]
        a, b = games
        np.testing.assert_array_equal(a.obs, b.obs)
        np.testing.assert_array_equal(a.policy, b.policy)
        np.testing.assert_array_equal(a.outcome, b.outcome)
        assert (a.result, a.resigned, a.version, a.moves) == (
            b.result,
            b.resigned,
            b.version,
            b.moves,
        )


async def test_a_failed_search_drops_the_tree_and_the_next_one_matches() -> None:
    calls = 0
    good = hashed()

    async def flaky(obs: np.ndarray) -> Any:
        nonlocal calls
        calls += 1
        if calls == 25:
            raise ConnectionError("lost")
        return await good(obs)

    cfg = dataclasses.replace(CONFIGS["in_flight"], core="compiled")
    cc = make_search(C4, cfg, np.random.default_rng(0))
    state = C4.initial_state()
    with pytest.raises(ConnectionError):
        await cc.search(state, flaky, add_noise=True)
    assert isinstance(cc, CompiledMCTS) and cc.tree_nodes == 0
    py = MCTS(C4, cfg, np.random.default_rng(0))
    py.rng, cc.rng = np.random.default_rng(1), np.random.default_rng(1)  # equal streams
    a = await py.search(state, good, add_noise=True)
    b = await cc.search(state, good, add_noise=True)
    np.testing.assert_array_equal(a.visits, b.visits)


async def test_bad_logits_raise_like_the_python_search() -> None:
    async def short(obs: np.ndarray) -> Any:
        return np.zeros(3, np.float32), 0.0

    for core in ("python", "compiled"):
        m = make_search(C4, MCTSConfig(core=core), np.random.default_rng(0))
        with pytest.raises(ValueError, match=r"logits of shape \(3,\), expected \(7,\)"):
            await m.search(C4.initial_state(), short, add_noise=False)
    m = make_search(C4, MCTSConfig(core="compiled"), np.random.default_rng(0))
    with pytest.raises(ValueError, match="terminal"):
        await m.search(C4.from_moves([0, 1, 0, 1, 0, 1, 0]), short, add_noise=False)


async def test_advance_frees_the_dropped_subtrees() -> None:
    cc = make_search(C4, MCTSConfig(num_simulations=200, core="compiled"), np.random.default_rng(0))
    assert isinstance(cc, CompiledMCTS)
    res = await cc.search(C4.initial_state(), hashed(), add_noise=True)
    total = cc.tree_nodes
    assert total > 150
    action = int(np.argmax(res.visits))
    cc.advance(action)
    assert 0 < cc.tree_nodes < total
    cc.advance(6 - action if action != 3 else 0)  # a move whose subtree may be tiny or absent
    cc.advance(0)
    assert cc.tree_nodes < total


async def test_the_process_counts_what_all_its_trees_hold() -> None:
    """``live_trees()`` (the actors' status line and Prometheus gauge) is the sum over every
    tree of the process, and a tree dropped gives its nodes and bytes back."""
    base_nodes, base_bytes = live_trees()
    cfg = MCTSConfig(num_simulations=100, core="compiled")
    trees = [make_search(C4, cfg, np.random.default_rng(i)) for i in range(3)]
    for t in trees:
        await t.search(C4.initial_state(), hashed(), add_noise=True)
    nodes, size = live_trees()
    assert nodes - base_nodes == sum(t.tree_nodes for t in trees) > 250
    assert size - base_bytes > 50 * (nodes - base_nodes)  # a node holds its edges and state
    trees[0].advance(3)
    assert live_trees()[0] - base_nodes == sum(t.tree_nodes for t in trees)
    del trees, t
    assert live_trees() == (base_nodes, base_bytes)


def test_make_search_chooses() -> None:
    rng = np.random.default_rng(0)
    assert type(make_search(C4, MCTSConfig(), rng)) is CompiledMCTS
    assert type(make_search(C4, MCTSConfig(core="python"), rng)) is MCTS

    class Other(ConnectFour):  # a subclass may change the rules: the compiled core refuses it
        pass

    assert type(make_search(Other(), MCTSConfig(), rng)) is MCTS
    with pytest.raises(ValueError, match="mcts.core=compiled"):
        make_search(Other(), MCTSConfig(core="compiled"), rng)


async def test_gather_is_used_for_leaves_in_flight() -> None:
    """Several leaves of one round are awaited together (the client batches them)."""
    seen: list[int] = []
    pending = 0

    async def evaluate(obs: np.ndarray) -> Any:
        nonlocal pending
        pending += 1
        await asyncio.sleep(0)
        seen.append(pending)
        pending -= 1
        return await hashed()(obs)

    cfg = MCTSConfig(num_simulations=32, leaves_in_flight=8, core="compiled")
    await make_search(C4, cfg, np.random.default_rng(0)).search(
        C4.initial_state(), evaluate, add_noise=True
    )
    assert max(seen) > 1


def _select_action_before(rng: np.random.Generator, cfg: MCTSConfig, visits: Any, move: int) -> int:
    """``MCTS.select_action`` as it was before the speed-up (the oracle)."""
    if move < cfg.temperature_moves and cfg.temperature > 0:
        p = (visits / visits.max()) ** (1.0 / cfg.temperature)
        return int(rng.choice(len(p), p=p / p.sum()))
    best = np.flatnonzero(visits == visits.max())
    return int(best[0]) if len(best) == 1 else int(rng.choice(best))


@pytest.mark.parametrize("temperature", [1.0, 0.5, 2.0, 0.0])
def test_move_choice_and_targets_match_the_numpy_versions(temperature: float) -> None:
    cfg = MCTSConfig(temperature=temperature, temperature_moves=5)
    draw = np.random.default_rng(0)
    m = MCTS(C4, cfg, np.random.default_rng(1))
    oracle_rng = np.random.default_rng(1)
    for i in range(3000):
        size = 7 if i % 2 else 9
        visits = draw.integers(0, 4 if i % 3 == 0 else 900, size).astype(np.int64)
        visits[draw.integers(size)] += 1  # at least one visit, as after any search
        move = i % 9
        assert m.select_action(visits, move) == _select_action_before(oracle_rng, cfg, visits, move)
        target = MCTS.policy_target(visits)
        assert target.dtype == np.float32
        np.testing.assert_array_equal(target, (visits / visits.sum()).astype(np.float32))


@pytest.mark.parametrize("alpha", [0.05, 0.1, 0.3, 1.0, 2.5])
def test_dirichlet_matches_numpy(alpha: float) -> None:
    a, b = np.random.default_rng(3), np.random.default_rng(3)
    for i in range(2000):
        k = 2 + i % 8
        assert dirichlet(a, alpha, k) == b.dirichlet([alpha] * k).tolist()
    assert a.random() == b.random()  # the streams stay in step


def test_a_stale_build_of_the_core_is_not_used(caplog: pytest.LogCaptureFixture) -> None:
    """A core built from an older C file (no ABI, or another one) is refused with the fix named;
    the current build is the one in use."""
    from types import SimpleNamespace

    from actors import _mcts_core
    from actors.games import compiled

    assert compiled._checked_core(_mcts_core) == (_mcts_core, "")
    for stale in (SimpleNamespace(__file__="old.so"), SimpleNamespace(__file__="old.so", ABI=1)):
        core, why = compiled._checked_core(stale)
        assert core is None
        assert "older actors/core/ (ABI 1" in why and "pip install -e ." in why
    assert "rebuild it with `pip install -e .`" in caplog.text
    assert compiled._checked_core(None) == (None, "it was not built")
