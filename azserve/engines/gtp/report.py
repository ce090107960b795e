"""The search behind ``genmove`` and the analysis commands, and what it reports: for each root
move searched, its visits, win rate, prior and principal variation, as Leela Zero's
``lz-analyze`` and KataGo's ``kata-analyze`` print them (and as Sabaki and Lizzie parse them).

The search is the Python PUCT (actors/mcts.py, the compiled search's reference), because the
analysis reads its whole tree: each root child's mean value, and the most visited line below
it. It runs in slices of ``SLICE`` simulations on the same tree (the tree is kept while the root
stays the same position), so a caller can report between slices, stop at a deadline, or be
cancelled by the next GTP command. Win rates are the side to move's, in [0, 1]: (Q + 1) / 2
for the values in [-1, 1] the net and the search use. The net has no score head: no score
field is printed (``scoreLead`` is omitted from ``kata-analyze``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from actors.games.go.rules import Go, GoState
from actors.mcts import MCTS
from actors.nodes import Node

SLICE = 16
"""Simulations between two looks at the clock (reports, deadlines, cancellation)."""

MAX_VISITS = 100_000
"""An open-ended analysis stops searching here (the tree's memory), and goes on reporting."""


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
    """A search's state: the root moves searched, best first, and the root's win rate."""

    infos: tuple[MoveInfo, ...]
    winrate: float
    """The side to move's win rate at the root (its mean value over the search)."""
    visits: int
    """The root's visits (its own evaluation and every simulation through it)."""

    @property
    def best(self) -> int:
        return self.infos[0].move


def report(root: Node, max_pv: int = 20) -> Report:
    """The report of a searched tree (``root`` expanded)."""
    assert root.actions is not None
    order = sorted(range(len(root.actions)), key=lambda i: (-root.n[i], -root.p[i]))
    infos = []
    for i in order:
        n = root.n[i]
        if n == 0:
            break
        q = root.w[i] / n  # for the root's side to move
        pv = [root.actions[i]]
        node = root.children[i]
        while node is not None and node.actions and len(pv) < max_pv:
            j = max(range(len(node.actions)), key=lambda k: (node.n[k], node.p[k]))  # type: ignore[union-attr]
            if node.n[j] == 0:
                break
            pv.append(node.actions[j])
            node = node.children[j]
        infos.append(MoveInfo(root.actions[i], n, (q + 1) / 2, root.p[i], tuple(pv)))
    if not infos:  # no simulation yet: the priors alone, best first
        i = order[0]
        infos.append(MoveInfo(root.actions[i], 0, 0.5, root.p[i], (root.actions[i],)))
    winrate = (root.value_sum / root.visits + 1) / 2 if root.visits else 0.5
    return Report(tuple(infos), winrate, root.visits)


class Searcher:
    """Runs the search for one engine: ``search(game, state, ...)`` -> Report. ``evaluate``:
    the net (``obs [C,H,W] uint8 -> (logits [A], value)``, awaited), e.g. an Agent's
    evaluator; ``mcts``: the engine's search settings (noise and temperature off)."""

    def __init__(self, evaluate: Any, mcts: Any, seed: int = 0) -> None:
        self.evaluate = evaluate
        self.mcts_cfg = replace(mcts, core="python", algorithm="puct", dirichlet_fraction=0.0)
        self.seed = seed
        self._tree: MCTS | None = None
        self._game: Go | None = None

    def _search_for(self, game: Go) -> MCTS:
        if self._tree is None or self._game is not game:
            self._tree = MCTS(game, self.mcts_cfg, np.random.default_rng(self.seed))
            self._game = game
        return self._tree

    async def search(
        self,
        game: Go,
        state: GoState,
        visits: int | None,
        deadline: float | None = None,
        on_slice: Callable[[Report], None] | None = None,
    ) -> Report:
        """Search ``state`` until the root has ``visits`` new simulations (None: until
        cancelled, or ``MAX_VISITS``) or ``time.monotonic()`` passes ``deadline``; at least
        one slice. ``on_slice`` hears the report after each slice."""
        tree = self._search_for(game)
        target = MAX_VISITS if visits is None else max(1, visits)
        done = 0
        while done < target:
            k = min(SLICE, target - done)
            await tree.search(state, self.evaluate, add_noise=False, num_simulations=k)
            done += k
            if on_slice is not None:
                on_slice(self.current())
            if deadline is not None and time.monotonic() >= deadline:
                break
        return self.current()

    async def raw(self, game: Go, state: GoState) -> Report:
        """The net alone (no search): its best move by prior, its value as the win rate."""
        logits, value = await self.evaluate(game.encode(state))
        actions = game.legal_actions(state)
        p = np.exp(logits[actions] - logits[actions].max())
        p /= p.sum()
        i = int(np.argmax(p))
        winrate = (float(value) + 1) / 2
        info = MoveInfo(actions[i], 0, winrate, float(p[i]), (actions[i],))
        return Report((info,), winrate, 1)

    def current(self) -> Report:
        """The report of the tree as it stands."""
        assert self._tree is not None and self._tree._root is not None
        return report(self._tree._root)

    def forget(self) -> None:
        """Drop the tree (a new game)."""
        self._tree = None


ANALYZE_KEYS = {"interval", "maxmoves", "minmoves", "ownership", "ownershipstdev", "pvvisits",
                "pvedgevisits", "movesownership", "rootinfo"}  # fmt: skip
"""The key-value pairs ``lz-analyze``/``kata-analyze`` take. ``interval`` and ``maxmoves`` are
honoured; the others are accepted and have no effect (no ownership or per-move ownership is
printed: the net has no ownership head; ``minmoves``: only searched moves are listed)."""


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
    own value; no score fields, the net has no score head; no ``lcb``)."""
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
    "MAX_VISITS",
    "SLICE",
    "AnalyzeArgs",
    "MoveInfo",
    "Report",
    "Searcher",
    "kata_line",
    "lz_line",
    "parse_analyze_args",
    "report",
]
