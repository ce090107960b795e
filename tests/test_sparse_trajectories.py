"""Sparse search policies (azserve/trajarrays.py, learner/policystore.py): a wide game's policy
targets as their nonzero entries on the wire, in the journal and in the replay, dense again in
the learner's batches; dense trajectories and files unchanged."""

from __future__ import annotations

import json
import struct
import subprocess
from pathlib import Path

import msgpack
import numpy as np
import pytest

from actors.games.compiled import core
from actors.main import SUMMARY_TAG
from azserve import protocol as P
from azserve.errors import ProtocolError
from azserve.sparse import SparseRows
from azserve.trajarrays import flatten, split
from azserve.trajfile import FILE_MAGIC, open_for_append, read_trajectory_file, write_record
from learner.checkpoint import latest_checkpoint, load_checkpoint
from learner.config import ReplayConfig
from learner.journal import Journal
from learner.policystore import DensePolicies, SparsePolicies, make_store
from learner.replay import Replay
from tests.conftest import free_tcp_port, quick_train_argv

A = 4672  # chess
OBS = (3, 8, 8)


def _policies(t: int, seed: int = 0, nonzero: int = 30) -> np.ndarray:
    """``t`` visit distributions over ``A`` actions, ``nonzero`` moves each (one row empty)."""
    rng = np.random.default_rng(seed)
    out = np.zeros((t, A), np.float32)
    for r in range(t - 1):
        cols = rng.choice(A, size=nonzero, replace=False)
        w = rng.random(nonzero).astype(np.float32)
        out[r, cols] = w / w.sum()
    return out


