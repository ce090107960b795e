"""Fuzzing the wire protocol: hypothesis against ``protocol.decode`` and a seeded generator
against a live server socket.

What the file proves, for every generated message:

- ``decode`` returns a message whose arrays match its header, or raises ``ProtocolError``;
  nothing else escapes (arbitrary byte frames, and near-valid headers built with plain
  ``msgpack`` as a foreign client would, then mutated);
- ``request_id_of`` never raises and finds the ``id`` a plain msgpack reader finds, and a
  decoded message carries that same ``id``;
- ``encode`` / ``decode`` round-trip every message type with random arrays exactly;
- a live ``InferenceServer`` answers every message a DEALER sends with exactly one reply,
  carrying the ``id`` the spec says it must (``replies + dropped == sent``, ``dropped == 0``:
  a DEALER cannot send a message without a body), counts each error reply once, serves the
  valid ``eval`` requests interleaved with the junk correctly, and stays ``serving``.

A default run generates ``10.5 x FUZZ_EXAMPLES`` = 10,500 messages (at least 10,000, asserted
by the last test); ``make fuzz`` (``AZSERVE_FUZZ_EXAMPLES=200000``) generates 2.1 million.
Everything is seeded or derandomized, so a CI run is deterministic.

Bugs this fuzzer found, now fixed, stay as regression tests at the end (``REGRESSIONS``): shapes
numpy cannot make, headers nested ~1000 deep (both used to kill the server's receive loop), and
0-d arrays that round-tripped as 1-d.
"""

from __future__ import annotations

import math
import os
import random
from collections import Counter
from typing import Any

import msgpack
import msgspec
import numpy as np
import pytest
import zmq
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from azserve import protocol as P
from azserve.errors import ProtocolError
from tests.conftest import (
    NET,
    MakeServer,
    RawDealer,
    Reference,
    ZmqSockets,
    eval_header,
    positions,
    wait_for,
)
from tests.fuzz_messages import (
    FIELDS,
    ITEMSIZE,
    MAX_ROWS,
    REPLY_OPS,
    Case,
    attributable_id,
    attributable_ids,
    near_valid,
)

MIN_TOTAL = 10_000
"""Messages a run must generate over the whole file (the CI contract)."""

FUZZ_EXAMPLES = int(os.environ.get("AZSERVE_FUZZ_EXAMPLES", "1000"))
"""Examples per decode property; ``make fuzz`` raises it. The live server gets eight times as
many messages (they cost a tenth of a hypothesis example to make)."""

PLAN = {
    "arbitrary": FUZZ_EXAMPLES,
    "near_valid": FUZZ_EXAMPLES,
    "round_trip": FUZZ_EXAMPLES // 2,
    "live": 8 * FUZZ_EXAMPLES,
}
"""Messages each fuzz test must generate; the last test checks them and their sum."""

TALLY: Counter[str] = Counter()
"""Messages each fuzz test generated (filled as the tests run)."""

pytestmark = [pytest.mark.faults, pytest.mark.timeout(60 + FUZZ_EXAMPLES // 20)]

FUZZ = settings(
    max_examples=FUZZ_EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    print_blob=False,
)
"""Deterministic hypothesis settings (no example database: nothing is written to the tree)."""

LIVE_BATCH = 250
"""Messages sent before their replies are read."""


# --- the decode property -----------------------------------------------------------------------


def check_decode(body: list[bytes]) -> None:
    """``decode(body)`` gives a consistent message or raises ``ProtocolError``, and
    ``request_id_of`` agrees with the spec's reading of the header."""
    try:
        msg, arrays = P.decode(body)
    except ProtocolError:
        pass
    else:
        assert isinstance(msg, P.Message)
        assert len(arrays) == len(msg.arrays) == len(body) - 1
        for spec, array, buf in zip(msg.arrays, arrays, body[1:]):
            assert array.dtype == P.DTYPES[spec.dtype]
            assert list(array.shape) == spec.shape
            assert array.nbytes == len(buf)
            assert not array.flags.writeable
        assert msg.id in attributable_ids(body[0])
    if not body:
        return
    rid = P.request_id_of(body[0])
    assert rid in attributable_ids(body[0])


# --- (a) arbitrary frames ----------------------------------------------------------------------


msgpack_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats()
    | st.text(max_size=12)
    | st.binary(max_size=12)
    | st.builds(msgpack.ExtType, st.integers(0, 127), st.binary(max_size=12))
    | st.builds(msgpack.Timestamp, st.integers(-(2**40), 2**40), st.integers(0, 999_999_999))
)
msgpack_values = st.recursive(
    msgpack_scalars,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.sampled_from(FIELDS) | st.text(max_size=6), inner, max_size=3)
        | st.dictionaries(st.integers(-(2**63), 2**64 - 1), inner, max_size=3)
    ),
    max_leaves=8,
)
map_headers = st.dictionaries(
    st.sampled_from(FIELDS) | st.text(max_size=6) | st.integers(-5, 5),
    msgpack_values,
    max_size=5,
)
any_header = st.one_of(
    st.binary(max_size=200),
    map_headers.map(msgpack.packb),
    msgpack_values.map(msgpack.packb),
)


