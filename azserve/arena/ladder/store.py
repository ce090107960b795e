"""The ladder's store: one append-only JSON-lines file of finished games (``games.jsonl``),
and what identifies a game in it. A game is named by its pair (in canonical order) and its
number within the pair, which with the ladder's seed fix its colours and its seed; so a ladder
resumes after any interruption without losing or repeating a game. A record's ``black`` and
``white`` are the first and second player, whatever the game calls them (chess: white, black).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from azserve.arena.ratings import Rating, Result
from azserve.errors import AzserveError


@dataclass(frozen=True)
class Entrant:
    """One player on the ladder: a checkpoint of a run, or an anchor."""

    name: str
    """Unique on the ladder: ``RUN@STEP`` for a checkpoint, the spec for an anchor."""
    spec: str
    """What ``make_player`` builds (``checkpoint:PATH`` for a checkpoint)."""
    run: str | None = None
    """The run's label (its directory's name); None for an anchor."""
    step: int | None = None
    hours: float | None = None
    """Wall-clock hours from the run's start to the checkpoint (from its metrics rows)."""
    positions: int | None = None
    """Positions recorded by then."""

    @property
    def anchor(self) -> bool:
        return self.run is None


@dataclass
class LadderReport:
    """What one invocation did and the ratings after it."""

    played: int
    total: int
    ratings: dict[str, Rating]
    entrants: list[Entrant]
    disputed: int
    results: list[Result] = field(default_factory=list)
    """Every stored game that counts (not disputed), from the first player's side."""


def pair_of(a: str, b: str) -> tuple[str, str]:
    """A pair in its canonical order (the order its games' seeds and colours are drawn in)."""
    return (a, b) if a < b else (b, a)


def game_seed(base: int, pair: tuple[str, str], k: int) -> int:
    """A game's seed: stable across processes and machines (no Python ``hash``)."""
    return _draw(f"{base}\0{pair[0]}\0{pair[1]}\0{k}") >> 1


def colours(base: int, pair: tuple[str, str], k: int) -> tuple[str, str]:
    """(who moves first, who moves second) in game ``k`` of ``pair`` under the ladder's seed
    ``base``: the two take turns, and who moves first in the pair's first game is drawn from
    the seed and the pair (as stably as ``game_seed``), so that over many pairs each side of
    a pair's canonical order opens about half the first games (the canonical order alone
    gave random play the first move in 12 of 13)."""
    first = (k + _draw(f"{base}\0{pair[0]}\0{pair[1]}\0colours")) % 2
    return pair[first], pair[1 - first]


def _draw(text: str) -> int:
    """64 bits of ``text``'s SHA-256."""
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")


class Store:
    """The ladder's append-only JSON-lines file of finished games; one writer at a time (a
    second ladder on the same directory is refused while the first runs)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._lock: IO[bytes] = open(path.with_name(path.name + ".lock"), "ab")  # noqa: SIM115
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._lock.close()
            raise AzserveError(f"another ladder is writing {path}") from None
        self.games: list[dict[str, Any]] = []
        self.counts: dict[tuple[str, str], int] = {}
        try:
            self._read()
        except BaseException:
            self._lock.close()
            raise
        self._out = open(path, "ab")  # noqa: SIM115 - closed in close()

    def _read(self) -> None:
        if not self.path.exists():
            return
        data = self.path.read_bytes()
        good = data.rfind(b"\n") + 1  # a torn last line (killed mid-write) is cut off
        if good < len(data):
            print(f"ladder: {self.path}: cut off a torn last line ({len(data) - good} bytes)",
                  file=sys.stderr)  # fmt: skip
            with open(self.path, "r+b") as f:
                f.truncate(good)
        for n, line in enumerate(data[:good].splitlines(), 1):
            if not line.strip():
                continue
            try:
                g = json.loads(line)
                pair, k = _checked(g)
            except (ValueError, KeyError, TypeError, IndexError, RecursionError) as e:
                raise AzserveError(f"{self.path}:{n}: not a game record ({e})") from None
            if k != self.counts.get(pair, 0):
                raise AzserveError(
                    f"{self.path}:{n}: game {k} of {pair[0]} v {pair[1]} out of order "
                    f"(expected {self.counts.get(pair, 0)})"
                )
            self.counts[pair] = k + 1
            self.games.append(g)

    def next_k(self, pair: tuple[str, str]) -> int:
        return self.counts.get(pair, 0)

    def append(self, record: dict[str, Any]) -> None:
        """Write one game durably (flushed and fsynced before this returns)."""
        pair, k = (record["pair"][0], record["pair"][1]), record["k"]
        assert k == self.next_k(pair), (pair, k)
        self._out.write(json.dumps(record, separators=(",", ":")).encode() + b"\n")
        self._out.flush()
        os.fsync(self._out.fileno())
        self.counts[pair] = k + 1
        self.games.append(record)

    def close(self) -> None:
        self._out.close()
        self._lock.close()


def _checked(g: Any) -> tuple[tuple[str, str], int]:
    """A record's pair and number, once every field the ladder reads back is as it writes it
    (ValueError or TypeError naming the first that is not: a damaged line is refused when the
    file is read, not when the fit meets it)."""
    if not isinstance(g, dict):
        raise TypeError(f"a {type(g).__name__}, not an object")
    pair, k = g["pair"], g["k"]
    if not (isinstance(pair, list) and len(pair) == 2 and all(isinstance(p, str) for p in pair)):
        raise ValueError(f"pair {pair!r} is not two names")
    if not isinstance(k, int) or isinstance(k, bool) or k < 0:
        raise ValueError(f"k {k!r} is not a game number")
    if {g["black"], g["white"]} != set(pair) or g["black"] == g["white"]:
        raise ValueError(f"black {g['black']!r} and white {g['white']!r} are not the pair")
    if g["winner"] not in (None, 0, 1) or isinstance(g["winner"], bool):
        raise ValueError(f"winner {g['winner']!r} is not 0, 1 or null")
    if not isinstance(g["reason"], str):
        raise ValueError(f"reason {g['reason']!r} is not a string")
    return (pair[0], pair[1]), k


def results_of(games: Iterable[dict[str, Any]]) -> list[Result]:
    """The games that count for the fit (disputed ones do not), from the side of the one who
    moved first (a record's ``black``: the first player whatever the game calls it)."""
    out = []
    for g in games:
        if g["reason"] == "disputed":
            continue
        score = 0.5 if g["winner"] is None else (1.0 if g["winner"] == 0 else 0.0)
        out.append(Result(g["black"], g["white"], score))
    return out


__all__ = ["Store", "colours", "game_seed", "pair_of", "results_of"]
