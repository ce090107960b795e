"""``azserve bench swap``: latency before, during and after repeated weight swaps under load.

The server (``azserve serve``, a child process) runs under the same load as ``bench serve``
(P processes x C coroutines, one position per call, always on the latest version) for three
phases of ``--duration`` seconds each: steady, swaps, after. In the swap phase this process
publishes ``--swaps`` new versions, evenly spaced, with ``ControlClient.load_weights``; a probe
sends a one-position request every 10 ms all along and reads the version that served each
reply, so that

    swap_ms = publish -> first reply served by the new version

(it includes the load, the warm-up and the wait of that first request behind the queue),
``live_ms`` = publish -> first request sent that the new version served (to within the probe's
10 ms period: when new requests started going to it), and ``load_ms`` = publish -> ack. A position is "during a swap" when its request was in flight at any
moment of a swap (publish to first new reply); the target is p99 during swaps <= 1.5 x steady.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import zmq
import zmq.asyncio

from azserve import protocol as P
from azserve.control import ControlClient
from azserve.errors import AzserveError
from azserve.perf.common import ServerChild, Workers, percentiles, sleep_until
from azserve.perf.load import positions, read_results, worker_argv


class VersionProbe:
    """Sends one one-position request (version -1 = latest) every ``period_s``, open loop, and
    records ``(t_send, t_done, version served)`` for each reply.

    Open loop on purpose: callers that resend on each reply fall into step (their requests share
    a batch, so their replies come back together), and the probe's resolution would degrade to
    one round trip."""

    def __init__(self, endpoint: str, model: str, obs: np.ndarray, period_s: float = 0.01) -> None:
        self.endpoint, self.model, self.obs, self.period_s = endpoint, model, obs, period_s
        self.replies: list[tuple[float, float, int]] = []
        self.errors: list[str] = []
        self._sent: dict[int, float] = {}
        self._ids = itertools.count(1)

    async def run(self, t_end: float, drain_s: float = 30.0) -> None:
        """Probe until ``t_end``, then wait up to ``drain_s`` for the last replies."""
        ctx = zmq.asyncio.Context()
        sock = ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(self.endpoint)
        recv = asyncio.create_task(self._recv(sock), name="probe-recv")
        try:
            while (now := time.monotonic()) < t_end:
                rid = next(self._ids)
                self._sent[rid] = now
                await sock.send_multipart(
                    P.encode(P.EvalRequest(id=rid, model=self.model), [self.obs])
                )
                await asyncio.sleep(self.period_s)
            deadline = time.monotonic() + drain_s
            while self._sent and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
        finally:
            recv.cancel()
            await asyncio.gather(recv, return_exceptions=True)
            sock.close()
            ctx.term()

    async def _recv(self, sock: zmq.asyncio.Socket) -> None:
        while True:
            msg, _ = P.decode(await sock.recv_multipart())
            sent = self._sent.pop(msg.id, None) if msg.id is not None else None
            if sent is None:
                continue
            if isinstance(msg, P.EvalReply):
                self.replies.append((sent, time.monotonic(), msg.version))
            else:  # an error reply: counted and reported, never hidden
                self.errors.append(str(msg))

    def first_served_by(self, version: int, after: float) -> tuple[float, float] | None:
        """(send, reply) times of the first request sent after ``after`` and served by
        ``version`` or newer: the first reply, and the first request sent; None if none."""
        hits = [(sent, done) for sent, done, v in self.replies if v >= version and sent >= after]
        return (min(s for s, _ in hits), min(d for _, d in hits)) if hits else None


def weight_blobs(cfg: Any, count: int) -> list[bytes]:
    """Safetensors weights of ``count`` differently seeded nets (versions 1..count)."""
    from azserve.model.network import build_net
    from azserve.model.weights import state_dict_to_bytes

    return [
        state_dict_to_bytes(build_net(cfg.net, seed=1000 + i).state_dict()) for i in range(count)
    ]


async def swap_phase(
    endpoint: str, cfg: Any, blobs: list[bytes], t_measure: float, duration: float
) -> dict[str, Any]:
    """Probe from ``t_measure`` to the end of the after phase; publish ``blobs`` as versions
    1..n, evenly spaced through the swap phase. Returns each swap's times."""
    probe = VersionProbe(endpoint, cfg.server.model, positions(1, cfg.net.obs_shape, seed=7))
    t_end = t_measure + 3 * duration
    probe_task = asyncio.create_task(probe.run(t_end), name="probe")
    swaps: list[dict[str, float]] = []
    spacing = duration / len(blobs)
    async with ControlClient(endpoint, cfg.server.model) as client:
        for i, blob in enumerate(blobs):
            await asyncio.sleep(max(0.0, t_measure + duration + i * spacing - time.monotonic()))
            t_pub = time.monotonic()
            ack = await client.load_weights(i + 1, blob)
            swaps.append(
                {
                    "version": i + 1,
                    "t_publish": t_pub,
                    "t_ack": time.monotonic(),
                    "server_load_ms": ack.load_ms,
                }
            )
    await probe_task
    if probe.errors:
        raise AzserveError(f"{len(probe.errors)} probe requests failed, e.g. {probe.errors[0]}")
    for s in swaps:
        first = probe.first_served_by(int(s["version"]), s["t_publish"])
        s["t_first_sent"], s["t_first_reply"] = first if first is not None else (np.nan, np.nan)
    return {"swaps": swaps}


