"""A search's report as GTP shows it: for each root move searched, its visits, win rate,
prior and principal variation, as Leela Zero's ``lz-analyze`` and KataGo's ``kata-analyze``
print them (and as Sabaki and Lizzie parse them).

The search itself is the engines' (``azserve.engines.search``: the checkpoint's algorithm on
the compiled core); ``from_progress`` turns what it reports (``actors.search.SearchReport``)
into this module's ``Report``. Win rates are the side to move's, in [0, 1]: (Q + 1) / 2 for the
values in [-1, 1] the net and the search use. No score field is printed (``scoreLead`` is
omitted from ``kata-analyze``).
"""

from __future__ import annotations

from dataclasses import dataclass

from actors.games.go.rules import Go
from azserve.engines.search import Progress


@dataclass(frozen=True)
class MoveInfo:
    """One root move after a search."""

    move: int
    """The action (``row * N + col``; ``N * N`` = pass)."""
    visits: int
    winrate: float
    """The side to move's win rate after this move, in [0, 1]."""
    prior: float
    """The net's policy for it, in [0, 1]."""
    pv: tuple[int, ...]
    """The principal variation starting with ``move`` (the most visited child at each step)."""


@dataclass(frozen=True)
class Report:
    """A search's state: the root moves searched, the one to play first, and the root's
    win rate."""

    infos: tuple[MoveInfo, ...]
    winrate: float
    """The side to move's win rate at the root (its mean value over the search)."""
    visits: int
    """The root's visits (its own evaluation and every simulation through it)."""
    nps: int = 0
    """Simulations per second of the search so far (0: not measured)."""
    nodes: int = 0
    """Nodes the search tree holds."""

    @property
    def best(self) -> int:
        return self.infos[0].move


def from_progress(progress: Progress) -> Report:
    """The ``Report`` of a search: the searched moves, the one the search plays first, then by
    visits (ties to the higher prior); the priors' best alone before any simulation."""
    r = progress.report
    order = sorted(range(len(r.actions)), key=lambda i: (-int(r.visits[i]), -float(r.priors[i])))
    first = [i for i in order if int(r.actions[i]) == progress.best]
    order = first + [i for i in order if i not in first and r.visits[i] > 0]
    infos = tuple(
        MoveInfo(
            int(r.actions[i]),
            int(r.visits[i]),
            (float(r.values[i]) + 1) / 2 if r.visits[i] else (r.root_value + 1) / 2,
            float(r.priors[i]),
            r.pvs[i],
        )
        for i in order
    )
    return Report(infos, (r.root_value + 1) / 2, r.root_visits, progress.nps, r.nodes)


ANALYZE_KEYS = {"interval", "maxmoves", "minmoves", "ownership", "ownershipstdev", "pvvisits",
                "pvedgevisits", "movesownership", "rootinfo"}  # fmt: skip
"""The key-value pairs ``lz-analyze``/``kata-analyze`` take. ``interval`` and ``maxmoves`` are
honoured; the others are accepted and have no effect (no ownership or per-move ownership is
printed: the default net has an ownership head, but the served path returns the policy and
the value only; ``minmoves``: only searched moves are listed)."""


@dataclass(frozen=True)
class AnalyzeArgs:
    """An analysis command's options."""

    interval_cs: int = 0
    """Centiseconds between two ``info`` lines (0: none while searching)."""
    max_moves: int = 0
    """The most moves per line (0: every searched move)."""

    @property
    def interval(self) -> float:
        return self.interval_cs / 100

    def line(self, game: Go, r: Report, kata: bool) -> str:
        return (kata_line if kata else lz_line)(game, r, self.max_moves)


def parse_analyze_args(args: list[str]) -> AnalyzeArgs:
    """``[INTERVAL] [KEY VALUE]...`` (the colour already taken off); GtpError naming a bad
    key or value."""
    from azserve.engines.gtp.board import GtpError

    opts: dict[str, int] = {}
    if args and args[0].isdigit():
        opts["interval"], args = int(args[0]), args[1:]
    if len(args) % 2:
        raise GtpError(f"syntax error: {args[-1]!r} has no value")
    for key, value in zip(args[::2], args[1::2]):
        k = key.lower()
        if k not in ANALYZE_KEYS:
            shown = key if len(key) <= 20 else key[:20] + "..."
            raise GtpError(f"syntax error: unknown analysis key {shown!r}")
        if k in ("interval", "maxmoves", "minmoves", "pvvisits", "pvedgevisits"):
            if not value.isdigit() or int(value) > 10**9:
                raise GtpError(f"syntax error: {key} {value!r} must be an integer >= 0")
            opts[k] = int(value)
        elif value.lower() not in ("true", "false"):
            raise GtpError(f"syntax error: {key} {value!r} must be true or false")
    return AnalyzeArgs(opts.get("interval", 0), opts.get("maxmoves", 0))


def lz_line(game: Go, r: Report, max_moves: int = 0) -> str:
    """One ``lz-analyze`` line: ``info move D4 visits 12 winrate 5123 prior 1234 order 0 pv D4
    Q16 ...`` for each move (win rate and prior x 10000, as integers; no ``lcb``: the search
    keeps no variance to bound it with)."""
    parts = []
    for k, m in enumerate(r.infos[: max_moves or None]):
        wr, prior = round(m.winrate * 10000), round(m.prior * 10000)
        parts.append(
            f"info move {game.format_move(m.move)} visits {m.visits} winrate {wr} "
            f"prior {prior} order {k} pv {' '.join(map(game.format_move, m.pv))}"
        )
    return " ".join(parts)


def kata_line(game: Go, r: Report, max_moves: int = 0) -> str:
    """One ``kata-analyze`` line: ``info move D4 visits 12 utility 0.02 winrate 0.51 prior
    0.12 order 0 pv D4 Q16 ...`` (floats in [0, 1]; utility = 2 x winrate - 1, the search's
    own value; no score fields: the served path returns no score; no ``lcb``)."""
    parts = []
    for k, m in enumerate(r.infos[: max_moves or None]):
        parts.append(
            f"info move {game.format_move(m.move)} visits {m.visits} "
            f"utility {2 * m.winrate - 1:.6f} winrate {m.winrate:.6f} prior {m.prior:.6f} "
            f"order {k} pv {' '.join(map(game.format_move, m.pv))}"
        )
    return " ".join(parts)


__all__ = [
    "ANALYZE_KEYS",
    "AnalyzeArgs",
    "MoveInfo",
    "Report",
    "from_progress",
    "kata_line",
    "lz_line",
    "parse_analyze_args",
]