@FUZZ
@given(header=any_header, buffers=st.lists(st.binary(max_size=48), max_size=20))
def test_decode_of_arbitrary_frames_raises_only_protocol_error(
    header: bytes, buffers: list[bytes]
) -> None:
    """Random bytes, random msgpack (maps with the spec's field names among random keys) and
    random counts of buffer frames: a message or a ``ProtocolError``, nothing else."""
    TALLY["arbitrary"] += 1
    check_decode([header, *buffers])


def test_decode_of_no_frames_is_a_protocol_error() -> None:
    """The one input (a) cannot draw: no frames at all."""
    with pytest.raises(ProtocolError, match="empty message"):
        P.decode([])


@FUZZ
@given(rng=st.randoms(use_true_random=False), rid=st.integers(0, 2**64 - 1))
def test_decode_of_mutated_valid_messages_raises_only_protocol_error(
    rng: random.Random, rid: int
) -> None:
    """Valid headers for every op built with plain msgpack, then keys dropped and added, wrong
    types, huge/negative/long shapes, unknown dtypes, frame counts and byte sizes broken,
    nested junk, truncated or corrupted bytes: a message or a ``ProtocolError``."""
    TALLY["near_valid"] += 1
    case = near_valid(rng, rid)
    check_decode(case.body)


# --- (c) round trip ----------------------------------------------------------------------------

ints = st.integers(-(2**63), 2**64 - 1)
ids = st.none() | ints
texts = st.text(max_size=16)
floats = st.floats(allow_nan=False)
status_values = st.recursive(
    st.none() | st.booleans() | ints | floats | texts | st.binary(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3),
    max_leaves=8,
)
MESSAGES: tuple[st.SearchStrategy[P.Message], ...] = (
    st.builds(P.EvalRequest, id=ids, proto=ints, model=texts, version=ints),
    st.builds(P.LoadWeights, id=ids, proto=ints, model=texts, version=ints, sha256=texts),
    st.builds(P.StatusRequest, id=ids, proto=ints),
    st.builds(P.Ping, id=ids, proto=ints),
    st.builds(
        P.PinUpdate,
        id=ids,
        proto=ints,
        model=texts,
        client=texts,
        pins=st.dictionaries(ints, ints, max_size=4),
        lease_s=floats,
    ),
    st.builds(
        P.Trajectory,
        id=ids,
        proto=ints,
        actor=texts,
        game_id=ints,
        game=texts,
        version=ints,
        length=ints,
        result=floats,
        resigned=st.booleans(),
    ),
    st.builds(P.EvalReply, id=ids, version=ints, latest=ints),
    st.builds(P.Loaded, id=ids, model=texts, version=ints, latest=ints, load_ms=floats),
    st.builds(P.StatusReply, id=ids, status=st.dictionaries(texts, status_values, max_size=4)),
    st.builds(P.Pong, id=ids, latest=ints, server_id=texts),
    st.builds(P.PinAck, id=ids, versions=st.lists(ints, max_size=4)),
    st.builds(P.TrajectoryAck, id=ids, game_id=ints, duplicate=st.booleans()),
    st.builds(P.ErrorReply, id=ids, type=texts, message=texts),
)
wire_arrays = hnp.arrays(
    dtype=st.sampled_from(sorted(ITEMSIZE)).flatmap(
        lambda name: st.sampled_from([np.dtype(name), np.dtype(name).newbyteorder(">")])
    ),
    shape=hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=4),
)


