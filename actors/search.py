"""The search interface, in the spirit of DeepMind's mctx: one protocol that PUCT
(``actors/mcts.py``) and Gumbel AlphaZero (``actors/gumbel.py``) both implement, each as a Python
reference and a compiled form (``actors/compiled_mcts.py``, the tree in C), chosen by
``mcts.algorithm`` and ``mcts.core`` in one factory, ``actors.searches.make_search``.

A search belongs to one game and keeps its tree from move to move (``Search``):

- ``await search.search(state, evaluate, add_noise, num_simulations)`` -> ``SearchResult``:
  the simulations from ``state``, awaiting ``evaluate(obs) -> (logits, value)`` per leaf;
- ``search.choose(result, move_number)`` -> (policy target, action): the training target and
  the move to play (PUCT: from the root's visits; Gumbel: the improved policy and the
  survivors of sequential halving);
- ``search.advance(action)``: the played move's subtree becomes the root;
- ``search.report()`` -> ``SearchReport``: the root's visits, values, priors and principal
  variations and the tree's size, what the engines (GTP, UCI) show between searches;
- ``search.encode_root(state)``, ``search.tree_nodes``, and the resignation rule
  (``sample_resign_allowed``, ``should_resign``).

The compiled forms also take their searches step by step, as ``actors.searchpool`` drives many
games' searches in rounds (``actors.compiled_mcts.CompiledSearch``).

What both algorithms and both forms share lives here, once: the config (``MCTSConfig``, the
``[mcts]`` section), the results, the move rules (``PuctMoves``, ``GumbelMoves``), the
resignation rule, the noise and schedule arithmetic (``dirichlet``, ``sample_tempered``,
``considered_visits``). The reference and compiled forms share this interface, not each
other's methods.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

import numpy as np

if TYPE_CHECKING:
    from actors.games.base import Game, State

Evaluate = Callable[..., Awaitable[tuple[np.ndarray, float]]]
"""obs uint8 [C, H, W] -> (policy logits float32 [A], value for the side to move at obs); a
search whose ``leaf_legal`` is set calls ``evaluate(obs, legal)`` with the leaf's legal
actions int [k] (the logits must then be right at those actions at least)."""


PLAY_ALGORITHM: Literal["puct", "gumbel"] = "puct"
"""The search that plays judged games, whatever self-play used: match, ladder and evaluation
(``azserve.arena.agent.Agent.analyze``) and, by default, the engines (``azserve.engines.search.engine_mcts``).
PUCT's move is its most visited root move, so a search can be read, cut short by a clock and
resumed; and with one game searched at a time it keeps several leaves in flight per round
(``leaves_in_flight``), where Gumbel's sequential halving evaluates one: the same net searches
about 8x the nodes per second. Every strength figure of match and the ladder was measured with
it (Gumbel stays what self-play trains with, where many games fill the batches)."""


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
    solver: bool = False
    """MCTS-solver (Winands et al. 2008), PUCT and Gumbel: game ends reached in the tree prove
    their parents (a child lost for its mover: a win; every child proven: the best of them),
    and so on up; a proven node is met as a terminal one, a proven root ends the search early
    (a win in more than one ply searches on for a shorter one), and the move is the shortest
    proven win (the longest proven loss; never a proven loss while another move is open).
    Gumbel also drops proven losses from sequential halving and completes Q with the proven
    values. docs/mcts.md, "Proven results". False: the search as before, bit for bit."""
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
    cap_win_margin: float = 0.0
    """Self-play's result of a game drawn at its ply cap (``Game.cap_score``: chess's
    ``max_plies``): a win for the side ahead by at least this much (chess: material in pawns),
    else the draw; 0 keeps the draw. Training results only: matches, the ladder and the
    in-tree search keep the rules' draw."""
    adjudicate_repetitions: bool = False
    """With ``cap_win_margin``: games drawn by threefold repetition or the 50-move rule are
    judged the same way (never a stalemate or a dead position)."""
    adjudicated_value: float = 1.0
    """The result an adjudicated win counts as (its loser gets minus this): below 1, a mate
    is worth more than a lead at the end, so the search still plays for the mate."""
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
        if self.cap_win_margin < 0:
            raise ValueError(f"cap_win_margin must be >= 0, got {self.cap_win_margin}")
        if not 0.0 < self.adjudicated_value <= 1.0:
            raise ValueError(f"adjudicated_value must be in (0, 1], got {self.adjudicated_value}")
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


