"""Targets a game can give beside (obs, policy, outcome): the contract of their names, dtypes
and shapes, shared by the actors that make them, the wire, the trajectory files and the learner.

A trajectory may carry, after its three arrays, the ones named in ``Trajectory.targets``, in
that order (a trajectory without targets is exactly what it was before they existed):

- ``ownership`` int8 ``[T, H, W]``: the final owner of each point (the planes' layout), from
  the side to move's view at each position: +1 its own, -1 the opponent's, 0 neither (Go:
  Tromp-Taylor area at the end; Othello: each square's final disc). Only a game played to its
  end carries it (a resigned game's board says nothing of the end).
- ``score`` float32 ``[T]``: the final score margin for the side to move (Go: area difference
  with komi; Othello: disc difference; chess and shogi: the final material balance, see
  ``MATERIAL``). Carried with ``ownership`` by a game that gives it, alone by chess and shogi.
- ``material_ahead`` float32 ``[T]``: the material balance for the side to move some plies
  later (``actors.material_ahead_plies``; the final balance where the game ends sooner).
- ``moves_left`` float32 ``[T]``: the plies played from each position to where the game
  stopped (``actors.moves_left``): its end, the ply cap, an adjudication or a resignation;
  the fast searches' plies count. 1 at a position whose move ended the game; >= 1 everywhere.
- ``reply`` float32 ``[T, A]``: the opponent's reply policy, the search policy of the next
  position; a row of zeros where there is none (the last move, or a next move that was not
  recorded). In a sparse trajectory (``azserve.trajarrays``) ``SparseRows`` like its policy,
  an empty row where there is none.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from azserve.sparse import SparseRows

TARGETS = ("ownership", "score", "material_ahead", "moves_left", "reply")
"""Every target name, in the order a trajectory lists the ones it carries."""

FINAL = ("ownership", "score")
"""The targets read from the final position (the game must have ended, not by resignation)."""

MATERIAL = ("score", "material_ahead")
"""The targets of a game with material (chess, shogi: ``Game.material_balance``), read from
the material of the positions played: ``score`` the final balance, ``material_ahead`` the
balance some plies on. A game played to its end carries them, one ended at the ply cap or
adjudicated too (its final material is real); a resigned game does not (where it would
have ended is unknown)."""


def target_spec(
    name: str, t: int, obs_shape: Sequence[int], num_actions: int
) -> tuple[np.dtype, tuple[int, ...]]:
    """(dtype, shape) of target ``name`` for ``t`` positions."""
    _, h, w = obs_shape
    if name == "ownership":
        return np.dtype(np.int8), (t, h, w)
    if name in ("score", "material_ahead", "moves_left"):
        return np.dtype(np.float32), (t,)
    if name == "reply":
        return np.dtype(np.float32), (t, num_actions)
    raise ValueError(f"unknown target {name!r} (known: {list(TARGETS)})")


def check_targets(
    names: Sequence[str],
    arrays: Sequence[np.ndarray | SparseRows],
    t: int,
    obs_shape: Sequence[int],
    num_actions: int,
) -> str | None:
    """Why ``arrays`` are not the targets ``names`` of ``t`` positions, or None when they are."""
    unknown = [n for n in names if n not in TARGETS]
    if unknown:
        return f"unknown target {unknown[0]!r} (known: {list(TARGETS)})"
    if list(names) != [n for n in TARGETS if n in names]:
        return f"targets {list(names)} repeat or are out of the order {list(TARGETS)}"
    if len(arrays) != len(names):
        return f"targets {list(names)} need {len(names)} arrays, got {len(arrays)}"
    for name, a in zip(names, arrays):
        if isinstance(a, SparseRows):
            why = a.problem(t, num_actions) if name == "reply" else "is not a policy"
            if why is not None:
                return f"target {name}: {why}"
            continue
        dtype, shape = target_spec(name, t, obs_shape, num_actions)
        if a.dtype != dtype or a.shape != shape:
            return f"target {name} must be {dtype.name}{list(shape)}, got {a.dtype.name}{list(a.shape)}"
        if name == "ownership" and not ((a >= -1) & (a <= 1)).all():
            return "target ownership outside {-1, 0, 1}"
        if name in ("score", "material_ahead") and not np.isfinite(a).all():
            return f"target {name} is not finite"
        if name == "moves_left" and not (np.isfinite(a).all() and (a >= 0).all()):
            return "target moves_left has negative or non-finite entries"
        if name == "reply" and not (np.isfinite(a).all() and (a >= 0).all()):
            return "target reply has negative or non-finite entries"
    return None


__all__ = ["FINAL", "MATERIAL", "TARGETS", "check_targets", "target_spec"]
