"""Elo ratings fitted by maximum likelihood from game results (Bradley-Terry, as BayesElo and
Ordo fit them): the probability that ``a`` scores against ``b`` is
``1 / (1 + 10 ** ((r_b - r_a) / 400))``, a draw counts as half a win for each side, and the
ratings are those that make the games played most likely.

Some players are held fixed (the ladder's random play at 0 Elo); every other rating, and its
95% interval, is relative to them. The interval comes from the curvature of the
log-likelihood at its maximum (the inverse of the observed information, the usual
large-sample interval).

A player that has won (or lost) every game it played has no finite maximum: its rating would
run off to infinity. As BayesElo does, every pair that has played gets ``prior_draws`` virtual
drawn games (half a game by default), which keeps every rating finite and pulls it toward its
opponents by an amount that vanishes as real games accumulate (40-0 against random then reads
as about +880 rather than +infinity).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np

ELO = 400.0 / math.log(10.0)
"""Elo points per natural-log unit of the odds."""


def expected_score(r_a: float, r_b: float) -> float:
    """The score ``a`` is expected to make against ``b`` (a win 1, a draw 1/2)."""
    return 1.0 / (1.0 + 10.0 ** ((r_b - r_a) / 400.0))


@dataclass(frozen=True)
class Result:
    """One game (or several alike) between two players, from ``a``'s side."""

    a: str
    b: str
    score: float
    """``a``'s score: 1 a win, 0.5 a draw, 0 a loss."""
    weight: float = 1.0
    """How many games this stands for (the virtual draws are fractional)."""


@dataclass(frozen=True)
class Rating:
    """One player's fitted rating."""

    elo: float
    lo: float
    """The 95% interval's ends (equal to ``elo`` for a fixed player)."""
    hi: float
    games: int
    """Real games played (the virtual draws not counted)."""
    score: float
    """Points scored in them."""
    fixed: bool = False
    anchored: bool = True
    """False when no chain of games links the player to a fixed one: its rating is then only
    relative to its own group, which is held at mean 0, and its interval is infinite."""


def fit(
    results: Iterable[Result],
    fixed: Mapping[str, float],
    players: Iterable[str] = (),
    prior_draws: float = 0.5,
    iterations: int = 100,
) -> dict[str, Rating]:
    """Maximum-likelihood ratings of every player in ``results`` (and ``players``, which may not
    have played yet: they get their group's mean, or 0, and an infinite interval).

    ``fixed``: players held at the given ratings. Newton's method on the log-likelihood; it
    converges in a handful of steps because the likelihood is concave."""
    games = list(results)
    names: list[str] = []
    seen: set[str] = set()
    for n in [*fixed, *players, *(g.a for g in games), *(g.b for g in games)]:
        if n not in seen:
            seen.add(n)
            names.append(n)
    idx = {n: i for i, n in enumerate(names)}
    played = np.zeros(len(names), dtype=np.int64)
    scored = np.zeros(len(names))
    pairs: set[tuple[int, int]] = set()
    rows: list[tuple[int, int, float, float]] = []
    for g in games:
        if g.a == g.b:
            raise ValueError(f"ratings: {g.a} cannot play itself")
        if not 0.0 <= g.score <= 1.0:
            raise ValueError(f"ratings: score {g.score} of {g.a} against {g.b} outside 0..1")
        i, j = idx[g.a], idx[g.b]
        rows.append((i, j, g.score, g.weight))
        played[i] += 1
        played[j] += 1
        scored[i] += g.score
        scored[j] += 1.0 - g.score
        pairs.add((min(i, j), max(i, j)))
    rows += [(i, j, 0.5, prior_draws) for i, j in sorted(pairs) if prior_draws > 0]

    groups = _groups(len(names), pairs)
    free = np.array([n not in fixed for n in names])
    r = np.array([float(fixed.get(n, 0.0)) / ELO for n in names])
    # A group with no fixed player is held at mean 0 (by a constraint on its first member).
    floating = [g for g in groups if not any(names[k] in fixed for k in g)]
    if rows:
        a = np.array([x[0] for x in rows])
        b = np.array([x[1] for x in rows])
        s = np.array([x[2] for x in rows])
        w = np.array([x[3] for x in rows])
        for _ in range(iterations):
            grad, hess = _derivatives(r, a, b, s, w)
            step = _newton_step(grad, hess, free, floating)
            r += step
            if np.max(np.abs(step), initial=0.0) * ELO < 1e-6:
                break
        _, hess = _derivatives(r, a, b, s, w)
    else:
        hess = np.zeros((len(names), len(names)))
    var = _variances(hess, free, floating)
    out = {}
    for k, n in enumerate(names):
        elo = r[k] * ELO
        half = 1.96 * math.sqrt(var[k]) * ELO if math.isfinite(var[k]) else math.inf
        if n in fixed:
            half = 0.0
        out[n] = Rating(
            elo=float(elo),
            lo=float(elo - half),
            hi=float(elo + half),
            games=int(played[k]),
            score=float(scored[k]),
            fixed=n in fixed,
            anchored=not any(k in g for g in floating),
        )
    return out


