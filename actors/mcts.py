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
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from math import exp, inf, sqrt
from typing import Literal

import numpy as np

from actors.games.base import Game, State

Evaluate = Callable[[np.ndarray], Awaitable[tuple[np.ndarray, float]]]
"""obs uint8 [C, H, W] -> (policy logits float32 [A], value for the side to move at obs)."""


@dataclass(frozen=True)
class MCTSConfig:
    """Search and move-selection knobs (AlphaZero's names and defaults where it has them)."""

    num_simulations: int = 100
    """New simulations per search; with subtree reuse the root's total visits keep growing."""
    c_puct: float = 1.25
    """Exploration constant of PUCT: U = c_puct * P * sqrt(N_parent) / (1 + N_child)."""
    dirichlet_alpha: float = 0.3
    """Concentration of the Dirichlet noise mixed into the root priors."""
    dirichlet_fraction: float = 0.25
    """Weight of that noise: P = (1 - fraction) * P + fraction * Dir(alpha)."""
    temperature: float = 1.0
    """Moves are sampled with probability ~ visits ** (1 / temperature) in the opening."""
    temperature_moves: int = 8
    """Moves (counted from 0 for the game's first) sampled with temperature; argmax after."""
    leaves_in_flight: int = 1
    """Leaves gathered per round and evaluated concurrently; 1 means no virtual loss."""
    virtual_loss: float = 1.0
    """Value subtracted per pending leaf along its path (only when leaves_in_flight > 1)."""
    reuse_tree: bool = True
    """Keep the played move's subtree as the next root (see ``MCTS.advance``)."""
    fpu_reduction: float = 0.25
    """First-play urgency: an unvisited child's Q is the parent's Q minus this times
    sqrt(prior mass of the visited children) (Leela Zero / KataGo); 0 means parent's Q."""
    root_fpu_reduction: float = 0.0
    """The same reduction at the root, kept 0 so root exploration follows the (noisy) priors."""
    resign_threshold: float = -0.95
    """The side to move resigns when its root value is below this; <= -1 disables."""
    resign_min_moves: int = 0
    """No resignation before this many moves have been played in the game."""
    no_resign_fraction: float = 0.1
    """Fraction of games played out with resignation disabled, to measure false resigns."""
    algorithm: Literal["puct", "gumbel"] = "puct"
    """Self-play search: AlphaZero's PUCT (this module) or Gumbel AlphaZero (actors/gumbel.py)."""
    num_sampled_actions: int = 16
    """Gumbel: root actions sampled without replacement (Gumbel-top-k) for sequential halving."""
    c_visit: float = 50.0
    """Gumbel: sigma(q) = (c_visit + max visits) * c_scale * q, q completed and in [0, 1]."""
    c_scale: float = 0.1
    """Gumbel: the scale of that transform (mctx's defaults: c_visit 50, c_scale 0.1)."""
    gumbel_opening: Literal["halving", "target"] = "halving"
    """Gumbel: how the first ``temperature_moves`` moves are chosen. ``halving`` = mctx's
    action, the survivor of sequential halving with the highest ``temperature * g + logits +
    sigma(completed Q)`` (g: the root's Gumbel noise); ``target`` = sampled from the policy
    target (the improved policy) ** (1 / temperature), as PUCT samples from its target, the
    visit counts. With a sharp policy and few simulations halving leaves one survivor whatever
    the noise, so ``halving`` self-play can turn into near-repeats of one game."""
    full_search_fraction: float = 1.0
    """Playout cap randomization (KataGo): the fraction of moves searched with
    ``num_simulations`` and recorded as training targets; 1 records every move."""
    fast_simulations: int = 8
    """Simulations of the other moves (played, never recorded; PUCT drops root noise there)."""
    core: Literal["auto", "compiled", "python"] = "auto"
    """Search implementation, PUCT or Gumbel (``actors.compiled_mcts``): ``compiled`` = the tree
    in C (Connect Four and tic-tac-toe), ``python`` = actors/mcts.py or actors/gumbel.py (every
    game; the oracles), ``auto`` = compiled where available. Both give identical results for the
    same seed and evaluator."""

    def __post_init__(self) -> None:
        if self.num_simulations < 1:
            raise ValueError(f"num_simulations must be >= 1, got {self.num_simulations}")
        if self.leaves_in_flight < 1:
            raise ValueError(f"leaves_in_flight must be >= 1, got {self.leaves_in_flight}")
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0.0 <= self.dirichlet_fraction <= 1.0:
            raise ValueError(f"dirichlet_fraction must be in [0, 1], got {self.dirichlet_fraction}")
        if not 0.0 <= self.no_resign_fraction <= 1.0:
            raise ValueError(f"no_resign_fraction must be in [0, 1], got {self.no_resign_fraction}")
        if self.gumbel_opening not in ("halving", "target"):
            raise ValueError(
                f"gumbel_opening must be 'halving' or 'target', got {self.gumbel_opening!r}"
            )
        if self.num_sampled_actions < 1:
            raise ValueError(f"num_sampled_actions must be >= 1, got {self.num_sampled_actions}")
        if not 0.0 < self.full_search_fraction <= 1.0:
            raise ValueError(
                f"full_search_fraction must be in (0, 1], got {self.full_search_fraction}"
            )
        if (
            self.full_search_fraction < 1.0
            and not 1 <= self.fast_simulations <= self.num_simulations
        ):
            raise ValueError(
                f"fast_simulations={self.fast_simulations} must be in [1, num_simulations="
                f"{self.num_simulations}] when full_search_fraction < 1"
            )

    @property
    def mean_simulations(self) -> float:
        """Simulations per move on average: full and fast searches by their shares."""
        f = self.full_search_fraction
        if f >= 1.0:
            return float(self.num_simulations)
        return f * self.num_simulations + (1.0 - f) * self.fast_simulations


