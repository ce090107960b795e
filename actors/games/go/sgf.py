"""SGF (FF[4]) for Go records: a writer (``sgf_record``; ``sgf`` for a refereed game) and a small
reader: the main line of the first game tree of a file, as
``loadsgf`` needs it (ours, GnuGo's, most editors').

It reads the grammar (``(;A[x]B[y][z];...(;...)(;...))``: nodes, properties with one or more
values, escapes in values, variations, of which only the first is followed) and keeps what a
Go position needs: ``SZ``, ``KM``, ``HA``, setup stones (``AB``, ``AW``, ``AE``, compressed
point lists ``aa:cc`` included), moves (``B``/``W``, ``[]`` or ``[tt]`` = pass), ``PL``, and
the texts a reader may want (``PB``, ``PW``, ``RE``, ``DT``, ``C``). Nothing is evaluated; a
malformed file is an ``SgfError`` naming where it went wrong.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from actors.games.base import Game


class SgfError(ValueError):
    """A file that is not SGF, or not Go SGF we can read; the message says where."""


Node = dict[str, list[str]]


@dataclass
class Record:
    """A Go game's main line."""

    size: int = 19
    komi: float | None = None
    handicap: int = 0
    setup: list[tuple[int, int]] = field(default_factory=list)
    """Stones placed before the first move: (colour 0 black / 1 white, point)."""
    moves: list[tuple[int, int | None]] = field(default_factory=list)
    """(colour, point), point None for a pass; points are ``row * N + col``, row 0 at the
    bottom (SGF's row ``a`` is the top)."""
    to_play: int | None = None
    """``PL`` of the root: the side to move first, when set."""
    info: dict[str, str] = field(default_factory=dict)
    """The root's PB, PW, RE, DT, GN, RU and C, where present."""
    comments: list[str] = field(default_factory=list)
    """Each move's ``C`` ("" where none), aligned with ``moves``."""


def parse_nodes(text: str) -> list[Node]:
    """The main line's nodes (the first variation at every fork)."""
    i, n = 0, len(text)
    start = text.find("(")
    if start < 0 or text.find(";", start) < 0:
        raise SgfError("not SGF: no '(;' game tree")
    i = start + 1
    nodes: list[Node] = []
    depth = 1  # parentheses open
    skipping = 0  # > 0: inside a later variation we do not follow
    done_main = False  # a variation of the main line has ended
    while i < n and depth > 0:
        ch = text[i]
        if ch in " \t\r\n":
            i += 1
        elif ch == "(":
            depth += 1
            if done_main:
                skipping += 1
            i += 1
        elif ch == ")":
            depth -= 1
            if skipping:
                skipping -= 1
            else:
                done_main = True  # the first variation is read: skip its siblings
            i += 1
        elif ch == ";":
            node, i = _node(text, i + 1)
            if not skipping and not done_main:
                nodes.append(node)
        else:
            raise SgfError(f"unexpected {ch!r} at offset {i}")
    if depth > 0:
        raise SgfError("unterminated game tree: a ')' is missing")
    return nodes


def _node(text: str, i: int) -> tuple[Node, int]:
    node: Node = {}
    n = len(text)
    while i < n:
        while i < n and text[i] in " \t\r\n":
            i += 1
        j = i
        while j < n and (text[j].isalpha()):
            j += 1
        if j == i:
            return node, i
        ident = "".join(c for c in text[i:j] if c.isupper())  # FF[3]'s lower-case letters go
        if not ident:
            raise SgfError(f"bad property name {text[i:j]!r} at offset {i}")
        i = j
        values = []
        while True:
            while i < n and text[i] in " \t\r\n":
                i += 1
            if i >= n or text[i] != "[":
                break
            value, i = _value(text, i + 1)
            values.append(value)
        if not values:
            raise SgfError(f"property {ident} without a value at offset {i}")
        node.setdefault(ident, []).extend(values)
    return node, i


def _value(text: str, i: int) -> tuple[str, int]:
    out = []
    n = len(text)
    while i < n:
        ch = text[i]
        if ch == "\\":
            if i + 1 < n and text[i + 1] == "\n":  # a soft line break
                i += 2
                continue
            if i + 1 < n:
                out.append(text[i + 1])
            i += 2
        elif ch == "]":
            return "".join(out), i + 1
        else:
            out.append(ch)
            i += 1
    raise SgfError("unterminated property value: a ']' is missing")


def read(text: str) -> Record:
    """The Go record in ``text``; SgfError for a file that is not one."""
    nodes = parse_nodes(text)
    root = nodes[0] if nodes else {}
    if root.get("GM", ["1"])[0].strip() not in ("1", ""):
        raise SgfError(f"GM[{root['GM'][0]}]: not a Go record (GM[1])")
    rec = Record()
    if "SZ" in root:
        sz = root["SZ"][0].split(":")[0].strip()
        if not sz.isdigit() or not 2 <= int(sz) <= 25:
            raise SgfError(f"SZ[{root['SZ'][0]}]: a square board of 2..25 is needed")
        rec.size = int(sz)
    if "KM" in root:
        try:
            rec.komi = float(root["KM"][0])
        except ValueError:
            raise SgfError(f"KM[{root['KM'][0]}] is not a number") from None
    if "HA" in root and root["HA"][0].strip().isdigit():
        rec.handicap = int(root["HA"][0])
    if "PL" in root:
        rec.to_play = _color(root["PL"][0])
    for key in ("PB", "PW", "RE", "DT", "GN", "RU", "C"):
        if key in root:
            rec.info[key] = root[key][0]
    for k, node in enumerate(nodes):
        for key, color in (("AB", 0), ("AW", 1)):
            for v in node.get(key, []):
                rec.setup += [(color, p) for p in _points(v, rec.size)]
        if "AE" in node:
            gone = {p for v in node["AE"] for p in _points(v, rec.size)}
            rec.setup = [(c, p) for c, p in rec.setup if p not in gone]
        for key, color in (("B", 0), ("W", 1)):
            if key in node:
                if (node.get("AB") or node.get("AW")) and rec.moves:
                    raise SgfError(f"node {k}: setup stones after the first move")
                rec.moves.append((color, _point(node[key][0], rec.size)))
                rec.comments.append(node.get("C", [""])[0] if k else "")
    return rec


