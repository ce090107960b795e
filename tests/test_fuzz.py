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

import hashlib
import math
import os
import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
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

MAX_ROWS = 16
LIVE_BATCH = 250
"""Messages sent before their replies are read."""

ITEMSIZE = {name: dt.itemsize for name, dt in P.DTYPES.items()}


# --- the spec's view of a header, independent of azserve ------------------------------------


def read_header(header: bytes, tolerant: bool = False) -> Any:
    """A header read with ``msgpack`` (not azserve). Tolerant: str that are not UTF-8 and
    reserved (negative) ext types are read too, as a lenient reader would."""
    if tolerant:
        return msgpack.unpackb(
            header,
            strict_map_key=False,
            use_list=False,
            unicode_errors="surrogateescape",
            ext_hook=lambda code, data: (code, data),
        )
    return msgpack.unpackb(header, strict_map_key=False, use_list=False)


def _id_in(obj: Any) -> int | None:
    rid = obj.get("id") if isinstance(obj, dict) else None
    return rid if isinstance(rid, int) and not isinstance(rid, bool) else None


def _plain(obj: Any) -> bool:
    """Every map key inside ``obj`` is a str or an int (what every msgpack reader can hold)."""
    stack = [obj]
    while stack:
        o = stack.pop()
        if isinstance(o, dict):
            if not all(isinstance(k, str | int) for k in o):
                return False
            stack.extend(o.values())
        elif isinstance(o, tuple):
            stack.extend(o)
    return True


def attributable_ids(header: bytes) -> set[int | None]:
    """The ids a reply to ``header`` may carry by docs/protocol.md §3.4 ("any msgpack map with
    an int id gets its id back"). Exactly one for a clean header (well-formed msgpack, str in
    UTF-8, map keys str or int, no reserved ext types). For one that is not, the spec does not
    say whether it still is "a msgpack map", so both readings are allowed: the id a lenient
    reader finds, or None."""
    try:
        obj = read_header(header)
    except Exception:  # noqa: BLE001 - not clean
        pass
    else:
        if _plain(obj):
            return {_id_in(obj)}
    try:
        return {_id_in(read_header(header, tolerant=True)), None}
    except Exception:  # noqa: BLE001 - no reader finds a map
        return {None}


def attributable_id(header: bytes) -> int | None:
    """The id of a clean header (see ``attributable_ids``)."""
    (rid,) = attributable_ids(header)
    return rid


_FIXED = {0xCA: 4, 0xCB: 8, 0xCC: 1, 0xCD: 2, 0xCE: 4, 0xCF: 8, 0xD0: 1, 0xD1: 2, 0xD2: 4}
_FIXED |= {0xD3: 8, 0xD4: 2, 0xD5: 3, 0xD6: 5, 0xD7: 9, 0xD8: 17}
_SIZED = {0xC4: (1, 0), 0xC5: (2, 0), 0xC6: (4, 0), 0xC7: (1, 1), 0xC8: (2, 1), 0xC9: (4, 1)}
_SIZED |= {0xD9: (1, 0), 0xDA: (2, 0), 0xDB: (4, 0)}
_CONTAINERS = {0xDC: (2, 1), 0xDD: (4, 1), 0xDE: (2, 2), 0xDF: (4, 2)}


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

FIELDS = (
    "op",
    "id",
    "arrays",
    "proto",
    "model",
    "version",
    "sha256",
    "client",
    "pins",
    "lease_s",
    "dtype",
    "shape",
)

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


# --- (b) near-valid messages, mutated ----------------------------------------------------------

REQUEST_OPS = ("eval", "load", "status", "ping", "pin", "traj")
REPLY_OPS = ("result", "loaded", "status_reply", "pong", "pin_ack", "traj_ack", "error")
INTS = (0, 1, -1, 2, 7, 255, -129, 2**15, 2**31 - 1, 2**31, -(2**31), 2**32, 2**53 + 1)
INTS += (2**62, 2**63 - 1, 2**63, -(2**63), 2**64 - 1)
FLOATS = (0.0, -0.0, 0.5, -1.0, 1e308, 5e-324, math.inf, -math.inf, math.nan)
STRINGS = ("", "eval", "ping", "default", "chess", "uint8", "-1", "\x00", "\u00e9\u4e2d\U0001f600")
BAD_DTYPES = ("complex64", "float128", "object", "<u1", ">f4", "U8", "", "int", "UINT8", "bool_")


