"""Time controls from GTP (``time_settings``, ``kgs-time_settings``, ``time_left``) and the time
``genmove`` may spend on one move.

The rule (``Clock.allowance``): with main time left, the move gets ``main / max(MIN_MOVES,
empty points / 2)`` seconds (the moves we may still have to play, estimated from the empty
points), plus a byo-yomi period's share when there is one; in byo-yomi, a Japanese period's
``period x SAFETY`` seconds, or a Canadian period's ``time left / stones left x SAFETY``; an
absolute clock with no main time left gets ``MIN_SECONDS``. ``SAFETY`` (0.8) leaves a margin
for the move's transmission and the net's first evaluation. ``genmove`` searches until its
simulation budget (``--sims``) or that allowance runs out, whichever is first, so a fast clock
means fewer visits and no clock means exactly ``--sims``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from azserve.engines.gtp.board import GtpError

MIN_MOVES = 10
"""The fewest moves main time is shared between."""
SAFETY = 0.8
"""The share of a byo-yomi period (or of the time per Canadian stone) a move may use."""
MIN_SECONDS = 0.05
"""What a move gets when the clock has nothing left to give."""


def _number(text: str, what: str, integer: bool = False) -> float:
    try:
        x = int(text) if integer else float(text)
    except ValueError:
        kind = "an integer" if integer else "a number"
        raise GtpError(f"syntax error: {what} {text!r} is not {kind}") from None
    if not math.isfinite(x) or x < 0:
        raise GtpError(f"syntax error: {what} {text!r} must be a finite number >= 0")
    return x


@dataclass
class Side:
    """One colour's clock as the controller last told it."""

    main: float = 0.0
    """Main time left, seconds."""
    period: float = 0.0
    """Byo-yomi: the time left in the current period (Canadian: for its stones)."""
    stones: int = 0
    """Canadian: stones still to play in the period; Japanese byo-yomi: periods left."""
    in_byoyomi: bool = False


@dataclass
class Clock:
    """The time settings and each colour's clock."""

    kind: str = "none"
    """``none``, ``absolute``, ``canadian`` or ``byoyomi``."""
    main: float = 0.0
    period: float = 0.0
    stones: int = 0
    """Canadian: stones per period; byo-yomi: the number of periods."""
    sides: list[Side] = field(default_factory=lambda: [Side(), Side()])

    def set(self, kind: str, main: float, period: float, stones: int) -> None:
        self.kind, self.main, self.period, self.stones = kind, main, period, stones
        self.sides = [Side(main, period, stones, main == 0), Side(main, period, stones, main == 0)]

    def time_settings(self, args: list[str]) -> None:
        """GTP's ``time_settings main byo_yomi_time byo_yomi_stones`` (Canadian); byo-yomi
        time 0 with main time: absolute; byo-yomi time > 0 with 0 stones: no limit."""
        if len(args) < 3:
            raise GtpError("syntax error: expected time_settings MAIN BYO_YOMI_TIME STONES")
        main = _number(args[0], "main time")
        period = _number(args[1], "byo-yomi time")
        stones = int(_number(args[2], "byo-yomi stones", integer=True))
        if period > 0 and stones == 0:
            self.set("none", 0, 0, 0)
        elif period == 0:
            self.set("absolute" if main > 0 else "none", main, 0, 0)
        else:
            self.set("canadian", main, period, stones)

    def kgs_time_settings(self, args: list[str]) -> None:
        """``kgs-time_settings none | absolute MAIN | canadian MAIN PERIOD STONES | byoyomi
        MAIN PERIOD PERIODS``."""
        if not args:
            raise GtpError(
                "syntax error: expected kgs-time_settings none|absolute|canadian|byoyomi"
            )
        kind = args[0].lower()
        need = {"none": 1, "absolute": 2, "canadian": 4, "byoyomi": 4}
        if kind not in need:
            raise GtpError(f"syntax error: unknown time system {args[0]!r}")
        if len(args) < need[kind]:
            raise GtpError(f"syntax error: {kind} needs {need[kind] - 1} values")
        if kind == "none":
            self.set("none", 0, 0, 0)
        elif kind == "absolute":
            self.set("absolute", _number(args[1], "main time"), 0, 0)
        else:
            main = _number(args[1], "main time")
            period = _number(args[2], "period time")
            count = int(_number(args[3], "stones" if kind == "canadian" else "periods", True))
            if period == 0 or count == 0:
                raise GtpError(f"syntax error: {kind} needs a period and a count above 0")
            self.set(kind, main, period, count)

    def time_left(self, color: int, args: list[str]) -> None:
        """``time_left COLOR TIME STONES``: STONES 0 = main time (TIME left), else byo-yomi
        with TIME left in the period and STONES to play (KGS's byo-yomi: periods left)."""
        if len(args) < 2:
            raise GtpError("syntax error: expected time_left COLOR TIME STONES")
        left = _number(args[0], "time")
        stones = int(_number(args[1], "stones", integer=True))
        side = self.sides[color]
        if stones == 0:
            side.main, side.in_byoyomi = left, False
            if self.kind == "byoyomi" and left == 0:
                side.in_byoyomi = True
        else:
            side.period, side.stones, side.in_byoyomi = left, stones, True
            side.main = 0.0

    def spent(self, color: int, seconds: float) -> None:
        """``color`` used ``seconds`` on a move: its main time shrinks (until the controller's
        next ``time_left`` says otherwise)."""
        side = self.sides[color]
        if self.kind != "none" and not side.in_byoyomi:
            side.main = max(0.0, side.main - seconds)
            side.in_byoyomi = side.main == 0 and self.kind in ("byoyomi", "canadian")

    def allowance(self, color: int, empty_points: int) -> float | None:
        """Seconds ``color`` may spend on its next move; None without a time limit."""
        if self.kind == "none":
            return None
        side = self.sides[color]
        if not side.in_byoyomi and side.main > 0:
            share = side.main / max(MIN_MOVES, empty_points / 2)
            if self.kind == "byoyomi":
                share += self.period * SAFETY / MIN_MOVES
            elif self.kind == "canadian":
                share += self.period / max(1, self.stones) * SAFETY / MIN_MOVES
            return max(MIN_SECONDS, share)
        if self.kind == "byoyomi":
            return max(MIN_SECONDS, self.period * SAFETY)
        if self.kind == "canadian":
            left = side.period if side.in_byoyomi else self.period
            stones = side.stones if side.in_byoyomi and side.stones else self.stones
            return max(MIN_SECONDS, left / max(1, stones) * SAFETY)
        return MIN_SECONDS  # absolute, nothing left


__all__ = ["MIN_MOVES", "MIN_SECONDS", "SAFETY", "Clock", "Side"]
