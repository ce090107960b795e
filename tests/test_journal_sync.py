"""The journal's group commit: fsync at most every ``learner.journal_sync_ms`` (0: every game
before its ack), counted; the learner's timer syncs a quiet journal within the window; a
failing fsync is counted and logged, and the learner goes on."""

from __future__ import annotations

import asyncio
import errno
import os
import time
from pathlib import Path

import numpy as np
import pytest

import learner.journal as journal_mod
from azserve.protocol import Trajectory
from learner.journal import Journal

REPO = Path(__file__).resolve().parents[1]


def game(i: int) -> tuple[Trajectory, np.ndarray, np.ndarray, np.ndarray]:
    t = 5
    obs = np.zeros((t, 2, 3, 3), np.uint8)
    policy = np.full((t, 9), 1 / 9, np.float32)
    outcome = np.ones(t, np.float32)
    msg = Trajectory(actor="a", game_id=i, game="tictactoe", version=0, length=t, result=1.0)
    return msg, obs, policy, outcome


@pytest.fixture
def fsyncs(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The real os.fsync, each call's descriptor recorded."""
    calls: list[int] = []
    real = os.fsync

    def counted(fd: int) -> None:
        calls.append(fd)
        real(fd)

    monkeypatch.setattr(journal_mod.os, "fsync", counted)
    return calls


def test_zero_fsyncs_every_game(tmp_path: Path, fsyncs: list[int]) -> None:
    j = Journal(tmp_path, sync_ms=0)
    j.rotate(0)
    for i in range(5):
        j.append(*game(i))
        assert j.unsynced == 0 and len(fsyncs) == i + 1
    j.close()
    assert [r[0].game_id for _, r in Journal(tmp_path).read()] == [0, 1, 2, 3, 4]


def test_group_commit_syncs_once_per_window(tmp_path: Path, fsyncs: list[int]) -> None:
    j = Journal(tmp_path, sync_ms=100)
    j.rotate(0)
    now = time.monotonic()
    for i in range(50):  # a burst inside one window: no fsync yet
        j.append(*game(i))
        assert j.sync_due(now) is False
    assert (j.unsynced, len(fsyncs)) == (50, 0)
    assert j.sync_due(now + 0.2) is True  # the window passed: one fsync for all 50
    assert (j.unsynced, len(fsyncs), j.syncs) == (0, 1, 1)
    assert j.sync_due(now + 10) is False  # nothing unsynced: nothing to do
    j.close()
    assert len(fsyncs) == 2  # close syncs too


def test_none_syncs_only_at_rotation_and_close(tmp_path: Path, fsyncs: list[int]) -> None:
    j = Journal(tmp_path, sync_ms=None)
    j.rotate(0)
    for i in range(10):
        j.append(*game(i))
        assert j.sync_due(time.monotonic() + 100) is False
    j.rotate(0)
    assert len(fsyncs) == 1
    j.close()


def _learner(tmp_path: Path, sync_ms: float):  # type: ignore[no-untyped-def]
    import learner.learn as learn_mod
    from azserve.config.schema import learner_settings, load_config

    cfg = load_config(
        REPO / "configs" / "tictactoe.toml",
        [
            f"server.bind=ipc://{tmp_path}/none",
            "learner.status_interval_s=0",
            f"learner.journal_sync_ms={sync_ms}",
        ],
    )
    return learn_mod.Learner(learner_settings(cfg), tmp_path)


def _close(lrn) -> None:  # type: ignore[no-untyped-def]
    lrn.journal.close()
    lrn.runlog.close()
    lrn._pool.shutdown()


async def test_the_learners_timer_syncs_a_quiet_journal(tmp_path: Path, fsyncs: list[int]) -> None:
    lrn = _learner(tmp_path, 50)
    try:
        before = len(fsyncs)
        for i in range(3):
            lrn._on_trajectory(*game(i))  # a short burst, then silence
        assert lrn.journal.unsynced > 0
        task = asyncio.create_task(lrn._journal_sync_loop())
        deadline = time.monotonic() + 10
        while lrn.journal.unsynced and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        task.cancel()
        assert lrn.journal.unsynced == 0 and len(fsyncs) > before
    finally:
        _close(lrn)


def test_a_failing_fsync_is_counted_and_the_learner_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    lrn = _learner(tmp_path, 0)

    def broken(fd: int) -> None:
        raise OSError(errno.EIO, "Input/output error")

    try:
        monkeypatch.setattr(journal_mod.os, "fsync", broken)
        with pytest.raises(OSError):  # sync_ms = 0: the game is not acked without its fsync
            lrn._on_trajectory(*game(0))
        monkeypatch.undo()
        lrn.journal.sync_s = 0.0001  # group commit: a failed fsync is a log line, not a stop
        lrn._on_trajectory(*game(1))
        monkeypatch.setattr(journal_mod.os, "fsync", broken)
        time.sleep(0.01)
        lrn._on_trajectory(*game(2))
        assert lrn.journal_sync_failures == 1 and lrn.games == 2
        assert any("journal fsync failed" in r.getMessage() for r in caplog.records)
    finally:
        monkeypatch.undo()
        _close(lrn)