@dataclass(frozen=True)
class SearchResult:
    """What one search returns."""

    visits: np.ndarray
    """int64 [A]: root visit count per action (0 for illegal actions)."""
    root_value: float
    """Mean value of the root for its side to move, over its evaluation and all simulations."""
    root_prior: np.ndarray
    """float32 [A]: the network's prior at the root, before noise (0 for illegal actions)."""
    num_evaluations: int
    """Calls to ``evaluate`` made by this search."""


class _Node:
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
        self.children: list[_Node | None] = []
        self.visits = 0  # own evaluation + simulations through this node
        self.value_sum = 0.0  # for this node's side to move
        self.visited_prior = 0.0  # prior mass of children with n > 0, for FPU
        self.terminal_value: float | None = None  # set on terminal nodes (never expanded)
        self.clean_p: list[float] | None = None  # root priors before Dirichlet noise


def sample_tempered(weights: np.ndarray, temperature: float, rng: np.random.Generator) -> int:
    """An index drawn with probability ~ weights ** (1 / temperature) (weights >= 0, not all 0).

    ``Generator.choice(len(p), p=p / p.sum())`` without its checks (a third of its cost): the
    same cumulative sum, normalisation and single uniform draw, so the same index
    (tests/test_compiled_mcts.py compares the two)."""
    p = (weights / weights.max()) ** (1.0 / temperature)
    cdf = (p / p.sum()).cumsum()
    cdf /= cdf[-1]
    return int(cdf.searchsorted(rng.random(), side="right"))


def dirichlet(rng: np.random.Generator, alpha: float, k: int) -> list[float]:
    """``rng.dirichlet([alpha] * k).tolist()``, the same draws and floats at a fifth of the cost.

    For ``alpha >= 0.1`` numpy's ``Generator.dirichlet`` draws ``k`` standard gammas in order,
    sums them left to right and multiplies each by the reciprocal of the sum; this does the same
    with one ``standard_gamma`` call (tests/test_compiled_mcts.py compares the two). Smaller
    alphas take numpy's other algorithm, so they go to ``rng.dirichlet`` itself.
    """
    if alpha < 0.1:
        return rng.dirichlet([alpha] * k).tolist()
    gammas = rng.standard_gamma(alpha, k).tolist()
    total = 0.0
    for g in gammas:
        total += g
    inv = 1.0 / total
    return [g * inv for g in gammas]


def _masked_softmax(logits: np.ndarray, actions: list[int]) -> list[float]:
    """Softmax of ``logits`` (float [A]) restricted to ``actions``, aligned with them."""
    values = logits.tolist()
    legal = [values[a] for a in actions]
    top = max(legal)
    exps = [exp(x - top) for x in legal]
    total = sum(exps)
    return [e / total for e in exps]