SOLVED_WIN = 1.0
"""The best result a game can give (``Game.terminal_value``'s range is [-1, 1]): a child proven
lost for its mover proves its parent won at once (the solver, ``MCTSConfig.solver``)."""


@dataclass(frozen=True)
class Proof:
    """What the solver (``MCTSConfig.solver``) has proven at a search's root: exact results
    under best play, found from the game's ends the tree reached. Its arrays are aligned with
    its owner's (``SearchResult``: [A], one entry per action; ``SearchReport``: [k], the root's
    legal actions)."""

    value: float | None
    """The root's exact value for its side to move (1 a forced win, -1 a forced loss, 0 a
    forced draw), None while unproven."""
    plies: int
    """Plies to the game's end under that proof (the shortest win, the longest loss); -1 while
    unproven."""
    values: np.ndarray
    """float64 [n]: each action's exact value for the root's side to move; NaN where unproven
    (and at illegal actions)."""
    action_plies: np.ndarray
    """int64 [n]: plies to the game's end after each action, that action included; -1 where
    unproven."""

    def best(self) -> int:
        """The index of the best proven action: the highest value, then the fewest plies (the
        most for a loss), then the first; -1 when none is proven."""
        # better_proof's order over every proven action at once (argmin/argmax: the first).
        proven = np.flatnonzero(self.action_plies >= 0)
        if not proven.size:
            return -1
        values = self.values[proven]
        top = values.max()
        proven = proven[values == top]
        plies = self.action_plies[proven]
        return int(proven[plies.argmax() if top < 0 else plies.argmin()])

    def forced(self) -> int:
        """The index of the move a proven win or loss imposes (``best``), or -1 (the root is
        unproven, or a proven draw: any drawing move will do)."""
        if self.value is None or abs(self.value) < SOLVED_WIN:
            return -1
        return self.best()

    def kept(self) -> np.ndarray:
        """bool [n]: the moves a choice may make: while the root is unproven, all but the
        proven losses; at a proven root, the moves proven to keep its value."""
        # NaN (unproven) compares unequal to everything: kept as open, left out of a draw.
        return self.values != -SOLVED_WIN if self.value is None else self.values == self.value

    def allowed(self, visits: np.ndarray, prior: np.ndarray) -> np.ndarray:
        """The weights the move is chosen from (as visits [n]): ``visits`` without the proven
        losses (a proven draw root: only its drawing moves); where that leaves nothing
        visited, the priors (float [n]) of those moves; where nothing at all, ``visits``."""
        keep = self.kept()
        kept = np.where(keep, visits, 0)
        if kept.any():
            return kept
        weights = np.where(keep, prior, 0.0)
        return weights if weights.any() else visits


def better_proof(v: float, p: int, bv: float, bp: int) -> bool:
    """Whether the exact value ``v`` reached in ``p`` plies beats ``bv`` in ``bp`` for the
    side choosing: the higher value, then the shorter way (the longer for a loss)."""
    if v != bv:
        return v > bv
    return p > bp if v < 0 else p < bp


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
    proof: Proof | None = field(default=None, kw_only=True)
    """With ``MCTSConfig.solver``: what is proven at the root, per action ([A]); else None."""


@dataclass(frozen=True)
class GumbelResult(SearchResult):
    """A Gumbel search's result: ``SearchResult``'s fields and what the move choice needs."""

    policy: np.ndarray
    """float32 [A]: softmax(logits + sigma(completed Q)) over legal actions, the policy target."""
    scores: np.ndarray
    """float64 [A]: logits + sigma(completed Q) of the considered actions that received the
    most visits in this search (the survivors of sequential halving; with the solver, among the
    moves ``Proof.kept`` keeps); -inf elsewhere."""
    gumbel: np.ndarray
    """float64 [A]: the root's Gumbel noise (0 without noise)."""