def main(args: argparse.Namespace) -> dict[str, Any]:
    from azserve.perf.serve import warmup_for

    d, n = args.duration, args.swaps
    overrides = list(args.overrides)
    with tempfile.TemporaryDirectory(prefix="azserve-bench-swap-") as tmp:
        work = Path(tmp)
        server = ServerChild(args.config, overrides, work)
        cfg = server.cfg
        blobs = weight_blobs(cfg, n)
        server.start()
        try:
            # load -> server <- swaps (this process) ; probe watches the versions served
            argvs = [
                worker_argv(
                    work / "load",
                    i,
                    "azserve",
                    server.endpoint,
                    cfg.server.model,
                    args.coroutines,
                    cfg.net.obs_shape,
                    max_rows=cfg.client.max_rows,
                )
                for i in range(args.processes)
            ]
            (work / "load").mkdir()
            with Workers(work / "load", argvs) as workers:
                workers.wait_ready()
                t_measure, t_end = workers.go(warmup_for(d), 3 * d)
                sleep_until(t_measure)
                swaps = asyncio.run(swap_phase(server.endpoint, cfg, blobs, t_measure, d))["swaps"]
                sleep_until(t_end)
                workers.wait_done(120)
            samples = read_results(work / "load", args.processes)
            # The learner's view: publish to one idle server, then to two, acked by each.
            second = ServerChild(args.config, overrides, work, name="server2")
            second.start()
            try:
                publish = asyncio.run(
                    publish_phase([server.endpoint, second.endpoint], cfg, blobs, first=n + 1)
                )
            finally:
                second.stop()
        finally:
            server.stop()
    result = summarize(samples.t_send, samples.t_done, swaps, t_measure, d, args.config, overrides)
    result["publish_ms"] = publish
    return result


async def publish_phase(
    endpoints: list[str], cfg: Any, blobs: list[bytes], first: int, rounds: int = 5
) -> dict[str, dict[str, float]]:
    """``learner.publisher.Publisher`` time from publish to every server's live ack, to the
    first server alone and then to both: ``{"1": {p50, max}, "2": {p50, max}}``."""
    from learner.publisher import Publisher

    out: dict[str, dict[str, float]] = {}
    version = first
    for count in (1, 2):
        publisher = Publisher(endpoints[:count], cfg.server.model, cfg.auth)
        await publisher.start()
        times = []
        try:
            for i in range(rounds):
                t0 = time.monotonic()
                acked = (await publisher.publish(version, blobs[i % len(blobs)])).acked_ms
                times.append((time.monotonic() - t0) * 1e3)
                if len(acked) != count:
                    raise AzserveError(
                        f"publish of v{version} acked by {len(acked)}/{count} servers"
                    )
                version += 1
        finally:
            await publisher.aclose()
        out[str(count)] = _p50_max(times)
    return out


def _p50_max(xs: list[float]) -> dict[str, float]:
    if not xs:
        return {"p50": float("nan"), "max": float("nan")}
    return {"p50": round(float(np.median(xs)), 1), "max": round(max(xs), 1)}


def summarize(
    t_send: list[float],
    t_done: list[float],
    swaps: list[dict[str, float]],
    t_measure: float,
    d: float,
    config: str,
    overrides: list[str],
) -> dict[str, Any]:
    """Latency per phase, during swaps, and swap times."""
    sent, done = np.asarray(t_send), np.asarray(t_done)
    lat = (done - sent) * 1e3
    phase = np.floor((done - t_measure) / d)  # 0 steady, 1 swaps, 2 after
    windows = [
        (s["t_publish"], s["t_first_reply"]) for s in swaps if np.isfinite(s["t_first_reply"])
    ]
    during = np.zeros(len(lat), bool)
    for a, b in windows:
        during |= (sent <= b) & (done >= a)
    swap_ms = [
        (s["t_first_reply"] - s["t_publish"]) * 1e3
        for s in swaps
        if np.isfinite(s["t_first_reply"])
    ]
    live_ms = [
        (s["t_first_sent"] - s["t_publish"]) * 1e3 for s in swaps if np.isfinite(s["t_first_sent"])
    ]
    load_ms = [(s["t_ack"] - s["t_publish"]) * 1e3 for s in swaps]
    steady, during_swap = percentiles(lat[phase == 0]), percentiles(lat[during])
    return {
        "bench": "swap",
        "config": config,
        "overrides": overrides,
        "duration_s": d,
        "swaps": len(swaps),
        "swaps_seen_served": len(swap_ms),
        "swap_ms": {**_p50_max(swap_ms), "all": [round(x, 1) for x in swap_ms]},
        "live_ms": _p50_max(live_ms),
        "load_ms": {
            **_p50_max(load_ms),
            "server_p50": round(float(np.median([s["server_load_ms"] for s in swaps])), 1),
        },
        "latency_ms_steady": steady,
        "latency_ms_during_swap": during_swap,
        "latency_ms_swap_phase": percentiles(lat[phase == 1]),
        "latency_ms_after": percentiles(lat[phase == 2]),
        "p99_during_over_steady": round(during_swap["p99"] / steady["p99"], 3)
        if steady["p99"]
        else float("nan"),
        "positions_during_swap": int(during.sum()),
        "positions_per_s": {
            name: round(float((phase == i).sum()) / d, 1)
            for i, name in enumerate(("steady", "swap_phase", "after"))
        },
    }
