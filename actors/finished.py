"""What a finished self-play game becomes: its first player's result (adjudicated or not), the
targets of its recorded positions beyond policy and value, and the ``Trajectory`` message with
its arrays that a sink sends (``actors.sinks``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from actors.games import Game, State
from actors.material import MaterialTrack
from actors.search import MCTSConfig
from azserve import protocol as P
from azserve.sparse import SparseRows
from azserve.trajarrays import Policy


@dataclass
class FinishedGame:
    """One game's training data. obs uint8 ``[T,C,H,W]``, policy float32 ``[T,A]`` (or its
    nonzero entries, ``SparseRows``), outcome float32 ``[T]`` (final result from the side to
    move at each position)."""

    obs: np.ndarray
    policy: Policy
    outcome: np.ndarray
    version: int
    result: float
    resigned: bool
    moves: int
    """Moves played; ``len(outcome)`` of them were recorded."""
    targets: dict[str, Policy] = field(default_factory=dict)
    """The game's targets by name (``azserve.targets``), in their order; empty unless asked."""


def game_result(
    game: Game, final: State, resigner: int | None, cfg: MCTSConfig | None = None
) -> tuple[float, bool]:
    """The first player's result of a game that ended at ``final`` (or with ``resigner``'s
    resignation): +1, 0, -1, or an adjudicated win's ``cfg.adjudicated_value``; and whether it
    was adjudicated: with ``cfg.cap_win_margin`` > 0 a draw at the game's ply cap (and with
    ``cfg.adjudicate_repetitions`` one by repetition or the 50-move rule) goes to the side
    ahead by at least that much (``Game.cap_score``)."""
    if resigner is not None:
        return (-1.0 if resigner == 0 else 1.0), False
    # terminal_value is for the side to move at the end; turn it into the first player's.
    tv = game.terminal_value(final)
    adjudicated = False
    if cfg is not None and cfg.cap_win_margin > 0:
        lead = game.cap_score(final, cfg.adjudicate_repetitions)
        if lead is not None and abs(lead) >= cfg.cap_win_margin:
            tv = cfg.adjudicated_value if lead > 0 else -cfg.adjudicated_value
            adjudicated = True
    return (tv if game.to_play(final) == 0 else -tv), adjudicated


def game_targets(
    game: Game,
    final: State,
    movers: np.ndarray,
    replies: list[np.ndarray | None],
    played_out: bool,
    material: MaterialTrack | None = None,
    moves_left: np.ndarray | None = None,
) -> dict[str, np.ndarray]:
    """The targets of one game's recorded positions (``azserve.targets``), by name in their
    order: ``ownership`` and ``score`` from the ``final`` state, turned to each position's side
    to move (``movers`` [T]), where the game gives them and was ``played_out`` (not resigned);
    ``score`` and ``material_ahead`` from the game's ``material`` where it was tracked and the
    game ``played_out`` (a game ended at the ply cap or adjudicated was); ``moves_left``
    float32 ``[T]`` as given, played out or resigned (the plies to where the game stopped);
    ``reply`` from ``replies`` (the next move's search policy, None where there is none)."""
    out: dict[str, np.ndarray] = {}
    final_targets = game.final_targets(final) if played_out else None
    sign = np.where(movers == 0, 1, -1)
    if final_targets is not None:
        owner, margin = final_targets
        out["ownership"] = (owner[None] * sign[:, None, None]).astype(np.int8)
        out["score"] = (margin * sign).astype(np.float32)
    if material is not None and played_out:
        out.update(material.targets(final, movers))
    if moves_left is not None:
        out["moves_left"] = moves_left.astype(np.float32, copy=False)
    reply = np.zeros((len(replies), game.num_actions), np.float32)
    for i, r in enumerate(replies):
        if r is not None:
            reply[i] = r
    out["reply"] = reply
    return out


def to_message(
    g: FinishedGame, actor: str, game_id: int, game_name: str
) -> tuple[P.Trajectory, list[Any]]:
    """A finished game as its wire message and what a sink's ``send`` takes after it (obs,
    policy, outcome, the targets; ``azserve.trajarrays.flatten`` makes the wire's arrays)."""
    msg = P.Trajectory(
        actor=actor,
        game_id=game_id,
        game=game_name,
        version=g.version,
        length=len(g.outcome),
        result=g.result,
        resigned=g.resigned,
        moves=g.moves,
    )
    if g.targets:
        msg.targets = list(g.targets)
    if isinstance(g.policy, SparseRows):
        msg.sparse = True
    return msg, [g.obs, g.policy, g.outcome, *g.targets.values()]
