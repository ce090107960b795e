"""The wire format as two pure functions, tested without sockets: round trips of every message
type, zero-copy array frames, plain-msgpack headers, and one clean ``ProtocolError`` for each
kind of malformed message."""

from __future__ import annotations

import msgpack
import msgspec
import numpy as np
import pytest

from azserve import protocol as P
from azserve.errors import ProtocolError

pytestmark = pytest.mark.timeout(30)

OBS = np.arange(2 * 2 * 3 * 3, dtype=np.uint8).reshape(2, 2, 3, 3)
LOGITS = np.linspace(-1, 1, 2 * 9, dtype=np.float32).reshape(2, 9)
VALUE = np.array([0.25, -0.5], np.float32)

# One instance of every message type, with the arrays it carries.
MESSAGES: list[tuple[P.Message, list[np.ndarray]]] = [
    (P.EvalRequest(id=1, model="ttt", version=3), [OBS]),
    (P.LoadWeights(id=2, version=4, sha256="ab" * 32), [np.frombuffer(b"blob", np.uint8)]),
    (P.StatusRequest(id=3), []),
    (P.Ping(id=4), []),
    (P.PinUpdate(id=5, client="pid-1", pins={0: 3, 2: 1}, lease_s=2.5), []),
    (
        P.Trajectory(
            id=6, actor="a1", game_id=9, game="tictactoe", version=2, length=2, result=-1.0
        ),
        [OBS, np.full((2, 9), 1 / 9, np.float32), np.array([1.0, -1.0], np.float32)],
    ),
    (P.EvalReply(id=7, version=3, latest=4), [LOGITS, VALUE]),
    (P.Loaded(id=8, model="default", version=4, latest=4, load_ms=12.5), []),
    (P.StatusReply(id=9, status={"rows": 10, "versions": {"latest": 0}}), []),
    (P.Pong(id=10, latest=4, server_id="abc"), []),
    (P.PinAck(id=11, versions=[0, 4]), []),
    (P.TrajectoryAck(id=12, game_id=9, duplicate=True), []),
    (P.ErrorReply(id=None, type="BadRequest", message="no"), []),
]
OPS = [
    "eval",
    "load",
    "status",
    "ping",
    "pin",
    "traj",
    "result",
    "loaded",
    "status_reply",
    "pong",
    "pin_ack",
    "traj_ack",
    "error",
]


def good_eval_header(**fields: object) -> dict[str, object]:
    header: dict[str, object] = {
        "op": "eval",
        "id": 5,
        "arrays": [{"dtype": "uint8", "shape": [2, 2, 3, 3]}],
    }
    header.update(fields)
    return header


def decode_raw(header: dict[str, object] | bytes, *buffers: bytes) -> tuple[P.Message, list]:
    head = header if isinstance(header, bytes) else msgpack.packb(header)
    return P.decode([head, *buffers])


@pytest.mark.parametrize(("msg", "arrays"), MESSAGES, ids=OPS)
def test_round_trip(msg: P.Message, arrays: list[np.ndarray]) -> None:
    frames = P.encode(msg, arrays)
    assert len(frames) == 1 + len(arrays)
    got, got_arrays = P.decode([bytes(f) for f in frames])
    assert msgspec.structs.replace(got, arrays=[]) == msg  # the header carries the specs
    assert [s.shape for s in got.arrays] == [list(a.shape) for a in arrays]
    assert type(got) is type(msg)
    for a, b in zip(arrays, got_arrays, strict=True):
        assert b.dtype == a.dtype and b.shape == a.shape
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize(
    ("op", "msg", "arrays"), [(op, *m) for op, m in zip(OPS, MESSAGES, strict=True)], ids=OPS
)
def test_header_is_plain_msgpack(op: str, msg: P.Message, arrays: list[np.ndarray]) -> None:
    """Any msgpack library reads the header: a map with ``op``, ``id`` and ``arrays``."""
    header = msgpack.unpackb(P.encode(msg, arrays)[0], strict_map_key=False)
    assert header["op"] == op
    assert header["id"] == msg.id
    assert header["arrays"] == [{"dtype": a.dtype.name, "shape": list(a.shape)} for a in arrays]


