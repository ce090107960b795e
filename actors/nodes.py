"""The tree nodes and steps the pure-Python searches share (``actors.mcts.MCTS``, PUCT, and
``actors.gumbel.GumbelSearch``): a node keeps its children's statistics in flat lists aligned
with its legal actions; expansion (the masked softmax), backup, the undo of a collided descent,
subtree reuse. The compiled core has the same layout in C (actors/core/tree.c).

Sign convention: ``w[i]`` sums values from the perspective of the side to move at the node
that owns the edge; a node's ``value_sum`` from the perspective of its own side to move.

``report`` reads a tree for the engines as the compiled core's ``root_edges`` and ``pv`` do
(actors/core/report.c), step for step.
"""

from __future__ import annotations

from math import exp

import numpy as np

from actors.games.base import Game, State
from actors.search import SearchReport


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


def report(root: Node | None, max_pv: int) -> SearchReport:
    """The ``SearchReport`` of the tree below ``root`` (expanded: a search has run)."""
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
    )


__all__ = [
    "Node",
    "backup",
    "count_nodes",
    "expand",
    "line_from",
    "masked_softmax",
    "most_visited",
    "report",
    "subtree",
    "undo",
]