def _game(t: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    obs = rng.integers(0, 2, (t, *OBS), dtype=np.uint8)
    outcome = rng.choice([-1.0, 0.0, 1.0], t).astype(np.float32)
    return obs, _policies(t, seed), outcome


def test_sparse_rows_round_trip_and_checks() -> None:
    dense = _policies(5)
    rows = SparseRows.from_dense(dense)
    assert rows.counts().tolist() == [30, 30, 30, 30, 0]
    assert rows.index.dtype == np.int16 and rows.weight.dtype == np.float16
    np.testing.assert_allclose(rows.dense(A), dense, rtol=1e-3, atol=1e-4)
    assert rows.problem(5, A) is None
    assert "out of range" in (rows.problem(5, 100) or "")
    bad = SparseRows(rows.offsets, rows.index, -rows.weight)
    assert bad.problem(5, A) == "weight has negative or non-finite entries"
    short = SparseRows(rows.offsets, rows.index, rows.weight[:-1])
    assert "weight must be float16[120]" in (short.problem(5, A) or "")
    # 30 moves: 4 B of index and weight each (+4 B of offsets) instead of 18,688 B.
    assert rows.nbytes == 4 * 30 * (2 + 2) + 6 * 4


def test_wire_layout_dense_unchanged_sparse_round_trips() -> None:
    obs, policy, outcome = _game(6)
    reply = np.roll(policy, -1, axis=0)
    msg = P.Trajectory(actor="a", game_id=1, game="chess", version=0, length=6, result=1.0)
    dense_frames = P.encode(msg, flatten(obs, policy, outcome, []))
    head = msgpack.unpackb(dense_frames[0])
    assert "sparse" not in head and len(dense_frames) == 4  # the bytes it had before
    msg.sparse, msg.targets = True, ["reply"]
    frames = P.encode(
        msg, flatten(obs, SparseRows.from_dense(policy), outcome, [SparseRows.from_dense(reply)])
    )
    assert len(frames) == 1 + 8
    got, arrays = P.decode(frames)
    assert isinstance(got, P.Trajectory) and got.sparse is True
    g_obs, g_policy, g_outcome, (g_reply,) = split(got, arrays)
    assert isinstance(g_policy, SparseRows) and isinstance(g_reply, SparseRows)
    np.testing.assert_array_equal(g_obs, obs)
    np.testing.assert_array_equal(g_outcome, outcome)
    np.testing.assert_allclose(g_policy.dense(A), policy, rtol=1e-3, atol=1e-4)
    np.testing.assert_allclose(g_reply.dense(A), reply, rtol=1e-3, atol=1e-4)
    with pytest.raises(ProtocolError, match=r"expected 8 arrays \(obs, offsets, index, weight"):
        split(got, arrays[:-1])
    sparse_bytes = sum(len(f) for f in frames[1:4]) + sum(len(f) for f in frames[5:])
    assert sparse_bytes < 0.05 * (policy.nbytes + reply.nbytes)


def _old_record(obs: np.ndarray, policy: np.ndarray, outcome: np.ndarray) -> bytes:
    """One trajectory record as azserve wrote it before sparse policies, built by hand: a
    msgpack header without the ``sparse`` key, then the three arrays."""
    arrays = [obs, policy, outcome]
    header = {
        "op": "traj",
        "id": None,
        "arrays": [{"dtype": a.dtype.name, "shape": list(a.shape)} for a in arrays],
        "proto": 1,
        "actor": "old",
        "game_id": 3,
        "game": "chess",
        "version": 0,
        "length": len(outcome),
        "result": 0.0,
        "resigned": False,
        "moves": 0,
    }
    frames = [msgpack.packb(header), *[a.tobytes() for a in arrays]]
    out = [struct.pack("<I", len(frames))]
    for f in frames:
        out += [struct.pack("<Q", len(f)), f]
    return b"".join(out)


def test_old_dense_journal_loads_beside_sparse_records(tmp_path: Path) -> None:
    obs, policy, outcome = _game(4, seed=1)
    journal_dir = tmp_path / "journal"
    journal_dir.mkdir()
    (journal_dir / "seg-000000000.azt").write_bytes(FILE_MAGIC + _old_record(obs, policy, outcome))
    journal = Journal(journal_dir)
    journal.rotate(keep_from=0)
    msg = P.Trajectory(
        actor="new", game_id=4, game="chess", version=0, length=4, result=1.0, sparse=True
    )
    journal.append(msg, obs, SparseRows.from_dense(policy), outcome)
    journal.close()
    records = [r for _, r in journal.read()]
    assert [m.actor for m, *_ in records] == ["old", "new"]
    (_, o_obs, o_policy, _, _), (n_msg, _, n_policy, _, _) = records
    assert isinstance(o_policy, np.ndarray) and o_policy.dtype == np.float32
    np.testing.assert_array_equal(o_policy, policy)
    np.testing.assert_array_equal(o_obs, obs)
    assert n_msg.sparse is True and isinstance(n_policy, SparseRows)
    np.testing.assert_allclose(n_policy.dense(A), policy, rtol=1e-3, atol=1e-4)
    # The sparse record is a few percent of the dense one on disk.
    sizes = [p.stat().st_size for _, p in journal.segments()]
    assert sizes[1] < sizes[0] * 0.2


def test_trajfile_dense_write_is_the_old_bytes(tmp_path: Path) -> None:
    obs, policy, outcome = _game(3, seed=2)
    path = tmp_path / "t.azt"
    with open_for_append(path) as f:
        msg = P.Trajectory(actor="old", game_id=3, game="chess", version=0, length=3, result=0.0)
        write_record(f, msg, obs, policy, outcome)
    assert path.read_bytes() == FILE_MAGIC + _old_record(obs, policy, outcome)
    ((m, *_),) = list(read_trajectory_file(path))
    assert m.sparse is not True


@pytest.mark.parametrize("width", [0, 256, 16])
def test_replay_sparse_store_samples_what_dense_does(width: int) -> None:
    cfg = ReplayConfig(capacity=64, min_size=1, policy_width=width)
    dense_cfg = ReplayConfig(capacity=64, min_size=1, policy_width=0)
    sparse_r = Replay(cfg, OBS, A, targets=("reply",))
    dense_r = Replay(dense_cfg, OBS, A, targets=("reply",))
    for seed in range(3):
        obs, policy, outcome = _game(30, seed)  # 90 positions: the ring wraps
        reply = np.roll(policy, -1, axis=0)
        reply[-1] = 0
        sparse_r.insert(
            obs, SparseRows.from_dense(policy), outcome, 0, {"reply": SparseRows.from_dense(reply)}
        )
        dense_r.insert(obs, policy, outcome, 0, {"reply": reply})
    a = sparse_r.sample(40, np.random.default_rng(9))
    b = dense_r.sample(40, np.random.default_rng(9))
    np.testing.assert_array_equal(a.obs, b.obs)
    np.testing.assert_array_equal(a.target_mask["reply"], b.target_mask["reply"])
    assert a.policy.shape == (40, A) and a.policy.dtype == np.float32
    if width == 16:  # rows of 30 moves keep their 16 largest, rescaled to the same sum
        assert ((a.policy > 0).sum(axis=1) <= 16).all()
        np.testing.assert_allclose(a.policy.sum(axis=1), b.policy.sum(axis=1), atol=2e-3)
        assert isinstance(sparse_r._policy, SparsePolicies) and sparse_r._policy.cut > 0
    else:
        np.testing.assert_allclose(a.policy, b.policy, rtol=1e-3, atol=1e-4)
        np.testing.assert_allclose(a.targets["reply"], b.targets["reply"], rtol=1e-3, atol=1e-4)
    if width:
        assert sparse_r.policy_bytes * 10 < dense_r.policy_bytes


def test_store_choice_by_width() -> None:
    assert isinstance(make_store(4, A, -1), SparsePolicies)
    assert isinstance(make_store(4, 82, -1), DensePolicies)  # Go 9x9 stays dense
    assert isinstance(make_store(4, A, 0), DensePolicies)
    assert make_store(4, 82, 8).width == 8  # type: ignore[union-attr]


@pytest.mark.slow
@pytest.mark.skipif(core is None, reason="chess needs the compiled core")
def test_chess_selfplay_and_learner_run_sparse(tmp_path: Path) -> None:
    """``azserve train --config chess`` for a few steps, real processes: the actors ask for
    sparse replies and send sparse policies, the learner journals them sparse, and the replay
    trains on them."""
    run_dir = tmp_path / "run"
    sets = (
        "game=chess(max_plies=40,history=1)",
        "net.blocks=1",
        "net.channels=16",
        "net.policy_channels=4",
        "actors.games=16",
        "actors.targets=true",
        "mcts.num_simulations=4",
        "mcts.num_sampled_actions=4",
        "replay.min_size=64",
        "trainer.batch_size=32",
        "trainer.publish_every=1",
        "backend.torch.compile=none",
        "learner.journal_keep_all=true",
        f"server.bind=tcp://127.0.0.1:{free_tcp_port()}",
        f"learner.bind=tcp://127.0.0.1:{free_tcp_port()}",
    )
    argv = [*quick_train_argv("chess", run_dir, *sets), "--steps", "3"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    ckpt = latest_checkpoint(run_dir / "checkpoints")
    assert ckpt is not None and load_checkpoint(ckpt).meta.step >= 3
    records = [r for _, r in Journal(run_dir / "journal").read()]
    assert records
    for msg, _obs, policy, outcome, targets in records:
        assert msg.sparse is True and isinstance(policy, SparseRows)
        assert policy.problem(len(outcome), A) is None
        counts = policy.counts()
        assert counts.min() >= 1 and counts.max() <= 218  # a chess position's legal moves
        np.testing.assert_allclose(policy.dense(A).sum(axis=1), 1.0, atol=2e-2)
        assert isinstance(targets["reply"], SparseRows)
    log = (run_dir / "logs" / "actor-0.log").read_text()
    summary = json.loads(log.split(SUMMARY_TAG, 1)[1].splitlines()[0])
    evals = summary["evals"]
    assert evals["messages"] > 0 and evals["sparse"] == evals["messages"]
