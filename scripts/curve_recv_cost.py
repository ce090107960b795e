"""What knowing each message's sender costs a CURVE server: eval round trips per second against
the shipped server (frames received uncopied, the sender's key read from each message) and
against the same server receiving copied frames (the sender unknown, as before keys per role).

    .venv/bin/python scripts/curve_recv_cost.py [--rounds 4] [--seconds 3] [--rows 16]
    .venv/bin/python scripts/curve_recv_cost.py --recv-only [--rounds 6]

Both servers run CURVE with the same keys, on loopback, with the tiny tic-tac-toe-sized test
net; one client process (``SyncClient``, back-to-back requests of ``--rows`` positions) drives
each. ``--recv-only``: the receive call alone on a bare CURVE ROUTER (20,000 queued two-frame
messages per round, no server around it). Rounds alternate the order (A B, B A, ...) and the
medians are compared as a ratio, since the machine is shared. Prints one JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import zmq
import zmq.auth
from zmq.auth.thread import ThreadAuthenticator

from azserve.auth import AuthConfig
from azserve.backends import BackendConfig, make_backend
from azserve.keys import create_keys
from azserve.model.network import initial_weights
from azserve.model.spec import NetConfig
from azserve.server import InferenceServer, InitialWeights, ServerConfig

NET = NetConfig(in_channels=2, height=3, width=3, num_actions=9, blocks=1, channels=8)

CLIENT = """
import sys, time
import numpy as np
from azserve import SyncClient
from azserve.auth import AuthConfig
auth = AuthConfig(client_secret_key=sys.argv[2], server_public_key=sys.argv[3])
obs = np.zeros((int(sys.argv[5]), 2, 3, 3), np.uint8)
with SyncClient(sys.argv[1], timeout_s=30, auth=auth) as c:
    c.evaluate(obs)
    n, end = 0, time.monotonic() + float(sys.argv[4])
    while time.monotonic() < end:
        c.evaluate(obs)
        n += 1
print(n / float(sys.argv[4]))
"""


class CopiedFrames(InferenceServer):
    """The receive path before per-message sender keys: copied frames, sender unknown."""

    async def _recv_loop(self) -> None:
        assert self._sock is not None
        while True:
            self._handle(await self._sock.recv_multipart())


async def one_round(cls: type[InferenceServer], keys: Path, seconds: float, rows: int) -> float:
    auth = AuthConfig(
        server_secret_key=str(keys / "server.key_secret"),
        client_keys_dir=str(keys / "authorized"),
        learner_public_key=str(keys / "learner.key"),
    )
    # No batching wait: a lone client measures the per-message cost, not the queue delay.
    cfg = ServerConfig(bind="tcp://127.0.0.1:*", status_interval_s=0.0, max_queue_delay_us=0)
    server = cls(cfg, NET.spec, make_backend(NET, BackendConfig(device="cpu", threads=1)), auth)
    await server.start(InitialWeights(0, initial_weights(NET)))
    try:
        argv = [
            sys.executable,
            "-c",
            CLIENT,
            server.endpoint,
            str(keys / "client.key_secret"),
            str(keys / "server.key"),
            str(seconds),
            str(rows),
        ]
        proc = await asyncio.create_subprocess_exec(*argv, stdout=subprocess.PIPE)
        out, _ = await proc.communicate()
        return float(out.decode().strip())
    finally:
        await server.aclose()


def recv_only(rounds: int, n: int = 20000) -> dict[str, float]:
    """Messages/s received: ``recv_multipart()`` vs ``recv_multipart(copy=False)`` with the
    frames' bytes and the sender's key, on a CURVE ROUTER fed by one DEALER."""
    with tempfile.TemporaryDirectory() as tmp:
        create_keys(tmp, ["client"])
        spub, ssec = zmq.auth.load_certificate(Path(tmp) / "server.key_secret")
        cpub, csec = zmq.auth.load_certificate(Path(tmp) / "client.key_secret")
    ctx = zmq.Context()
    zap = ThreadAuthenticator(ctx)
    zap.start()
    zap.configure_curve(domain="*", location=zmq.auth.CURVE_ALLOW_ANY)
    router = ctx.socket(zmq.ROUTER)
    router.curve_secretkey, router.curve_publickey, router.curve_server = ssec, spub, True
    router.rcvhwm = 0
    port = router.bind_to_random_port("tcp://127.0.0.1")
    dealer = ctx.socket(zmq.DEALER)
    dealer.curve_secretkey, dealer.curve_publickey, dealer.curve_serverkey = csec, cpub, spub
    dealer.sndhwm = 0
    dealer.connect(f"tcp://127.0.0.1:{port}")
    header, obs = b"h" * 60, b"\x01" * (16 * 18)  # an eval request's sizes, 16 positions

    def copied() -> None:
        router.recv_multipart()

    def uncopied() -> None:
        parts = router.recv_multipart(copy=False)
        _ = [p.bytes for p in parts], parts[-1].get("User-Id")

    def rate(recv: Callable[[], None]) -> float:
        for _ in range(n):
            dealer.send_multipart([header, obs])
        t = time.perf_counter()
        for _ in range(n):
            recv()
        return n / (time.perf_counter() - t)

    variants = [("uncopied_with_sender", uncopied), ("copied_sender_unknown", copied)]
    got: dict[str, list[float]] = {name: [] for name, _ in variants}
    rate(copied)  # warm-up: the handshake and the first allocations
    for i in range(rounds):
        for name, recv in variants if i % 2 == 0 else variants[::-1]:
            got[name].append(rate(recv))
    dealer.close(0)
    router.close(0)
    zap.stop()
    ctx.term()
    a, b = (statistics.median(got[k]) for k, _ in variants)
    return {
        "msgs_s_uncopied_with_sender": round(a),
        "msgs_s_copied_sender_unknown": round(b),
        "ratio": round(a / b, 3),
        "rounds": rounds,
    }


async def main(rounds: int, seconds: float, rows: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        keys = Path(tmp)
        create_keys(keys, ["client"])
        got: dict[str, list[float]] = {"uncopied_with_sender": [], "copied_sender_unknown": []}
        variants = [
            ("uncopied_with_sender", InferenceServer),
            ("copied_sender_unknown", CopiedFrames),
        ]
        for i in range(rounds):
            for name, cls in variants if i % 2 == 0 else variants[::-1]:
                got[name].append(await one_round(cls, keys, seconds, rows))
    a, b = (statistics.median(got[k]) for k in ("uncopied_with_sender", "copied_sender_unknown"))
    return {
        "rows_per_request": rows,
        "req_s_uncopied_with_sender": round(a),
        "req_s_copied_sender_unknown": round(b),
        "ratio": round(a / b, 3),
        "rounds": rounds,
    }


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--seconds", type=float, default=3.0)
    p.add_argument("--rows", type=int, default=16)
    p.add_argument("--recv-only", action="store_true", help="the receive call alone")
    args = p.parse_args()
    if args.recv_only:
        print(json.dumps(recv_only(args.rounds)))
    else:
        print(json.dumps(asyncio.run(main(args.rounds, args.seconds, args.rows))))
