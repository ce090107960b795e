"""The compiled searches: PUCT and Gumbel with their trees in C (``_mcts_core``), the compiled
forms of ``actors.search.Search`` beside the Python references (``actors.mcts.MCTS``,
``actors.gumbel.GumbelSearch``).

``CompiledMCTS`` and ``CompiledGumbel`` share the interface and the move rules with the
references (``actors.search.PuctMoves``, ``GumbelMoves``), not their methods, and for the same
seed and evaluator give the same visit counts, values, priors and (Gumbel) policy targets, bit
for bit (tests/test_compiled_mcts.py and tests/test_compiled_gumbel.py play whole games against
the Python searches, the oracles). Only the tree and its arithmetic move to C: the coroutine still
awaits the injected ``evaluate`` once per leaf (``asyncio.gather`` for several PUCT leaves in
flight) and draws the Dirichlet or Gumbel noise from the same generator in the same order.

The compiled core plays the games of its table (actors/core/games/: a game's ``core_name``, at
its ``core_params``; the tree holds the game's ``core_state`` bytes); ``actors.searches.make_search`` takes the Python
search for any other game, for ``MCTSConfig.core = "python"``, or when the extension was not
built (no C compiler at install time): ``use_compiled`` decides.
"""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np

from actors.games import Game, State
from actors.games import compiled as _loader
from actors.games.compiled import compiled_available, core_rules
from actors.search import (
    Evaluate,
    GumbelMoves,
    GumbelResult,
    MCTSConfig,
    Proof,
    PuctMoves,
    SearchReport,
    SearchResult,
    considered_visits,
    dirichlet,
    require_live,
)


def new_tree(game: Game, config: MCTSConfig, selection: str) -> Any:
    """A compiled tree for ``game`` searching by ``selection`` (an entry of the core's
    ``SELECTIONS``), every knob the core names (``KNOBS``) taken from ``config`` by name."""
    core = _loader._mcts_core
    knobs = {name: getattr(config, name) for name in core.KNOBS}
    return core.Tree(core_rules(game), selection, **knobs)


def use_compiled(game: Game, config: MCTSConfig) -> bool:
    """``config.core``'s choice: ``compiled`` (an error if unavailable), ``python``, or ``auto``
    (compiled where available)."""
    if config.core == "python":
        return False
    if compiled_available(game):
        return True
    if config.core == "compiled":
        why = _loader._UNAVAILABLE if _loader._mcts_core is None else f"does not know {game.name}"
        raise ValueError(f"mcts.core=compiled: the compiled MCTS is unavailable ({why})")
    return False


class CompiledSearch:
    """The steps of a compiled search, shared by the coroutine (``search``) and by
    ``actors.searchpool.SearchPool``, which drives many games' searches in rounds.

    A search is: ``begin(state)`` (True when the root needs its evaluation: ``root_obs`` gives
    it, ``expand_root`` takes the answer), then ``prepare(add_noise, sims)``, then leaves:
    ``tree.descend(obs)`` and ``tree.step(logits, value, obs)`` until they return 0, then
    ``result(evaluations)``. A failure anywhere must ``tree.reset()``."""

    game: Game
    config: MCTSConfig
    rng: np.random.Generator
    _tree: Any
    leaf_legal: bool = False
    """As ``actors.search``'s: ``evaluate(obs, legal)`` with the leaf's legal actions."""

    @property
    def tree(self) -> Any:
        return self._tree

    @property
    def sequential(self) -> bool:
        """One leaf at a time (``step``), as the pool drives it."""
        return True

    def begin(self, state: State) -> bool:
        require_live(self.game, state)
        return not self._tree.set_root(*self.game.core_state(state))

    def prepare(self, add_noise: bool, sims: int) -> None:
        raise NotImplementedError

    def result(self, evaluations: int) -> Any:
        raise NotImplementedError

    async def search(
        self,
        state: State,
        evaluate: Evaluate,
        add_noise: bool,
        num_simulations: int | None = None,
    ) -> Any:
        tree, shape, empty, uint8 = self._tree, self.game.obs_shape, np.empty, np.uint8
        sims = self.config.num_simulations if num_simulations is None else num_simulations
        try:
            evaluations = 0
            if self.begin(state):
                obs = empty(shape, uint8)
                tree.root_obs(obs)
                logits, value = await self._ask(evaluate, obs, -1)
                tree.expand_root(logits, value)
                evaluations += 1
            self.prepare(add_noise, sims)
            evaluations += await self._leaves(evaluate)
        except BaseException:
            # A failed or cancelled search may leave leaves in flight: never reuse that tree.
            tree.reset()
            raise
        return self.result(evaluations)

    async def _leaves(self, evaluate: Evaluate) -> int:
        """The simulations ``prepare`` set up; returns the evaluations made. The tree descends
        (and backs up terminal leaves) in C; this loop only awaits the leaves."""
        tree, shape, empty, uint8 = self._tree, self.game.obs_shape, np.empty, np.uint8
        evaluations = 0
        obs = empty(shape, uint8)
        n = tree.descend(obs)
        step = tree.step
        while n:
            logits, value = await self._ask(evaluate, obs, 0)
            evaluations += 1
            obs = empty(shape, uint8)  # a new array: evaluate may still hold the last one
            n = step(logits, value, obs)
        return evaluations

    def _ask(self, evaluate: Evaluate, obs: np.ndarray, leaf: int) -> Any:
        """``evaluate`` of pending ``leaf``'s planes (-1: the root's), with its legal actions
        when ``leaf_legal``."""
        if self.leaf_legal:
            return evaluate(obs, np.frombuffer(self._tree.leaf_actions(leaf), np.int16))
        return evaluate(obs)

    def encode_root(self, state: State) -> np.ndarray:
        """The observation of ``state``, the tree's root after a search, encoded in C (the
        same bytes as ``game.encode``: tests/test_compiled_mcts.py compares whole games)."""
        out = np.empty(self.game.obs_shape, np.uint8)
        self._tree.root_obs(out)
        return out

    def advance(self, action: int) -> None:
        self._tree.advance(action, self.config.reuse_tree)

    def report(self, max_pv: int = 32) -> SearchReport:
        """The root's visits, values, priors and principal variations, read from the C tree
        (``root_edges``, ``pv``: actors/core/report.c) as ``actors.nodes.report`` reads a
        Python tree."""
        tree, a = self._tree, self.game.num_actions
        actions, visits = np.empty(a, np.int64), np.empty(a, np.int64)
        values, priors = np.empty(a, np.float64), np.empty(a, np.float32)
        k, root_visits, root_value = tree.root_edges(actions, visits, values, priors)
        pvs = tuple(tuple(np.frombuffer(tree.pv(i, max_pv), np.uint16).tolist()) for i in range(k))
        proof = self._proof(False) if self.config.solver else None
        return SearchReport(actions[:k], visits[:k], values[:k], priors[:k], pvs, root_visits,
                            root_value, int(tree.nodes), proof=proof)  # fmt: skip

    def _proof(self, by_action: bool) -> Proof:
        """The solver's ``Proof`` at the root, read from the C tree (``root_proof``) as
        ``actors.nodes.root_proof`` reads a Python tree: over the root's legal actions, or
        with ``by_action`` over every action of the game."""
        a = self.game.num_actions
        values, plies = np.empty(a, np.float64), np.empty(a, np.int64)
        k, value, root_plies = self._tree.root_proof(values, plies, by_action)
        if by_action:
            return Proof(value, root_plies, values, plies)
        return Proof(value, root_plies, values[:k], plies[:k])

    @property
    def tree_nodes(self) -> int:
        """Nodes held by the tree (freed as soon as ``advance`` or a new root drops them)."""
        return int(self._tree.nodes)


