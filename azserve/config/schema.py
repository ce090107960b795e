"""The whole configuration: one section per component, each defined next to its component.

``load_config(path, overrides)`` reads a TOML file from configs/, applies ``--set`` overrides,
checks every key and value, and returns a frozen ``Config``. Each component receives only its
own section (``client_config``, ``actors_config``, ``learner_settings`` cut them out, with the
endpoints derived).

Endpoints have two sources of truth: ``server.bind`` and ``learner.bind``. ``client.server``,
``learner.servers`` and ``actors.learner`` follow them unless set (``endpoints``).
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar

from actors.config import ActorsConfig
from actors.games import Game, make_game
from actors.material import has_material
from actors.search import MCTSConfig
from azserve.auth import AuthConfig
from azserve.backends.base import BackendConfig
from azserve.client import ClientConfig
from azserve.config.load import apply_overrides, dump_toml, from_dict, read_toml, to_dict
from azserve.errors import ConfigError
from azserve.model.spec import NetConfig
from azserve.server.config import ServerConfig
from azserve.targets import FINAL, MATERIAL
from learner.config import (
    CheckpointConfig,
    LearnerConfig,
    LearnerSettings,
    ReplayConfig,
    TrainerConfig,
)

D = TypeVar("D")

NET_FROM_GAME = ("in_channels", "height", "width", "num_actions")
"""The ``net`` keys a game fixes (its observation planes and actions); a config that leaves
them out gets the game's."""


@dataclass(frozen=True)
class EvalConfig:
    """Evaluation during and after training."""

    sims: int = 50
    """MCTS simulations per move for analysis and benchmark scoring."""
    c_puct: float | None = None
    """Analysis search: PUCT constant (None = ``mcts.c_puct``). A wider search than self-play's
    finds the rare tactic the network's prior hides."""
    fpu_reduction: float | None = None
    """Analysis search: first-play urgency reduction (None = ``mcts.fpu_reduction``)."""
    match_games: int = 20
    """Games per match (against random and against an earlier version), colours alternating."""
    match_sims: int = 25
    """MCTS simulations per move in matches."""
    c4_positions: str = "data/connect4/move_scores.tsv"
    """Connect Four benchmark positions (a relative path is tried from the working directory,
    then the repository root, then the copy shipped in the package)."""
    c4_limit: int = 0
    """Score only the first N benchmark positions (0 = all)."""
    compile: Literal["none", "jit", "inductor", "auto", "backend"] = "none"
    """How the net runs for evaluation and analysis (``azserve eval``, a run's evaluations,
    ``analyze``, ``play`` and the engines ``gtp``, ``uci``, ``usi``): as
    ``backend.torch.compile``, or ``backend`` for the run's own setting. ``none`` by default:
    these are short or one position at a time, and compiling costs more than it saves
    (Connect Four's ``azserve eval``: 45.5 s compiled, 25.6 s eager; ``azserve usi`` on a 4x64
    net: ``readyok`` after 49 s compiled, 3-4 s eager, and no faster search; 2 cores).
    Self-play, matches and the ladder keep ``backend.*``."""


@dataclass(frozen=True)
class LadderConfig:
    """A rating ladder kept during ``azserve train`` (``azserve ladder`` on the run, in
    ``RUN/ladder``): rounds of games between the run's kept checkpoints and the anchors, run
    at low priority and within a share of the wall time, so that it does not starve
    self-play. Keep checkpoints to rate with ``checkpoint.keep_every``."""

    games: int = 0
    """Games per round; 0 = no ladder during training."""
    anchors: tuple[str, ...] = ("random",)
    """Fixed opponents: ``random`` (0 Elo), ``gtp:CMD``, ``openspiel-mcts:SIMS``,
    ``checkpoint:PATH``."""
    share: float = 0.1
    """Most of the wall time the ladder may run: after a round of t seconds, the next starts
    t (1 - share) / share later (at 0.1, a round of 1 minute waits 9). Its process runs at
    ``nice`` 10 with one torch thread."""
    sims: int = 0
    """Simulations a move for every checkpoint (0 = ``eval.sims``)."""
    max_checkpoints: int = 12
    """Checkpoints of the run on the ladder, evenly spaced, the newest among them."""

    def __post_init__(self) -> None:
        from azserve.config.player_spec import parse_spec

        for spec in self.anchors:
            try:
                parse_spec(spec)
            except ConfigError as e:
                raise ConfigError(f"ladder.anchors: {e}") from None


