"""Malformed and refused requests, sent by hand on a raw socket: each gets an error reply of the
documented ``type`` (with the request's ``id`` when it can be read), while a well-behaved client
keeps getting correct results throughout. The receive loop never dies of bad input."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import msgpack
import numpy as np
import pytest

from azserve import EvalClient, InferenceServer, Overloaded, RemoteError
from azserve.backends import BackendConfig, TorchConfig
from azserve.backends.torch_backend import TorchBackend
from tests.conftest import (
    NET,
    GatedBackend,
    MakeClient,
    MakeControl,
    MakeServer,
    RawDealer,
    Reference,
    ZmqSockets,
    eval_header,
    positions,
    wait_for,
    weights_blob,
)

pytestmark = pytest.mark.timeout(60)

MAX_ROWS = 16
OBS = positions(2, seed=1)


class GoodTraffic:
    """Eight coroutines evaluating (pinned to version 0) without pause; every reply is checked
    against the model after the test."""

    def __init__(self, client: EvalClient) -> None:
        self.client = client
        self.obs = positions(50, seed=2)
        self.rows: list[int] = []
        self.logits: list[np.ndarray] = []
        self.values: list[float] = []
        self.tasks = [asyncio.create_task(self._game(i)) for i in range(8)]

    async def _game(self, i: int) -> None:
        k = i
        while True:
            row = k % len(self.obs)
            k += 1
            logits, value = await self.client.evaluate(self.obs[row], version=0)
            self.rows.append(row)
            self.logits.append(logits)
            self.values.append(value)

    async def more(self, n: int = 50) -> None:
        """Wait until ``n`` more good requests are served (a failed one ends its task: fail)."""
        target = len(self.rows) + n
        await wait_for(lambda: len(self.rows) >= target or any(t.done() for t in self.tasks))
        for t in self.tasks:
            if t.done():
                t.result()  # raises the error a good request got

    async def stop(self) -> None:
        for t in self.tasks:
            t.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)

    def all_correct(self, ref: Reference) -> bool:
        rows = np.array(self.rows)
        return bool(
            ref.rows_matching(
                self.obs[rows], np.stack(self.logits), np.array(self.values, np.float32)
            ).all()
        )


@dataclass
class Rig:
    server: InferenceServer
    raw: RawDealer
    traffic: GoodTraffic

    async def expect_error(
        self, frames: list[bytes], type_: str, rid: int | None, match: str = ""
    ) -> dict[str, Any]:
        """Send ``frames``; the next reply must be an error of ``type_`` for ``rid``; then the
        good traffic must keep flowing."""
        errors = self.server.status()["errors"]
        await self.raw.send_frames(frames)
        reply, arrays = await self.raw.recv()
        assert reply["op"] == "error", reply
        assert (reply["type"], reply["id"]) == (type_, rid), reply
        assert match in reply["message"]
        assert arrays == []
        assert self.server.status()["errors"] == errors + 1
        await self.traffic.more()
        return reply


@pytest.fixture
async def rig(
    make_server: MakeServer, make_client: MakeClient, zmq_sockets: ZmqSockets, ref: Reference
) -> AsyncIterator[Rig]:
    server = await make_server(max_batch_size=MAX_ROWS)
    client = await make_client(server.endpoint, max_rows=MAX_ROWS)
    client.pin(0)
    traffic = GoodTraffic(client)
    await traffic.more()
    yield Rig(server, zmq_sockets.dealer(server.endpoint), traffic)
    await traffic.stop()
    assert traffic.all_correct(ref)
    assert server.status()["state"] == "serving"


def pack(header: dict[str, Any]) -> bytes:
    return msgpack.packb(header)


def spec(dtype: str, shape: list[int]) -> list[dict[str, Any]]:
    return [{"dtype": dtype, "shape": shape}]


def _sparse(
    rid: int, offsets: list[int], actions: list[int], offsets_dtype: str = "int32"
) -> list[bytes]:
    """A sparse eval of ``OBS`` (2 rows) with these legal actions (docs/protocol.md)."""
    o, a = np.array(offsets, offsets_dtype), np.array(actions, np.int16)
    arrays = (
        spec("uint8", list(OBS.shape)) + spec(offsets_dtype, [len(o)]) + spec("int16", [len(a)])
    )
    return [pack(eval_header(rid, OBS, arrays=arrays)), OBS.tobytes(), o.tobytes(), a.tobytes()]


# (frames, error type, id echoed, part of the message)
EVAL_CASES: dict[str, tuple[list[bytes], str, int | None, str]] = {
    "no-array-frame": ([pack(eval_header(1, OBS))], "BadRequest", 1, "but 0 followed"),
    "extra-frame": (
        [pack(eval_header(2, OBS)), OBS.tobytes(), b"x"],
        "BadRequest",
        2,
        "but 2 followed",
    ),
    "byte-size-mismatch": (
        [pack(eval_header(3, OBS)), OBS.tobytes()[:-1]],
        "BadRequest",
        3,
        "needs 36 bytes, frame has 35",
    ),
    "unknown-dtype": (
        [pack(eval_header(4, OBS, arrays=spec("complex64", [2, 2, 3, 3]))), b"\0" * 288],
        "BadRequest",
        4,
        "unknown dtype 'complex64'",
    ),
    "negative-dim": (
        [pack(eval_header(5, OBS, arrays=spec("uint8", [-2, 2, 3, 3]))), OBS.tobytes()],
        "BadRequest",
        5,
        "negative dimension",
    ),
    "absurd-declared-size": (
        [pack(eval_header(6, OBS, arrays=spec("uint8", [2**60, 2**60, 3, 3]))), OBS.tobytes()],
        "BadRequest",
        6,
        "frame has 36",
    ),
    "dtype-not-accepted-for-obs": (
        [pack(eval_header(7, OBS.astype(np.float64))), OBS.astype(np.float64).tobytes()],
        "BadDtype",
        7,
        "uint8 or float32",
    ),
    "too-many-rows": (
        [pack(eval_header(8, positions(MAX_ROWS + 1))), positions(MAX_ROWS + 1).tobytes()],
        "TooManyRows",
        8,
        f"1..{MAX_ROWS}",
    ),
    "zero-rows": (
        [pack(eval_header(9, OBS[:0])), b""],
        "TooManyRows",
        9,
        f"1..{MAX_ROWS}",
    ),
    "wrong-obs-shape": (
        [pack(eval_header(10, np.zeros((2, 3, 3, 3), np.uint8))), bytes(54)],
        "BadShape",
        10,
        "must be [rows, 2, 3, 3]",
    ),
    "flat-obs": (
        [pack(eval_header(11, np.zeros((2, 18), np.uint8))), bytes(36)],
        "BadShape",
        11,
        "must be [rows, 2, 3, 3]",
    ),
    "two-arrays": (
        [
            pack(eval_header(12, OBS, arrays=spec("uint8", [2, 2, 3, 3]) * 2)),
            OBS.tobytes(),
            OBS.tobytes(),
        ],
        "BadRequest",
        12,
        "takes 1 array (obs) or 3",
    ),
    "sparse-offsets-not-monotone": (
        _sparse(13, [0, 2, 1], [1, 2]),
        "BadLegal",
        13,
        "offsets not monotone: offsets[2] = 1 < offsets[1] = 2",
    ),
    "sparse-action-out-of-range": (
        _sparse(14, [0, 1, 2], [1, 9]),
        "BadLegal",
        14,
        "actions[1] = 9 is out of range 0..8",
    ),
    "sparse-counts-not-matching": (
        _sparse(15, [0, 1, 3], [1, 2]),
        "BadLegal",
        15,
        "offsets[-1] = 3 does not match the 2 actions",
    ),
    "sparse-offsets-int64": (
        _sparse(16, [0, 1, 2], [1, 2], offsets_dtype="int64"),
        "BadLegal",
        16,
        "offsets dtype int64 must be int32",
    ),
    "unknown-model": (
        [pack(eval_header(13, OBS, model="chess")), OBS.tobytes()],
        "UnknownModel",
        13,
        "'chess'",
    ),
    "unknown-version": (
        [pack(eval_header(14, OBS, version=7)), OBS.tobytes()],
        "VersionUnavailable",
        14,
        "version 7 is not resident",
    ),
    "wrong-proto": (
        [pack(eval_header(15, OBS, proto=2)), OBS.tobytes()],
        "UnsupportedProtocol",
        15,
        "proto 2",
    ),
    "wrong-field-type": (
        [pack(eval_header(16, OBS, version="latest")), OBS.tobytes()],
        "BadRequest",
        16,
        "$.version",
    ),
    "garbage-bytes": ([b"\xc1\x00garbage\xff"], "BadRequest", None, "bad header"),
    "truncated-msgpack": (
        [pack(eval_header(17, OBS))[:-4], OBS.tobytes()],
        "BadRequest",
        None,
        "bad header",
    ),
    "empty-header": ([b""], "BadRequest", None, "bad header"),
    "header-not-a-map": ([pack([1, 2, 3])], "BadRequest", None, "bad header"),
    "header-too-large": (
        [pack(eval_header(18, OBS, model="m" * 70_000)), OBS.tobytes()],
        "BadRequest",
        18,
        "exceeds",
    ),
    "unknown-op": ([pack({"op": "train", "id": 19})], "BadRequest", 19, "bad header"),
    "reply-sent-as-request": (
        [pack({"op": "result", "id": 20, "version": 0, "latest": 0})],
        "BadRequest",
        20,
        "not a request",
    ),
    "ping-wrong-proto": (
        [pack({"op": "ping", "id": 21, "proto": 9})],
        "UnsupportedProtocol",
        21,
        "",
    ),
    "pin-unknown-model": (
        [pack({"op": "pin", "id": 22, "model": "go", "client": "c", "pins": {0: 1}})],
        "UnknownModel",
        22,
        "'go'",
    ),
}


@pytest.mark.parametrize("case", list(EVAL_CASES))
async def test_malformed_request_gets_an_error_reply(rig: Rig, case: str) -> None:
    frames, type_, rid, match = EVAL_CASES[case]
    await rig.expect_error(frames, type_, rid, match)


async def test_req_style_envelope_keeps_its_delimiter_on_errors(rig: Rig) -> None:
    await rig.raw.send_frames([b"", b"\xc1garbage"])
    frames = await rig.raw.recv_frames()
    assert frames[0] == b""
    reply = msgpack.unpackb(frames[1])
    assert (reply["op"], reply["type"], reply["id"]) == ("error", "BadRequest", None)
    await rig.traffic.more()


def load_frames(rid: int, blob: bytes, **fields: Any) -> list[bytes]:
    header = {
        "op": "load",
        "id": rid,
        "version": 3,
        "sha256": hashlib.sha256(blob).hexdigest(),
        "arrays": spec("uint8", [len(blob)]),
    }
    header.update(fields)
    return [pack(header), blob]


GOOD_BLOB = weights_blob(seed=1)
OTHER_NET_BLOB = weights_blob(seed=1).replace(b"policy_fc", b"policy_fx")

LOAD_CASES: dict[str, tuple[list[bytes], str, str]] = {
    "bad-checksum": (load_frames(1, GOOD_BLOB, sha256="0" * 64), "BadWeights", "sha256 mismatch"),
    "garbage-weights": (
        load_frames(2, b"not safetensors at all"),
        "BadWeights",
        "not readable safetensors",
    ),
    "weights-of-another-net": (
        load_frames(3, OTHER_NET_BLOB),
        "BadWeights",
        "do not fit the configured net",
    ),
    "negative-version": (load_frames(4, GOOD_BLOB, version=-1), "BadRequest", ">= 0"),
    "no-blob": (
        [pack({"op": "load", "id": 5, "version": 3, "sha256": "0" * 64})],
        "BadRequest",
        "exactly 1 array",
    ),
    "blob-not-bytes": (
        [
            pack(
                {
                    "op": "load",
                    "id": 6,
                    "version": 3,
                    "sha256": "0" * 64,
                    "arrays": spec("float32", [2]),
                }
            ),
            bytes(8),
        ],
        "BadRequest",
        "uint8",
    ),
    "unknown-model": (load_frames(7, GOOD_BLOB, model="chess"), "UnknownModel", "'chess'"),
    "wrong-proto": (load_frames(8, GOOD_BLOB, proto=0), "UnsupportedProtocol", "proto 0"),
}


@pytest.mark.parametrize("case", list(LOAD_CASES))
async def test_bad_weight_load_gets_an_error_reply(rig: Rig, case: str) -> None:
    frames, type_, match = LOAD_CASES[case]
    rid = msgpack.unpackb(frames[0])["id"]
    await rig.expect_error(frames, type_, rid, match)
    assert rig.server.versions.resident() == [0]


async def test_load_older_than_latest_is_refused(rig: Rig) -> None:
    reply, _ = await rig.raw.call(msgpack.unpackb(load_frames(1, GOOD_BLOB)[0]), GOOD_BLOB)
    assert (reply["op"], reply["version"], reply["latest"]) == ("loaded", 3, 3)
    await rig.expect_error(
        load_frames(2, GOOD_BLOB, version=2), "BadVersion", 2, "older than the latest 3"
    )
    # Reloading a resident version is idempotent (a publisher retrying after a lost ack).
    reply, _ = await rig.raw.call(msgpack.unpackb(load_frames(3, GOOD_BLOB)[0]), GOOD_BLOB)
    assert (reply["op"], reply["version"]) == ("loaded", 3)
    assert rig.server.versions.resident() == [0, 3]


async def test_one_callers_bad_obs_fails_only_that_caller(rig: Rig, ref: Reference) -> None:
    """Leaves of one tick share a message only with alike leaves, so a caller with a wrong
    shape gets BadShape while its neighbours in the same tick are served."""
    client = rig.traffic.client
    good = [client.evaluate(o) for o in positions(5, seed=3)]
    bad = client.evaluate(np.zeros((3, 3, 3), np.uint8))
    more_good = client.evaluate(positions(4, seed=4))
    with pytest.raises(RemoteError, match="BadShape") as err:
        await asyncio.wait_for(bad, 5)
    assert err.value.type == "BadShape"
    for o, fut in zip(positions(5, seed=3), good, strict=True):
        assert ref.matches(o, *(await asyncio.wait_for(fut, 5)))
    assert ref.matches(positions(4, seed=4), *(await asyncio.wait_for(more_good, 5)))
    with pytest.raises(ValueError, match=r"\[C,H,W\] or \[n,C,H,W\]"):
        client.evaluate(np.zeros((NET.in_channels, 9), np.uint8))
    await rig.traffic.more()


async def test_storm_of_garbage_while_serving(rig: Rig) -> None:
    """Hundreds of malformed messages at once: each answered, none breaks the server."""
    storm = [frames for frames, _, _, _ in EVAL_CASES.values()] * 10
    for frames in storm:
        await rig.raw.send_frames(frames)
    replies = [await rig.raw.recv() for _ in storm]
    assert all(h["op"] == "error" for h, _ in replies)
    assert rig.server.status()["errors"] == len(storm)
    await rig.traffic.more()


async def test_queue_limit_gives_overloaded(
    make_server: MakeServer, make_client: MakeClient, ref: Reference
) -> None:
    backend = GatedBackend()
    server = await make_server(
        backend=backend, max_batch_size=4, max_queued_rows=6, max_queue_delay_us=0
    )
    client = await make_client(server.endpoint)
    running = client.evaluate(positions(4, seed=5))  # computes, held at the gate
    await asyncio.wait_for(backend.entered.wait(), 5)
    queued = client.evaluate(positions(3, seed=6))  # waits for the busy backend
    await wait_for(lambda: server.status()["queued_rows"] == 3)
    with pytest.raises(Overloaded, match=r"3 rows queued \(limit 6\)"):
        await client.evaluate(positions(4, seed=7))
    backend.gate.set()
    assert ref.matches(positions(4, seed=5), *(await running))
    assert ref.matches(positions(3, seed=6), *(await queued))


async def test_load_past_the_version_limit_gives_overloaded(
    make_server: MakeServer, make_control: MakeControl
) -> None:
    server = await make_server(max_versions=1)
    ctl = await make_control(server.endpoint)
    with pytest.raises(Overloaded, match="cannot load another version"):
        await ctl.load_weights(1, weights_blob(seed=1))
    assert server.versions.resident() == [0]


class RowDroppingBackend(TorchBackend):
    """Breaks the row invariant on batches of more than one row."""

    async def infer(self, version: int, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        logits, value = await super().infer(version, obs)
        return (logits[:1], value[:1]) if len(obs) > 1 else (logits, value)


async def test_backend_breaking_the_row_invariant_gives_internal_error(
    make_server: MakeServer, make_client: MakeClient, ref: Reference
) -> None:
    server = await make_server(
        backend=RowDroppingBackend(
            NET, BackendConfig(device="cpu", torch=TorchConfig(compile="none"))
        )
    )
    client = await make_client(server.endpoint)
    with pytest.raises(RemoteError, match="InternalError: backend returned logits") as err:
        await client.evaluate(positions(3))
    assert err.value.type == "InternalError"
    one = positions(1)[0]
    assert ref.matches(one, *(await client.evaluate(one)))  # still serving


async def test_load_of_a_held_version_with_other_bytes_is_refused(
    make_server: MakeServer, make_control: MakeControl, make_client: MakeClient, ref: Reference
) -> None:
    """A version number names one set of weights: the learner's version 0 with bytes other
    than the server's is refused (BadVersion), and the server keeps serving its own."""
    server = await make_server()
    ctl = await make_control(server.endpoint)
    same = await ctl.load_weights(0, weights_blob(seed=NET.seed))  # the same bytes: idempotent
    assert (same.version, same.latest) == (0, 0)
    with pytest.raises(RemoteError, match="already held with other weights") as err:
        await ctl.load_weights(0, weights_blob(seed=NET.seed + 1))
    assert err.value.type == "BadVersion"
    obs = positions(3, seed=5)
    client = await make_client(server.endpoint)
    logits, values = await client.evaluate(obs, 0)
    assert ref.matches(obs, logits, values, seed=NET.seed)
