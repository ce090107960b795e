"""A live status display for long-running commands (``azserve train``, ``azserve launch``).

On a terminal: a block of labelled rows, redrawn in place (``rich.live``), never wider than 80
columns; notes (``note``) print above it and stay; ``close`` leaves the last frame on screen, so
what follows (the final summary) never overwrites it. Elsewhere (a pipe, a log file): each
update is plain lines, each with a timestamp.

The display knows nothing of what it shows: callers pass ``Row(label, text)`` lists, and use
``human``/``pct``/``sig`` to round numbers for people.
"""

from __future__ import annotations

import logging
import math
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import IO, Any

WIDTH = 80
"""Most columns a frame uses, whatever the terminal's width."""


@dataclass(frozen=True)
class Row:
    """One line of the display: a short label and its text."""

    label: str
    text: str


class Display:
    """``with Display(live=...) as d: d.update(rows); d.note("...")``."""

    def __init__(self, live: bool | None = None, stream: IO[str] | None = None) -> None:
        self.stream = stream if stream is not None else sys.stdout
        self.live = self.stream.isatty() if live is None else live
        self._live: Any = None
        self._console: Any = None
        self._handlers: list[tuple[logging.StreamHandler[Any], Any]] = []

    def __enter__(self) -> Display:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> None:
        """Begin the live area (a terminal only; otherwise nothing to do)."""
        if not self.live or self._live is not None:
            return
        from rich.console import Console
        from rich.live import Live

        self._console = Console(file=self.stream, width=min(WIDTH, _columns(self.stream)))
        self._live = Live(console=self._console, auto_refresh=False, redirect_stderr=True)
        self._live.start()
        # Log records would scribble over the live area: route the terminal handlers through
        # the live console (sys.stderr is its proxy now), which prints them above the frame.
        for h in logging.getLogger().handlers:
            if type(h) is logging.StreamHandler and h.stream in (sys.__stderr__, sys.__stdout__):
                self._handlers.append((h, h.setStream(sys.stderr)))

    def update(self, rows: Sequence[Row]) -> None:
        """Show ``rows``: redraw the live area, or print them as timestamped lines."""
        if self._live is not None:
            self._live.update(_grid(rows), refresh=True)
            return
        stamp = time.strftime("%H:%M:%S")
        width = max((len(r.label) for r in rows), default=0)
        for r in rows:
            self.stream.write(f"{stamp} {r.label:<{width}}  {r.text}\n")
        self.stream.flush()

    def note(self, text: str) -> None:
        """A line that stays: above the live area, or timestamped."""
        if self._live is not None:
            self._console.print(text, markup=False, highlight=False, soft_wrap=True)
            return
        self.stream.write(f"{time.strftime('%H:%M:%S')} {text}\n")
        self.stream.flush()

    def close(self) -> None:
        """End the live area, its last frame left on screen. Further notes print plainly."""
        if self._live is None:
            return
        self._live.stop()
        for h, previous in self._handlers:
            h.setStream(previous)
        self._handlers.clear()
        self._live = None
        self.live = False


def _columns(stream: IO[str]) -> int:
    import os

    try:
        columns = os.get_terminal_size(stream.fileno()).columns
    except (OSError, ValueError):
        return WIDTH
    return columns if columns > 0 else WIDTH  # a fresh pseudo-terminal says 0


def _grid(rows: Sequence[Row]) -> Any:
    from rich.table import Table
    from rich.text import Text

    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column(overflow="fold")
    for r in rows:  # Text, not markup: a progress bar's "[###...]" is no style tag
        grid.add_row(Text(r.label), Text(r.text))
    return grid


def human(x: float) -> str:
    """A count for people: ``1234`` -> ``1,234``, ``56789`` -> ``56.8k``, ``3.2e6`` -> ``3.2M``."""
    if not math.isfinite(x):
        return "-"
    a = abs(x)
    if a >= 1e9:
        return f"{x / 1e9:.3g}G"
    if a >= 1e6:
        return f"{x / 1e6:.3g}M"
    if a >= 1e4:
        return f"{x / 1e3:.3g}k"
    if a >= 100 or float(x).is_integer():
        return f"{x:,.0f}"
    return f"{x:.3g}"


def pct(fraction: float) -> str:
    """``0.8123`` -> ``81%``."""
    return f"{fraction:.0%}" if math.isfinite(fraction) else "-"


def sig(x: Any, digits: int = 3) -> Any:
    """Floats (also inside dicts and lists) rounded to ``digits`` significant digits, for
    log lines: ``0.98672566371681`` -> ``0.987``. Other values pass through."""
    if isinstance(x, dict):
        return {k: sig(v, digits) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [sig(v, digits) for v in x]
    if isinstance(x, float) and math.isfinite(x) and x != 0:
        return round(x, max(0, digits - 1 - math.floor(math.log10(abs(x)))))
    return x


def bar(fraction: float, width: int = 20) -> str:
    """``[#####.....]`` for a fraction in [0, 1]."""
    n = int(min(1.0, max(0.0, fraction)) * width)
    return "[" + "#" * n + "." * (width - n) + "]"
