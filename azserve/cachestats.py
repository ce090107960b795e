"""The counters of an evaluation cache: the actors' (``actors/evalcache.py``) and the
server's (``azserve/server/rowcache.py``) count the same things."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class CacheStats:
    """Counters (cumulative) and size of one cache."""

    hits: int = 0
    """Positions answered from the cache (not evaluated)."""
    shared: int = 0
    """Positions whose evaluation was shared with another asker of the same key: the actors'
    joins of an evaluation in flight, the server's repeats within one batch."""
    misses: int = 0
    """Positions evaluated (sent to the server; computed by the server's backend)."""
    evictions: int = 0
    """Entries dropped to stay within the memory bound."""
    entries: int = 0
    bytes: int = 0
    """Estimated footprint of the entries."""

    @property
    def hit_rate(self) -> float:
        """Fraction of lookups not evaluated (hits and shared)."""
        total = self.hits + self.shared + self.misses
        return (self.hits + self.shared) / total if total else 0.0

    def line(self) -> str:
        """The status line's cache part (``azserve bench selfplay`` parses the actors')."""
        return (
            f"cache hit {100 * self.hit_rate:.1f}% hits {self.hits} shared {self.shared} "
            f"misses {self.misses} entries {self.entries} {self.bytes / 2**20:.1f} MB "
            f"evictions {self.evictions}"
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "hit_rate": round(self.hit_rate, 4),
            "hits": self.hits,
            "shared": self.shared,
            "misses": self.misses,
            "entries": self.entries,
            "bytes": self.bytes,
            "evictions": self.evictions,
        }
