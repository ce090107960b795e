"""The tree nodes and steps the pure-Python searches share (``actors.mcts.MCTS``, PUCT, and
``actors.gumbel.GumbelSearch``): a node keeps its children's statistics in flat lists aligned
with its legal actions; expansion (the masked softmax), backup, the undo of a collided descent,
subtree reuse. The compiled core has the same layout in C (actors/core/tree.c).

Sign convention: ``w[i]`` sums values from the perspective of the side to move at the node
that owns the edge; a node's ``value_sum`` from the perspective of its own side to move.

``report`` reads a tree for the engines as the compiled core's ``root_edges`` and ``pv`` do
(actors/core/report.c), step for step.

The solver's steps (``MCTSConfig.solver``; actors/core/tree.c's ``prove`` and ``solve_backup``):
a node's ``proven`` is its exact value for its side to move (a terminal node's result, or one
proven from its children), ``plies`` the plies to the game's end under that proof.
"""

from __future__ import annotations

from math import exp, nan

import numpy as np

from actors.games.base import Game, State
from actors.search import SOLVED_WIN, Proof, SearchReport, better_proof


class Node:
    """A position in the tree; children's statistics live in the parent's flat lists."""

    __slots__ = (
        "state",
        "actions",
        "p",
        "n",
        "w",
        "children",
        "visits",
        "value_sum",
        "visited_prior",
        "terminal_value",
        "clean_p",
        "proven",
        "plies",
    )

    def __init__(self, state: State) -> None:
        self.state = state
        self.actions: list[int] | None = None  # legal actions; None until expanded
        self.p: list[float] = []  # priors, aligned with actions
        self.n: list[int] = []  # visit counts, including leaves in flight
        self.w: list[float] = []  # value sums for this node's side to move
        self.children: list[Node | None] = []
        self.visits = 0  # own evaluation + simulations through this node
        self.value_sum = 0.0  # for this node's side to move
        self.visited_prior = 0.0  # prior mass of children with n > 0, for FPU
        self.terminal_value: float | None = None  # set on terminal nodes (never expanded)
        self.clean_p: list[float] | None = None  # root priors before Dirichlet noise
        self.proven: float | None = None  # the solver's exact value for the side to move
        self.plies = -1  # plies to the game's end under that proof (0: terminal)


def masked_softmax(logits: np.ndarray, actions: list[int]) -> list[float]:
    """Softmax of ``logits`` (float [A]) restricted to ``actions``, aligned with them."""
    values = logits.tolist()
    legal = [values[a] for a in actions]
    top = max(legal)
    exps = [exp(x - top) for x in legal]
    total = sum(exps)
    return [e / total for e in exps]


def expand(game: Game, node: Node, logits: np.ndarray, value: float) -> None:
    """Give ``node`` its children (priors from ``logits``) and count its own evaluation."""
    if logits.shape != (game.num_actions,):
        raise ValueError(
            f"evaluate returned logits of shape {logits.shape}, expected ({game.num_actions},)"
        )
    actions = game.legal_actions(node.state)
    k = len(actions)
    node.actions = actions
    node.p = masked_softmax(logits, actions)
    node.n = [0] * k
    node.w = [0.0] * k
    node.children = [None] * k
    node.visits += 1
    node.value_sum += float(value)


def backup(path: list[tuple[Node, int]], value: float, vl: float) -> None:
    """Add a leaf's ``value`` (for its side to move) along ``path``, lifting virtual loss."""
    for node, i in reversed(path):
        value = -value
        node.w[i] += value + vl
        node.value_sum += value


def prove(node: Node) -> bool:
    """Whether ``node`` is proven now, from its children (set ``proven`` and ``plies`` when
    it is): a child proven lost for its side to move makes it a win; every child proven, the
    best of them (``better_proof``: the shortest win, the longest loss)."""
    best, bv, bp, complete = -1, 0.0, 0, True
    for j, c in enumerate(node.children):
        if c is None or c.proven is None:
            complete = False
            continue
        v, p = -c.proven, c.plies + 1
        if best < 0 or better_proof(v, p, bv, bp):
            best, bv, bp = j, v, p
    if best >= 0 and (complete or bv >= SOLVED_WIN):
        node.proven, node.plies = bv, bp
        return True
    return False


def solve_backup(path: list[tuple[Node, int]], value: float, vl: float) -> None:
    """``backup`` of a simulation that ended at a proven node (``value``: its exact value),
    proving the nodes above it while each is proven in turn; from a node newly proven up, the
    value backed up is that node's exact value."""
    solving = True
    for node, i in reversed(path):
        value = -value
        node.w[i] += value + vl
        if solving and prove(node):
            value = node.proven  # type: ignore[assignment]
        else:
            solving = False
        node.value_sum += value


