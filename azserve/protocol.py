"""The wire protocol: typed messages and the two pure functions that turn them into ZeroMQ
frames and back. Transport code never builds headers by hand.

A message is ``[header, buf_0, ..., buf_n]``. The header is a msgpack map whose ``op`` key names
the message type; its ``arrays`` field lists one ``{"dtype", "shape"}`` spec per raw buffer frame
that follows (C-contiguous, little-endian). See docs/protocol.md for the full specification.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Union

import msgspec
import numpy as np

from azserve.errors import ProtocolError

PROTOCOL_VERSION = 1
"""Bumped on any incompatible change; requests carry it in ``proto``."""

DTYPES: dict[str, np.dtype] = {
    name: np.dtype(name).newbyteorder("<")
    for name in (
        "uint8",
        "int8",
        "int16",
        "int32",
        "int64",
        "float16",
        "float32",
        "float64",
        "bool",
    )
}
"""Dtypes allowed in array frames, by wire name (numpy names, little-endian)."""

MAX_ARRAYS = 16
"""Most buffer frames one message may carry."""

MAX_HEADER_BYTES = 1 << 16
"""Largest header frame accepted."""

MAX_DIMS = 32
"""Most dimensions one array may have (numpy's own limit)."""


class ArraySpec(msgspec.Struct, frozen=True):
    """Describes one raw buffer frame: numpy dtype name and shape."""

    dtype: str
    shape: list[int]


class Message(msgspec.Struct, tag_field="op", kw_only=True):
    """Base of every message. ``id`` is chosen by the requester and echoed in the reply."""

    id: int | None = None
    arrays: list[ArraySpec] = []


# --- requests (client -> server) -------------------------------------------------------------


class EvalRequest(Message, tag="eval", kw_only=True):
    """Evaluate positions. arrays: ``[obs [rows, C, H, W] uint8 (or float32)]``, or sparse
    ``[obs, offsets int32 [rows + 1], actions int16|int32 [n]]``: each row's legal actions,
    ragged (``azserve.sparse``), whose logits alone come back.

    ``version`` is the pinned weights version, or -1 for the latest.
    """

    proto: int = PROTOCOL_VERSION
    model: str = "default"
    version: int = -1


class LoadWeights(Message, tag="load", kw_only=True):
    """Load weights as version ``version``. arrays: ``[blob [nbytes] uint8]`` (safetensors).

    ``sha256`` is the hex digest of the blob. Acked by ``Loaded`` once the version is live.
    """

    proto: int = PROTOCOL_VERSION
    model: str = "default"
    version: int
    sha256: str


class StatusRequest(Message, tag="status", kw_only=True):
    """Ask for the server's status (versions, queues, counters)."""

    proto: int = PROTOCOL_VERSION


class Ping(Message, tag="ping", kw_only=True):
    """Liveness probe; also how clients learn the latest version and the server instance."""

    proto: int = PROTOCOL_VERSION


class PinUpdate(Message, tag="pin", kw_only=True):
    """Lease heartbeat: ``pins`` maps version -> live games pinned to it on this client.

    Replaces the client's previous pins; the lease expires ``lease_s`` seconds after the last
    update unless renewed.
    """

    proto: int = PROTOCOL_VERSION
    model: str = "default"
    client: str
    pins: dict[int, int]
    lease_s: float = 5.0


class Trajectory(Message, tag="traj", kw_only=True):
    """A finished game. arrays: ``[obs [T,C,H,W] uint8, policy [T,A] float32, outcome [T] float32]``
    followed by one array per name in ``targets`` (``azserve.targets``); with ``sparse``, the
    policy (and a ``reply`` target) is three arrays, ``offsets int32 [T+1], index int16 [n],
    weight float16 [n]`` (``azserve.trajarrays``).

    ``outcome[t]`` is the final result from the side to move at position t (+1 win, 0 draw, -1 loss).
    """

    proto: int = PROTOCOL_VERSION
    actor: str
    game_id: int
    game: str
    version: int
    length: int
    result: float
    resigned: bool = False
    moves: int = 0
    """Moves played in the game, recorded or not (playout cap randomization records only the
    fully searched ones); 0 (older senders) means ``length``."""
    targets: list[str] | msgspec.UnsetType = msgspec.UNSET
    """Names of the target arrays after the first three (``azserve.targets``: ``ownership``,
    ``score``, ``reply``, in that order). Unset, the key is not sent at all: a trajectory
    without targets has the bytes it had before they existed."""
    sparse: bool | msgspec.UnsetType = msgspec.UNSET
    """The policies are sparse rows (a wide game's: ``azserve.sparse.SparseRows``). Unset
    (dense), the key is not sent: a dense trajectory has the bytes it had before."""


# --- replies (server -> client) --------------------------------------------------------------


class EvalReply(Message, tag="result", kw_only=True):
    """Evaluation results. arrays: ``[logits [rows, A] float32, value [rows] float32]``; to a
    sparse request ``[logits float16 [n], value [rows] float32]``, ``logits[j]`` the logit of
    the request's ``actions[j]`` (its ``offsets`` split them into rows)."""

    version: int
    latest: int


class Loaded(Message, tag="loaded", kw_only=True):
    """Weights version ``version`` is live. ``load_ms`` from receipt to live."""

    model: str
    version: int
    latest: int
    load_ms: float


class StatusReply(Message, tag="status_reply", kw_only=True):
    """Server status as a free-form map (versions, queues, counters)."""

    status: dict[str, Any]


class Pong(Message, tag="pong", kw_only=True):
    """Reply to ``Ping``. ``server_id`` changes when the server restarts."""

    latest: int
    server_id: str


class PinAck(Message, tag="pin_ack", kw_only=True):
    """Reply to ``PinUpdate``; lists the versions the server holds."""

    versions: list[int]


class TrajectoryAck(Message, tag="traj_ack", kw_only=True):
    """Trajectory ``game_id`` is stored (or was already: ``duplicate``)."""

    game_id: int
    duplicate: bool = False


class ErrorReply(Message, tag="error", kw_only=True):
    """The request failed. ``type`` is one of the error types in docs/protocol.md."""

    type: str
    message: str


AnyMessage = Union[  # noqa: UP007 - msgspec needs a Union object here
    EvalRequest,
    LoadWeights,
    StatusRequest,
    Ping,
    PinUpdate,
    Trajectory,
    EvalReply,
    Loaded,
    StatusReply,
    Pong,
    PinAck,
    TrajectoryAck,
    ErrorReply,
]

_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(AnyMessage)
_loose_decoder = msgspec.msgpack.Decoder()

Frame = bytes | memoryview


def spec_of(array: np.ndarray) -> ArraySpec:
    """The wire spec of a numpy array (its dtype must be one of ``DTYPES``)."""
    name = array.dtype.name
    if name not in DTYPES:
        raise ProtocolError(f"dtype {name} cannot travel on the wire (allowed: {sorted(DTYPES)})")
    return ArraySpec(dtype=name, shape=list(array.shape))


def encode(msg: Message, arrays: Sequence[np.ndarray] = ()) -> list[Frame]:
    """Message + arrays -> frames ``[header, buf_0, ...]``. Buffers are not copied when the
    arrays are already C-contiguous and little-endian. ``msg`` is not modified (the header
    sent is a copy carrying the arrays' specs)."""
    bufs: list[Frame] = []
    specs = []
    for a in arrays:
        a = np.asarray(a)
        if not a.flags.c_contiguous:  # (ascontiguousarray would turn a 0-d array into 1-d)
            a = a.copy(order="C")
        if a.dtype.byteorder == ">":
            a = a.astype(a.dtype.newbyteorder("<"))
        specs.append(spec_of(a))
        bufs.append(memoryview(a).cast("B") if a.size else b"")  # type: ignore[arg-type]
    return [_encoder.encode(msgspec.structs.replace(msg, arrays=specs)), *bufs]


def decode(frames: Sequence[Frame]) -> tuple[Message, list[np.ndarray]]:
    """Frames -> (message, arrays). Arrays are zero-copy read-only views of the frames.

    Raises ``ProtocolError`` for anything malformed: undecodable header, unknown op, wrong
    field types, frame count not matching ``arrays``, unknown dtype, byte size not matching
    dtype x shape.
    """
    if not frames:
        raise ProtocolError("empty message")
    header = frames[0]
    if len(header) > MAX_HEADER_BYTES:
        raise ProtocolError(f"header of {len(header)} bytes exceeds {MAX_HEADER_BYTES}")
    try:
        msg = _decoder.decode(header)
    except msgspec.DecodeError as exc:
        raise ProtocolError(f"bad header: {exc}") from exc
    except RecursionError:  # msgpack nested ~1000 deep, well under the header limit
        raise ProtocolError("bad header: nested too deeply") from None
    specs = msg.arrays
    if len(specs) > MAX_ARRAYS:
        raise ProtocolError(f"{len(specs)} arrays exceed the limit of {MAX_ARRAYS}")
    if len(frames) - 1 != len(specs):
        raise ProtocolError(
            f"header describes {len(specs)} array frame(s) but {len(frames) - 1} followed"
        )
    return msg, [_to_array(spec, buf, i) for i, (spec, buf) in enumerate(zip(specs, frames[1:]))]


def _to_array(spec: ArraySpec, buf: Frame, index: int) -> np.ndarray:
    dtype = DTYPES.get(spec.dtype)
    if dtype is None:
        raise ProtocolError(
            f"arrays[{index}]: unknown dtype {spec.dtype!r} (allowed: {sorted(DTYPES)})"
        )
    if any(d < 0 for d in spec.shape):
        raise ProtocolError(f"arrays[{index}]: negative dimension in shape {spec.shape}")
    if len(spec.shape) > MAX_DIMS:
        raise ProtocolError(f"arrays[{index}]: {len(spec.shape)} dimensions (at most {MAX_DIMS})")
    # Python ints: an absurd declared shape cannot overflow, it just fails to match.
    expected = math.prod(spec.shape) * dtype.itemsize
    if expected != len(buf):
        raise ProtocolError(
            f"arrays[{index}]: {spec.dtype}{spec.shape} needs {expected} bytes, frame has {len(buf)}"
        )
    try:
        return np.frombuffer(buf, dtype=dtype).reshape(spec.shape)
    except ValueError as exc:  # an empty array numpy cannot size, e.g. shape [0, 2**63]
        raise ProtocolError(f"arrays[{index}]: shape {spec.shape}: {exc}") from None


def request_id_of(header: Frame) -> int | None:
    """Best-effort request id from a header that failed to decode, so the error can be
    attributed. None when the header is not a msgpack map with an integer ``id``."""
    try:
        obj = _loose_decoder.decode(header)
    except (msgspec.DecodeError, ValueError, TypeError, RecursionError):
        return None
    rid = obj.get("id") if isinstance(obj, dict) else None
    return rid if isinstance(rid, int) and not isinstance(rid, bool) else None
