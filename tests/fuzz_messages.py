"""Fuzz messages for ``tests/test_fuzz.py``: the spec's reading of a header, independent of
azserve (what id an error reply must carry), and near-valid messages of every op with their
mutators. Built with plain ``msgpack``, as a client in another language would."""

from __future__ import annotations

import hashlib
import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import msgpack
import numpy as np

from azserve import protocol as P
from tests.conftest import (
    NET,
    eval_header,
    positions,
)

ITEMSIZE = {name: dt.itemsize for name, dt in P.DTYPES.items()}
"""Bytes per element of each wire dtype."""
MAX_ROWS = 16
"""The live server's ``max_batch_size``: the shape mutators step across it."""
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