def junk(rng: random.Random, depth: int = 0) -> Any:
    """A random msgpack-able value, biased to boundary values, nested a few levels at most."""
    kind = rng.randrange(10 if depth < 3 else 7)
    if kind == 0:
        return None
    if kind == 1:
        return rng.random() < 0.5
    if kind == 2:
        return rng.choice(INTS) if rng.random() < 0.7 else rng.randint(-(2**63), 2**64 - 1)
    if kind == 3:
        return rng.choice(FLOATS) if rng.random() < 0.7 else rng.uniform(-1e9, 1e9)
    if kind == 4:
        return rng.choice(STRINGS) if rng.random() < 0.5 else "s" * rng.randrange(40)
    if kind == 5:
        return rng.randbytes(rng.randrange(12))
    if kind == 6:
        return msgpack.ExtType(rng.randint(0, 127), rng.randbytes(rng.randrange(13)))
    if kind == 7:
        return [junk(rng, depth + 1) for _ in range(rng.randrange(4))]
    if kind == 8:
        return {rng.choice(FIELDS): junk(rng, depth + 1) for _ in range(rng.randrange(4))}
    return {rng.choice(INTS): junk(rng, depth + 1) for _ in range(rng.randrange(3))}


def spec(a: np.ndarray) -> dict[str, Any]:
    return {"dtype": a.dtype.name, "shape": list(a.shape)}


def valid_message(rng: random.Random, op: str, rid: int) -> tuple[dict[str, Any], list[bytes]]:
    """A correct message of ``op``, as a header map and its buffers."""
    if op == "eval":
        obs = positions(rng.randint(1, 4), seed=rng.getrandbits(32))
        if rng.random() < 0.3:
            obs = obs.astype(np.float32)
        return eval_header(rid, obs), [obs.tobytes()]
    if op == "load":
        n = rng.randrange(48)
        blob = bytes(n)  # one blob per version, so no two loads of a version differ
        header = {"op": op, "id": rid, "proto": 1, "model": "default", "version": 1 + n}
        header |= {
            "sha256": hashlib.sha256(blob).hexdigest(),
            "arrays": [{"dtype": "uint8", "shape": [n]}],
        }
        return header, [blob]
    if op in ("status", "ping"):
        return {"op": op, "id": rid, "proto": 1}, []
    if op == "pin":
        pins = {0: rng.randrange(3)} if rng.random() < 0.8 else {}
        header = {"op": op, "id": rid, "proto": 1, "model": "default", "pins": pins}
        return header | {
            "client": f"fuzz-{rng.randrange(4)}",
            "lease_s": rng.choice((0, 1.0, 5)),
        }, []
    if op == "traj":
        t = rng.randint(1, 3)
        arrays = [
            positions(t, seed=rng.getrandbits(32)),
            np.full((t, NET.num_actions), 1 / NET.num_actions, np.float32),
            np.ones(t, np.float32),
        ]
        header = {"op": op, "id": rid, "proto": 1, "actor": "fuzz", "game_id": rid}
        header |= {"game": "tictactoe", "version": 0, "length": t, "result": 1.0}
        return header | {"arrays": [spec(a) for a in arrays]}, [a.tobytes() for a in arrays]
    fields: dict[str, dict[str, Any]] = {
        "result": {"version": 0, "latest": 0},
        "loaded": {"model": "default", "version": 0, "latest": 0, "load_ms": 1.5},
        "status_reply": {"status": {"rows": 1}},
        "pong": {"latest": 0, "server_id": "x"},
        "pin_ack": {"versions": [0]},
        "traj_ack": {"game_id": 1},
        "error": {"type": "BadRequest", "message": "no"},
    }
    header = {"op": op, "id": rid, **fields[op]}
    if op != "result":
        return header, []
    arrays = [np.zeros((1, NET.num_actions), np.float32), np.zeros(1, np.float32)]
    return header | {"arrays": [spec(a) for a in arrays]}, [a.tobytes() for a in arrays]


Mutator = Callable[[random.Random, dict[str, Any], list[bytes]], None]


def _specs(h: dict[str, Any]) -> list[dict[str, Any]]:
    arrays = h.get("arrays")
    return [s for s in arrays if isinstance(s, dict)] if isinstance(arrays, list) else []


def drop_key(rng: random.Random, h: dict[str, Any], bufs: list[bytes]) -> None:
    if h:
        del h[rng.choice(list(h))]


