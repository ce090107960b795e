"""The search behind the engines (``azserve gtp``, ``azserve uci`` and Go analysis): the search
``match`` and the ladder play and measured, driven in slices so that an engine can report,
meet a deadline or stop between them.

The search is ``actors.searches.make_search`` with the checkpoint's ``mcts.*`` (c_puct, FPU,
the compiled core wherever it plays the game) and ``PLAY_ALGORITHM`` (PUCT; ``engine_mcts``
takes Gumbel too), awaiting the Agent's ``BatchedEvaluator``:
with PUCT, ``leaves_in_flight`` leaves go to the net together, one batch per round, as
self-play batches its leaves. Gumbel's sequential halving takes one leaf at a time (the
schedule is sequential), and a budget cut into slices would be a different search (each
slice halves afresh), so a Gumbel search with a known budget and no deadline runs whole.

What an engine shows comes from ``Search.report()`` (visits, values, priors, principal
variations, the tree's size) and the move it plays from ``Search.choose`` at temperature 0
(the Agent's analysis settings: no noise, no temperature, no resignation).

With the solver (the checkpoint's ``mcts.solver``; docs/mcts.md, "Proven results") the report
carries the root's ``Proof``: the move played is the proof's (the shortest proven win, the
longest proven loss, never a proven loss while another move is open: ``proven_move`` on a
sliced Gumbel search, ``Search.choose`` otherwise), and a proven root ends the slicing
(``settled``): a search with a budget (simulations or a deadline) plays a proven result at
once; an open-ended one searches on only while a shorter win may still be found.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Literal

import numpy as np

from actors.games.base import Game, State
from actors.search import (
    PLAY_ALGORITHM,
    SOLVED_WIN,
    Evaluate,
    MCTSConfig,
    Proof,
    Search,
    SearchReport,
)
from actors.searches import make_search

SLICE = 32
"""Simulations between two looks at the clock and the input (PUCT, or a Gumbel search with
no fixed budget)."""
GUMBEL_SLICE = 64
"""A Gumbel search's slice when it has no fixed budget (a time limit, an open analysis)."""
MAX_VISITS = 100_000
"""An open-ended search stops here (the tree's memory); the engine goes on reporting."""
LEAVES_IN_FLIGHT = 8
"""PUCT leaves evaluated together per round by default: a 4x64 chess net on 2 CPU cores
searched 1,800 nodes/s at 8 (the smallest of chess's batch buckets; docs/benchmarks.md, "The
engines")."""


@dataclass(frozen=True)
class Progress:
    """A search as it stands: the tree's report, the move it would play, its speed."""

    report: SearchReport
    best: int
    """The move the search plays now (``Search.choose`` at temperature 0)."""
    simulations: int
    """Simulations of this search so far (the ``nodes`` of a UCI ``info`` line)."""
    seconds: float
    """Wall time of this search so far."""

    @property
    def nps(self) -> int:
        """Simulations per second."""
        return int(self.simulations / self.seconds) if self.seconds > 0 else 0


def engine_mcts(
    mcts: MCTSConfig,
    leaves_in_flight: int = LEAVES_IN_FLIGHT,
    algorithm: Literal["puct", "gumbel"] = PLAY_ALGORITHM,
) -> MCTSConfig:
    """An engine's search settings: ``mcts`` (an Agent's: the checkpoint's c_puct, FPU and
    core; no noise, no temperature) with ``algorithm`` (by default the one match and the ladder
    play and measured: ``PLAY_ALGORITHM``), ``leaves_in_flight`` leaves per round (PUCT; Gumbel
    takes one at a time) and no resignation (the engines decide that themselves)."""
    return replace(
        mcts,
        algorithm=algorithm,
        leaves_in_flight=leaves_in_flight,
        dirichlet_fraction=0.0,
        resign_threshold=-2.0,
    )


