"""The compiled Gumbel search against the pure-Python one (the oracle): same seed and evaluator,
the same visit counts, root values, priors, improved policies, scores, noise, evaluations,
chosen moves and training targets, bit for bit."""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Any

import numpy as np
import pytest

from actors.compiled_mcts import CompiledGumbel
from actors.games import ConnectFour, Game, TicTacToe, make_game
from actors.games.compiled import compiled_available
from actors.gumbel import GumbelSearch
from actors.search import MCTSConfig
from actors.searches import make_search
from actors.selfplay import SelfPlayStats, play_game
from tests.test_compiled_mcts import assert_same, hashed, play_lockstep

pytestmark = pytest.mark.skipif(
    not compiled_available(ConnectFour()), reason="actors._mcts_core was not built"
)

TTT, C4 = TicTacToe(), ConnectFour()


def gumbel(**kw: Any) -> MCTSConfig:
    return MCTSConfig(algorithm="gumbel", **kw)


CONFIGS = {
    "default": gumbel(num_simulations=16),
    "many_sims": gumbel(num_simulations=100, num_sampled_actions=4),
    "few_sampled": gumbel(num_simulations=24, num_sampled_actions=2),
    "one_sampled": gumbel(num_simulations=9, num_sampled_actions=1),
    "one_sim": gumbel(num_simulations=1),
    "scales": gumbel(num_simulations=32, c_visit=10.0, c_scale=1.5),
    "no_reuse": gumbel(num_simulations=20, reuse_tree=False, temperature=0.0),
    "hot_opening": gumbel(num_simulations=16, temperature=3.0, temperature_moves=20),
    "target_opening": gumbel(num_simulations=16, gumbel_opening="target", temperature=2.0),
}


async def _play_lockstep(game: Game, cfg: MCTSConfig, seed: int, evaluate: Any) -> int:
    py = GumbelSearch(game, dataclasses.replace(cfg, core="python"), np.random.default_rng(seed))
    cc = make_search(game, dataclasses.replace(cfg, core="compiled"), np.random.default_rng(seed))
    assert isinstance(cc, CompiledGumbel)
    return await play_lockstep(game, py, cc, evaluate)


@pytest.mark.parametrize("name", sorted(CONFIGS))
@pytest.mark.parametrize("game", [C4, TTT], ids=["connect4", "tictactoe"])
async def test_whole_games_match_the_python_search(game: Game, name: str) -> None:
    moves = 0
    for seed in range(3):
        moves += await _play_lockstep(game, CONFIGS[name], seed, hashed())
    assert moves >= 3 * 5


@pytest.mark.parametrize(
    "game_name, name",
    [
        (game, name)
        if (game, name) != ("go13", "many_sims")
        # the Python search at 100 simulations a move on 13x13: 21 s; go9 checks the same
        else pytest.param(game, name, marks=pytest.mark.long)
        for game in ("othello", "go9", "go13")
        for name in ("default", "many_sims", "hot_opening")
    ],
)
async def test_whole_games_of_othello_and_go_match_the_python_search(
    game_name: str, name: str
) -> None:
    game = make_game(game_name)
    assert await _play_lockstep(game, CONFIGS[name], 1, hashed()) >= 20


@pytest.mark.parametrize(
    "dtype, value_type, spread",
    [(np.float64, float, 6.0), (np.float16, float, 2.0), (">f4", np.float64, 20.0)],
)
async def test_other_logit_and_value_types_match(
    dtype: Any, value_type: Any, spread: float
) -> None:
    """Other dtypes, and logits spread wide enough that priors underflow the log's floor."""
    await _play_lockstep(C4, CONFIGS["default"], 7, hashed(dtype, value_type, spread))


class _Client:
    latest_version = 3

    def pin_latest(self) -> Any:
        return contextlib.nullcontext(3)

    def evaluate(self, obs: np.ndarray, version: int) -> Any:
        return hashed()(obs)


