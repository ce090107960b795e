"""The data-parallel learner (learner/distributed.py): N ranks on a global batch make the
update one process makes on that batch; a real two-rank learner under ``azserve train``
trains and publishes, and a rank killed with ``kill -9`` takes the group down and the
supervisor restarts it from the newest checkpoint."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from safetensors.torch import load_file

from tests.conftest import free_tcp_port, quick_train_argv

REPO = Path(__file__).resolve().parents[1]

RANK_SCRIPT = textwrap.dedent(
    """
    import sys
    import numpy as np
    import torch
    from safetensors.torch import save_file

    from actors.games import make_game
    from azserve.model.spec import NetConfig
    from learner.config import TrainerConfig
    from learner.distributed import RankGroup
    from learner.replay import Batch
    from learner.trainer import Trainer

    rank, world, port, out, steps, rows, heads = sys.argv[1:8]
    rank, world, steps, rows = int(rank), int(world), int(steps), int(rows)
    heads = tuple(h for h in heads.split(",") if h)
    torch.set_num_threads(1)
    game = make_game("connect4")  # the mirror symmetry: augmentation is part of the check
    net = NetConfig(blocks=2, channels=16, heads=heads)
    weights = {f"{h}_weight": 0.5 for h in heads}
    cfg = TrainerConfig(batch_size=rows, lr=0.05, momentum=0.9, weight_decay=1e-4, **weights)
    group = None
    if world > 1:
        group = RankGroup(rank, world, f"tcp://127.0.0.1:{port}", torch.device("cpu"), 60.0)
    trainer = Trainer(net, cfg, symmetries=game.symmetries, group=group)
    data = np.random.default_rng(0)
    losses = []
    for _ in range(steps):
        obs = data.integers(0, 2, (rows, 2, 6, 7), dtype=np.uint8)
        policy = data.dirichlet(np.ones(7), rows).astype(np.float32)
        outcome = data.choice([-1.0, 0.0, 1.0], rows).astype(np.float32)
        targets = {
            "ownership": data.integers(-1, 2, (rows, 6, 7)).astype(np.int8),
            "score": data.normal(0, 5, rows).astype(np.float32),
            "reply": data.dirichlet(np.ones(7), rows).astype(np.float32),
        }
        masks = {h: data.random(rows) < 0.7 for h in targets}
        batch = Batch(obs, policy, outcome, np.zeros(rows, np.int64),
                      targets={h: targets[h] for h in heads},
                      target_mask={h: masks[h] for h in heads})  # fmt: skip
        if group is None:
            row = trainer.step(batch)
        else:
            whole = trainer.prepare(batch) if rank == 0 else None
            shapes = ((rows // world, 2, 6, 7), (rows // world, 7), (rows // world,))
            shard = group.scatter_batch(whole, shapes, trainer.targets)
            row = trainer.step(shard, lr=trainer.lr(), prepared=True)
        losses.append([row["loss"], *(row[f"{h}_loss"] for h in heads)])
    if rank == 0:
        state = {k: v.contiguous() for k, v in trainer.model.state_dict().items()}
        import json
        save_file(state, out, metadata={"losses": json.dumps(losses)})
    if group is not None:
        group.close()
    """
)


def run_ranks(
    tmp_path: Path, world: int, steps: int, rows: int, heads: tuple[str, ...] = ()
) -> tuple[dict, list[list[float]]]:
    """Train ``steps`` on the same batches with ``world`` ranks; rank 0's weights and each
    step's losses (the total, then each head's)."""
    script = tmp_path / "rank.py"
    script.write_text(RANK_SCRIPT)
    out = tmp_path / f"world{world}{'-'.join(('', *heads))}.safetensors"
    port = free_tcp_port()
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                str(script),
                str(r),
                str(world),
                str(port),
                str(out),
                str(steps),
                str(rows),
                ",".join(heads),
            ],  # fmt: skip
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for r in range(world)
    ]
    for p in procs:
        output, _ = p.communicate(timeout=240)
        assert p.returncode == 0, output[-3000:]
    from safetensors import safe_open

    with safe_open(str(out), framework="pt") as f:
        losses = json.loads((f.metadata() or {})["losses"])
    return load_file(str(out)), losses


@pytest.mark.timeout(300)
@pytest.mark.parametrize("heads", [(), ("ownership", "score", "reply")], ids=["plain", "targets"])
def test_two_ranks_make_the_update_of_one_on_the_whole_batch(
    tmp_path: Path, heads: tuple[str, ...]
) -> None:
    """With the targets, each rank's shard carries its rows of every target and mask, moved
    by the same symmetry as its planes: otherwise the heads' losses and weights would part."""
    steps, rows = 6, 64
    one, losses_one = run_ranks(tmp_path, 1, steps, rows, heads)
    two, losses_two = run_ranks(tmp_path, 2, steps, rows, heads)
    assert one.keys() == two.keys()
    worst = max(float((one[k].double() - two[k].double()).abs().max()) for k in one)
    # Float tolerance: the global batch statistics are summed across ranks in another order.
    assert worst < 1e-5, worst  # measured: 1.2e-7 after 6 steps
    for a, b in zip(losses_one, losses_two):
        assert len(a) == 1 + len(heads) and max(abs(x - y) for x, y in zip(a, b)) < 1e-4, (a, b)
    # Not trivially equal: the weights moved, the heads' among them.
    from azserve.model.network import build_net
    from azserve.model.spec import NetConfig

    init = build_net(NetConfig(blocks=2, channels=16, heads=heads), seed=NetConfig().seed)
    start = init.state_dict()
    moved = max(float((start[k].double() - one[k].double()).abs().max()) for k in one)
    assert moved > 1e-3
    for h in heads:
        mine = [k for k in one if k.startswith(h)]
        assert mine and max(float((start[k] - one[k]).abs().max()) for k in mine) > 1e-4, h


def train_argv(run_dir: Path, *extra: str) -> list[str]:
    sets = ["learner.processes=2", "replay.min_size=300", *extra]
    return quick_train_argv("tictactoe", run_dir, *sets)


def versions_published(run_dir: Path) -> list[int]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [int(r["version"]) for r in rows if "version" in r]


def learner_ranks(run_dir: Path) -> dict[int, int]:
    """rank -> pid of the learner's processes of this run (from /proc)."""
    out = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        args = [a.decode(errors="replace") for a in argv]
        if "learn" in args and str(run_dir) in args:
            rank = int(args[args.index("--rank") + 1]) if "--rank" in args else 0
            out[rank] = int(pid)
    return out


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_kill_9_of_rank_1_restarts_the_group_from_the_newest_checkpoint(tmp_path: Path) -> None:
    """Two ranks train and publish under ``azserve train``; ``kill -9`` of rank 1 takes the
    group down, the supervisor restarts the learner, both ranks join again from the newest
    checkpoint, and versions keep rising."""
    run_dir = tmp_path / "run"
    argv = [*train_argv(run_dir, "train.restart_children=true"), "--minutes", "1.5"]
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    try:
        deadline = time.monotonic() + 150
        ranks: dict[int, int] = {}
        while time.monotonic() < deadline:  # until rank 1 trains and a version is out
            ranks = learner_ranks(run_dir)
            started = 1 in ranks and (run_dir / "metrics.jsonl").exists()
            if started and max(versions_published(run_dir), default=0) >= 2:
                break
            time.sleep(1)
        else:
            log = run_dir / "logs" / "learner.log"
            raise AssertionError(
                f"the two-rank learner never got going: ranks {ranks}; "
                + (log.read_text()[-2000:] if log.exists() else "no learner log")
            )
        before = max(versions_published(run_dir))
        os.kill(ranks[1], signal.SIGKILL)
        learner_log = run_dir / "logs" / "learner.log"

        def rejoined_and_published() -> bool:
            log = learner_log.read_text()
            return (
                log.count("rank 1 of 2 joined") == 2
                and log.count("rank 0 of 2 joined") == 2
                and max(versions_published(run_dir)) > before
            )

        deadline = time.monotonic() + 150
        while proc.poll() is None and time.monotonic() < deadline:
            if rejoined_and_published():  # what the test is about: stop the run here
                proc.send_signal(signal.SIGINT)
                break
            time.sleep(1)
        output, _ = proc.communicate(timeout=150)
    finally:
        if proc.poll() is None:  # the whole run: the supervisor and its children
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode in (0, 130), output[-4000:]  # ended by its clock, or stopped above
    log = learner_log.read_text()
    assert log.count("rank 1 of 2 joined") == 2 and log.count("rank 0 of 2 joined") == 2, log
    assert "resumed from" in log, log[-3000:]
    versions = versions_published(run_dir)
    assert versions == sorted(versions) and max(versions) > before, (before, versions)
    assert "restart" in output, output[-3000:]