class CompiledMCTS(CompiledSearch, PuctMoves):
    """PUCT with the tree in C; see the module docstring."""

    def __init__(self, game: Game, config: MCTSConfig, rng: np.random.Generator) -> None:
        super().__init__(game, config, rng)
        if not compiled_available(game):
            raise ValueError(f"the compiled MCTS does not support {game.name}")
        width = config.leaves_in_flight
        self._tree = new_tree(game, config, "puct")
        self._leaf_shape = game.obs_shape if width == 1 else (width, *game.obs_shape)

    @property
    def sequential(self) -> bool:
        return self.config.leaves_in_flight == 1

    def prepare(self, add_noise: bool, sims: int) -> None:
        """Root noise (Dirichlet, from this game's generator) and the simulation budget."""
        cfg, tree = self.config, self._tree
        k = tree.root_width()
        noise = None
        if add_noise and k > 1 and cfg.dirichlet_fraction > 0:
            noise = dirichlet(self.rng, cfg.dirichlet_alpha, k)
        tree.root_priors(noise, cfg.dirichlet_fraction)
        tree.start(sims)

    def result(self, evaluations: int) -> SearchResult:
        a = self.game.num_actions
        visits = np.zeros(a, dtype=np.int64)
        prior = np.zeros(a, dtype=np.float32)
        root_value = self._tree.root_result(visits, prior)
        proof = self._proof(True) if self.config.solver else None
        return SearchResult(visits, root_value, prior, evaluations, proof=proof)

    async def _leaves(self, evaluate: Evaluate) -> int:
        if self.config.leaves_in_flight == 1:
            return await super()._leaves(evaluate)
        tree, shape = self._tree, self._leaf_shape
        evaluations = 0
        obs = np.empty(shape, np.uint8)
        n = tree.descend(obs)
        while n:
            if n == 1:
                results = [await self._ask(evaluate, obs[0], 0)]
            else:
                results = await asyncio.gather(*[self._ask(evaluate, obs[i], i) for i in range(n)])
            tree.finish(results)
            evaluations += n
            obs = np.empty(shape, np.uint8)
            n = tree.descend(obs)
        return evaluations


class CompiledGumbel(CompiledSearch, GumbelMoves):
    """Gumbel AlphaZero with the tree in C; see the module docstring. The schedule
    (``considered_visits``) and the Gumbel draws come from Python; the root's sequential
    halving, the descent, expansion and backup run in C between awaited leaves."""

    def __init__(self, game: Game, config: MCTSConfig, rng: np.random.Generator) -> None:
        super().__init__(game, config, rng)
        if not compiled_available(game):
            raise ValueError(f"the compiled Gumbel search does not support {game.name}")
        self._tree = new_tree(game, config, "gumbel")

    def prepare(self, add_noise: bool, sims: int) -> None:
        """The root's Gumbel draws (from this game's generator) and the halving schedule."""
        cfg, tree = self.config, self._tree
        k = tree.root_width()
        noise = self.rng.gumbel(size=k).tolist() if add_noise else None
        tree.gumbel_start(noise, considered_visits(min(cfg.num_sampled_actions, k), sims))

    def result(self, evaluations: int) -> GumbelResult:
        a, empty = self.game.num_actions, np.empty
        policy = empty(a, np.float32)
        scores = empty(a, np.float64)
        gumbel = empty(a, np.float64)
        visits = empty(a, np.int64)
        prior = empty(a, np.float32)
        root_value = self._tree.gumbel_result(policy, scores, gumbel, visits, prior)
        proof = self._proof(True) if self.config.solver else None
        return GumbelResult(visits, root_value, prior, evaluations, policy, scores, gumbel,
                            proof=proof)  # fmt: skip