def add_key(rng: random.Random, h: dict[str, Any], bufs: list[bytes]) -> None:
    key = rng.choice((*FIELDS, "zz_unknown", "", "ID", "Op"))
    h[key if rng.random() < 0.9 else rng.choice(INTS)] = junk(rng)


def retype_field(rng: random.Random, h: dict[str, Any], bufs: list[bytes]) -> None:
    if h:
        h[rng.choice(list(h))] = junk(rng)


def change_op(rng: random.Random, h: dict[str, Any], bufs: list[bytes]) -> None:
    ops = (*REQUEST_OPS, *REPLY_OPS, "train", "", "EVAL", "eval ", "ping\x00")
    h["op"] = rng.choice(ops) if rng.random() < 0.85 else junk(rng)


def garble_id(rng: random.Random, h: dict[str, Any], bufs: list[bytes]) -> None:
    choice = rng.randrange(6)
    if choice == 0:
        h.pop("id", None)
    else:
        h["id"] = (None, True, 1.5, str(h.get("id")), rng.choice(INTS), junk(rng))[choice]


def bad_value(rng: random.Random, h: dict[str, Any], bufs: list[bytes]) -> None:
    """A value of the right type that a server must refuse (or, sometimes, accept)."""
    key, values = rng.choice(
        (
            ("proto", (0, 2, -1, 2**63, 2**64 - 1)),
            ("model", ("chess", "", "default ", "m" * 300)),
            ("version", (-1, -2, 0, 7, 2**63 - 1, -(2**63), 2**64 - 1)),
            ("lease_s", (-1.0, 600.5, math.nan, math.inf, 0, 600)),
            ("pins", ({}, {-1: 1}, {0: -1}, {7: 1}, {2**63 - 1: 2**63 - 1}, {"0": 1})),
            ("sha256", ("", "0" * 64, "zz", "A" * 64)),
            ("client", ("", "c" * 1000)),
        )
    )
    h[key] = rng.choice(values)


def mutate_dtype(rng: random.Random, h: dict[str, Any], bufs: list[bytes]) -> None:
    if specs := _specs(h):
        rng.choice(specs)["dtype"] = rng.choice((*ITEMSIZE, *BAD_DTYPES))


def mutate_shape(rng: random.Random, h: dict[str, Any], bufs: list[bytes]) -> None:
    """Huge, negative, empty, long (past numpy's 32 dimensions), non-int shapes, and shapes
    one semantic check away from valid."""
    if not (specs := _specs(h)):
        return
    rows = rng.choice((0, 1, 2, MAX_ROWS, MAX_ROWS + 1, 300))
    c, hh, w = NET.obs_shape
    shapes: list[Any] = [
        [],
        [-1],
        [rows, -c, hh, w],
        [2**62, 2**62],
        [2**64 - 1, 0],
        [0, 2**63],
        [0, 2**62, 2**62],
        [0] * rng.randint(2, 40),
        [1] * rng.randint(2, 40),
        [rows, c, hh, w],
        [rows, c + 1, hh, w],
        [rows, c * hh * w],
        [rows, c, hh, w, 1],
        [float(rows), c, hh, w],
        [[rows], c, hh, w],
        "[1, 2, 3, 3]",
        [True, c, hh, w],
        [rng.choice(INTS) for _ in range(rng.randrange(1, 5))],
    ]
    rng.choice(specs)["shape"] = rng.choice(shapes)


def mutate_arrays(rng: random.Random, h: dict[str, Any], bufs: list[bytes]) -> None:
    arrays = h.get("arrays") if isinstance(h.get("arrays"), list) else []
    first = arrays[0] if arrays else {"dtype": "uint8", "shape": [1]}
    h["arrays"] = rng.choice(
        (
            junk(rng),
            [],
            [first] * rng.randint(2, 20),  # up to past the 16-array limit
            [junk(rng)],
            [{"dtype": "uint8"}],
            [{"shape": [1]}],
            [dict(first, extra=junk(rng))] if isinstance(first, dict) else [first],
            [*arrays, first],
        )
    )


def mutate_frames(rng: random.Random, h: dict[str, Any], bufs: list[bytes]) -> None:
    """Frame count or byte size broken: drop, add, resize, scramble a buffer."""
    choice = rng.randrange(5)
    if choice == 0 and bufs:
        bufs.pop(rng.randrange(len(bufs)))
    elif choice == 1:
        bufs.insert(rng.randrange(len(bufs) + 1), rng.randbytes(rng.randrange(40)))
    elif choice == 2 and bufs:
        i = rng.randrange(len(bufs))
        bufs[i] = bufs[i][: max(0, len(bufs[i]) - rng.randint(1, 8))]
    elif choice == 3 and bufs:
        i = rng.randrange(len(bufs))
        bufs[i] += rng.randbytes(rng.randint(1, 8))
    elif bufs:
        i = rng.randrange(len(bufs))
        bufs[i] = rng.randbytes(len(bufs[i]))  # NaN floats, 0..255 planes


