"""The learner's config sections, torch-free so that the app can load every config without
importing torch (an actor process never does)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from azserve.auth import AuthConfig
from azserve.errors import ConfigError
from azserve.model.spec import NetConfig
from azserve.targets import TARGETS


@dataclass(frozen=True)
class ReplayConfig:
    """Replay section of the learner config."""

    capacity: int = 200_000
    """Positions held; the oldest are overwritten first."""
    max_policy_lag: int = 4
    """Positions made by a version more than this many versions behind the current one are dropped."""
    reuse_target: float = 4.0
    """Samples trained per sample inserted that the rate limiter holds training to."""
    reuse_file: str = ""
    """A file holding the reuse target, followed while the learner runs (``learner.livefile``):
    ``azserve train``'s autopilot writes it (docs/autopilot.md). Empty: ``reuse_target`` stays
    fixed."""
    min_size: int = 2_000
    """Fresh positions needed before the first batch may be sampled."""
    seed: int = 0
    """Seed of the replay's own generator, used when ``sample`` is given none."""
    policy_width: int = -1
    """How policies are kept (``learner.policystore``): -1 = auto, sparse entries (256 per
    position) for a game of more than 512 actions (chess) and dense rows otherwise; 0 = dense
    float32 rows; K > 0 = K entries per position (int16 index, float16 weight; a position with
    more keeps its K largest)."""

    def __post_init__(self) -> None:
        if self.policy_width < -1:
            raise ConfigError(f"replay.policy_width: must be >= -1, got {self.policy_width}")
        if self.capacity < 1:
            raise ConfigError(f"replay.capacity: must be >= 1, got {self.capacity}")
        if self.max_policy_lag < 0:
            raise ConfigError(f"replay.max_policy_lag: must be >= 0, got {self.max_policy_lag}")
        if not self.reuse_target > 0:
            raise ConfigError(f"replay.reuse_target: must be > 0, got {self.reuse_target}")
        if not 0 <= self.min_size <= self.capacity:
            raise ConfigError(f"replay.min_size: must be in [0, capacity], got {self.min_size}")