def _derivatives(
    r: np.ndarray, a: np.ndarray, b: np.ndarray, s: np.ndarray, w: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Gradient and Hessian of the log-likelihood in natural-log units."""
    n = len(r)
    p = 1.0 / (1.0 + np.exp(r[b] - r[a]))
    g = w * (s - p)
    grad = np.bincount(a, g, n) - np.bincount(b, g, n)
    c = w * p * (1.0 - p)
    hess = np.zeros((n, n))
    np.add.at(hess, (a, a), -c)
    np.add.at(hess, (b, b), -c)
    np.add.at(hess, (a, b), c)
    np.add.at(hess, (b, a), c)
    return grad, hess


def _reduced(free: np.ndarray, floating: list[list[int]]) -> np.ndarray:
    """The indices solved for: the free players, less the first of each floating group."""
    pinned = {g[0] for g in floating}
    return np.array([k for k in range(len(free)) if free[k] and k not in pinned], dtype=np.int64)


def _newton_step(
    grad: np.ndarray, hess: np.ndarray, free: np.ndarray, floating: list[list[int]]
) -> np.ndarray:
    keep = _reduced(free, floating)
    step = np.zeros(len(grad))
    if len(keep):
        h = hess[np.ix_(keep, keep)]
        step[keep] = -np.linalg.lstsq(h, grad[keep], rcond=None)[0]
        step = np.clip(step, -3.0, 3.0)  # at most ~1,300 Elo a step: no overshoot from afar
    for g in floating:  # back to mean 0 within each floating group
        step[g] -= (step[g].sum() + 0.0) / len(g)
    return step


def _variances(hess: np.ndarray, free: np.ndarray, floating: list[list[int]]) -> np.ndarray:
    """Each rating's variance (natural-log units) from the observed information; inf for a
    player with no games."""
    n = len(free)
    var = np.full(n, math.inf)
    var[~free] = 0.0
    keep = _reduced(free, floating)
    if len(keep):
        info = -hess[np.ix_(keep, keep)]
        cov = np.linalg.pinv(info)
        diag = np.diag(cov)
        has_games = np.abs(np.diag(info)) > 0
        var[keep] = np.where(has_games, np.maximum(diag, 0.0), math.inf)
    for g in floating:  # only relative to its own group: no interval against the fixed
        var[g] = math.inf
    return var


def _groups(n: int, pairs: set[tuple[int, int]]) -> list[list[int]]:
    """The players linked by chains of games (union-find), each group sorted."""
    parent = list(range(n))

    def root(k: int) -> int:
        while parent[k] != k:
            parent[k] = parent[parent[k]]
            k = parent[k]
        return k

    for i, j in pairs:
        parent[root(i)] = root(j)
    groups: dict[int, list[int]] = {}
    for k in range(n):
        groups.setdefault(root(k), []).append(k)
    return list(groups.values())


def wilson(wins: float, n: int, z: float = 1.96) -> tuple[float, float]:
    """The Wilson score interval of a win rate (95% for z = 1.96)."""
    if n == 0:
        return 0.0, 1.0
    p = wins / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


__all__ = ["ELO", "Rating", "Result", "expected_score", "fit", "wilson"]
