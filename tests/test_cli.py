"""The real ``azserve`` command as a subprocess: ``serve`` answers with the configured weights
and stops on SIGTERM, bad configs exit 2 naming the key, ``keys`` writes certificates."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
import zmq.auth

from azserve import SyncClient
from azserve.config.schema import load_config, to_dict
from azserve.errors import RequestTimeout
from azserve.model.network import build_net
from learner.checkpoint import save_checkpoint
from learner.trainer import Trainer

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
TTT = REPO / "configs" / "tictactoe.toml"


def azserve_cmd(*args: str) -> list[str]:
    """The installed ``azserve`` script next to this interpreter (else ``python -m azserve.cli.main``)."""
    script = Path(sys.executable).with_name("azserve")
    head = [str(script)] if script.exists() else [sys.executable, "-m", "azserve.cli.main"]
    return [*head, *args]


class Proc:
    """A child process with its output in files (no pipe can fill up and block it)."""

    def __init__(self, argv: list[str], out_dir: Path, name: str) -> None:
        self.out_path = out_dir / f"{name}.out"
        self.err_path = out_dir / f"{name}.err"
        with self.out_path.open("wb") as out, self.err_path.open("wb") as err:
            self.popen = subprocess.Popen(
                argv,
                stdout=out,
                stderr=err,
                stdin=subprocess.DEVNULL,
                cwd=REPO,
                start_new_session=True,
            )

    @property
    def stdout(self) -> str:
        return self.out_path.read_text(errors="replace")

    @property
    def stderr(self) -> str:
        return self.err_path.read_text(errors="replace")

    def wait(self, timeout: float) -> int:
        return self.popen.wait(timeout)

    def kill(self) -> None:
        if self.popen.poll() is None:
            os.killpg(self.popen.pid, signal.SIGKILL)
            self.popen.wait()


@pytest.fixture
def spawn(tmp_path: Path) -> Iterator[Callable[..., Proc]]:
    """``spawn(name, *azserve_args)`` -> Proc; every process is killed at teardown."""
    procs: list[Proc] = []

    def start(name: str, *args: str) -> Proc:
        p = Proc(azserve_cmd(*args), tmp_path, name)
        procs.append(p)
        return p

    yield start
    for p in procs:
        p.kill()


def wait_serving(proc: Proc, endpoint: str, timeout_s: float = 90.0) -> None:
    """Ping until the server answers; fail at once if the process exits."""
    deadline = time.monotonic() + timeout_s
    with SyncClient(endpoint, timeout_s=0.5) as c:
        while True:
            code = proc.popen.poll()
            assert code is None, f"server exited with {code}:\n{proc.stdout}\n{proc.stderr}"
            try:
                c.ping()
                return
            except RequestTimeout:
                assert time.monotonic() < deadline, f"server did not answer:\n{proc.stderr}"


def reference(model: torch.nn.Module, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    with torch.inference_mode():
        logits, values = model.eval()(torch.from_numpy(obs).float())
    return logits.numpy(), values.numpy()


def positions(rows: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 2, (rows, 2, 3, 3), dtype=np.uint8)


def test_serve_answers_with_seeded_net_and_stops_on_sigterm(spawn, tmp_path: Path) -> None:
    endpoint = f"ipc://{tmp_path}/s.ipc"
    sets = ["--set", f"server.bind={endpoint}", "--set", "server.status_interval_s=0"]
    proc = spawn("serve", "serve", "--config", str(TTT), *sets)
    wait_serving(proc, endpoint)
    assert f"azserve serving tictactoe on {endpoint} (weights version 0)" in proc.stdout

    cfg = load_config(TTT, [f"server.bind={endpoint}"])
    want_logits, want_values = reference(build_net(cfg.net, seed=cfg.net.seed), positions(16))
    with SyncClient(endpoint, timeout_s=10) as c:
        logits, values, version = c.evaluate(positions(16))
        assert c.status()["model"] == "default"
    assert version == 0
    np.testing.assert_allclose(logits, want_logits, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(values, want_values, rtol=1e-4, atol=1e-5)

    t0 = time.monotonic()
    proc.popen.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=20) == 0, proc.stderr
    assert time.monotonic() - t0 < 20
    assert "server closed" in proc.stderr


def test_serve_checkpoint_serves_its_weights(spawn, tmp_path: Path) -> None:
    cfg = load_config(TTT)
    # A learner checkpoint (model + optimizer + counters) of weights unlike the seed-0 default.
    trainer = Trainer(replace(cfg.net, seed=7), replace(cfg.trainer, device="cpu"))
    ckpt = save_checkpoint(tmp_path / "ckpts", 40, 5, trainer.state_dict(), to_dict(cfg))

    endpoint = f"ipc://{tmp_path}/s.ipc"
    # No --config and no version: the checkpoint carries both (it was saved at version 5).
    proc = spawn(
        "serve", "serve", "--checkpoint", str(ckpt),
        "--set", f"server.bind={endpoint}", "--set", "server.status_interval_s=0",
    )  # fmt: skip
    wait_serving(proc, endpoint)
    want_logits, want_values = reference(trainer.model, positions(8, seed=1))
    seed0_logits, _ = reference(build_net(cfg.net, seed=0), positions(8, seed=1))
    with SyncClient(endpoint, timeout_s=10) as c:
        logits, values, version = c.evaluate(positions(8, seed=1))
        assert c.ping().latest == 5
    assert version == 5
    np.testing.assert_allclose(logits, want_logits, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(values, want_values, rtol=1e-4, atol=1e-5)
    assert not np.allclose(logits, seed0_logits, atol=1e-3)
    proc.popen.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=20) == 0, proc.stderr


def test_bad_configs_exit_2_naming_the_key_and_keys_writes_certificates(
    spawn, tmp_path: Path
) -> None:
    # Independent commands, run side by side to share the interpreter start-up time.
    bad_type = spawn("bad_type", "serve", "--config", str(TTT), "--set", "server.max_batch_size=x")
    unknown = spawn("unknown", "serve", "--config", str(TTT), "--set", "server.max_batch_sise=8")
    missing = spawn("missing", "serve", "--config", str(tmp_path / "nope.toml"))
    keys = spawn("keys", "keys", "--dir", str(tmp_path / "keys"), "alice", "bob")

    assert bad_type.wait(timeout=90) == 2
    assert "config error: server.max_batch_size: expected an integer, got 'x'" in bad_type.stderr
    assert unknown.wait(timeout=90) == 2
    assert "config error: server.max_batch_sise: unknown key" in unknown.stderr
    assert missing.wait(timeout=90) == 2
    assert "config file not found" in missing.stderr
    for p in (bad_type, unknown, missing):
        assert "Traceback" not in p.stderr

    assert keys.wait(timeout=90) == 0, keys.stderr
    d = tmp_path / "keys"
    for name in ("server", "alice", "bob"):
        public, secret = zmq.auth.load_certificate(d / f"{name}.key_secret")
        assert len(public) == len(secret) == 40
        assert zmq.auth.load_certificate(d / f"{name}.key")[0] == public
        assert (d / f"{name}.key_secret").stat().st_mode & 0o077 == 0  # secret: owner only
    assert sorted(p.name for p in (d / "authorized").iterdir()) == ["alice.key", "bob.key"]
    assert f"auth.server_secret_key={d / 'server.key_secret'}" in keys.stdout


def test_actors_wait_for_a_late_server_and_stop_on_sigterm(spawn, tmp_path: Path) -> None:
    endpoint = f"ipc://{tmp_path}/late.ipc"
    sets = ["--set", f"client.server={endpoint}", "--set", "actors.sink=null"]
    proc = spawn("actors", "actors", "--config", str(TTT), "--id", "a", *sets)
    deadline = time.monotonic() + 90
    while "waiting for the inference server" not in proc.stderr:
        assert proc.popen.poll() is None, proc.stderr
        assert time.monotonic() < deadline, proc.stderr
        time.sleep(0.2)
    proc.popen.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=20) == 0, proc.stderr
    assert "Traceback" not in proc.stderr