class EngineSearch:
    """One engine's search tree, kept from move to move while the root stays (``run``), made
    afresh for a new game or another game object (a new komi)."""

    def __init__(self, evaluate: Evaluate, mcts: MCTSConfig, seed: int = 0) -> None:
        self.evaluate = evaluate
        self.mcts = mcts
        self.seed = seed
        self._search: Search | None = None
        self._game: Game | None = None

    def configure(self, **changes: Any) -> None:
        """Other search settings (``MCTSConfig`` fields by name); the tree starts afresh."""
        self.mcts = replace(self.mcts, **changes)
        self.new_game()

    def new_game(self) -> None:
        self._search = None

    def search_for(self, game: Game) -> Search:
        """The search of ``game`` (made on first use, or when the game object changed)."""
        if self._search is None or self._game is not game:
            self._search = make_search(game, self.mcts, np.random.default_rng(self.seed))
            self._game = game
        return self._search

    async def run(
        self,
        game: Game,
        state: State,
        sims: int | None,
        deadline: float | None = None,
        on_slice: Callable[[Progress], None] | None = None,
        stopped: Callable[[], bool] = lambda: False,
    ) -> Progress:
        """Search ``state`` for ``sims`` new simulations (None: until ``stopped()``, or
        ``MAX_VISITS``), until ``time.monotonic()`` passes ``deadline`` or ``stopped()`` turns
        true, or the solver's proof settles the root (``settled``), whichever is first; at
        least one slice. ``on_slice`` hears the progress after each slice."""
        search = self.search_for(game)
        open_ended = sims is None and deadline is None
        whole = self.mcts.algorithm == "gumbel" and sims is not None and deadline is None
        step = GUMBEL_SLICE if self.mcts.algorithm == "gumbel" else SLICE
        target = MAX_VISITS if sims is None else max(1, sims)
        start = time.monotonic()
        done = 0
        while True:
            k = target - done if whole else min(step, target - done)
            result = await search.search(state, self.evaluate, False, k)
            done += k
            report = search.report()
            # Gumbel's move is among the survivors of the last halving: over a search cut into
            # slices, that is one slice's choice, so the most visited move is played instead.
            # With the solver, the proof's move among those (``proven_move``).
            sliced = self.mcts.algorithm == "gumbel" and done > k
            if not sliced:
                best = search.choose(result, 1 << 30)[1]
            else:
                best = report.pv[0] if report.proof is None else proven_move(report)
            progress = Progress(report, best, done, time.monotonic() - start)
            if on_slice is not None:
                on_slice(progress)
            if done >= target or stopped():
                return progress
            if deadline is not None and time.monotonic() >= deadline:
                return progress
            if report.proof is not None and settled(report.proof, open_ended):
                return progress

    async def raw(self, game: Game, state: State) -> Progress:
        """The net alone (no search): its priors, its value as the root's."""
        start = time.monotonic()
        logits, value = await self.evaluate(game.encode(state))
        actions = np.asarray(game.legal_actions(state), dtype=np.int64)
        p = np.exp(logits[actions] - logits[actions].max())
        p /= p.sum()
        k = len(actions)
        report = SearchReport(
            actions, np.zeros(k, np.int64), np.zeros(k), p.astype(np.float32),
            tuple((int(a),) for a in actions), 1, float(value), 1,
        )  # fmt: skip
        return Progress(report, int(actions[int(np.argmax(p))]), 0, time.monotonic() - start)


def proven_move(report: SearchReport) -> int:
    """The move a report's ``proof`` allows (``PuctMoves.choose`` at temperature 0, on the
    report's arrays [k]): a proven win's or loss's own (the shortest win, the longest loss),
    else the most visited move left open (never a proven loss while another is open; a
    proven draw: its drawing moves), ties to the higher prior."""
    assert report.proof is not None
    forced = report.proof.forced()
    if forced >= 0:
        return int(report.actions[forced])
    weights = report.proof.allowed(report.visits, report.priors)
    top = np.flatnonzero(weights == weights.max())
    return int(report.actions[top[np.argmax(report.priors[top])]])


def settled(proof: Proof, open_ended: bool) -> bool:
    """Whether a search may stop at a root with this proof. A search with a budget stops at
    any proof (a mate found is played at once, even where a shorter one may exist); an
    open-ended one once it can learn no more (``actors.nodes.search_over``: a loss, a draw, a
    win in one ply, or every move proven), where its next slices would run no simulation: a
    busy loop under ``go infinite``."""
    if proof.value is None:
        return False
    if not open_ended or proof.value < SOLVED_WIN or proof.plies <= 1:
        return True
    return bool((proof.action_plies >= 0).all())


__all__ = [
    "GUMBEL_SLICE",
    "LEAVES_IN_FLIGHT",
    "MAX_VISITS",
    "SLICE",
    "EngineSearch",
    "Progress",
    "engine_mcts",
    "proven_move",
    "settled",
]