def _color(v: str) -> int:
    t = v.strip().upper()
    if t not in ("B", "W"):
        raise SgfError(f"PL[{v}]: expected B or W")
    return "BW".index(t)


def _point(v: str, size: int) -> int | None:
    """An SGF point (``dd``) as ``row * N + col``; None for a pass (``[]``, or ``tt`` on
    boards up to 19x19)."""
    v = v.strip()
    if not v or (v == "tt" and size <= 19):
        return None
    if len(v) != 2 or not v.isalpha():
        raise SgfError(f"bad point [{v}]")
    col, row_from_top = ord(v[0].lower()) - 97, ord(v[1].lower()) - 97
    if not (0 <= col < size and 0 <= row_from_top < size):
        raise SgfError(f"point [{v}] is off the {size}x{size} board")
    return (size - 1 - row_from_top) * size + col


def _points(v: str, size: int) -> list[int]:
    """A point or a compressed rectangle ``aa:cc``."""
    if ":" not in v:
        p = _point(v, size)
        if p is None:
            raise SgfError(f"setup stone [{v}] is not a point")
        return [p]
    a, b = v.split(":", 1)
    pa, pb = _point(a, size), _point(b, size)
    if pa is None or pb is None:
        raise SgfError(f"setup rectangle [{v}] is not two points")
    r0, r1 = sorted((pa // size, pb // size))
    c0, c1 = sorted((pa % size, pb % size))
    return [r * size + c for r in range(r0, r1 + 1) for c in range(c0, c1 + 1)]


def sgf(game: Game, r: Any, black: str, white: str, date: str = "") -> str:
    """A GameRecord (a match's GameResult is one) as SGF (FF[4]); Go only. A disputed game's
    reason and every scorer's verdict go in its comment."""
    comment = ""
    if r.why or len(r.scores) > 1:
        scores = ", ".join(f"{k} {v}" for k, v in r.scores.items())
        comment = "; ".join(x for x in (r.why, scores) if x)
    return sgf_record(game, r.moves, black, white, date, r.result, comment=comment)


def sgf_record(
    game: Game,
    moves: Sequence[int],
    black: str,
    white: str,
    date: str = "",
    result: str = "",
    comment: str = "",
    comments: Sequence[str] = (),
    colors: Sequence[int] = (),
    setup: Sequence[tuple[int, int]] = (),
    event: str = "",
) -> str:
    """A Go game as SGF (FF[4]): the players' names, the date (``DT``, ISO), the result
    (``RE``, left out while the game goes on), the game's comment, setup stones (``AB``/``AW``:
    (colour, point) each, handicap included, with ``HA`` for black-only setups), the moves
    (``colors``: each move's colour, for games where a side played twice; default alternating
    from black, or white after a handicap), and each move's comment (``comments``, aligned with
    ``moves``; "" for none), and the event (``EV``) it was played for. ``read`` reads it
    back."""
    n = game.size  # type: ignore[attr-defined]
    letters = "abcdefghijklmnopqrstuvwxy"

    def point(a: int) -> str:
        row, col = divmod(a, n)
        return letters[col] + letters[n - 1 - row]

    props = (
        f"(;GM[1]FF[4]CA[UTF-8]AP[azserve]SZ[{n}]KM[{game.komi:g}]RU[Tromp-Taylor]"  # type: ignore[attr-defined]
        f"PB[{_escape(black)}]PW[{_escape(white)}]"
    )
    if result:
        props += f"RE[{result}]"
    if date:
        props += f"DT[{date}]"
    if event:
        props += f"EV[{_escape(event)}]"
    if comment:
        props += f"C[{_escape(comment)}]"
    for side, key in ((0, "AB"), (1, "AW")):
        stones = [point(p) for c, p in setup if c == side]
        if stones:
            props += key + "".join(f"[{x}]" for x in stones)
    if setup and all(c == 0 for c, _ in setup):
        props += f"HA[{len(setup)}]"
    first = 1 if setup and all(c == 0 for c, _ in setup) else 0
    body = []
    for i, a in enumerate(moves):
        mover = "BW"[colors[i] if i < len(colors) else (first + i) % 2]
        node = f";{mover}[]" if a == game.pass_action else f";{mover}[{point(a)}]"
        if i < len(comments) and comments[i]:
            node += f"C[{_escape(comments[i])}]"
        body.append(node)
    return props + "".join(body) + ")\n"


def _escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("]", "\\]")


__all__ = ["Record", "SgfError", "parse_nodes", "read", "sgf", "sgf_record"]
