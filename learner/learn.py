"""The learner process: receive trajectories -> replay -> train -> publish -> checkpoint.

The event loop owns the trajectory socket and the publisher; training steps run on a worker
thread so trajectories keep arriving while a step computes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import torch

from actors.games import make_game
from azserve.errors import ComponentFailed, ConfigError, WeightsError
from azserve.model.device import resolve_device
from azserve.model.weights import load_weights_file, state_dict_to_bytes
from azserve.prom import start_endpoint
from learner.checkpoint import (
    journal_from,
    list_checkpoints,
    load_checkpoint,
    newest_readable_checkpoint,
    save_checkpoint,
    trainer_state_from_bytes,
    trainer_state_to_bytes,
)
from learner.config import LearnerSettings
from learner.distributed import PING, STEP, STOP, RankGroup
from learner.journal import Journal
from learner.livefile import follow, read_number
from learner.policystore import Policy
from learner.prom import learner_registry
from learner.publisher import Publisher
from learner.receiver import DuplicateFilter, TrajectoryReceiver
from learner.replay import Batch, Replay
from learner.runlog import RunLog
from learner.status import Status
from learner.trainer import Trainer
from learner.versions import VersionCounter

log = logging.getLogger("learner")


class Learner:
    """One learner; ``await run(stop)`` until ``stop`` is set or ``max_steps`` is reached."""

    def __init__(
        self,
        cfg: LearnerSettings,
        run_dir: str | Path,
        resume: bool = False,
        group: RankGroup | None = None,
    ) -> None:
        self.cfg = cfg
        self.group = group
        """Rank 0 of a data-parallel group (learner/distributed.py), or None: one process."""
        self.run_dir = Path(run_dir)
        self.ckpt_dir = self.run_dir / cfg.checkpoint.dir
        if not cfg.learner.servers:
            raise ConfigError("learner.servers: no server to publish to")
        game = make_game(cfg.game)
        if game.obs_shape != cfg.net.obs_shape or game.num_actions != cfg.net.num_actions:
            raise ConfigError(
                f"net: in_channels/height/width/num_actions {cfg.net.obs_shape}/{cfg.net.num_actions} "
                f"do not fit {cfg.game} ({game.obs_shape}/{game.num_actions})"
            )
        if cfg.learner.threads > 0:
            torch.set_num_threads(cfg.learner.threads)
        self.trainer = Trainer(
            cfg.net, cfg.trainer, game.symmetries, group, score_scale=game.score_scale
        )
        self.versions = VersionCounter(cfg.trainer.publish_every)
        self._lost_checkpoints = 0
        self._journal_from = 0
        """The first journal segment after the checkpoint resumed (0: none resumed)."""
        self._unsaved = False
        """A version was taken but its checkpoint could not be written (disk full): it is
        retried every step, and the version is published only once it is on disk."""
        self.checkpoint_failures = 0
        self.games = 0
        self.positions = 0
        self.moves = 0
        """Moves played in the stored games; ``positions`` of them were recorded."""
        if resume:
            self._resume()
        if group is not None:  # every rank starts from this state: the resumed checkpoint's
            group.broadcast_bytes(trainer_state_to_bytes(self.trainer.state_dict()))
            shard = cfg.trainer.batch_size // group.world
            self._shard_shapes = shard_shapes(cfg, shard)
            self._controlled = time.monotonic()
        self.replay = Replay(
            cfg.replay, cfg.net.obs_shape, cfg.net.num_actions, targets=cfg.trainer.targets()
        )
        self.replay.set_current_version(self.versions.current)
        # A restarted learner takes the run's current reuse target and threads, not the
        # configured ones (azserve train's autopilot writes them: learner.livefile).
        if cfg.replay.reuse_file and (target := read_number(cfg.replay.reuse_file)) is not None:
            self.replay.set_reuse_target(target)
            log.info("reuse target %g (%s)", target, cfg.replay.reuse_file)
        self.threads = cfg.learner.threads
        """torch threads of the step thread (0: torch's default)."""
        self._threads_wanted = self.threads
        if cfg.learner.threads_file and (n := read_number(cfg.learner.threads_file)):
            self._threads_wanted = int(n)
        # Every accepted game is journaled before it is acked (learner/journal.py).
        self.journal = Journal(self.run_dir / "journal", self.cfg.learner.journal_sync_ms)
        self.journal_sync_failures = 0
        dedup = DuplicateFilter(cfg.learner.dedup_capacity)
        self.journaled_on_resume = self._replay_journal(dedup) if resume else 0
        self._rotate_journal()
        self.receiver = TrajectoryReceiver(
            cfg.learner,
            cfg.net.obs_shape,
            cfg.net.num_actions,
            self._on_trajectory,
            game=game.name,  # the name actors write in trajectories
            dedup=dedup,
            auth=cfg.auth,
        )
        # Games may be pinned to any version still fresh enough to train on, and a little
        # older while they finish: keep those weights to restore them to a restarted server.
        self.publisher = Publisher(
            list(cfg.learner.servers),
            cfg.model,
            cfg.auth,
            cfg.learner.publish_timeout_s,
            keep_versions=cfg.replay.max_policy_lag + 2,
            fetch=self._weights_of_version,
            wait_s=cfg.learner.publish_wait_s,
        )
        self.runlog = RunLog(self.run_dir)
        self._data = asyncio.Event()
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="learner-step")
        self.wait_s = 0.0
        self.train_s = 0.0
        self.last: dict[str, float] = {}
        self.status = Status(self)
        self.prom, self._step_seconds = learner_registry(self)

    def _resume(self) -> None:
        ckpt, bad = newest_readable_checkpoint(self.ckpt_dir)
        # Versions published after the newest good checkpoint may exist: skip past what the
        # servers hold before publishing, so no number is used twice (see _skip_past_servers).
        self._lost_checkpoints = len(bad)
        if ckpt is None:
            log.info("no readable checkpoint in %s: starting fresh", self.ckpt_dir)
            return
        path = ckpt.meta.path
        self.trainer.load_state_dict(ckpt.trainer_state())
        self.versions.current, self.versions.named_step = ckpt.meta.version, ckpt.meta.step
        self._journal_from = int(ckpt.meta.extra.get("journal_from", 0))
        # Totals continue across restarts (train.games budgets and metrics rows count them).
        self.games = int(ckpt.meta.extra.get("games", 0))
        self.positions = int(ckpt.meta.extra.get("positions", 0))
        self.moves = int(ckpt.meta.extra.get("moves", self.positions))
        log.info(
            "resumed from %s: step %d, version %d",
            path,
            self.trainer.step_count,
            self.versions.current,
        )

    def _weights_of_version(self, version: int) -> bytes | None:
        """The published weights of ``version`` from its checkpoint, if one is kept."""
        for _, path in reversed(list_checkpoints(self.ckpt_dir)):
            try:
                if load_checkpoint(path).meta.version == version:
                    return state_dict_to_bytes(load_weights_file(path))
            except (WeightsError, OSError):
                continue  # unreadable or pruned meanwhile: look further
        return None

    def _replay_journal(self, dedup: DuplicateFilter) -> int:
        """After a resume: the games journaled since the checkpoint (segments started at its
        version or later) count again, the fresh ones go back into replay (the replay drops
        stale ones), and every journaled game is remembered, so a resend of one is a
        duplicate, not a second copy. Returns the games added to the count."""
        since = self._journal_from
        added = 0
        # Older segments (kept only with learner.journal_keep_all) hold nothing a resend or
        # the replay could still want.
        journaled = self.journal.read(self._journal_needed_from())
        for segment, (msg, obs, policy, outcome, targets) in journaled:
            dedup.add((msg.actor, msg.game_id))
            self.replay.insert(obs, policy, outcome, msg.version, targets)
            if segment >= since:
                added += 1
                self.games += 1
                self.positions += len(outcome)
                self.moves += max(msg.moves, len(outcome))
        if added:
            log.info("journal: %d games received after the checkpoint were restored", added)
        return added

    def _rotate_journal(self) -> int:
        """Start a new journal segment; returns its number. Segments go once no checkpoint of
        the last ``checkpoint.keep_last`` (those a resume falls back through) needs them; the
        ``keep_every`` archive does not pin the journal, so it stays bounded (unless
        ``learner.journal_keep_all``)."""
        keep_from = 0 if self.cfg.learner.journal_keep_all else self._journal_needed_from()
        return self.journal.rotate(keep_from)

    def _journal_needed_from(self) -> int:
        """The first journal segment a resume may need: that of the oldest of the last
        ``checkpoint.keep_last`` checkpoints."""
        recent = list_checkpoints(self.ckpt_dir)[-self.cfg.checkpoint.keep_last :]
        return journal_from(recent[0][1]) if recent else 0

    def _on_trajectory(
        self,
        msg: Any,
        obs: np.ndarray,
        policy: Policy,
        outcome: np.ndarray,
        *targets: Policy,
    ) -> None:
        self.journal.append(msg, obs, policy, outcome, *targets)  # OSError: not acked
        self._sync_journal()
        named = dict(zip(msg.targets or [], targets))
        self.replay.insert(obs, policy, outcome, msg.version, named)
        self.games += 1
        self.positions += len(outcome)
        self.moves += max(msg.moves, len(outcome))
        self._data.set()

    async def run(self, stop: asyncio.Event) -> None:
        # actors -> receiver -> replay ; trainer -> publisher -> servers
        await self.receiver.start()
        await self.publisher.start()
        cfg = self.cfg.learner
        metrics = await start_endpoint(self.prom, cfg.metrics_host, cfg.metrics_port, "learner")
        try:
            if self._lost_checkpoints:
                await self._skip_past_servers()
            if not self._unsaved:  # servers start on the current weights
                await _unless_stopped(self._publish(), stop)
            status = asyncio.create_task(self.status.loop(), name="learner-status")
            syncs = asyncio.create_task(self._journal_sync_loop(), name="learner-journal-sync")
            files = asyncio.create_task(self._follow_files(), name="learner-live-files")
            try:
                await self._train_loop(stop)
            finally:
                status.cancel()
                syncs.cancel()
                files.cancel()
        finally:
            if metrics is not None:
                metrics.close()
            await self.receiver.aclose()
            await self.publisher.aclose()
            if self.group is not None:
                await asyncio.get_running_loop().run_in_executor(self._pool, self._stop_ranks)
            self._pool.shutdown(wait=True)
            self.runlog.close()
            self.journal.close()

    async def _train_loop(self, stop: asyncio.Event) -> None:
        loop = asyncio.get_running_loop()
        bs = self.cfg.trainer.batch_size
        max_steps = self.cfg.learner.max_steps
        while not stop.is_set():
            for part in (self.receiver.lifecycle, self.publisher.lifecycle):
                if part.error is not None:  # a dead owner task: stop, and exit non-zero
                    raise ComponentFailed(f"learner: {part.name} failed: {part.error!r}")
            if max_steps and self.trainer.step_count >= max_steps:
                log.info("max_steps %d reached", max_steps)
                return
            if not self.replay.can_sample(bs):
                # Actor-bound: wait for fresh data rather than overtrain the window.
                t0 = time.monotonic()
                self._data.clear()
                waiters = [
                    asyncio.ensure_future(stop.wait()),
                    asyncio.ensure_future(self._data.wait()),
                ]
                await asyncio.wait(waiters, timeout=1.0, return_when=asyncio.FIRST_COMPLETED)
                for w in waiters:
                    w.cancel()
                self.wait_s += time.monotonic() - t0
                if self.group is not None and self._ping_due():
                    await loop.run_in_executor(self._pool, self.group.send_control, PING)
                continue
            batch = self.replay.sample(bs, self.trainer.rng)
            t0 = time.monotonic()
            self.last = await loop.run_in_executor(self._pool, self._step, batch)
            self.train_s += time.monotonic() - t0
            self._step_seconds.observe(time.monotonic() - t0)
            step = self.trainer.step_count
            if step % self.cfg.learner.log_every == 0:
                self.runlog.write(self.row(), step)
            if self.versions.due(step):
                self.versions.bump(step)
                self.replay.set_current_version(self.versions.current)
                self._unsaved = True
            if self._unsaved:
                # Checkpoint before publishing: a learner killed in between must not resume
                # from an older checkpoint and publish different weights under this number.
                # The number was never published, so a retry names this step's weights.
                self.versions.named_step = step
                counts = self._cut_journal()
                if counts is not None and await loop.run_in_executor(
                    self._pool, self._try_checkpoint, counts
                ):
                    self._unsaved = False
                    await _unless_stopped(self._publish(), stop)

    def _step(self, batch: Batch) -> dict[str, float]:
        """One update (on the step thread): alone, or as rank 0 of the group, which augments
        the global batch, sends every rank its shard and the learning rate, and trains its own
        shard while the others train theirs."""
        if self._threads_wanted != self.threads:
            # On the step thread: under OpenMP a thread keeps the count it started with.
            log.info("torch threads %d -> %d", self.threads, self._threads_wanted)
            torch.set_num_threads(self._threads_wanted)
            self.threads = self._threads_wanted
        if self.group is None:
            return self.trainer.step(batch)
        whole = self.trainer.prepare(batch)
        lr = self.trainer.lr()
        self.group.send_control(STEP, lr)
        self._controlled = time.monotonic()
        shard = self.group.scatter_batch(whole, self._shard_shapes, self.trainer.targets)
        return self.trainer.step(shard, lr=lr, prepared=True)

    def _ping_due(self) -> bool:
        """Rank 0 waits for data: the other ranks hear from it well within their timeout."""
        assert self.group is not None
        if time.monotonic() - self._controlled < self.cfg.learner.rank_timeout_s / 4:
            return False
        self._controlled = time.monotonic()
        return True

    def _stop_ranks(self) -> None:
        """The other ranks exit; then this one leaves the group."""
        if self.group is None:
            return
        try:
            self.group.send_control(STOP)
        except RuntimeError as exc:  # a rank is gone already: the group is broken anyway
            log.warning("ranks not told to stop: %s", exc)
            self.group.close(broken=True)
            return
        self.group.close()

    async def _skip_past_servers(self) -> None:
        """After resuming past unreadable checkpoints, servers may hold versions newer than
        the one resumed: take a number above all of them, so none is ever used twice."""
        latest = max(
            (st["versions"]["latest"] for st in (await self.publisher.statuses()).values() if st),
            default=-1,
        )
        if latest >= self.versions.current:
            log.warning(
                "servers hold v%d, newer than the resumed v%d (its checkpoint was lost): "
                "continuing as v%d",
                latest,
                self.versions.current,
                latest + 1,
            )
            self.versions.current = latest
            self.versions.bump(self.trainer.step_count)
            self.replay.set_current_version(self.versions.current)
            counts = self._cut_journal()
            self._unsaved = counts is None or not self._try_checkpoint(counts)

    async def _publish(self) -> None:
        blob = state_dict_to_bytes(self.trainer.model.state_dict())
        t0 = time.monotonic()
        result = await self.publisher.publish(self.versions.current, blob)
        ms = (time.monotonic() - t0) * 1e3
        log.info(
            "published v%d to %d/%d servers in %.0f ms%s",
            self.versions.current,
            len(result.acked_ms),
            len(self.publisher.servers),
            ms,
            "".join(f"; {s}: {why}" for s, why in result.failed.items()),
        )

    def _cut_journal(self) -> tuple[int, int, int, int] | None:
        """On the event loop, at once: the (games, positions, moves) a checkpoint about to be
        taken counts, and a new journal segment (its number is the last item) for what follows.
        None when the segment cannot be started (a full disk): no checkpoint this time."""
        counts = (self.games, self.positions, self.moves)
        try:
            return (*counts, self._rotate_journal())
        except OSError as exc:
            self._checkpoint_failed(exc)
            return None

    def _try_checkpoint(self, counts: tuple[int, int, int, int]) -> bool:
        """Checkpoint; a write error (ENOSPC, EIO, a read-only disk) is one log line and a
        False, and training goes on (the caller retries at the next step)."""
        try:
            self._checkpoint(counts)
        except OSError as exc:
            self._checkpoint_failed(exc)
            return False
        return True

    def _checkpoint_failed(self, exc: OSError) -> None:
        self.checkpoint_failures += 1
        if self.checkpoint_failures & (self.checkpoint_failures - 1) == 0:
            log.error(
                "checkpoint of v%d failed (%s, %d failures so far): training goes on, "
                "v%d is published once its checkpoint is written",
                self.versions.current,
                exc,
                self.checkpoint_failures,
                self.versions.current,
            )

    def _checkpoint(self, counts: tuple[int, int, int, int]) -> Path:
        """Save a checkpoint counting ``counts`` = (games, positions, moves, first journal
        segment after it): exactly the games in the segments before that one (``_cut_journal``)."""
        games, positions, moves, segment = counts
        state = {
            **self.trainer.state_dict(),
            "games": games,
            "positions": positions,
            "moves": moves,
            "journal_from": segment,
        }
        return save_checkpoint(
            self.ckpt_dir,
            self.trainer.step_count,
            self.versions.current,
            state,
            self.cfg.run_config,
            keep_last=self.cfg.checkpoint.keep_last,
            keep_every=self.cfg.checkpoint.keep_every,
        )

    def checkpoint_now(self) -> Path:
        """A checkpoint of the current state (on a clean stop). Weights trained past the last
        published version get the next version number: a resumed run serves them under it."""
        self.versions.settle(self.trainer.step_count)
        counts = (
            self.games,
            self.positions,
            self.moves,
            self._rotate_journal(),
        )  # OSError: to the caller
        path = self._checkpoint(counts)
        self.journal.close()
        return path

    def row(self) -> dict[str, Any]:
        """The learner's status row now (``learner.status``)."""
        return self.status.row()

    def _sync_journal(self) -> None:
        """The journal's group commit when due; a failed fsync is counted and logged (the
        records stay flushed to the kernel, and the next call retries)."""
        try:
            self.journal.sync_due(time.monotonic())
        except OSError as exc:
            self.journal_sync_failures += 1
            if self.journal_sync_failures & (self.journal_sync_failures - 1) == 0:
                log.error(
                    "journal fsync failed (%s, %d failures so far): a host crash now may lose "
                    "more than learner.journal_sync_ms of acked games",
                    exc,
                    self.journal_sync_failures,
                )

    async def _journal_sync_loop(self) -> None:
        """Group commit on a quiet link: games appended and not followed by more are synced
        within the window too."""
        window = self.cfg.learner.journal_sync_ms / 1e3
        if not window:
            return  # every append fsyncs itself
        while True:
            await asyncio.sleep(window)
            self._sync_journal()

    async def _follow_files(self) -> None:
        """Follow ``replay.reuse_file`` and ``learner.threads_file`` (``azserve train``'s
        autopilot writes them)."""
        follows = [
            follow(path, apply)
            for path, apply in (
                (self.cfg.replay.reuse_file, self._set_reuse),
                (self.cfg.learner.threads_file, self._set_threads),
            )
            if path
        ]
        await asyncio.gather(*follows)

    def _set_threads(self, n: float) -> None:
        """Taken by the step thread before its next step: torch's thread count is per thread."""
        self._threads_wanted = int(n)

    def _set_reuse(self, target: float) -> None:
        before = self.replay.reuse_target
        if target == before:
            return
        self.replay.set_reuse_target(target)
        log.info("reuse target %g -> %g (%s)", before, target, self.cfg.replay.reuse_file)
        self._data.set()  # a training loop waiting for credit looks again


