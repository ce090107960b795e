"""One search interface (``actors.search.Search``): both algorithms, each as a Python reference
and a compiled form, come from one factory by ``mcts.algorithm`` and ``mcts.core``, implement
the whole interface, and share it (and the move rules) rather than each other's methods."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from actors.compiled_mcts import CompiledGumbel, CompiledMCTS
from actors.games import ConnectFour
from actors.games.compiled import compiled_available
from actors.gumbel import GumbelSearch
from actors.mcts import MCTS
from actors.search import GumbelMoves, MCTSConfig, PuctMoves, Search
from actors.searches import make_search

C4 = ConnectFour()

KINDS = {
    ("puct", "python"): MCTS,
    ("gumbel", "python"): GumbelSearch,
    ("puct", "compiled"): CompiledMCTS,
    ("gumbel", "compiled"): CompiledGumbel,
}


@pytest.mark.parametrize(("algorithm", "core"), list(KINDS))
def test_one_factory_picks_by_algorithm_and_core(algorithm: str, core: str) -> None:
    if core == "compiled" and not compiled_available(C4):
        pytest.skip("actors._mcts_core was not built")
    cfg = MCTSConfig(algorithm=algorithm, core=core, num_simulations=8)  # type: ignore[arg-type]
    search = make_search(C4, cfg, np.random.default_rng(0))
    assert type(search) is KINDS[(algorithm, core)]
    assert isinstance(search, Search)  # every member of the interface
    # the interface, end to end: a search, a target and a move, the tree advanced
    state = C4.initial_state()

    async def evaluate(obs: np.ndarray) -> tuple[np.ndarray, float]:
        return np.zeros(C4.num_actions, np.float32), 0.0

    result = asyncio.run(search.search(state, evaluate, add_noise=True))
    target, action = search.choose(result, 0)
    assert target.shape == (C4.num_actions,) and abs(float(target.sum()) - 1.0) < 1e-5
    assert action in C4.legal_actions(state)
    search.advance(action)
    assert search.tree_nodes > 0  # the played move's subtree kept


def test_the_compiled_forms_share_the_interface_not_the_references_methods() -> None:
    assert not issubclass(CompiledMCTS, MCTS) and not issubclass(CompiledGumbel, GumbelSearch)
    assert issubclass(CompiledMCTS, PuctMoves) and issubclass(MCTS, PuctMoves)
    assert issubclass(CompiledGumbel, GumbelMoves) and issubclass(GumbelSearch, GumbelMoves)


def test_auto_takes_python_where_the_core_does_not_know_the_game() -> None:
    class Other(ConnectFour):
        core_name = None  # rules the compiled core does not know

    rng = np.random.default_rng(0)
    assert type(make_search(Other(), MCTSConfig(), rng)) is MCTS
    assert type(make_search(Other(), MCTSConfig(algorithm="gumbel"), rng)) is GumbelSearch
    with pytest.raises(ValueError, match="mcts.core=compiled"):
        make_search(Other(), MCTSConfig(core="compiled"), rng)


@pytest.mark.parametrize("algorithm", ["puct", "gumbel"])
def test_report_is_the_same_from_the_python_and_the_compiled_tree(algorithm: str) -> None:
    """``Search.report()``: the root's visits, values, priors and lines, read from either tree,
    agree (the compiled tree's through actors/core/report.c)."""
    if not compiled_available(C4):
        pytest.skip("actors._mcts_core was not built")

    async def evaluate(obs: np.ndarray) -> tuple[np.ndarray, float]:
        r = np.random.default_rng(int(obs.sum()) + 7 * int(obs[0].sum()))
        return r.normal(size=C4.num_actions).astype(np.float32), float(r.uniform(-1, 1))

    reports = []
    for core in ("python", "compiled"):
        cfg = MCTSConfig(algorithm=algorithm, core=core, num_simulations=48, leaves_in_flight=1)  # type: ignore[arg-type]
        search = make_search(C4, cfg, np.random.default_rng(0))
        asyncio.run(search.search(C4.initial_state(), evaluate, add_noise=True))
        reports.append(search.report(max_pv=12))
    py, cc = reports
    assert py.actions.tolist() == cc.actions.tolist() == C4.legal_actions(C4.initial_state())
    assert py.visits.tolist() == cc.visits.tolist() and int(py.visits.sum()) == 48
    assert py.root_visits == cc.root_visits == 49
    assert np.array_equal(py.values, cc.values) and np.array_equal(py.priors, cc.priors)
    assert py.pvs == cc.pvs and py.pv == cc.pv and len(py.pv) > 1
    assert all(line[0] == a for line, a in zip(py.pvs, py.actions.tolist()))
    assert all(len(line) <= 12 for line in py.pvs)
    assert py.nodes == cc.nodes == search.tree_nodes
    assert py.root_value == cc.root_value