async def test_play_game_targets_match() -> None:
    """Whole self-play games through ``play_game``: identical observations, policy targets,
    outcomes and results (the training data), resignation and playout caps included."""
    base = gumbel(num_simulations=16, resign_threshold=-0.6, no_resign_fraction=0.3)
    capped = gumbel(num_simulations=16, full_search_fraction=0.5, fast_simulations=4)
    for seed, cfg in enumerate([base] * 5 + [capped] * 3):
        games, stats = [], []
        for core in ("python", "compiled"):
            s = SelfPlayStats()
            c = dataclasses.replace(cfg, core=core)
            games.append(await play_game(C4, c, _Client(), np.random.default_rng(seed), s))  # type: ignore[arg-type]
            stats.append(s)
        a, b = games
        np.testing.assert_array_equal(a.obs, b.obs)
        np.testing.assert_array_equal(a.policy, b.policy)
        np.testing.assert_array_equal(a.outcome, b.outcome)
        assert (a.result, a.resigned, a.moves) == (b.result, b.resigned, b.moves)
        assert stats[0] == stats[1]


async def test_a_failed_search_drops_the_tree_and_the_next_one_matches() -> None:
    calls = 0
    good = hashed()

    async def flaky(obs: np.ndarray) -> Any:
        nonlocal calls
        calls += 1
        if calls == 9:
            raise ConnectionError("lost")
        return await good(obs)

    cfg = dataclasses.replace(CONFIGS["default"], core="compiled")
    cc = make_search(C4, cfg, np.random.default_rng(0))
    assert isinstance(cc, CompiledGumbel)
    state = C4.initial_state()
    with pytest.raises(ConnectionError):
        await cc.search(state, flaky, add_noise=True)
    assert cc.tree_nodes == 0
    py = GumbelSearch(C4, cfg, np.random.default_rng(1))
    cc.rng = np.random.default_rng(1)  # equal streams
    assert_same(await py.search(state, good, True), await cc.search(state, good, True))


async def test_bad_logits_and_terminal_roots_raise_like_the_python_search() -> None:
    async def short(obs: np.ndarray) -> Any:
        return np.zeros(3, np.float32), 0.0

    for core in ("python", "compiled"):
        m = make_search(C4, gumbel(core=core), np.random.default_rng(0))
        with pytest.raises(ValueError, match=r"logits of shape \(3,\), expected \(7,\)"):
            await m.search(C4.initial_state(), short, add_noise=False)
        with pytest.raises(ValueError, match="terminal"):
            await m.search(C4.from_moves([0, 1, 0, 1, 0, 1, 0]), short, add_noise=False)


async def test_advance_keeps_the_played_subtree_and_frees_the_rest() -> None:
    cc = make_search(C4, gumbel(num_simulations=200, core="compiled"), np.random.default_rng(0))
    assert isinstance(cc, CompiledGumbel)
    res = await cc.search(C4.initial_state(), hashed(), add_noise=True)
    total = cc.tree_nodes
    assert total >= res.num_evaluations > 150  # a node per evaluation, terminals besides
    action = cc.select_action(res, 99)
    cc.advance(action)
    kept = cc.tree_nodes
    assert 0 < kept < total
    assert kept <= res.visits[action]  # at most one new node per simulation through it
    cc.advance(0)
    cc.advance(0)
    assert cc.tree_nodes < kept


def test_make_search_picks_the_compiled_gumbel_where_it_can() -> None:
    rng = np.random.default_rng(0)
    assert type(make_search(C4, gumbel(), rng)) is CompiledGumbel
    assert type(make_search(TTT, gumbel(), rng)) is CompiledGumbel
    assert type(make_search(C4, gumbel(core="python"), rng)) is GumbelSearch

    class Other(ConnectFour):  # a subclass may change the rules: the compiled core refuses it
        pass

    assert type(make_search(Other(), gumbel(), rng)) is GumbelSearch
    with pytest.raises(ValueError, match="mcts.core=compiled"):
        make_search(Other(), gumbel(core="compiled"), rng)