@dataclass(frozen=True)
class TrainConfig:
    """``azserve train``: the whole loop on one machine."""

    minutes: float = 0.0
    """Stop after this many minutes (0 = no time budget)."""
    steps: int = 0
    """Stop after this many learner steps (0 = no step budget)."""
    games: int = 0
    """Stop after this many self-play games in total (0 = no game budget)."""
    restart_children: bool = False
    """Restart a crashed child process (else a crash stops the run cleanly)."""
    max_restarts: int = 3
    """Restarts allowed per child before the run stops."""
    server_threads: int = 0
    """torch threads of the inference server; 0 = follow the idle cores
    (``backend.torch.auto_threads`` from one thread up to the machine's cores): the server grows into what the actors and the
    learner leave free and gives it back when they need it."""
    learner_threads: int = 1
    """torch threads of the learner."""
    status_interval_s: float = 5.0
    """Seconds between rows of the live status table."""
    eval_every_s: float = 60.0
    """Seconds between evaluations of the latest checkpoint (0 = only at the end)."""


@dataclass(frozen=True)
class AutopilotConfig:
    """``azserve train``'s games in flight, sized while it runs (``azserve.run.autopilot``,
    docs/autopilot.md): enough leaf rows in flight to fill the server's best batch, more only
    while the server waits for rows. Fewer games in flight finish sooner and lag less behind
    the learner. And the learner's reuse target, moved to where the learner neither idles for
    credit nor falls behind the positions it is sent, and its torch threads, by which side is
    the bottleneck (``azserve.run.autopilot_learner``). Off: every actor process keeps
    ``actors.games``, the learner ``replay.reuse_target`` and ``train.learner_threads``."""

    enabled: bool = True
    """Size games in flight from the server's measurements, and move the learner's reuse target
    and threads from its own (false: ``actors.games``, ``replay.reuse_target`` and
    ``train.learner_threads`` fixed)."""
    interval_s: float = 10.0
    """Seconds between decisions, each on the server's counters over the interval."""
    start_batches: float = 1.0
    """Rows in flight at the start, in the server's best batches (``efficiency``; without
    batch buckets ``server.max_batch_size``); the controller moves it by what it measures."""
    min_games: int = 4
    """Fewest games in flight per actor process."""
    max_games: int = 0
    """Most games in flight per actor process (0 = ``actors.games``)."""
    busy_low: float = 0.85
    """Below this busy fraction the server waits for rows: one best batch more in flight; and,
    where the learner trains on the server's CPU cores, the learner's reuse target may rise past
    the configured one only then."""
    busy_high: float = 0.95
    """At or above this busy fraction, with full batches, rows beyond one best batch of each
    weights version served only queue: fewer games in flight (by ``1 - decrease``)."""
    full_batch: float = 0.9
    """A batch at least this share of the best batch counts as full."""
    efficiency: float = 0.9
    """The best batch is the smallest batch bucket whose rows per second, as the server timed
    its buckets at start (status ``backend.bucket_ms``), reach this share of the fastest
    bucket's: a smaller batch nearly as cheap a row needs fewer games in flight (1: the
    fastest bucket only)."""
    decrease: float = 0.7
    """Rows in flight kept on a decrease (multiplicative; never below one best batch of each
    weights version served)."""
    reuse: bool = True
    """Also move the learner's reuse target (``replay.reuse_target``) within ``reuse_min`` and
    ``reuse_max`` by the learner's measured busy fraction and the positions it is sent
    (``azserve.run.autopilot_learner``; false: ``replay.reuse_target`` fixed)."""
    reuse_min: float = 1.0
    """Lowest reuse target the autopilot sets (samples trained per sample made)."""
    reuse_max: float = 8.0
    """Highest reuse target the autopilot sets (training the same positions more often risks
    overfitting them)."""
    reuse_interval_s: float = 30.0
    """Seconds between the learner side's decisions (threads, then the reuse target), each on the
    learner's counters over the interval."""
    learner_busy_low: float = 0.6
    """Below this busy fraction the learner idles waiting for credit: a higher reuse target."""
    learner_busy_high: float = 0.9
    """At or above this busy fraction, with reuse short of the target (credit piling up),
    the learner is the bottleneck: a lower reuse target."""
    reuse_step: float = 1.5
    """Most factor one decision moves the reuse target by, up or down."""
    threads: bool = True
    """Also move the learner's torch threads, one at a time, by which side is the bottleneck:
    a core to the learner when it is and the server idles, one back when the server is and
    the learner idles (the server follows the idle cores: only with ``train.server_threads =
    0``; false: ``train.learner_threads`` fixed)."""
    max_learner_threads: int = 0
    """Most torch threads the autopilot gives the learner (0: the machine's cores less one)."""

    def __post_init__(self) -> None:
        if not self.busy_low < self.busy_high:
            raise ConfigError(
                f"autopilot.busy_low={self.busy_low}: must be below autopilot.busy_high="
                f"{self.busy_high} (the band between them is where nothing changes)"
            )
        if not self.learner_busy_low < self.learner_busy_high:
            raise ConfigError(
                f"autopilot.learner_busy_low={self.learner_busy_low}: must be below "
                f"autopilot.learner_busy_high={self.learner_busy_high} (the band between them "
                "is where the reuse target holds)"
            )
        if not self.reuse_min <= self.reuse_max:
            raise ConfigError(
                f"autopilot.reuse_max={self.reuse_max}: must be at least autopilot.reuse_min="
                f"{self.reuse_min}"
            )
        if self.max_games and self.max_games < self.min_games:
            raise ConfigError(
                f"autopilot.max_games={self.max_games}: must be 0 (actors.games) or at least "
                f"autopilot.min_games={self.min_games}"
            )