def search_over(root: Node) -> bool:
    """Whether the solver's search of ``root`` is over: it is proven, and not a win in more than
    one ply with a move left unproven (where a shorter win may still be found)."""
    if root.proven is None:
        return False
    if root.proven < SOLVED_WIN or root.plies <= 1:
        return True
    return all(c is not None and c.proven is not None for c in root.children)


def edge_proofs(node: Node) -> tuple[list[float], list[int]]:
    """Each child's exact value for ``node``'s side to move (NaN where unproven) and its
    plies to the end, the move included (-1 where unproven), aligned with ``node.actions``."""
    values, plies = [], []
    for c in node.children:
        proven = c is not None and c.proven is not None
        values.append(-c.proven if proven else nan)  # type: ignore[union-attr,operator]
        plies.append(c.plies + 1 if proven else -1)  # type: ignore[union-attr]
    return values, plies


def root_proof(root: Node, num_actions: int | None = None) -> Proof:
    """The solver's ``Proof`` at ``root``: over its legal actions ([k]), or over every action
    ([num_actions], NaN and -1 at the others) when ``num_actions`` is given."""
    values, plies = edge_proofs(root)
    if num_actions is None:
        v, p = np.array(values, dtype=np.float64), np.array(plies, dtype=np.int64)
    else:
        v, p = np.full(num_actions, nan), np.full(num_actions, -1, dtype=np.int64)
        v[root.actions] = values
        p[root.actions] = plies
    return Proof(root.proven, root.plies, v, p)


def undo(path: list[tuple[Node, int]], vl: float) -> None:
    """Take back a collided descent: its visits and virtual loss on every edge of ``path``.

    Every edge of ``path`` was visited before (by the descent that put the leaf in flight),
    so no visit count returns to zero and ``visited_prior`` stays right.
    """
    for node, i in path:
        node.n[i] -= 1
        node.visits -= 1
        node.w[i] += vl


def subtree(root: Node | None, action: int, reuse: bool) -> Node | None:
    """The root after ``action`` is played: the child's subtree when ``reuse`` and it was
    expanded, else None (a fresh tree)."""
    if not reuse or root is None or root.actions is None or action not in root.actions:
        return None
    child = root.children[root.actions.index(action)]
    return child if child is not None and child.actions is not None else None


def count_nodes(root: Node | None) -> int:
    """Nodes in the tree below ``root``, itself included."""
    stack, n = ([root] if root is not None else []), 0
    while stack:
        node = stack.pop()
        n += 1
        stack.extend(c for c in node.children if c is not None)
    return n


def most_visited(node: Node) -> int:
    """The index of ``node``'s most visited child (ties: the higher prior, then the first),
    or -1 when none has a visit."""
    best = -1
    for j, nj in enumerate(node.n):
        if nj and (
            best < 0 or nj > node.n[best] or (nj == node.n[best] and node.p[j] > node.p[best])
        ):
            best = j
    return best


def line_from(node: Node, i: int, limit: int) -> tuple[int, ...]:
    """Child ``i`` of ``node``'s action, then the most visited child at each node below it
    (at most ``limit`` moves)."""
    line: list[int] = []
    current: Node | None = node
    while current is not None and current.actions and i >= 0 and len(line) < limit:
        line.append(current.actions[i])
        current = current.children[i]
        i = most_visited(current) if current is not None and current.actions else -1
    return tuple(line)


def report(root: Node | None, max_pv: int, solver: bool = False) -> SearchReport:
    """The ``SearchReport`` of the tree below ``root`` (expanded: a search has run), with the
    solver's ``Proof`` when ``solver``."""
    if root is None or root.actions is None:
        raise RuntimeError("no expanded root: report() needs a search first")
    visits = root.visits
    return SearchReport(
        actions=np.array(root.actions, dtype=np.int64),
        visits=np.array(root.n, dtype=np.int64),
        values=np.array([w / n if n else 0.0 for w, n in zip(root.w, root.n)], dtype=np.float64),
        priors=np.array(root.clean_p if root.clean_p is not None else root.p, dtype=np.float32),
        pvs=tuple(line_from(root, i, max_pv) for i in range(len(root.actions))),
        root_visits=visits,
        root_value=root.value_sum / visits,
        nodes=count_nodes(root),
        proof=root_proof(root) if solver else None,
    )


__all__ = [
    "Node",
    "backup",
    "count_nodes",
    "expand",
    "line_from",
    "masked_softmax",
    "most_visited",
    "prove",
    "report",
    "root_proof",
    "search_over",
    "solve_backup",
    "subtree",
    "undo",
]
