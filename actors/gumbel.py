"""Gumbel AlphaZero search (Danihelka et al., "Policy improvement by planning with Gumbel", 2022).

At the root: Gumbel-top-k sampling of actions without replacement, sequential halving over them
(the visit schedule of DeepMind's mctx, ``seq_halving.py``), and as the result the action with
the highest ``g + logits + sigma(completed Q)`` among the most visited; the policy target is
``softmax(logits + sigma(completed Q))`` over all legal actions. Below the root the selection is
deterministic: argmax of ``softmax(logits + sigma(completed Q)) - n / (1 + sum n)``. The
completed-Q transform is mctx's ``qtransform_completed_by_mix_value`` (unvisited actions take
the mixed value, Q is rescaled to [0, 1], then multiplied by ``(c_visit + max n) * c_scale``).

Like the PUCT search (``actors/mcts.py``) it is pure and awaits only the injected
``evaluate(obs) -> (logits, value)``; it shares that module's node layout and sign convention (``actors.nodes``)
(``w[i]`` for the side to move at the node owning the edge), so ``advance`` reuses subtrees the
same way. It evaluates one leaf at a time (``leaves_in_flight`` is a PUCT knob): the schedule is
sequential, and self-play batches across games anyway.

With ``MCTSConfig.solver`` it proves and propagates game results with PUCT's steps
(``actors.nodes``: ``prove``, ``solve_backup``, ``search_over``): a proven node is met as a
terminal one, a proven child's completed Q is its exact value, sequential halving drops the
root's proven losses (a won root searched on: every proven move) and a proven root ends the
search; docs/mcts.md, "Proven results".
"""

from __future__ import annotations

import math
from math import exp, log

import numpy as np

from actors.games.base import Game, State
from actors.nodes import (
    Node,
    backup,
    count_nodes,
    edge_proofs,
    expand,
    report,
    root_proof,
    search_over,
    solve_backup,
    subtree,
)
from actors.search import (
    SOLVED_WIN,
    Evaluate,
    GumbelMoves,
    GumbelResult,
    MCTSConfig,
    SearchReport,
    considered_visits,
    require_live,
)

_LOW_LOGIT = -1e9
"""mctx's floor for ``g + logits + sigma`` (keeps an only-considered action selectable)."""
_TINY = 1e-30
"""Floor of a prior before its log, and of prior mass in the mixed value (mctx: finfo.tiny)."""
_EPSILON = 1e-8
"""Least denominator of the [0, 1] rescaling of Q (mctx's epsilon)."""


def completed_q(
    raw_value: float,
    prior: list[float],
    n: list[int],
    w: list[float],
    c_visit: float,
    c_scale: float,
    exact: list[float] | None = None,
) -> list[float]:
    """sigma(completed Q) of one node's children, aligned with them.

    Args:
        raw_value: the network's value of the node, for its side to move.
        prior: the node's priors over its legal actions (sum 1).
        n: visit counts of those actions.
        w: their value sums, for the node's side to move.
        c_visit, c_scale: ``sigma(q) = (c_visit + max n) * c_scale * q``.
        exact: with the solver, the children's proven values for the node's side to move,
            NaN where unproven (``nodes.edge_proofs``): a proven child's Q is its value.

    An unvisited action's Q is the mixed value ``(raw_value + sum n * sum_visited p q / sum_visited
    p) / (1 + sum n)``; the completed Qs are rescaled to [0, 1] by their min and max first.
    """
    # One pass, no generators: this runs at every node of every simulation.
    total = top = 0
    mass = weighted = 0.0
    q: list[float | None] = []
    plain = exact is None
    for p, ni, wi, xi in zip(prior, n, w, n if plain else exact, strict=True):  # type: ignore[arg-type]
        if ni:
            qi = wi / ni if plain or xi != xi else xi  # NaN: unproven
            pm = p if p > _TINY else _TINY
            total += ni
            mass += pm
            weighted += pm * qi
            if ni > top:
                top = ni
            q.append(qi)
        else:
            q.append(None)
    mixed = (raw_value + total * weighted / mass) / (total + 1) if total else raw_value
    done = [mixed if x is None else x for x in q]
    lo, hi = min(done), max(done)
    span = hi - lo
    scale = (c_visit + top) * c_scale / (span if span > _EPSILON else _EPSILON)
    return [(x - lo) * scale for x in done]


def _softmax(x: list[float]) -> list[float]:
    top = max(x)
    e = [exp(v - top) for v in x]
    s = sum(e)
    return [v / s for v in e]


def _logits(prior: list[float]) -> list[float]:
    """Log-priors: the masked, normalised logits (softmax(logits) == prior)."""
    return [log(max(p, _TINY)) for p in prior]


class _GNode(Node):
    """A node that also keeps its network value (the mixed value needs it)."""

    __slots__ = ("raw_value",)

    def __init__(self, state: State) -> None:
        super().__init__(state)
        self.raw_value = 0.0