@dataclass(frozen=True)
class SearchReport:
    """A search tree's root as it stands between searches: what an engine shows (GTP's
    analysis lines, UCI's ``info``). Aligned arrays over the root's ``k`` legal actions."""

    actions: np.ndarray
    """int64 [k]: the root's legal actions, increasing."""
    visits: np.ndarray
    """int64 [k]: each action's visits (every search kept on this root, not only the last)."""
    values: np.ndarray
    """float64 [k]: each action's mean value Q for the root's side to move, in [-1, 1]
    (0 where unvisited)."""
    priors: np.ndarray
    """float32 [k]: the network's prior of each action, before any root noise."""
    pvs: tuple[tuple[int, ...], ...]
    """k lines: each action, then the most visited child at each node below it (ties to the
    higher prior); just the action when it is unvisited."""
    root_visits: int
    """The root's visits: its own evaluation and every simulation through it."""
    root_value: float
    """The root's mean value for its side to move, over its evaluation and simulations."""
    nodes: int
    """Nodes the tree holds."""
    proof: Proof | None = field(default=None, kw_only=True)
    """With ``MCTSConfig.solver``: what is proven at the root, per legal action ([k]); else
    None."""

    @property
    def pv(self) -> tuple[int, ...]:
        """The principal variation: the line of the most visited action (ties to the higher
        prior); empty before any simulation."""
        if not self.visits.size or self.visits.max() == 0:
            return ()
        top = np.flatnonzero(self.visits == self.visits.max())
        return self.pvs[int(top[np.argmax(self.priors[top])])]


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