async def _unless_stopped(work: Any, stop: asyncio.Event) -> None:
    """Await ``work`` unless ``stop`` is set first (then cancel it): a publish waiting on an
    unreachable server must not hold up a stop. Servers left behind are caught up next run."""
    task = asyncio.ensure_future(work)
    stopper = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait([task, stopper], return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopper.cancel()
        if not task.done():
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def shard_shapes(
    cfg: LearnerSettings, rows: int
) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """The (obs, policy, outcome) shapes of a rank's shard of ``rows`` positions."""
    return (rows, *cfg.net.obs_shape), (rows, cfg.net.num_actions), (rows,)


def run_rank(cfg: LearnerSettings, rank: int, rendezvous: str) -> int:
    """A data-parallel rank > 0 (``azserve learn --rank R``): join the group, take rank 0's
    training state, then train a shard of every global batch until rank 0 says stop.
    Returns 0 on STOP; a broken group raises (the process exits non-zero)."""
    if cfg.learner.threads > 0:
        torch.set_num_threads(cfg.learner.threads)
    device = resolve_device(cfg.trainer.device, "trainer.device")
    group = RankGroup(rank, cfg.learner.processes, rendezvous, device, cfg.learner.rank_timeout_s)
    stopped = False
    try:
        scale = make_game(cfg.game).score_scale  # the same loss as rank 0's
        trainer = Trainer(cfg.net, cfg.trainer, symmetries=None, group=group, score_scale=scale)
        trainer.load_state_dict(trainer_state_from_bytes(group.broadcast_bytes(None)))
        shapes = shard_shapes(cfg, cfg.trainer.batch_size // group.world)
        while True:
            word, lr = group.recv_control()
            if word == STOP:
                log.info("rank %d: stopped by rank 0 at step %d", rank, trainer.step_count)
                stopped = True
                return 0
            if word == STEP:
                shard = group.scatter_batch(None, shapes, trainer.targets)
                trainer.step(shard, lr=lr, prepared=True)
    finally:
        group.close(broken=not stopped)