def fit_frames(rng: random.Random, h: dict[str, Any], bufs: list[bytes]) -> None:
    """Make frame count and sizes match the (mutated) specs, so that the message reaches the
    checks past the byte size rule."""
    arrays = h.get("arrays")
    if not isinstance(arrays, list):
        return
    del bufs[len(arrays) :]
    bufs.extend(b"" for _ in range(len(arrays) - len(bufs)))
    for i, s in enumerate(arrays):
        if (
            not isinstance(s, dict)
            or not isinstance(s.get("dtype"), str)
            or s["dtype"] not in ITEMSIZE
        ):
            continue
        shape = s.get("shape")
        if isinstance(shape, list) and all(type(d) is int and d >= 0 for d in shape):
            n = math.prod(shape) * ITEMSIZE[s["dtype"]]
            if n <= 1 << 14:
                bufs[i] = bufs[i][:n].ljust(n, b"\x01")


def oversize(rng: random.Random, h: dict[str, Any], bufs: list[bytes]) -> None:
    h["pad"] = "p" * rng.choice((P.MAX_HEADER_BYTES - 200, P.MAX_HEADER_BYTES + 1, 70_000))


HEADER_MUTATORS: tuple[Mutator, ...] = (
    drop_key,
    add_key,
    retype_field,
    change_op,
    garble_id,
    bad_value,
    bad_value,
    mutate_dtype,
    mutate_shape,
    mutate_shape,
    mutate_arrays,
    mutate_frames,
    mutate_frames,
    oversize,
)


def mutate_bytes(rng: random.Random, head: bytes) -> bytes:
    """The packed header broken at the byte level: truncated, bytes flipped, trailing bytes,
    or a deeply nested unknown field spliced in (the ``deep-nesting`` bug)."""
    choice = rng.randrange(8)
    if choice == 0:
        return head[: rng.randrange(len(head))]
    if choice in (1, 2):
        b = bytearray(head)
        for _ in range(rng.randint(1, 3)):
            b[rng.randrange(len(b))] = rng.randrange(256)
        return bytes(b)
    if choice == 3:
        return head + rng.randbytes(rng.randint(1, 4))
    if choice in (4, 5) and 0x80 <= head[0] < 0x8F:  # nested junk, shallow
        depth = rng.randint(1, 50)
    elif 0x80 <= head[0] < 0x8F:  # past the recursion limit
        depth = rng.randint(2000, 5000)
    else:
        return head
    nest = b"\x91" * depth + msgpack.packb(junk(rng))
    field_ = msgpack.packb("nest") + nest
    return bytes([head[0] + 1]) + (field_ + head[1:] if rng.random() < 0.5 else head[1:] + field_)


@dataclass
class Case:
    """One generated message: ``frames`` as a DEALER sends them (an empty first frame followed
    by more is a REQ-style delimiter, docs/protocol.md §1)."""

    frames: list[bytes]
    op: str = ""
    mutated: bool = True
    obs: np.ndarray | None = field(default=None, repr=False)

    @property
    def body(self) -> list[bytes]:
        """What the server decodes: the frames past a delimiter (docs/protocol.md §1)."""
        return self.frames[1:] if not self.frames[0] and len(self.frames) > 1 else self.frames


def near_valid(rng: random.Random, rid: int) -> Case:
    """A correct message of a random op with 0-3 mutations (header map, frames, bytes)."""
    op = rng.choice((*REQUEST_OPS, *REQUEST_OPS, *REPLY_OPS))
    h, bufs = valid_message(rng, op, rid)
    n = rng.choice((0, 1, 1, 1, 2, 2, 3))
    for _ in range(n):
        rng.choice(HEADER_MUTATORS)(rng, h, bufs)
    if n and rng.random() < 0.3:
        fit_frames(rng, h, bufs)
    head = msgpack.packb(h)
    if n and rng.random() < 0.15:
        head = mutate_bytes(rng, head)
    delimiter = [b""] if rng.random() < 0.05 else []
    return Case([*delimiter, head, *bufs], op, mutated=n > 0)


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