def test_minimal_plain_header_takes_defaults() -> None:
    """A client may omit every field that has a default (proto, model, version, id)."""
    msg, arrays = decode_raw(good_eval_header(id=None), OBS.tobytes())
    assert isinstance(msg, P.EvalRequest)
    assert (msg.proto, msg.model, msg.version, msg.id) == (1, "default", -1, None)
    np.testing.assert_array_equal(arrays[0], OBS)
    msg, _ = decode_raw({"op": "ping"})
    assert isinstance(msg, P.Ping) and msg.id is None


def test_unknown_header_keys_are_ignored() -> None:
    """Forward compatibility: a newer client's extra fields do not break an older server."""
    header = good_eval_header(priority=3)
    header["arrays"] = [{"dtype": "uint8", "shape": [2, 2, 3, 3], "order": "C"}]
    msg, arrays = decode_raw(header, OBS.tobytes())
    assert isinstance(msg, P.EvalRequest) and arrays[0].shape == (2, 2, 3, 3)


def test_decode_is_zero_copy() -> None:
    frame = bytearray(OBS.tobytes())
    _, (obs,) = decode_raw(good_eval_header(), frame)
    assert np.shares_memory(obs, np.frombuffer(frame, np.uint8))
    frame[0] = 200  # the array is a view of the frame, not a copy
    assert obs[0, 0, 0, 0] == 200


def test_decoded_arrays_of_bytes_frames_are_read_only() -> None:
    _, (obs,) = decode_raw(good_eval_header(), OBS.tobytes())
    assert not obs.flags.writeable


def test_encode_is_zero_copy_for_contiguous_arrays() -> None:
    frames = P.encode(P.EvalReply(version=0, latest=0), [LOGITS, VALUE])
    assert np.shares_memory(np.frombuffer(frames[1], np.float32), LOGITS)
    assert np.shares_memory(np.frombuffer(frames[2], np.float32), VALUE)


def test_encode_makes_strided_and_big_endian_arrays_c_order_little_endian() -> None:
    strided = np.asfortranarray(LOGITS)
    big = VALUE.astype(">f4")
    frames = P.encode(P.EvalReply(version=0, latest=0), [strided, big])
    assert bytes(frames[1]) == LOGITS.tobytes(order="C")
    assert bytes(frames[2]) == VALUE.astype("<f4").tobytes()
    header = msgpack.unpackb(frames[0])
    assert [a["dtype"] for a in header["arrays"]] == ["float32", "float32"]
    _, (logits, value) = P.decode([bytes(f) for f in frames])
    np.testing.assert_array_equal(logits, LOGITS)
    np.testing.assert_array_equal(value, VALUE)


@pytest.mark.parametrize("name", sorted(P.DTYPES))
def test_every_wire_dtype_round_trips(name: str) -> None:
    a = np.arange(6).astype(name).reshape(2, 3)
    _, (b,) = P.decode([bytes(f) for f in P.encode(P.EvalRequest(), [a])])
    assert b.dtype.name == name
    np.testing.assert_array_equal(a, b)


def test_empty_array_round_trips() -> None:
    a = np.zeros((0, 2, 3, 3), np.uint8)
    frames = P.encode(P.EvalRequest(), [a])
    assert bytes(frames[1]) == b""
    _, (b,) = P.decode(frames)
    assert b.shape == (0, 2, 3, 3)


def test_encode_refuses_dtype_not_on_the_wire() -> None:
    with pytest.raises(ProtocolError, match="complex64 cannot travel"):
        P.encode(P.EvalRequest(), [np.zeros(2, np.complex64)])


# --- malformed messages: each is a ProtocolError that names the problem -----------------------