@dataclass(frozen=True)
class Config:
    """Everything one run needs."""

    game: str = "connect4"
    """The game: a built-in name (``tictactoe``, ``connect4``, ``othello``, ``go9``, ``go13``,
    ``go19``, ``go9-features``, ``go13-features``, ``go19-features``, ``chess``),
    ``openspiel:NAME``, or ``module:Class`` / ``file.py:Class`` for a game of your own
    (docs/games.md)."""
    net: NetConfig = field(default_factory=NetConfig)
    server: ServerConfig = field(default_factory=ServerConfig)
    backend: BackendConfig = field(default_factory=BackendConfig)
    client: ClientConfig = field(default_factory=ClientConfig)
    auth: AuthConfig = field(default_factory=AuthConfig)
    mcts: MCTSConfig = field(default_factory=MCTSConfig)
    actors: ActorsConfig = field(default_factory=ActorsConfig)
    replay: ReplayConfig = field(default_factory=ReplayConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    learner: LearnerConfig = field(default_factory=LearnerConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    ladder: LadderConfig = field(default_factory=LadderConfig)
    autopilot: AutopilotConfig = field(default_factory=AutopilotConfig)

    def __post_init__(self) -> None:
        game = game_of(self.game)
        fits = (*game.obs_shape, game.num_actions)
        have = (*self.net.obs_shape, self.net.num_actions)
        if fits != have:
            raise ConfigError(
                f"net: {'/'.join(NET_FROM_GAME)} = {'/'.join(map(str, have))} do not fit "
                f"{self.game} ({'/'.join(map(str, fits))}); leave them out to take the game's"
            )
        if self.client.model != self.server.model:
            raise ConfigError(
                f"client.model={self.client.model!r} differs from server.model={self.server.model!r}"
            )
        keep = self.backend.triton.keep_versions
        if self.backend.kind == "triton" and keep < self.server.max_versions:
            raise ConfigError(
                f"backend.triton.keep_versions={keep} is below server.max_versions="
                f"{self.server.max_versions}: Triton would drop versions games are pinned to"
            )
        if self.trainer.batch_size % self.learner.processes:
            raise ConfigError(
                f"learner.processes={self.learner.processes}: trainer.batch_size="
                f"{self.trainer.batch_size} must divide by it (each rank trains an equal shard "
                "of the global batch)"
            )
        if self.learner.processes > 1 and self.trainer.amp == "fp16":
            raise ConfigError(
                f"learner.processes={self.learner.processes} with trainer.amp='fp16': the "
                "gradient scaler is per process; use 'bf16' or 'none'"
            )
        trained = self.trainer.targets()
        for name in trained:
            if name not in self.net.heads:
                raise ConfigError(
                    f"trainer.{name}_weight={getattr(self.trainer, f'{name}_weight')} needs "
                    f"the {name} head: add {name!r} to net.heads"
                )
        gives = set(MATERIAL) if has_material(game) else set()
        if type(game).final_targets is not Game.final_targets:
            gives |= set(FINAL)
        lacking = [n for n in trained if n not in gives and n in (*FINAL, *MATERIAL)]
        if lacking:
            what = (
                "material (Game.material_balance: chess, shogi)"
                if lacking[0] == "material_ahead"
                else "final ownership or score (Game.final_targets; or material: "
                "Game.material_balance)"
            )
            raise ConfigError(
                f"trainer.{lacking[0]}_weight > 0: {self.game} gives no {what}; set it to 0"
            )
        if self.net.moves_left_discount > 0 and "moves_left" not in trained:
            raise ConfigError(
                f"net.moves_left_discount={self.net.moves_left_discount} discounts the served "
                "value by the moves_left head, which trainer.moves_left_weight=0 leaves "
                "untrained: set the weight above 0 or the discount to 0"
            )
        if self.autopilot.max_games and self.autopilot.max_games > self.actors.games:
            raise ConfigError(
                f"autopilot.max_games={self.autopilot.max_games}: must not exceed actors.games="
                f"{self.actors.games} (the autopilot moves games in flight below the configured "
                "count; raise actors.games to allow more)"
            )
        ap, target = self.autopilot, self.replay.reuse_target
        if ap.enabled and ap.reuse and not ap.reuse_min <= target <= ap.reuse_max:
            raise ConfigError(
                f"replay.reuse_target={target}: must be within autopilot.reuse_min="
                f"{ap.reuse_min} and autopilot.reuse_max={ap.reuse_max}, the bounds the "
                "autopilot moves it in from there (widen them, or set autopilot.reuse=false "
                "to keep it fixed)"
            )
        if self.client.max_rows > self.server.max_batch_size:
            raise ConfigError(
                f"client.max_rows={self.client.max_rows} exceeds server.max_batch_size="
                f"{self.server.max_batch_size} (the server would refuse such requests)"
            )


@dataclass(frozen=True)
class Endpoints:
    """Where each role connects, derived once from the two binds."""

    server: str
    """What actors' EvalClients connect to (``client.server``, else ``server.bind``)."""
    servers: tuple[str, ...]
    """What the learner publishes to (``learner.servers``, else ``server.bind``)."""
    learner: str
    """Where actors send trajectories (``actors.learner``, else ``learner.bind``)."""


def endpoints(cfg: Config) -> Endpoints:
    """The derived endpoints of ``cfg`` (explicitly set keys win)."""
    return Endpoints(
        server=cfg.client.server or cfg.server.bind,
        servers=cfg.learner.servers or (cfg.server.bind,),
        learner=cfg.actors.learner or cfg.learner.bind,
    )


def client_config(cfg: Config) -> ClientConfig:
    """The client section with its server endpoint resolved."""
    return dataclasses.replace(cfg.client, server=endpoints(cfg).server)


def actors_config(cfg: Config) -> ActorsConfig:
    """The actors section with the learner endpoint resolved, ``targets`` on when the
    trainer trains on any (``trainer.*_weight`` above 0), ``material_ahead_plies`` the
    trainer's while it trains a material target (``score``, ``material_ahead``: a game
    without material sends none all the same), and ``moves_left`` on while it trains that."""
    trained = cfg.trainer.targets()
    material = any(n in MATERIAL for n in trained)
    return dataclasses.replace(
        cfg.actors,
        learner=endpoints(cfg).learner,
        targets=cfg.actors.targets or bool(trained),
        material_ahead_plies=(
            cfg.trainer.material_ahead_plies if material else cfg.actors.material_ahead_plies
        ),
        moves_left=cfg.actors.moves_left or "moves_left" in trained,
    )


def learner_settings(cfg: Config) -> LearnerSettings:
    """What the learner process needs, with the servers it publishes to resolved."""
    return LearnerSettings(
        game=cfg.game,
        net=cfg.net,
        replay=cfg.replay,
        trainer=cfg.trainer,
        checkpoint=cfg.checkpoint,
        learner=dataclasses.replace(cfg.learner, servers=endpoints(cfg).servers),
        auth=cfg.auth,
        model=cfg.server.model,
        run_config=to_dict(cfg),
    )


def load_config(path: str | os.PathLike[str] | None, overrides: list[str] = ()) -> Config:  # type: ignore[assignment]
    """Read, override and check a config. Bad keys or values raise ``ConfigError``."""
    data = read_toml(path) if path else {}
    return config_from_data(apply_overrides(data, list(overrides)))


def config_from_data(data: dict[str, Any]) -> Config:
    """A checked ``Config`` from TOML-shaped ``data`` (overrides applied): the ``net`` keys
    the data leaves out (``NET_FROM_GAME``) come from its game."""
    game = data.get("game", Config.game)
    if isinstance(game, str) and isinstance(data.get("net", {}), dict):
        net = data.setdefault("net", {})
        g = game_of(game)
        for key, value in zip(NET_FROM_GAME, (*g.obs_shape, g.num_actions)):
            net.setdefault(key, value)
    return from_dict(Config, data, "")


def game_of(name: str) -> Game:
    """The game a config names; ConfigError naming the key otherwise."""
    try:
        return make_game(name)
    except ValueError as e:
        raise ConfigError(f"game: {e}") from None


def replace(cfg: D, **sections: Any) -> D:
    """A copy of ``cfg`` with some sections (or fields of sections, as dicts, tables inside
    them as dicts too: ``backend={"torch": {"compile": "none"}}``) replaced."""
    out: dict[str, Any] = {}
    for name, value in sections.items():
        current = getattr(cfg, name)
        nested = isinstance(value, dict) and dataclasses.is_dataclass(current)
        out[name] = replace(current, **value) if nested else value
    return dataclasses.replace(cfg, **out)  # type: ignore[type-var]


def save_config(cfg: Config, path: str | os.PathLike[str]) -> Path:
    """Write the resolved config as TOML beside a run's outputs."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(dump_toml(to_dict(cfg)))
    return p
