"""The tree nodes and steps the pure-Python searches share (``actors.mcts.MCTS``, PUCT, and
``actors.gumbel.GumbelSearch``): a node keeps its children's statistics in flat lists aligned
with its legal actions; expansion (the masked softmax), backup, the undo of a collided descent,
subtree reuse. The compiled core has the same layout in C (actors/core/tree.c).

Sign convention: ``w[i]`` sums values from the perspective of the side to move at the node
that owns the edge; a node's ``value_sum`` from the perspective of its own side to move.
"""

from __future__ import annotations

from math import exp

import numpy as np

from actors.games.base import Game, State


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


__all__ = ["Node", "backup", "count_nodes", "expand", "masked_softmax", "subtree", "undo"]