@lru_cache(maxsize=256)
def considered_visits(num_considered: int, num_simulations: int) -> tuple[int, ...]:
    """The sequential-halving schedule: for simulation ``t``, the visit count that the root
    action chosen at ``t`` has before it (mctx's ``get_sequence_of_considered_visits``).

    Each phase gives every one of the ``num_considered`` remaining actions
    ``max(1, n // (ceil(log2 k) * num_considered))`` more visits, then halves them (never
    below 2). With ``num_considered <= 1`` the one action is visited every time. Memoised:
    every move of a game asks for one of a few schedules.
    """
    if num_considered <= 1:
        return tuple(range(num_simulations))
    log2max = math.ceil(math.log2(num_considered))
    sequence: list[int] = []
    visits = [0] * num_considered
    considered = num_considered
    while len(sequence) < num_simulations:
        extra = max(1, int(num_simulations / (log2max * considered)))
        for _ in range(extra):
            sequence.extend(visits[:considered])
            for i in range(considered):
                visits[i] += 1
        considered = max(2, considered // 2)
    return tuple(sequence[:num_simulations])


def require_live(game: Game, state: State) -> None:
    """A search needs a position with a move to make: refuse a terminal one, with the board."""
    if game.is_terminal(state):
        raise ValueError(f"search from a terminal position:\n{game.render(state)}")


@runtime_checkable
class Search(Protocol):
    """One game's search tree: what self-play, play, analyze, gtp and eval call."""

    game: Game
    config: MCTSConfig
    rng: np.random.Generator
    leaf_legal: bool

    async def search(
        self,
        state: State,
        evaluate: Evaluate,
        add_noise: bool,
        num_simulations: int | None = None,
    ) -> Any: ...

    def choose(self, result: Any, move_number: int) -> tuple[np.ndarray, int]: ...

    def advance(self, action: int) -> None: ...

    def encode_root(self, state: State) -> np.ndarray: ...

    def report(self, max_pv: int = 32) -> SearchReport: ...

    def sample_resign_allowed(self) -> bool: ...

    def should_resign(self, root_value: float, move_number: int, resign_allowed: bool) -> bool: ...


class _Rules:
    """What every search holds (its game, knobs and generator) and the resignation rule."""

    leaf_legal: bool = False
    """Call ``evaluate(obs, legal)`` with each leaf's legal actions (int ``[k]``, increasing),
    for an evaluator that asks for those logits only (a sparse evaluation, ``azserve.sparse``;
    ``actors.selfplay.GameLeaves`` sets it); False: ``evaluate(obs)``."""

    def __init__(self, game: Game, config: MCTSConfig, rng: np.random.Generator) -> None:
        self.game = game
        self.config = config
        self.rng = rng

    def ask(self, evaluate: Evaluate, state: State) -> Awaitable[tuple[np.ndarray, float]]:
        """``evaluate`` of ``state``'s planes, with its legal actions when ``leaf_legal``."""
        obs = self.game.encode(state)
        if self.leaf_legal:
            return evaluate(obs, np.asarray(self.game.legal_actions(state)))  # type: ignore[call-arg]
        return evaluate(obs)

    def sample_resign_allowed(self) -> bool:
        """Draw, once per game, whether it may resign (False for ``no_resign_fraction``)."""
        return bool(self.rng.random() >= self.config.no_resign_fraction)

    def should_resign(self, root_value: float, move_number: int, resign_allowed: bool) -> bool:
        """Whether the side to move, whose root value is ``root_value`` (the root's mean value
        over its evaluation and simulations), resigns now."""
        cfg = self.config
        return (
            resign_allowed
            and move_number >= cfg.resign_min_moves
            and root_value < cfg.resign_threshold
        )


class PuctMoves(_Rules):
    """PUCT's move rules (AlphaZero): the target is the root's visit distribution; the move is
    sampled from visits ** (1 / temperature) in the opening, the most visited after."""

    def choose(self, result: SearchResult, move_number: int) -> tuple[np.ndarray, int]:
        """(policy target, move) after a search returned ``result``. With the solver's
        ``proof``, a proven win or loss imposes its move (the shortest win, the longest loss)
        and otherwise the move is chosen as below without the proven losses (a proven draw:
        among its drawing moves); the target stays the visits."""
        target, proof = self.policy_target(result.visits), result.proof
        if proof is None:
            return target, self.select_action(result.visits, move_number)
        forced = proof.forced()
        if forced >= 0:
            return target, forced
        return target, self.select_action(proof.allowed(result.visits, result.root_prior),
                                          move_number)  # fmt: skip

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


class GumbelMoves(_Rules):
    """Gumbel AlphaZero's move rules: the target is the improved policy; the move is among the
    survivors of sequential halving."""

    def choose(self, result: GumbelResult, move_number: int) -> tuple[np.ndarray, int]:
        """(policy target, move) after a search returned ``result``. With the solver's
        ``proof``, a proven win or loss imposes its move (the shortest win, the longest loss),
        as ``PuctMoves.choose``; otherwise the move is chosen as below, the proven losses left
        out (the survivors already leave them out)."""
        target, proof = self.policy_target(result), result.proof
        if proof is not None and (forced := proof.forced()) >= 0:
            return target, forced
        return target, self.select_action(result, move_number)

    def select_action(self, result: GumbelResult, move_number: int) -> int:
        """The move to play. While ``move_number < temperature_moves`` (and temperature > 0):
        with ``gumbel_opening = "halving"``, among the survivors of sequential halving, the
        highest ``temperature * g + logits + sigma(completed Q)`` (at temperature 1, mctx's
        action: a sample guided by the noise); with ``"target"``, a sample from the policy
        target ** (1 / temperature). After that, the highest ``logits + sigma(completed Q)``
        among the survivors (ties to the lowest action)."""
        cfg = self.config
        scores = result.scores
        if move_number < cfg.temperature_moves and cfg.temperature > 0:
            if cfg.gumbel_opening == "target":
                weights = result.policy
                if result.proof is not None:  # the solver's: never a proven loss (Proof.kept)
                    weights = result.proof.allowed(weights, result.root_prior)
                return sample_tempered(weights, cfg.temperature, self.rng)
            scores = scores + cfg.temperature * result.gumbel
        return int(scores.argmax())

    @staticmethod
    def policy_target(result: GumbelResult) -> np.ndarray:
        """float32 [A]: the improved policy softmax(logits + sigma(completed Q))."""
        return result.policy


__all__ = [
    "PLAY_ALGORITHM",
    "SOLVED_WIN",
    "Evaluate",
    "GumbelMoves",
    "GumbelResult",
    "MCTSConfig",
    "Proof",
    "PuctMoves",
    "Search",
    "SearchReport",
    "SearchResult",
    "better_proof",
    "considered_visits",
    "dirichlet",
    "require_live",
    "sample_tempered",
]
