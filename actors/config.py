"""The actors' config section (torch-free, like everything in ``actors``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from azserve.errors import ConfigError


@dataclass(frozen=True)
class ActorsConfig:
    """Self-play processes and where their finished games go."""

    processes: int = 1
    """Actor processes that ``train``/``launch`` start (each runs ``games`` coroutines)."""
    games: int = 256
    """Concurrent game coroutines per process: enough leaves in flight for large batches."""
    games_file: str = ""
    """A file holding this process's games in flight and its search pool's lane size, followed
    while it runs (``actors.inflight``): ``azserve train``'s autopilot writes it
    (docs/autopilot.md). Empty: ``games`` stays fixed."""
    sink: Literal["learner", "file", "null"] = "learner"
    """Where finished games go: the learner endpoint, a local file, or only counted."""
    learner: str = ""
    """The learner's trajectory endpoint (sink = learner; empty: ``learner.bind``)."""
    file: str = "trajectories.azt"
    """Output file (sink = file)."""
    max_outbox: int = 512
    """Unacknowledged trajectories kept for resending; a full outbox makes games wait."""
    resend_after_s: float = 5.0
    """Resend a trajectory not acked after this long (doubling on each resend)."""
    max_resend_after_s: float = 60.0
    """Upper bound of the resend interval."""
    drain_timeout_s: float = 5.0
    """How long closing the sink waits for outstanding acks."""
    version_wait_s: float = 30.0
    """How long a game whose weights version is gone (a restarted server) waits for it to be
    restored before the game is abandoned and counted; it never switches versions."""
    max_games: int = 0
    """Stop after this many finished games per process (0 = until stopped)."""
    status_interval_s: float = 5.0
    """Seconds between status lines (0 = none)."""
    cache_mb: float = 64.0
    """Evaluation cache of the process (``actors.evalcache``), shared by its games: memory it
    may use (0 = off). Keyed by (version, position): hits are exact and cost no message."""
    search_pool: bool = True
    """Drive the games' compiled searches in rounds (``actors.searchpool``): one message per
    round of leaves, no future per leaf, the leaves of a round fed in C; the same results as a
    coroutine awaiting each leaf (false). More simulations per actor CPU-second, and on this
    CPU host more positions/s too (docs/benchmarks.md). Searches the pool cannot drive (the
    Python core, PUCT with ``mcts.leaves_in_flight > 1``) await their own leaves."""
    targets: bool = False
    """Send the targets the game can give with each game (``azserve.targets``: final
    ownership and score margin of the games played to their end, the opponent's reply policy).
    ``azserve train`` turns it on when a ``trainer.*_weight`` of a target is above 0."""
    material_ahead_plies: int = 0
    """With ``targets``, a game with material (chess, shogi) also sends its material targets
    (actors/material.py): ``score``, the final balance, and ``material_ahead``, the balance
    this many plies after each position; 0 = neither (the trajectories of before). The config
    sets it to ``trainer.material_ahead_plies`` while ``trainer.score_weight`` or
    ``trainer.material_ahead_weight`` is above 0."""
    moves_left: bool = False
    """With ``targets``, every game also sends ``moves_left``, the plies from each recorded
    position to where the game stopped (``azserve.targets``); false = not (the trajectories of
    before). The config turns it on while ``trainer.moves_left_weight`` is above 0."""
    sparse_policy: Literal["auto", "on", "off"] = "auto"
    """Send the policy targets (and the ``reply`` target) as their nonzero entries, int16
    index and float16 weight (``azserve.trajarrays``): ``auto`` for games wider than 512 actions
    (chess), ``on``, ``off`` (dense float32 rows, as before)."""
    seed: int = 0
    """Base seed; each process and game coroutine derives its own stream."""
    metrics_port: int = 0
    """Prometheus endpoint base port: actor process *i* uses this + *i* (0 = off)."""
    metrics_index: int = -1
    """The *i* of ``metrics_port``: -1 takes the number the process's ``--id`` ends in
    (``azserve train``'s ``actor-i``); ``azserve launch`` numbers the processes of each host."""
    metrics_host: str = "127.0.0.1"
    """Address of the metrics endpoints (loopback by default)."""

    def __post_init__(self) -> None:
        if self.material_ahead_plies < 0:
            raise ConfigError(
                f"actors.material_ahead_plies={self.material_ahead_plies}: must be >= 0 "
                "(0 = no material targets)"
            )
        if self.max_outbox < 1:
            raise ConfigError(f"actors.max_outbox: must be >= 1, got {self.max_outbox}")
        if not 0 < self.resend_after_s <= self.max_resend_after_s:
            raise ConfigError(
                f"actors.resend_after_s={self.resend_after_s}: must be in "
                f"(0, actors.max_resend_after_s={self.max_resend_after_s}]"
            )