@settings(FUZZ, max_examples=PLAN["round_trip"])
@given(
    msg=st.one_of(*MESSAGES),
    arrays=st.lists(wire_arrays, max_size=4),
    view=st.sampled_from(["contiguous", "reversed", "transposed"]),
)
def test_round_trip_is_exact(msg: P.Message, arrays: list[np.ndarray], view: str) -> None:
    """Every message type with random field values and random arrays (every wire dtype, both
    byte orders, empty arrays, non-contiguous views) comes back field for field and byte for
    byte; ``encode`` leaves its argument alone."""
    TALLY["round_trip"] += 1
    if view == "reversed":
        arrays = [a[::-1] if a.ndim else a for a in arrays]
    elif view == "transposed":
        arrays = [a.T for a in arrays]
    frames = P.encode(msg, arrays)
    assert msg.arrays == []
    got, got_arrays = P.decode([bytes(f) for f in frames])
    assert msgspec.structs.replace(got, arrays=[]) == msg
    assert got.arrays == [P.ArraySpec(a.dtype.name, list(a.shape)) for a in arrays]
    for a, b in zip(arrays, got_arrays, strict=True):
        want = np.asarray(a, a.dtype.newbyteorder("<")).copy(order="C")  # keeps 0-d as 0-d
        assert b.dtype == want.dtype and b.shape == want.shape
        assert b.tobytes() == want.tobytes()


# --- live server -------------------------------------------------------------------------------

REPLY_TYPES = {
    "BadRequest",
    "UnsupportedProtocol",
    "UnknownModel",
    "BadShape",
    "BadDtype",
    "TooManyRows",
    "BadValue",
    "BadLegal",
    "Overloaded",
    "VersionUnavailable",
    "BadWeights",
    "BadVersion",
}
"""Error types bad input may get (docs/protocol.md §3.4; no shutdown or backend failures here)."""

ANSWER = {
    "eval": {("result", None)},
    "ping": {("pong", None)},
    "status": {("status_reply", None)},
    "pin": {("pin_ack", None)},
    "load": {("error", "BadWeights"), ("error", "BadVersion")},  # the blobs are not weights
    "traj": {("error", "BadRequest")},  # trajectories go to the learner
} | {op: {("error", "BadRequest")} for op in REPLY_OPS}
"""(op, error type) an unmutated message of each op gets."""


def live_cases(rng: random.Random, first_id: int, count: int) -> list[Case]:
    """``count`` messages (ids from ``first_id``): one in ten a valid ``eval`` kept for
    checking, the rest near-valid (mutated or not) and random bytes."""
    cases: list[Case] = []
    rid = first_id
    while len(cases) < count:
        rid += 1
        pick = rng.random()
        if pick < 0.1:
            obs = positions(rng.randint(1, 4), seed=rid)
            if rng.random() < 0.3:
                obs = obs.astype(np.float32)
            case = Case([msgpack.packb(eval_header(rid, obs)), obs.tobytes()], op="eval")
            case.mutated, case.obs = False, obs
        elif pick < 0.95:
            case = near_valid(rng, rid)
        else:
            case = Case([rng.randbytes(rng.randrange(64)) for _ in range(rng.randint(1, 4))])
        cases.append(case)
    return cases


Reply = tuple[bool, dict[str, Any], list[np.ndarray]]


def split_reply(frames: list[bytes]) -> Reply:
    """(delimited, header, arrays) of a reply, read with msgpack and numpy only."""
    delimited = not frames[0] and len(frames) > 1
    body = frames[1:] if delimited else frames
    header = msgpack.unpackb(body[0], strict_map_key=False)
    specs = header.get("arrays", [])
    assert len(specs) == len(body) - 1, header
    arrays = [
        np.frombuffer(buf, np.dtype(s["dtype"]).newbyteorder("<")).reshape(s["shape"])
        for s, buf in zip(specs, body[1:], strict=True)
    ]
    return delimited, header, arrays