@dataclass(frozen=True)
class TrainerConfig:
    """Trainer section of the learner config."""

    batch_size: int = 256
    """Positions per training step."""
    optimizer: Literal["sgd", "adamw"] = "sgd"
    """SGD with momentum (AlphaZero's choice) or AdamW."""
    lr: float = 0.02
    """Peak learning rate (reached after warmup)."""
    momentum: float = 0.9
    """SGD momentum; AdamW's beta1."""
    adam_beta2: float = 0.999
    """AdamW's beta2."""
    nesterov: bool = False
    """Nesterov momentum for SGD."""
    weight_decay: float = 1e-4
    """Decay of conv/linear weights (biases and batch-norm parameters are not decayed)."""
    weight_decay_mode: Literal["optimizer", "loss"] = "optimizer"
    """"optimizer": the optimizer's weight_decay (coupled L2 for SGD, decoupled for AdamW);
    "loss": an explicit ``weight_decay/2 * ||w||^2`` term, reported in the loss as ``l2``."""
    value_weight: float = 1.0
    """Weight of the value loss relative to the policy cross-entropy: the squared error, or
    with ``net.value_head = "wdl"`` the win/draw/loss cross-entropy."""
    ownership_weight: float = 0.0
    """Weight of the final-ownership loss (the mean over the board's points of a binary
    cross-entropy, KataGo's); needs ``net.heads`` to have ``ownership`` and a game that gives
    it (Go, Othello). 0 = off: the loss, the replay and the trajectories are today's."""
    score_weight: float = 0.0
    """Weight of the score-margin loss (the squared error of the margin divided by the
    game's score scale: the board's points; chess and shogi: the final material balance over
    ``Game.score_scale`` pawns); needs the ``score`` head. 0 = off."""
    material_ahead_weight: float = 0.0
    """Weight of the loss of the material balance ``material_ahead_plies`` plies ahead (chess,
    shogi; the squared error as for the score); needs the ``material_ahead`` head. 0 = off."""
    material_ahead_plies: int = 16
    """Plies ahead of each position whose material balance ``material_ahead`` is (the final
    balance where the game ends sooner); the actors compute it (``actors.material_ahead_plies``
    follows it while a material target is trained)."""
    moves_left_weight: float = 0.0
    """Weight of the loss of the plies left in the game (Leela's moves-left head: a Huber loss,
    delta 10 plies, on plies over 20); needs the ``moves_left`` head, and the actors then send
    the target (``actors.moves_left``). 0 = off. ``net.moves_left_discount`` above 0 needs it."""
    reply_weight: float = 0.0
    """Weight of the opponent's-reply policy loss (cross-entropy against the next position's
    search policy); needs the ``reply`` head. 0 = off."""
    lr_schedule: Literal["constant", "cosine", "step", "run"] = "constant"
    """Shape of the learning rate after warmup. "run": constant at ``lr``, then a cosine down
    to ``lr * lr_final_ratio`` over the last ``lr_anneal_fraction`` of the time budget of
    ``azserve train`` (train.minutes), by the clock: the steps a run will make are not known
    when it starts, its end is."""
    total_steps: int = 100_000
    """Cosine: steps over which lr decays from ``lr`` to ``lr * lr_final_ratio``."""
    lr_final_ratio: float = 0.0
    """Cosine and run: final lr as a fraction of ``lr``."""
    lr_anneal_fraction: float = 0.25
    """Run: the last fraction of the time budget over which the learning rate anneals."""
    run_start_unix: float = 0.0
    """Run: when the time budget began (unix seconds). Set by ``azserve train``; 0 = unset."""
    run_end_unix: float = 0.0
    """Run: when the time budget ends (unix seconds). Set by ``azserve train``; 0 = unset."""
    lr_milestones: tuple[int, ...] = ()
    """Step: steps at which lr is multiplied by ``lr_gamma``."""
    lr_gamma: float = 0.1
    """Step: factor applied at each milestone."""
    warmup_steps: int = 0
    """Steps of linear warmup from lr/warmup_steps to lr."""
    grad_clip: float | None = None
    """Clip the global gradient norm to this (None: no clipping; the norm is reported anyway)."""
    amp: Literal["auto", "none", "bf16", "fp16"] = "none"
    """Mixed precision (``torch.autocast``; the weights and the optimizer stay float32). bf16 on
    CUDA or on a CPU: on one with AVX512-BF16 or AMX a Connect Four training step costs about
    half the CPU time of float32 (docs/benchmarks.md), elsewhere bf16 is emulated and slower (a
    warning says so). fp16 on CUDA only (with a gradient scaler); ignored on a CPU. ``auto``:
    bf16 where the device runs it natively (those CPUs, a CUDA device with bf16), else none."""
    channels_last: bool = False
    """Train with the weights and inputs in channels-last memory order (faster convolutions on
    a CPU: about 1.2x per step on the Connect Four net). Checkpoints and published weights are
    the same either way."""
    compile: bool = False
    """Train through ``torch.compile`` (inductor) of the network: forward and backward become
    generated kernels, compiled once at the first step (tens of seconds on a CPU). Checkpoints
    and published weights are the same either way."""
    device: Literal["cpu", "cuda", "auto"] = "auto"
    """Where to train; "auto" picks CUDA when available."""
    publish_every: int = 100
    """Training steps per published weights version."""
    augment: bool = True
    """Replace each sample by a random board symmetry (when the game provides symmetries)."""
    seed: int = 0
    """Seed of the trainer's numpy generator (sampling, augmentation); the initial weights
    come from ``net.seed``."""

    def __post_init__(self) -> None:
        for key in ("batch_size", "total_steps", "publish_every"):
            if getattr(self, key) < 1:
                raise ConfigError(f"trainer.{key}: must be >= 1, got {getattr(self, key)}")
        if not self.lr > 0:
            raise ConfigError(f"trainer.lr: must be > 0, got {self.lr}")
        if self.weight_decay < 0 or self.warmup_steps < 0:
            raise ConfigError("trainer.weight_decay and trainer.warmup_steps must be >= 0")
        if self.grad_clip is not None and not self.grad_clip > 0:
            raise ConfigError(f"trainer.grad_clip: must be > 0 or unset, got {self.grad_clip}")
        if not 0.0 < self.lr_anneal_fraction <= 1.0:
            raise ConfigError(
                f"trainer.lr_anneal_fraction: must be in (0, 1], got {self.lr_anneal_fraction}"
            )
        if self.run_end_unix and not self.run_end_unix > self.run_start_unix:
            raise ConfigError(
                f"trainer.run_end_unix: must be after trainer.run_start_unix "
                f"({self.run_start_unix}), got {self.run_end_unix}"
            )
        if list(self.lr_milestones) != sorted(self.lr_milestones):
            raise ConfigError(
                f"trainer.lr_milestones: must be increasing, got {self.lr_milestones}"
            )
        for name in TARGETS:
            if getattr(self, f"{name}_weight") < 0:
                raise ConfigError(f"trainer.{name}_weight: must be >= 0")
        if self.material_ahead_plies < 1:
            raise ConfigError(
                f"trainer.material_ahead_plies={self.material_ahead_plies}: must be >= 1 "
                "(the balance that many plies after each position)"
            )

    def targets(self) -> tuple[str, ...]:
        """The targets trained on (weight above 0), in ``azserve.targets`` order."""
        return tuple(n for n in TARGETS if getattr(self, f"{n}_weight") > 0)


@dataclass(frozen=True)
class CheckpointConfig:
    """Checkpoint section of the learner config."""

    dir: str = "checkpoints"
    """Directory of the checkpoint files (created when missing)."""
    keep_last: int = 5
    """The most recent checkpoints kept."""
    keep_every: int = 0
    """Also keep, for ever, checkpoints whose step is a multiple of this (0: none)."""

    def __post_init__(self) -> None:
        if self.keep_last < 1:
            raise ConfigError(f"checkpoint.keep_last: must be >= 1, got {self.keep_last}")
        if self.keep_every < 0:
            raise ConfigError(f"checkpoint.keep_every: must be >= 0, got {self.keep_every}")


