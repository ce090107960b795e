"""The compiled core's table of selection rules (``_mcts_core.SELECTIONS``: actors/core/select.c),
each entry against its pure-Python reference: whole self-play games in lockstep on every game
the core plays, the same visit counts, values, priors, targets and moves bit for bit (the
comparison of tests/test_compiled_mcts.py). A new rule is one C file and a line in the table,
and it names its reference in ``REFERENCES`` here, or this file fails.

Also the contract of ``Tree(rules, selection, **knobs)``: the knobs are ``MCTSConfig``'s fields
of the same names, each required, none unknown."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest

from actors.compiled_mcts import new_tree
from actors.games import BUILTIN_GAMES, make_game
from actors.games.compiled import core, core_name, core_rules
from actors.gumbel import GumbelSearch
from actors.mcts import MCTS
from actors.search import MCTSConfig
from actors.searches import make_search
from tests.test_compiled_mcts import hashed, play_lockstep

pytestmark = pytest.mark.skipif(core is None, reason="actors._mcts_core was not built")

REFERENCES: dict[str, Any] = {"puct": MCTS, "gumbel": GumbelSearch}
"""Each selection rule's pure-Python reference (its oracle)."""

CONFIGS = {
    "puct": MCTSConfig(num_simulations=24, leaves_in_flight=4, virtual_loss=2.0),
    "gumbel": MCTSConfig(algorithm="gumbel", num_simulations=24, num_sampled_actions=8),
}
"""One config per entry, exercising its own knobs (PUCT with leaves in flight)."""

SELECTIONS = tuple(core.SELECTIONS) if core is not None else ()
VARIANTS = ("go13", "go9-features")
"""Built-in games beyond the first to name each compiled entry, played too (go19 is go13's
rules on a bigger board, and slow in Python)."""
SHORTER = {"shogi": "shogi(max_plies=96,history=1)"}
"""Games whose near-random self-play runs to the ply cap (shogi: 512 plies, a minute and more
per entry here), played at a shorter one."""


def compiled_games() -> tuple[str, ...]:
    """The first built-in game naming each entry of the compiled table, then ``VARIANTS``: a new
    compiled game is played here without being listed (one no built-in game names fails
    tests/test_game_registry.py)."""
    if core is None:
        return ()
    first: dict[str, str] = {}
    for name in BUILTIN_GAMES:
        entry = core_name(make_game(name))
        if entry in core.GAMES:
            first.setdefault(entry, SHORTER.get(name, name))
    return tuple(first.values()) + VARIANTS


GAMES = compiled_games()


def test_every_entry_has_a_reference_and_a_config() -> None:
    assert set(SELECTIONS) == set(REFERENCES) == set(CONFIGS)


@pytest.mark.parametrize("game_name", GAMES)
@pytest.mark.parametrize("selection", SELECTIONS)
async def test_each_entry_plays_in_lockstep_with_its_reference(
    selection: str, game_name: str
) -> None:
    game, cfg = make_game(game_name), CONFIGS[selection]
    seeds = 3 if game_name in ("tictactoe", "connect4") else 1
    for seed in range(seeds):
        py = REFERENCES[selection](
            game, dataclasses.replace(cfg, core="python"), np.random.default_rng(seed)
        )
        cc = make_search(
            game, dataclasses.replace(cfg, core="compiled"), np.random.default_rng(seed)
        )
        assert type(py) is not type(cc)  # the compiled form, not the reference twice
        assert await play_lockstep(game, py, cc, hashed(actions=game.num_actions)) >= 5


def test_the_knobs_are_the_configs_fields_by_name() -> None:
    fields = {f.name for f in dataclasses.fields(MCTSConfig)}
    assert set(core.KNOBS) <= fields
    rules = core_rules(make_game("connect4"))
    knobs = {name: getattr(MCTSConfig(), name) for name in core.KNOBS}
    core.Tree(rules, "puct", **knobs)
    missing = dict(knobs)
    del missing["c_puct"]
    with pytest.raises(TypeError, match="the knob c_puct is missing"):
        core.Tree(rules, "puct", **missing)
    with pytest.raises(TypeError, match="keywords, but the knobs are"):
        core.Tree(rules, "puct", **knobs, frobnicate=1.0)
    with pytest.raises(ValueError, match="no selection rule alphabeta"):
        core.Tree(rules, "alphabeta", **knobs)
    with pytest.raises(ValueError, match="leaves_in_flight must be >= 1"):
        core.Tree(rules, "puct", **{**knobs, "leaves_in_flight": 0})


def test_wide_rounds_and_wide_games_need_no_caps() -> None:
    """No compile-time bound: 200 leaves in flight, and Go 25x25's 626 actions."""
    from actors.games.go.rules import Go

    cfg = MCTSConfig(num_simulations=400, leaves_in_flight=200, virtual_loss=1.0)
    go = Go(25)
    tree = new_tree(go, cfg, "puct")
    assert not tree.set_root(*go.core_state(go.initial_state()))
    obs = np.empty(go.obs_shape, np.uint8)
    tree.root_obs(obs)
    np.testing.assert_array_equal(obs, go.encode(go.initial_state()))
    tree.expand_root(np.zeros(go.num_actions, np.float32), 0.0)
    tree.root_priors(None, 0.0)
    tree.start(400)
    leaves = np.empty((200, *go.obs_shape), np.uint8)
    n = tree.descend(leaves)
    assert n == 200
    tree.finish([(np.zeros(go.num_actions, np.float32), 0.0)] * n)
    assert tree.nodes == 201
