"""The words of the line engines' commands (``azserve.engines.protocol``): ``go``'s limits and
clocks, the options ``setoption`` sets, and values as centipawns; ``ProtocolError`` for
anything malformed. No session state: the dialects (``azserve.engines.uci``, ``usi``) and the
tests use them as they are."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

MARGIN_MS = 30
"""Kept back from every time budget for the reply's way to the GUI (``MoveOverhead``)."""
MAX_NODES = 1_000_000


class ProtocolError(Exception):
    """A malformed or illegal command: its message follows ``info string error``."""


@dataclass
class Limits:
    """One ``go``'s limits: simulations, milliseconds, or neither (until ``stop``)."""

    nodes: int | None = None
    movetime_ms: float | None = None
    infinite: bool = False
    ponder: bool = False
    """``go ponder``: search without limits until ``ponderhit`` (then these limits, counted
    from it) or ``stop``."""
    note: str = ""
    """What the engine made of a limit it has no such thing for (``depth``, ``mate``)."""


def depth_nodes(depth: int) -> int:
    """The node budget of ``go depth N``: a tree's depth grows with the log of its nodes, so
    each ply doubles the budget, from 16 at depth 1 up to 2**17 (about 131,000)."""
    return 2 ** min(max(depth, 1) + 3, 17)


def read_go(
    words: Sequence[str], keys: Sequence[str], flags: Sequence[str], signed: Sequence[str] = ()
) -> tuple[dict[str, int], set[str]]:
    """``go``'s words as (``key N`` numbers, bare flags); ProtocolError for an unknown word, a
    missing or bad number, or a negative one (but for the ``signed`` keys: clocks run out)."""
    nums: dict[str, int] = {}
    seen: set[str] = set()
    i = 0
    while i < len(words):
        w = words[i]
        if w in flags:
            seen.add(w)
        elif w in keys:
            if i + 1 >= len(words):
                raise ProtocolError(f"go: {w} needs a number")
            try:
                nums[w] = int(words[i + 1])
            except ValueError:
                raise ProtocolError(f"go: {w} {words[i + 1]!r} is not a whole number") from None
            if nums[w] < 0 and w not in signed:
                raise ProtocolError(f"go: {w} {nums[w]} is negative")
            i += 1
        else:
            raise ProtocolError(f"go: unknown limit {w!r}")
        i += 1
    return nums, seen


def clock_ms(left: int, inc: int, togo: int, margin_ms: float, byoyomi: int = 0) -> float:
    """The milliseconds a move may take with ``left`` on the clock: a ``togo``-th of it plus
    three quarters of the increment, never more than half of what is left, plus the whole
    ``byoyomi`` (USI's time per move once the main time is spent), less ``margin_ms``."""
    share = max(left, 0) / max(togo, 1) + 0.75 * inc
    return max(1.0, min(share, max(left, 0) / 2) + byoyomi - margin_ms)


@dataclass(frozen=True)
class Option:
    """An engine option as the handshake announces it."""

    name: str
    kind: str
    """``spin``, ``combo`` or ``check``."""
    default: Any
    low: int = 0
    high: int = 0
    choices: tuple[str, ...] = ()
    help: str = ""

    def line(self) -> str:
        if self.kind == "spin":
            return f"option name {self.name} type spin default {self.default} min {self.low} max {self.high}"
        if self.kind == "check":
            return f"option name {self.name} type check default {str(self.default).lower()}"
        return f"option name {self.name} type combo default {self.default} " + " ".join(
            f"var {c}" for c in self.choices
        )

    def parse(self, text: str) -> Any:
        """The option's value from ``setoption``'s text; ProtocolError when out of range."""
        if self.kind == "spin":
            try:
                v = int(text)
            except ValueError:
                raise ProtocolError(
                    f"setoption {self.name}: {text!r} is not a whole number"
                ) from None
            if not self.low <= v <= self.high:
                raise ProtocolError(f"setoption {self.name}: {v} is not in {self.low}..{self.high}")
            return v
        if self.kind == "check":
            if text.lower() not in ("true", "false"):
                raise ProtocolError(f"setoption {self.name}: {text!r}: expected true or false")
            return text.lower() == "true"
        if text.lower() not in self.choices:
            raise ProtocolError(
                f"setoption {self.name}: {text!r}: expected one of {', '.join(self.choices)}"
            )
        return text.lower()


def centipawns(value: float) -> int:
    """Leela's map from a value in (-1, 1) to centipawns (clipped to +-12,800)."""
    v = max(-0.999, min(0.999, value))
    return int(round(max(-12800.0, min(12800.0, 111.714640912 * math.tan(1.5620688421 * v)))))
