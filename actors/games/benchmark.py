"""What ``azserve eval`` scores a game on: the contract of a game's benchmarks.

A game lists its benchmarks in ``Game.benchmarks()`` (none by default: such a game is scored by
matches against uniform random play). A benchmark scores an agent on positions whose right
moves are known and returns a JSON-able dict of scores, written under its ``name`` in
``eval.jsonl`` and ``azserve eval``'s output; its ``series`` say which of those scores the run's
report and the learning curves (``azserve compare``) draw, and which way is better. Nothing
outside the game's files needs to know the game's name to score or draw it.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

OVERALL = "overall"
"""The key of a series' headline figure when it is scored per set (``{"overall": 0.1, ...}``)."""

Search = Literal["policy", "mcts"]


class Move(Protocol):
    """One analysed position: the move the agent chose."""

    @property
    def move(self) -> int: ...


class Analyst(Protocol):
    """What a benchmark needs of an agent (``azserve.arena.agent.Agent`` is one): its game, and
    its move at each of many positions, by the raw policy (``sims`` 0) or by a search of
    ``sims`` simulations."""

    game: Any
    """The ``Game`` it plays (typed loosely: the game module names this one for its hook)."""

    def analyze_sync(self, states: list[Any], sims: int) -> Sequence[Move]: ...


@dataclass(frozen=True)
class Series:
    """One score of a benchmark as a curve over learner steps.

    Every series is a fraction in [0, 1]: an error rate when ``lower_is_better`` (mistakes), a
    success rate otherwise (optimal moves); the learning curves draw ``1 - value`` of the
    latter, so that all their panels are mistake rates.
    """

    label: str
    """The legend of its line in the report (``"policy: optimal moves"``)."""
    path: tuple[str, ...]
    """Keys into the benchmark's result leading to a number, or to ``{set: number}`` with an
    ``overall`` entry (the report draws ``overall``, the learning curves a row per set)."""
    search: Search
    """``policy`` for the raw network's moves, ``mcts`` for the searched ones (the curves draw
    them dashed and solid)."""
    lower_is_better: bool
    """True for an error rate."""

    def value(self, result: dict[str, Any]) -> float | dict[str, float] | None:
        """The number, or the per-set numbers, at ``path`` in ``result``; None where this
        result did not measure it (no search at ``sims`` 0)."""
        node: Any = result
        for key in self.path:
            if not isinstance(node, dict) or key not in node:
                return None
            node = node[key]
        if isinstance(node, dict):
            return {str(k): float(v) for k, v in node.items()}
        return float(node)

    def headline(self, result: dict[str, Any]) -> float | None:
        """The number the report draws: the value, or its ``overall`` entry."""
        v = self.value(result)
        return v.get(OVERALL) if isinstance(v, dict) else v

    def mistake_rates(self, result: dict[str, Any]) -> dict[str, float]:
        """``{set: error rate}`` (``{"overall": ...}`` for a plain number); empty when not
        measured."""
        v = self.value(result)
        if v is None:
            return {}
        rates = v if isinstance(v, dict) else {OVERALL: v}
        return {k: x if self.lower_is_better else 1.0 - x for k, x in rates.items()}


class Benchmark(abc.ABC):
    """Scores an agent's moves against known right ones.

    ``run``'s result must stay readable by runs that come after: its keys are what old
    ``eval.jsonl`` files hold, so a benchmark adds keys but never renames them.
    """

    name: str
    """Its key in ``eval.jsonl`` and ``azserve eval``'s JSON (the game's name by custom)."""
    series: tuple[Series, ...] = ()
    """What the report and the learning curves draw of its result."""
    takes_positions: bool = False
    """Whether it reads its positions from a file (``eval.c4_positions``, ``azserve eval
    --positions``, ``--limit``); those options are refused for a game none of whose
    benchmarks does."""

    @abc.abstractmethod
    def run(
        self, agent: Analyst, sims: int, positions: Path | None = None, limit: int = 0
    ) -> dict[str, Any]:
        """Score ``agent``: its raw policy always, and a search of ``sims`` simulations per
        move when ``sims`` > 0. ``positions`` (a readable file) and ``limit`` (the first N
        positions, 0 = all) are given only to a benchmark that ``takes_positions``."""

    def summary(self, result: dict[str, Any]) -> str:
        """One line for people: each series' headline as a percentage."""
        parts = []
        for s in self.series:
            v = s.headline(result)
            if v is not None:
                parts.append(f"{s.label} {100 * v:.1f}%")
        return ", ".join(parts)