class GumbelSearch(GumbelMoves):
    """The Gumbel search tree of one game in Python, reused from move to move like ``MCTS``'s
    (the reference: ``actors.compiled_mcts.CompiledGumbel`` must give the same results).
    ``actors.search.Search``.

    Args:
        game: the rules.
        config: search knobs (``num_simulations``, ``num_sampled_actions``, ``c_visit``,
            ``c_scale``, the move-choice and resignation keys).
        rng: source of the Gumbel noise, move sampling and the no-resign draw.
    """

    def __init__(self, game: Game, config: MCTSConfig, rng: np.random.Generator) -> None:
        super().__init__(game, config, rng)
        self._root: _GNode | None = None

    async def search(
        self,
        state: State,
        evaluate: Evaluate,
        add_noise: bool,
        num_simulations: int | None = None,
    ) -> GumbelResult:
        """Run ``num_simulations`` (default ``config.num_simulations``) new simulations from
        ``state``, reusing the tree kept by ``advance`` when its root is ``state``.

        ``add_noise`` draws Gumbel(0, 1) noise at the root (the root noise of this algorithm:
        the top-k actions are then a sample without replacement from the prior); without it the
        top-k are the k most likely and the search is deterministic.
        """
        game, cfg = self.game, self.config
        require_live(game, state)
        sims = cfg.num_simulations if num_simulations is None else num_simulations
        root = self._root
        if root is None or root.state != state:
            root = self._root = _GNode(state)
        try:
            evaluations = 0
            if root.actions is None:
                logits, value = await self.ask(evaluate, state)
                self._expand(root, logits, value)
                evaluations += 1
            return await self._halve(root, evaluate, add_noise, sims, evaluations)
        except BaseException:
            self._root = None  # a failed search may leave partial statistics: never reuse it
            raise

    async def _halve(
        self, root: _GNode, evaluate: Evaluate, add_noise: bool, sims: int, evaluations: int
    ) -> GumbelResult:
        """Sequential halving over ``sims`` simulations at expanded ``root``; ``evaluations``
        counts those made before (the root's own). With the solver, a proven root ends it early
        and the root's closed moves (``_open``) are not visited."""
        cfg, game = self.config, self.game
        solver = cfg.solver
        actions: list[int] = root.actions  # type: ignore[assignment]
        k = len(actions)
        logits = _logits(root.p)
        top = max(logits)
        logits = [x - top for x in logits]
        g = self.rng.gumbel(size=k).tolist() if add_noise else [0.0] * k
        schedule = considered_visits(min(cfg.num_sampled_actions, k), sims)
        counts = [0] * k  # this search's visits per root action: what the schedule counts
        for t in range(sims):
            if solver and search_over(root):
                break
            sigma = self._sigma(root)
            want = schedule[t]
            i, best = -1, -math.inf
            if solver:
                i = _solver_root_action(root, counts, want, g, logits, sigma)
            else:
                for j in range(k):
                    if counts[j] == want:
                        score = max(_LOW_LOGIT, g[j] + logits[j] + sigma[j])
                        if score > best:
                            i, best = j, score
            assert i >= 0, "the schedule always names a considered action"
            counts[i] += 1
            evaluations += await self._simulate(root, i, evaluate)
        sigma = self._sigma(root)
        improved = [x + s for x, s in zip(logits, sigma, strict=True)]
        proof = root_proof(root, game.num_actions) if solver else None
        # With the solver the survivors are among the moves a choice may make (Proof.kept).
        keep = [True] * k if proof is None else proof.kept()[actions].tolist()
        most = max((c for c, kept in zip(counts, keep, strict=True) if kept), default=0)
        policy = np.zeros(game.num_actions, dtype=np.float32)
        policy[actions] = _softmax(improved)
        scores = np.full(game.num_actions, -math.inf)
        noise = np.zeros(game.num_actions)
        noise[actions] = g
        for j, a in enumerate(actions):
            if counts[j] == most and keep[j]:
                scores[a] = improved[j]
        visits = np.zeros(game.num_actions, dtype=np.int64)
        visits[actions] = root.n
        prior = np.zeros(game.num_actions, dtype=np.float32)
        prior[actions] = root.p
        root_value = root.value_sum / root.visits
        return GumbelResult(visits, root_value, prior, evaluations, policy, scores, noise,
                            proof=proof)  # fmt: skip

    def _sigma(self, node: _GNode) -> list[float]:
        """sigma(completed Q) of ``node``'s children (with the solver, proven ones at their
        exact values)."""
        cfg = self.config
        exact = edge_proofs(node)[0] if cfg.solver else None
        return completed_q(node.raw_value, node.p, node.n, node.w, cfg.c_visit, cfg.c_scale,
                           exact)  # fmt: skip

    async def _simulate(self, root: _GNode, first: int, evaluate: Evaluate) -> int:
        """One simulation through root action ``first``, deterministic selection below;
        returns the evaluations made (0 at a terminal leaf). With the solver a proven node is
        met as a terminal one: its exact value backed up, proving the nodes above it in turn
        (``nodes.solve_backup``, as PUCT's)."""
        cfg, game = self.config, self.game
        solver = cfg.solver
        node, i = root, first
        path: list[tuple[Node, int]] = []
        while True:
            node.n[i] += 1
            node.visits += 1
            path.append((node, i))
            child = node.children[i]
            if child is None:
                child = node.children[i] = _GNode(game.apply(node.state, node.actions[i]))  # type: ignore[index]
                if game.is_terminal(child.state):
                    child.terminal_value = tv = game.terminal_value(child.state)
                    if solver:
                        child.proven, child.plies = float(tv), 0
                else:
                    logits, value = await self.ask(evaluate, child.state)
                    self._expand(child, logits, value)  # type: ignore[arg-type]
                    backup(path, float(value), 0.0)
                    return 1
            exact = child.terminal_value
            if exact is None and solver:
                exact = child.proven
            if exact is not None:
                child.visits += 1
                child.value_sum += exact
                if solver:
                    solve_backup(path, exact, 0.0)
                else:
                    backup(path, exact, 0.0)
                return 0
            node = child  # type: ignore[assignment]
            if solver:
                values = edge_proofs(node)[0]
                i = _interior_action(node, cfg.c_visit, cfg.c_scale, values)  # type: ignore[arg-type]
            else:
                i = _interior_action(node, cfg.c_visit, cfg.c_scale)  # type: ignore[arg-type]

    def _expand(self, node: _GNode, logits: np.ndarray, value: float) -> None:
        """``nodes.expand``, keeping the network's value too."""
        expand(self.game, node, logits, value)
        node.raw_value = float(value)

    def encode_root(self, state: State) -> np.ndarray:
        """The observation of ``state``, the position just searched (what self-play records)."""
        return self.game.encode(state)

    def advance(self, action: int) -> None:
        """Play ``action`` at the root: its subtree becomes the root (or the tree is dropped)."""
        self._root = subtree(self._root, action, self.config.reuse_tree)  # type: ignore[assignment]

    def report(self, max_pv: int = 32) -> SearchReport:
        """The root's visits, values, priors and principal variations (``actors.search``)."""
        return report(self._root, max_pv, self.config.solver)

    @property
    def tree_nodes(self) -> int:
        """Nodes held by the tree (a walk: for tests and diagnostics, not the hot path)."""
        return count_nodes(self._root)