class MCTS:
    """The search tree of one game, reused from move to move.

    Args:
        game: the rules.
        config: search knobs.
        rng: source of Dirichlet noise, move sampling and the no-resign draw.
    """

    def __init__(self, game: Game, config: MCTSConfig, rng: np.random.Generator) -> None:
        self.game = game
        self.config = config
        self.rng = rng
        self._root: _Node | None = None

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
        if game.is_terminal(state):
            raise ValueError(f"search from a terminal position:\n{game.render(state)}")
        root = self._root
        if root is None or root.state != state:
            root = self._root = _Node(state)
        try:
            evaluations = 0
            if root.actions is None:
                logits, value = await evaluate(game.encode(state))
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
        return SearchResult(visits, root.value_sum / root.visits, prior, evaluations)

    def encode_root(self, state: State) -> np.ndarray:
        """The observation of ``state``, the position just searched (what self-play records)."""
        return self.game.encode(state)

    def advance(self, action: int) -> None:
        """Play ``action`` at the root: its subtree becomes the root (or the tree is dropped)."""
        root, self._root = self._root, None
        if not self.config.reuse_tree or root is None or root.actions is None:
            return
        if action in root.actions:
            child = root.children[root.actions.index(action)]
            if child is not None and child.actions is not None:
                self._root = child

    def select_action(self, visits: np.ndarray, move_number: int) -> int:
        """The move to play from root visits (int [A]) at ``move_number`` (0 = first move).

        Sampled with probability ~ visits ** (1 / temperature) for the first
        ``temperature_moves`` moves, then the most visited (ties broken at random).
        """
        cfg = self.config
        if move_number < cfg.temperature_moves and cfg.temperature > 0:
            return sample_tempered(visits, cfg.temperature, self.rng)
        counts = visits.tolist()
        top = max(counts)
        best = [a for a, n in enumerate(counts) if n == top]
        return best[0] if len(best) == 1 else int(self.rng.choice(best))

    @staticmethod
    def policy_target(visits: np.ndarray) -> np.ndarray:
        """float32 [A]: the visit distribution, the policy training target."""
        counts = visits.tolist()
        total = sum(counts)
        # int / int is the correctly rounded quotient, as numpy's float64 division of exact
        # doubles; the float32 rounding is the same cast: equal to (visits / total) as float32.
        return np.array([n / total for n in counts], dtype=np.float32)

    def sample_resign_allowed(self) -> bool:
        """Draw, once per game, whether it may resign (False for ``no_resign_fraction``)."""
        return bool(self.rng.random() >= self.config.no_resign_fraction)

    def should_resign(self, root_value: float, move_number: int, resign_allowed: bool) -> bool:
        """Whether the side to move, whose root value is ``root_value``, resigns now."""
        cfg = self.config
        return (
            resign_allowed
            and move_number >= cfg.resign_min_moves
            and root_value < cfg.resign_threshold
        )

    def _expand(self, node: _Node, logits: np.ndarray, value: float) -> None:
        _expand(self.game, node, logits, value)

    def _set_root_priors(self, root: _Node, add_noise: bool) -> None:
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

    async def _simulate(self, root: _Node, evaluate: Evaluate, count: int) -> int:
        """Run ``count`` simulations from expanded ``root``; returns the evaluations made.

        Each round descends up to ``leaves_in_flight`` times, with virtual loss on the edges
        of pending leaves so later descents spread out, then evaluates the new leaves together.
        A descent that reaches a leaf already in flight (a collision) is undone and ends the
        round early; the round's first descent never collides, so every round makes progress.
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
        done = evaluations = 0
        while done < count:
            batch: list[tuple[_Node, list[tuple[_Node, int]]]] = []
            while done + len(batch) < count and len(batch) < width:
                node, reduction = root, root_fpu_reduction
                path: list[tuple[_Node, int]] = []
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
                    for j, nj in enumerate(n):
                        score = w[j] / nj + p[j] * sqrt_n / (1 + nj) if nj else fpu + p[j] * sqrt_n
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
                        child = node.children[i] = _Node(apply(node.state, node.actions[i]))  # type: ignore[index]
                        created = True
                        if is_terminal(child.state):
                            child.terminal_value = game.terminal_value(child.state)
                        else:
                            batch.append((child, path))
                        break
                    if child.actions is None:
                        break
                    node = child
                if child.terminal_value is not None:
                    child.visits += 1
                    child.value_sum += child.terminal_value
                    _backup(path, child.terminal_value, vl)
                    done += 1
                elif not created:
                    _undo(path, vl)
                    break
            if not batch:
                continue
            if len(batch) == 1:
                results = [await evaluate(game.encode(batch[0][0].state))]
            else:
                results = await asyncio.gather(
                    *[evaluate(game.encode(leaf.state)) for leaf, _ in batch]
                )
            for (leaf, path), (logits, value) in zip(batch, results, strict=True):
                self._expand(leaf, logits, value)
                _backup(path, float(value), vl)
            done += len(batch)
            evaluations += len(batch)
        return evaluations


def _expand(game: Game, node: _Node, logits: np.ndarray, value: float) -> None:
    """Give ``node`` its children (priors from ``logits``) and count its own evaluation."""
    if logits.shape != (game.num_actions,):
        raise ValueError(
            f"evaluate returned logits of shape {logits.shape}, expected ({game.num_actions},)"
        )
    actions = game.legal_actions(node.state)
    k = len(actions)
    node.actions = actions
    node.p = _masked_softmax(logits, actions)
    node.n = [0] * k
    node.w = [0.0] * k
    node.children = [None] * k
    node.visits += 1
    node.value_sum += float(value)


def _backup(path: list[tuple[_Node, int]], value: float, vl: float) -> None:
    """Add a leaf's ``value`` (for its side to move) along ``path``, lifting virtual loss."""
    for node, i in reversed(path):
        value = -value
        node.w[i] += value + vl
        node.value_sum += value


def _undo(path: list[tuple[_Node, int]], vl: float) -> None:
    """Take back a collided descent: its visits and virtual loss on every edge of ``path``.

    Every edge of ``path`` was visited before (by the descent that put the leaf in flight),
    so no visit count returns to zero and ``visited_prior`` stays right.
    """
    for node, i in path:
        node.n[i] -= 1
        node.visits -= 1
        node.w[i] += vl