@pytest.mark.parametrize(
    ("header", "buffers", "match"),
    [
        (good_eval_header(), [], "describes 1 array frame.* but 0 followed"),
        (good_eval_header(), [OBS.tobytes(), b"x"], "describes 1 array frame.* but 2 followed"),
        (good_eval_header(), [OBS.tobytes()[:-1]], r"needs 36 bytes, frame has 35"),
        (
            good_eval_header(arrays=[{"dtype": "float32", "shape": [2, 2, 3, 3]}]),
            [OBS.tobytes()],
            r"float32\[2, 2, 3, 3\] needs 144 bytes, frame has 36",
        ),
        (
            good_eval_header(arrays=[{"dtype": "complex64", "shape": [2]}]),
            [b"\0" * 16],
            "unknown dtype 'complex64'",
        ),
        (
            good_eval_header(arrays=[{"dtype": ">f4", "shape": [1]}]),
            [b"\0" * 4],
            "unknown dtype '>f4'",
        ),
        (
            good_eval_header(arrays=[{"dtype": "uint8", "shape": [-1, 36]}]),
            [OBS.tobytes()],
            "negative dimension",
        ),
        (
            good_eval_header(arrays=[{"dtype": "uint8", "shape": [2**62, 2**62, 2**62]}]),
            [OBS.tobytes()],
            "needs .* bytes, frame has 36",
        ),
        (
            good_eval_header(arrays=[{"dtype": "uint8", "shape": [0]}] * (P.MAX_ARRAYS + 1)),
            [b""] * (P.MAX_ARRAYS + 1),
            "exceed the limit",
        ),
        ({"op": "launch", "id": 1}, [], "bad header"),
        ({"id": 1}, [], "bad header"),
        (good_eval_header(version="latest"), [OBS.tobytes()], r"bad header.*\$\.version"),
        (good_eval_header(arrays=[{"dtype": "uint8"}]), [OBS.tobytes()], "bad header"),
        ({"op": "load", "id": 1, "version": 1}, [], r"bad header.*sha256"),
        ({"op": "eval", "id": 1.5}, [], r"bad header.*\$\.id"),
    ],
    ids=[
        "missing-frame",
        "extra-frame",
        "short-buffer",
        "size-not-dtype-x-shape",
        "unknown-dtype",
        "big-endian-dtype-name",
        "negative-dim",
        "absurd-declared-size",
        "too-many-arrays",
        "unknown-op",
        "no-op",
        "wrong-field-type",
        "spec-without-shape",
        "missing-required-field",
        "float-id",
    ],
)
def test_malformed_message(header: dict[str, object], buffers: list[bytes], match: str) -> None:
    with pytest.raises(ProtocolError, match=match):
        decode_raw(header, *buffers)


@pytest.mark.parametrize(
    "head",
    [
        b"",
        b"\xc1garbage",
        msgpack.packb(good_eval_header())[:-3],
        msgpack.packb([1, 2, 3]),
        msgpack.packb("eval"),
    ],
    ids=["empty", "garbage", "truncated-msgpack", "array-not-map", "string-not-map"],
)
def test_undecodable_header(head: bytes) -> None:
    with pytest.raises(ProtocolError, match="bad header"):
        P.decode([head])


def test_header_size_limit() -> None:
    huge = msgpack.packb(good_eval_header(model="m" * P.MAX_HEADER_BYTES))
    with pytest.raises(ProtocolError, match="exceeds"):
        P.decode([huge, OBS.tobytes()])


def test_empty_message() -> None:
    with pytest.raises(ProtocolError, match="empty"):
        P.decode([])


@pytest.mark.parametrize(
    ("head", "rid"),
    [
        (msgpack.packb({"op": "eval", "id": 42, "arrays": "nonsense"}), 42),
        (msgpack.packb({"op": "unknown", "id": 7}), 7),
        (msgpack.packb({"id": 2**64 - 1}), 2**64 - 1),
        (msgpack.packb({"op": "eval", "id": None}), None),
        (msgpack.packb({"op": "eval", "id": "7"}), None),
        (msgpack.packb({"op": "eval", "id": True}), None),
        (msgpack.packb({"op": "eval"}), None),
        (msgpack.packb([42]), None),
        (msgpack.packb({"id": 42})[:-1], None),
        (b"\xc1", None),
        (b"", None),
    ],
    ids=[
        "bad-fields",
        "unknown-op",
        "uint64",
        "null",
        "string",
        "bool",
        "missing",
        "array",
        "truncated",
        "garbage",
        "empty",
    ],
)
def test_request_id_of(head: bytes, rid: int | None) -> None:
    assert P.request_id_of(head) == rid


def test_encode_does_not_modify_its_message() -> None:
    msg = P.EvalRequest(id=1, model="m", version=3)
    frames = P.encode(msg, [np.zeros((2, 2, 3, 3), np.uint8)])
    assert msg.arrays == []  # the caller's message is untouched
    decoded, arrays = P.decode(frames)
    assert [a.shape for a in decoded.arrays] == [[2, 2, 3, 3]] and arrays[0].shape == (2, 2, 3, 3)
