"""Prometheus on every role, the standard way: a real server, learner and actor process, each
exporting on its own loopback port and logging the URL; latencies as histograms in seconds
(``_bucket``, ``_sum``, ``_count``); error replies labelled by type; process and build info;
TensorBoard tags grouped."""

from __future__ import annotations

import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from azserve import SyncClient
from azserve.errors import RemoteError
from learner.runlog import tb_tag
from tests.conftest import free_tcp_port
from tests.test_cli import TTT, Proc, azserve_cmd, wait_serving

pytestmark = pytest.mark.slow


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        return r.read().decode()


def test_every_role_exports_prometheus_metrics(tmp_path: Path) -> None:
    server_port, learner_port, actor_base = free_tcp_port(), free_tcp_port(), free_tcp_port()
    sets = [
        f"server.bind=ipc://{tmp_path}/s", f"learner.bind=ipc://{tmp_path}/l",
        f"server.metrics_port={server_port}", f"learner.metrics_port={learner_port}",
        f"actors.metrics_port={actor_base}", "actors.games=8", "mcts.num_simulations=4",
        "server.status_interval_s=0", "learner.status_interval_s=1", "actors.status_interval_s=0",
    ]  # fmt: skip
    args = ["--config", str(TTT), *(x for s in sets for x in ("--set", s))]
    server = Proc(azserve_cmd("serve", *args), tmp_path, "server")
    learner = Proc(
        azserve_cmd("learn", *args, "--run-dir", str(tmp_path / "run")), tmp_path, "learn"
    )
    actor = Proc(azserve_cmd("actors", *args, "--id", "actor-0"), tmp_path, "actor")
    try:
        wait_serving(server, f"ipc://{tmp_path}/s")
        with (
            SyncClient(f"ipc://{tmp_path}/s", timeout_s=10) as c,
            pytest.raises(RemoteError, match="BadShape"),
        ):
            c.evaluate(np.zeros((1, 2, 6, 7), np.uint8))
        texts: dict[str, str] = {}
        deadline = time.monotonic() + 90
        while len(texts) < 3:
            for role, proc, port in (
                ("server", server, server_port),
                ("learner", learner, learner_port),
                ("actor", actor, actor_base),
            ):
                assert proc.popen.poll() is None, f"{role} exited:\n{proc.stderr}"
                if (
                    role not in texts
                    and f"metrics on http://127.0.0.1:{port}/metrics" in proc.stderr
                ):
                    text = scrape(port)
                    # The actor's counters appear once it has played; the learner's right away.
                    if role != "actor" or "azserve_actor_games_total{" in text:
                        texts[role] = text
            assert time.monotonic() < deadline, {k: len(v) for k, v in texts.items()}
            time.sleep(0.5)
    finally:
        for p in (actor, learner, server):
            p.kill()
    for role, text in texts.items():
        assert f'role="{role}"' in text and "# TYPE azserve_build_info gauge" in text, role
        assert "process_resident_memory_bytes" in text and "python_info" in text, role
    s = texts["server"]
    for name in (
        "azserve_latency_seconds",
        "azserve_queue_delay_seconds",
        "azserve_compute_seconds",
    ):
        assert f"# TYPE {name} histogram" in s
        assert f'{name}_bucket{{le="0.001",model="default"}}' in s
        assert f'{name}_sum{{model="default"}}' in s and f'{name}_count{{model="default"}}' in s
    assert 'azserve_error_replies_total{model="default",type="BadShape"} 1.0' in s
    lrn = texts["learner"]
    assert "# TYPE azserve_learner_step_seconds histogram" in lrn
    assert "# TYPE azserve_learner_steps_total counter" in lrn
    assert "# TYPE azserve_replay_policy_lag gauge" in lrn
    act = texts["actor"]
    assert "# TYPE azserve_actor_loop_lag_seconds histogram" in act
    assert 'azserve_actor_games_total{game="tictactoe"}' in act


def test_tensorboard_tags_are_grouped() -> None:
    assert tb_tag("loss") == "train/loss" and tb_tag("lr") == "train/lr"
    assert tb_tag("reuse") == "replay/reuse" and tb_tag("mean_lag") == "replay/mean_lag"
    assert tb_tag("games") == "selfplay/games"
    assert tb_tag("server_batch") == "server/server_batch"
    assert tb_tag("inference_busy") == "server/inference_busy"