def _interior_action(
    node: _GNode, c_visit: float, c_scale: float, exact: list[float] | None = None
) -> int:
    """Deterministic selection below the root: argmax of the improved policy minus the visit
    share ``n / (1 + sum n)``, so visit frequencies track softmax(logits + sigma(completed Q)).
    softmax(log p + sigma) is computed as p * exp(sigma), normalised: no logs needed.
    ``exact``: the solver's proven values of the children (``completed_q``)."""
    n, p = node.n, node.p
    denom = 1 + sum(n)
    if denom == 1:  # nothing visited: sigma is 0 everywhere, the improved policy is the prior
        return p.index(max(p))
    sigma = completed_q(node.raw_value, p, n, node.w, c_visit, c_scale, exact)
    top = max(sigma)
    e = [pj * exp(sj - top) for pj, sj in zip(p, sigma, strict=True)]
    z = sum(e)
    i, best = 0, -math.inf
    for j, ej in enumerate(e):
        score = ej / z - n[j] / denom
        if score > best:
            i, best = j, score
    return i


def _open(root: Node) -> list[bool]:
    """With the solver: the root's moves sequential halving may still visit, aligned with its
    children. While the root is unproven, all but the proven losses (one stays open: an
    unproven root has an unproven move); a won root searched on for a shorter win (PUCT's rule,
    ``nodes.search_over``): its unproven moves only."""
    won = root.proven is not None
    return [
        c is None or c.proven is None or (not won and c.proven < SOLVED_WIN) for c in root.children
    ]


def _solver_root_action(
    root: Node, counts: list[int], want: int, g: list[float], logits: list[float],
    sigma: list[float],
) -> int:  # fmt: skip
    """With the solver, the root action of a simulation whose schedule names the visit count
    ``want``: among the open moves (``_open``) with that count, the highest ``g + logits +
    sigma`` (the plain rule); when only closed moves hold it, the open move with the highest
    count below it steps in (the best of the last halving's losers, or the next of the
    Gumbel-top-k order), failing that the one with the lowest count above it; ties to the
    higher score, then the first."""
    i, key = -1, (False, 0, 0.0)
    for j, is_open in enumerate(_open(root)):
        if is_open:
            c = counts[j]
            below = c <= want
            kj = (below, c if below else -c, max(_LOW_LOGIT, g[j] + logits[j] + sigma[j]))
            if i < 0 or kj > key:
                i, key = j, kj
    return i