def check_attribution(cases: list[Case], replies: list[Reply]) -> None:
    """The multiset of reply ids is the multiset of ids the spec reads from the headers sent
    (where a header allows two readings, one of them); each delimited message came back
    delimited."""
    got = Counter(h["id"] for _, h, _ in replies)
    exact: Counter[int | None] = Counter()
    either: Counter[int | None] = Counter()
    for c in cases:
        readings = attributable_ids(c.body[0])
        if len(readings) == 1:
            exact.update(readings)
        else:
            either.update(readings - {None})
    assert not exact - got, "messages whose id got no reply"
    rest = got - exact  # one reply per two-reading header: its id, or None
    assert rest.total() == either.total()
    assert all(k is None or n <= either[k] for k, n in rest.items()), rest
    assert sum(d for d, _, _ in replies) == sum(
        not c.frames[0] and len(c.frames) > 1 for c in cases
    )


def check_answers(cases: list[Case], replies: list[Reply], ref: Reference) -> None:
    """Unmutated messages get their op's answer; every ``result`` has consistent shapes; the
    valid evals get the model's numbers for their rows. (A mutated id can equal another
    message's: only ids that one message of the batch may claim are matched here.)"""
    by_id: dict[int | None, list[Reply]] = {}
    for r in replies:
        by_id.setdefault(r[1]["id"], []).append(r)
    claims = Counter(rid for c in cases for rid in attributable_ids(c.body[0]))
    for _, h, arrays in replies:
        if h["op"] == "result":
            logits, value = arrays
            assert logits.dtype == value.dtype == np.float32
            assert logits.shape == (value.shape[0], NET.num_actions) and value.shape[0] >= 1
    obs_rows, logits_rows, value_rows = [], [], []
    for case in cases:
        rid = attributable_id(case.body[0]) if not case.mutated else None
        if rid is None or claims[rid] > 1:
            continue
        ((_, h, arrays),) = by_id[rid]
        assert (h["op"], h.get("type")) in ANSWER[case.op], (case.op, h)
        if case.obs is not None:
            logits, value = arrays
            assert (h["version"], h["latest"]) == (0, 0)
            assert logits.shape == (len(case.obs), NET.num_actions)
            obs_rows.append(case.obs.astype(np.float32))
            logits_rows.append(logits)
            value_rows.append(value)
    assert obs_rows
    assert ref.rows_matching(
        np.concatenate(obs_rows), np.concatenate(logits_rows), np.concatenate(value_rows)
    ).all()


@pytest.mark.usefixtures("torch_one_thread")
async def test_live_server_answers_every_fuzzed_message(
    make_server: MakeServer, zmq_sockets: ZmqSockets, ref: Reference
) -> None:
    """A DEALER sends batches of generated messages and reads the replies. Per batch: exactly
    one reply per message (``replies + dropped == sent`` with ``dropped == 0``: a DEALER cannot
    send a message without a body), each with the id the spec attributes to its header, in the
    envelope it came in; one error count per error reply and one served request per result;
    valid evals served correctly among the junk; unmutated messages answered as their op is;
    the server still serving."""
    server = await make_server(max_batch_size=MAX_ROWS)
    sock = zmq_sockets.socket(zmq.DEALER)
    sock.setsockopt(zmq.RCVHWM, 0)  # a batch of replies may wait unread: never drop one
    sock.setsockopt(zmq.SNDHWM, 0)
    sock.connect(server.endpoint)
    raw = RawDealer(sock)
    rng = random.Random(20240611)
    sent = 0
    while sent < PLAN["live"]:
        cases = live_cases(rng, 1_000_000 + 10 * sent, min(LIVE_BATCH, PLAN["live"] - sent))
        before = server.status()
        for case in cases:
            await raw.send_frames(case.frames)
        replies = [split_reply(await raw.recv_frames(timeout_s=10.0)) for _ in cases]
        after = server.status()
        sent += len(cases)
        TALLY["live"] += len(cases)

        assert after["state"] == "serving", server.lifecycle.error
        dropped = after["dropped"] - before["dropped"]
        assert len(replies) + dropped == len(cases)
        assert dropped == 0
        errors = [h for _, h, _ in replies if h["op"] == "error"]
        assert after["errors"] - before["errors"] == len(errors)
        assert {h["type"] for h in errors} <= REPLY_TYPES
        results = sum(h["op"] == "result" for _, h, _ in replies)
        assert after["requests"] - before["requests"] == results
        check_attribution(cases, replies)
        check_answers(cases, replies, ref)
    assert await sock.poll(200) == 0, "a message got more than one reply"
    assert server.status()["state"] == "serving"