@dataclass(frozen=True)
class LearnerConfig:
    """The learner process: where trajectories arrive and where weights go."""

    bind: str = "tcp://127.0.0.1:5556"
    """Endpoint the trajectory receiver binds (``tcp://host:port``, ``ipc://path``; port ``*``
    picks one). The truth for ``actors.learner``, which follows it unless set."""
    servers: tuple[str, ...] = ()
    """Inference servers every new version is published to (empty: ``server.bind``)."""
    publish_timeout_s: float = 60.0
    """How long one send of weights waits for a server's ack before it is given up (the
    server is caught up in the background after)."""
    publish_wait_s: float = 5.0
    """How long training waits, at each publish, for the servers' acks: a server cut off or
    hung past this keeps its send going in the background and holds up nothing."""
    threads: int = 1
    """torch intra-op threads for training on CPU (0 = torch's default)."""
    threads_file: str = ""
    """A file holding the torch threads for training, followed while the learner runs
    (``learner.livefile``): ``azserve train``'s autopilot writes it (docs/autopilot.md). Empty:
    ``threads`` stays fixed."""
    status_interval_s: float = 5.0
    """Seconds between status lines (0 = none)."""
    log_every: int = 10
    """Training steps between rows of metrics.jsonl."""
    max_steps: int = 0
    """Stop after this many training steps in total (0 = until stopped)."""
    dedup_capacity: int = 1 << 17
    """(actor, game_id) keys remembered to drop resent duplicates (about 100 bytes each)."""
    max_message_bytes: int = 64 << 20
    """Larger inbound trajectory messages make ZeroMQ drop the connection (protects memory)."""
    close_linger_ms: int = 100
    """How long closing waits to flush acks still queued (lost acks only cause resends)."""
    bind_retry_s: float = 2.0
    """Keep retrying a bind that finds the address in use this long: ZeroMQ releases a closed
    socket's address asynchronously, so a receiver restarted on the same endpoint may wait."""
    processes: int = 1
    """Ranks of a data-parallel learner (learner/distributed.py): rank 0 receives, keeps the
    replay, checkpoints and publishes; every rank trains on its shard of each global batch
    (``trainer.batch_size`` must divide by it). 1: one process, as before."""
    rendezvous: str = ""
    """Where the ranks meet (``tcp://host:port``, rank 0's host); empty: a free loopback port
    of rank 0's host, for ranks on one host."""
    start_ranks: bool = True
    """Rank 0 starts ranks 1..N-1 itself, on its own host. False: something else starts them
    (``azserve launch`` with ``[learner] rank_hosts``, one rank per host), and rank 0 waits for
    them at ``rendezvous``."""
    rank_timeout_s: float = 120.0
    """How long a collective waits for a silent rank before the group gives up (a rank that
    dies is seen at once; this bounds a hung one)."""
    journal_sync_ms: float = 100.0
    """Group commit of the journal: fsync at most this often (ms), so that a host crash loses
    at most this window of acked games; 0 fsyncs every game before its ack (about 1 ms each
    on a VM disk: scripts/journal_sync_cost.py). A killed process loses nothing either way."""
    journal_keep_all: bool = False
    """Keep every journal segment, not only those a resume may need: an audit trail of every
    game stored (``azserve bench chaos`` counts them); the journal then grows with the run."""
    metrics_port: int = 0
    """Prometheus endpoint port on ``metrics_host`` (0 = off)."""
    metrics_host: str = "127.0.0.1"
    """Address of the metrics endpoint (loopback by default)."""

    def __post_init__(self) -> None:
        if not self.publish_wait_s > 0:
            raise ConfigError(f"learner.publish_wait_s: must be > 0, got {self.publish_wait_s}")
        if self.dedup_capacity < 1:
            raise ConfigError(f"learner.dedup_capacity: must be >= 1, got {self.dedup_capacity}")
        if self.processes > 1 and not self.start_ranks and not self.rendezvous:
            raise ConfigError(
                "learner.start_ranks=false: ranks started elsewhere must meet rank 0 at a known "
                "address; set learner.rendezvous (tcp://HOST:PORT of rank 0's host)"
            )


@dataclass(frozen=True)
class LearnerSettings:
    """Everything one learner process needs, cut from the run's config by the app (so the
    learner never imports the app's schema)."""

    game: str
    """The game name (``actors.games.make_game``)."""
    net: NetConfig
    replay: ReplayConfig
    trainer: TrainerConfig
    checkpoint: CheckpointConfig
    learner: LearnerConfig
    """With ``servers`` resolved (never empty)."""
    auth: AuthConfig
    model: str
    """The servers' model name."""
    run_config: dict[str, Any] = field(default_factory=dict)
    """The run's whole resolved config, stored in every checkpoint."""
