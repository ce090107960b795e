"""PUCT Monte Carlo tree search as in AlphaZero, with the network injected as ``evaluate``.

The search is pure: it touches no sockets and awaits only ``evaluate(obs) -> (logits, value)``,
so tests drive it with toy evaluators. Nodes keep their children's statistics in flat Python
lists (priors ``p``, visits ``n``, value sums ``w``, one slot per legal action): at Connect Four's
seven children plain lists beat numpy, whose per-call cost dominates (DESIGN.md, section 9).

Sign convention: ``w[i]`` sums values from the perspective of the side to move at the node
that owns the edge; a node's ``value_sum`` from the perspective of its own side to move.
Turns alternate (the ``Game`` contract), so a value flips sign at every ply of the backup.
"""

from __future__ import annotations

import asyncio
from math import inf, sqrt

import numpy as np

from actors.games.base import Game, State
from actors.nodes import (
    Node,
    backup,
    count_nodes,
    expand,
    report,
    root_proof,
    search_over,
    solve_backup,
    subtree,
    undo,
)
from actors.search import (
    Evaluate,
    MCTSConfig,
    PuctMoves,
    SearchReport,
    SearchResult,
    dirichlet,
    require_live,
)


class MCTS(PuctMoves):
    """The PUCT search tree of one game in Python, reused from move to move (the reference:
    ``actors.compiled_mcts.CompiledMCTS`` must give the same results). ``actors.search.Search``.

    Args:
        game: the rules.
        config: search knobs.
        rng: source of Dirichlet noise, move sampling and the no-resign draw.
    """

    def __init__(self, game: Game, config: MCTSConfig, rng: np.random.Generator) -> None:
        super().__init__(game, config, rng)
        self._root: Node | None = None

    async def search(
        self,
        state: State,
        evaluate: Evaluate,
        add_noise: bool,
        num_simulations: int | None = None,
    ) -> SearchResult:
        """Run ``num_simulations`` (default ``config.num_simulations``) new simulations from
        ``state``.

        Reuses the tree kept by ``advance`` when its root is ``state``, else starts afresh.
        ``add_noise`` mixes Dirichlet noise into the root priors for this search only.
        """
        game = self.game
        require_live(game, state)
        root = self._root
        if root is None or root.state != state:
            root = self._root = Node(state)
        try:
            evaluations = 0
            if root.actions is None:
                logits, value = await self.ask(evaluate, state)
                self._expand(root, logits, value)
                evaluations += 1
            self._set_root_priors(root, add_noise)
            sims = self.config.num_simulations if num_simulations is None else num_simulations
            evaluations += await self._simulate(root, evaluate, sims)
        except BaseException:
            # A failed or cancelled search may leave leaves in flight: never reuse that tree.
            self._root = None
            raise
        visits = np.zeros(game.num_actions, dtype=np.int64)
        visits[root.actions] = root.n
        prior = np.zeros(game.num_actions, dtype=np.float32)
        prior[root.actions] = root.clean_p if root.clean_p is not None else root.p
        proof = root_proof(root, game.num_actions) if self.config.solver else None
        return SearchResult(visits, root.value_sum / root.visits, prior, evaluations, proof=proof)

    def encode_root(self, state: State) -> np.ndarray:
        """The observation of ``state``, the position just searched (what self-play records)."""
        return self.game.encode(state)

    def advance(self, action: int) -> None:
        """Play ``action`` at the root: its subtree becomes the root (or the tree is dropped)."""
        self._root = subtree(self._root, action, self.config.reuse_tree)

    def report(self, max_pv: int = 32) -> SearchReport:
        """The root's visits, values, priors and principal variations (``actors.search``)."""
        return report(self._root, max_pv, self.config.solver)

    @property
    def tree_nodes(self) -> int:
        """Nodes held by the tree (a walk: for tests and diagnostics, not the hot path)."""
        return count_nodes(self._root)

    def _expand(self, node: Node, logits: np.ndarray, value: float) -> None:
        expand(self.game, node, logits, value)

    def _set_root_priors(self, root: Node, add_noise: bool) -> None:
        """Mix fresh Dirichlet noise into the root priors, or restore the clean ones."""
        if root.clean_p is not None:
            root.p, root.clean_p = root.clean_p, None
        cfg = self.config
        k = len(root.p)
        if add_noise and k > 1 and cfg.dirichlet_fraction > 0:
            noise = dirichlet(self.rng, cfg.dirichlet_alpha, k)
            f = cfg.dirichlet_fraction
            root.clean_p = root.p
            root.p = [(1 - f) * p + f * x for p, x in zip(root.p, noise, strict=True)]
        root.visited_prior = sum(p for p, ni in zip(root.p, root.n, strict=True) if ni)

    async def _simulate(self, root: Node, evaluate: Evaluate, count: int) -> int:
        """Run ``count`` simulations from expanded ``root``; returns the evaluations made.

        Each round descends up to ``leaves_in_flight`` times, with virtual loss on the edges
        of pending leaves so later descents spread out, then evaluates the new leaves together.
        A descent that reaches a leaf already in flight (a collision) is undone and ends the
        round early; the round's first descent never collides, so every round makes progress.
        With ``solver``, a proven node is met as a terminal one (its exact value backed up,
        proving the nodes above it in turn: ``solve_backup``), and a proven root ends the
        search (the leaves in flight are still evaluated), unless it is a win in more than one
        ply with moves left unproven: then the search goes on among those, for a shorter win.
        """
        cfg = self.config
        game = self.game
        apply, is_terminal = game.apply, game.is_terminal
        c_puct, fpu_reduction, root_fpu_reduction = (
            cfg.c_puct,
            cfg.fpu_reduction,
            cfg.root_fpu_reduction,
        )
        width = cfg.leaves_in_flight
        vl = cfg.virtual_loss if width > 1 else 0.0
        solver = cfg.solver
        done = evaluations = 0
        while done < count and not (solver and search_over(root)):
            batch: list[tuple[Node, list[tuple[Node, int]]]] = []
            while (
                done + len(batch) < count
                and len(batch) < width
                and not (solver and search_over(root))
            ):
                node, reduction = root, root_fpu_reduction
                path: list[tuple[Node, int]] = []
                created = False
                while True:
                    # PUCT selection, inlined because this loop is the hot path: Q + U with
                    # U = c_puct * P * sqrt(N) / (1 + n); unvisited children get the FPU value.
                    n, w, p = node.n, node.w, node.p
                    visits = node.visits
                    sqrt_n = c_puct * sqrt(visits)
                    fpu = node.value_sum / visits - reduction * sqrt(node.visited_prior)
                    reduction = fpu_reduction
                    i, best = 0, -inf
                    if solver and node is root and root.proven is not None:
                        # A won root searched on for a shorter win: its unproven moves only.
                        kids = node.children
                        for j, nj in enumerate(n):
                            c = kids[j]
                            if c is not None and c.proven is not None:
                                continue
                            score = (
                                w[j] / nj + p[j] * sqrt_n / (1 + nj) if nj else fpu + p[j] * sqrt_n
                            )
                            if score > best:
                                i, best = j, score
                    else:
                        for j, nj in enumerate(n):
                            score = (
                                w[j] / nj + p[j] * sqrt_n / (1 + nj) if nj else fpu + p[j] * sqrt_n
                            )
                            if score > best:
                                i, best = j, score
                    if not n[i]:
                        node.visited_prior += p[i]
                    n[i] += 1
                    node.visits = visits + 1
                    if vl:
                        w[i] -= vl
                    path.append((node, i))
                    child = node.children[i]
                    if child is None:
                        child = node.children[i] = Node(apply(node.state, node.actions[i]))  # type: ignore[index]
                        created = True
                        if is_terminal(child.state):
                            child.terminal_value = tv = game.terminal_value(child.state)
                            if solver:
                                child.proven, child.plies = float(tv), 0
                        else:
                            batch.append((child, path))
                        break
                    if child.actions is None or (solver and child.proven is not None):
                        break
                    node = child
                exact = child.terminal_value
                if exact is None and solver:
                    exact = child.proven
                if exact is not None:
                    child.visits += 1
                    child.value_sum += exact
                    if solver:
                        solve_backup(path, exact, vl)
                    else:
                        backup(path, exact, vl)
                    done += 1
                elif not created:
                    undo(path, vl)
                    break
            if not batch:
                continue
            if len(batch) == 1:
                results = [await self.ask(evaluate, batch[0][0].state)]
            else:
                results = await asyncio.gather(
                    *[self.ask(evaluate, leaf.state) for leaf, _ in batch]
                )
            for (leaf, path), (logits, value) in zip(batch, results, strict=True):
                self._expand(leaf, logits, value)
                backup(path, float(value), vl)
            done += len(batch)
            evaluations += len(batch)
        return evaluations