# --- the count ---------------------------------------------------------------------------------


def test_the_run_generated_enough_messages() -> None:
    """Every fuzz test above generated its planned count, and the file at least ``MIN_TOTAL``
    (runs after them: pytest keeps file order)."""
    missing = [name for name in PLAN if name not in TALLY]
    if missing:
        pytest.skip(f"fuzz tests not run in this session: {missing}")
    for name, planned in PLAN.items():
        assert TALLY[name] >= planned, (name, TALLY[name], planned)
    total = sum(TALLY.values())
    assert total >= MIN_TOTAL, f"{total} messages generated; CI needs {MIN_TOTAL}"


# --- regressions: inputs of bugs this file found ------------------------------------------------


def ping_with(shape: list[int], dtype: str = "uint8") -> list[bytes]:
    header = {"op": "ping", "id": 1, "arrays": [{"dtype": dtype, "shape": shape}]}
    return [msgpack.packb(header), bytes(math.prod(shape) * ITEMSIZE[dtype])]


def deep_field(depth: int = 2000) -> list[bytes]:
    return [b"\x83\xa2op\xa4ping\xa2id\x01\xa4nest" + b"\x91" * depth + b"\xc0"]


REGRESSIONS: dict[str, list[bytes]] = {
    "33-dimensions": ping_with([1] * 33),
    "zero-beside-2**63": ping_with([0, 2**63]),
    "zero-beside-overflow": ping_with([0, 2**62], "float64"),
    "deep-unknown-field": deep_field(),
    "deep-non-map": [b"\x91" * 2000 + b"\xc0"],
}
"""Minimal inputs of the bugs found: more than 32 dimensions, zero beside dimensions numpy
cannot size (both: numpy's ValueError escaped decode), headers nested ~1000 deep
(RecursionError escaped decode and request_id_of). Each killed the server's receive loop."""


@pytest.mark.parametrize("frames", list(REGRESSIONS.values()), ids=list(REGRESSIONS))
def test_regression_decode(frames: list[bytes]) -> None:
    """decode raises ``ProtocolError`` for them and request_id_of returns, never raises."""
    with pytest.raises(ProtocolError):
        P.decode(frames)
    P.request_id_of(frames[0])


@pytest.mark.parametrize("frames", list(REGRESSIONS.values()), ids=list(REGRESSIONS))
async def test_regression_live(
    make_server: MakeServer, zmq_sockets: ZmqSockets, frames: list[bytes]
) -> None:
    """The same inputs sent to a live server: a ``BadRequest`` reply, and it keeps serving."""
    server = await make_server()
    raw = zmq_sockets.dealer(server.endpoint)
    await raw.send_frames(frames)
    await wait_for(
        lambda: server.state != "serving" or bool(raw.sock.getsockopt(zmq.EVENTS) & zmq.POLLIN)
    )
    assert server.state == "serving", server.lifecycle.error
    reply, _ = await raw.recv()
    assert (reply["op"], reply["type"]) == ("error", "BadRequest")
    pong, _ = await raw.call({"op": "ping", "id": 2})
    assert pong["op"] == "pong"


def test_regression_round_trip_of_a_0d_array() -> None:
    """A 0-d array (shape ``[]``, which the wire format allows) must round-trip as 0-d."""
    _, (got,) = P.decode([bytes(f) for f in P.encode(P.Ping(id=1), [np.array(7, np.int32)])])
    assert got.shape == ()
