"""Dead stones at the end of a Go game, estimated by Monte Carlo playouts, and the score with
them removed (GTP's ``final_status_list`` and ``final_score``).

The net has no ownership head, so the status of each chain comes from playing the final
position out many times, as GnuGo's Monte Carlo status estimate and Leela's ownership do:

1. From the position, ``playouts`` games are played to the end by light random play: each side
   plays a uniformly random legal move (simple ko, no suicide) that neither fills one of its
   own eyes (an empty point whose neighbours are all its stones and whose diagonals hold at
   most one opponent stone, none on the edge) nor puts its own chain in atari without taking
   anything (so that walls are not filled in from inside, and a seki stays a seki); a side
   with no such move passes; two passes (or
   3 x the board's points of moves) end the playout. Half the playouts start with black, half
   with white, so that neither side gets a free tempo.
2. Each playout's final board is scored by area (Tromp-Taylor): every point is black's, white's
   or neither's. ``ownership`` averages this over the playouts: +1 black in every playout, -1
   white in every playout.
3. A chain is ``alive`` when the mean ownership of its points, from its own side, is at least
   ``ALIVE`` (1/3: e.g. its own in 2 playouts of 3, the opponent's in the third). Random play
   is slow to kill a lone stone in a wide open area (the invader lives in some playouts), so
   the other chains are judged with the region around them: the points reachable from the
   chain through empty points and through its side's chains that are not clearly alive. When
   that region touches no clearly alive chain of its side (the opponent encloses it), the
   chain is ``dead`` when the opponent owns the region more often than its side does (the
   region's mean ownership from the chain's side is below 0); when it does touch one, the
   chain's own points decide the same way. The chains not dead are alive; those of them that
   touch an empty region bordered by both colours (a shared liberty) and no empty region of
   their colour alone (no eye, no territory), once the dead are off the board, are ``seki``.
   Random play never fills a shared liberty of a seki (that is self-atari), so seki chains
   keep their stones in the playouts; they count as alive in the score. (The seki rule goes
   by shape alone: it finds the classic seki without eyes, not one with an eye each, and it
   cannot see a shape that one side can still kill by a sacrifice.)
4. The score (``final_score``): the dead chains are taken off the board, then the board is
   scored by area, komi to white. A region that touched only a dead chain and its killer
   becomes the killer's, as GnuGo's Chinese counting does.

Random play is right about settled positions (a lone stone deep in the opponent's area, a
group with two eyes, a wall against a wall) and can be wrong about unsettled fights: play a
game out (``kgs-genmove_cleanup``-style) where that matters. The estimate is seeded, so one
position always gets the same answer.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np

from actors.games.go.rules import BLACK, EMPTY, WHITE, Go

ALIVE = 1 / 3
"""A chain is alive when the mean ownership of its points, from its own side, is at least this."""

PLAYOUTS = 200
"""Playouts per estimate by default: the ownership of a point is then known to about +-0.07."""


@dataclass(frozen=True)
class ChainStatus:
    """One chain at the end of the game."""

    color: int
    """BLACK (1) or WHITE (2)."""
    cells: tuple[int, ...]
    """Its points, ``row * N + col``."""
    own: float
    """Mean ownership of its points from its own side, in [-1, 1]."""
    status: str
    """``alive``, ``dead`` or ``seki``."""


class _Playout:
    """A light board for random playouts: a flat list, simple ko, no history."""

    def __init__(self, size: int) -> None:
        n = self.size = size
        self.cells = n * n
        self.nbrs = [
            [r2 * n + c2 for r2, c2 in ((r - 1, c), (r + 1, c), (r, c - 1), (r, c + 1))
             if 0 <= r2 < n and 0 <= c2 < n]
            for r in range(n) for c in range(n)
        ]  # fmt: skip
        self.diags = [
            [r2 * n + c2 for r2, c2 in ((r - 1, c - 1), (r - 1, c + 1), (r + 1, c - 1),
                                        (r + 1, c + 1)) if 0 <= r2 < n and 0 <= c2 < n]
            for r in range(n) for c in range(n)
        ]  # fmt: skip

    def _chain(self, board: list[int], p: int, enough: int = 0) -> tuple[list[int], set[int]]:
        """(the chain through ``p``, its liberties). ``enough`` > 0: stop as soon as that many
        liberties are found (the chain is then partial): random play only asks whether a
        chain has 0, 1 or more, and big chains made the full walk the playouts' hot spot."""
        color = board[p]
        seen = {p}
        stack = [p]
        libs: set[int] = set()
        nbrs = self.nbrs
        while stack:
            q = stack.pop()
            for r in nbrs[q]:
                v = board[r]
                if v == EMPTY:
                    libs.add(r)
                    if enough and len(libs) >= enough:
                        return list(seen), libs
                elif v == color and r not in seen:
                    seen.add(r)
                    stack.append(r)
        return list(seen), libs

    def _is_eye(self, board: list[int], p: int, me: int) -> bool:
        if any(board[q] != me for q in self.nbrs[p]):
            return False
        other = 3 - me
        bad = sum(1 for q in self.diags[p] if board[q] == other)
        return bad == 0 if len(self.diags[p]) < 4 else bad <= 1

    def _play(self, board: list[int], p: int, me: int, ko: int) -> tuple[int, list[int]] | None:
        """Play ``me`` at empty ``p`` in place: (the new ko point or -1, the points taken), or
        None (and the board unchanged) for a move random play does not make: a suicide, a ko
        retake, or a self-atari that takes nothing."""
        if p == ko:
            return None
        board[p] = me
        other = 3 - me
        taken: list[int] = []
        for q in self.nbrs[p]:
            if board[q] == other:
                chain, libs = self._chain(board, q, 1)
                if not libs:
                    for c in chain:
                        board[c] = EMPTY
                    taken.extend(chain)
        mine, libs = self._chain(board, p, 2)
        if not libs or (len(libs) == 1 and not taken):
            board[p] = EMPTY  # nothing was taken, so the board is as it was
            return None
        if len(taken) == 1 and len(mine) == 1 and len(libs) == 1:
            return taken[0], taken
        return -1, taken

    def _urgent(self, board: list[int], last: int, me: int) -> list[int]:
        """Moves answering the opponent's ``last`` move, best first: take its chain when it is
        in atari; save a chain of ours that it put in atari by taking an adjacent chain in
        atari or by extending."""
        out: list[int] = []
        if last < 0 or board[last] == EMPTY:
            return out
        chain, libs = self._chain(board, last, 2)
        if len(libs) == 1:
            out.extend(libs)
        for q in self.nbrs[last]:
            if board[q] != me:
                continue
            mine, my_libs = self._chain(board, q, 2)
            if len(my_libs) != 1:
                continue
            for c in mine:  # take an opponent chain next to ours that is in atari
                for r in self.nbrs[c]:
                    if board[r] == 3 - me:
                        _, their = self._chain(board, r, 2)
                        if len(their) == 1:
                            out.extend(their)
            out.extend(my_libs)  # extend (the move is refused if still in atari)
        return out

    def play_out(self, board: list[int], me: int, rng: random.Random) -> list[int]:
        """Random play from ``board`` (``me`` to move) to the end; the final board."""
        board = list(board)
        empties = [p for p in range(self.cells) if board[p] == EMPTY]
        where = {p: i for i, p in enumerate(empties)}  # point -> its index in empties
        ko, passes, moves, last = -1, 0, 0, -1
        limit = 3 * self.cells
        while passes < 2 and moves < limit:
            played, result = -1, None
            for p in self._urgent(board, last, me):
                result = self._play(board, p, me, ko)
                if result is not None:
                    played = p
                    break
            if played < 0:
                # Uniform among the moves random play makes: draw from the untried empty
                # points, setting aside (swapping to the end) each one refused.
                k = len(empties)
                while k:
                    j = rng.randrange(k)
                    p = empties[j]
                    if not self._is_eye(board, p, me):
                        result = self._play(board, p, me, ko)
                        if result is not None:
                            played = p
                            break
                    k -= 1
                    q = empties[k]
                    empties[j], empties[k] = q, p
                    where[q], where[p] = j, k
            if played >= 0 and result is not None:
                i = where.pop(played)  # the point is a stone now: out of the empties
                tail = empties.pop()
                if tail != played:
                    empties[i] = tail
                    where[tail] = i
                for c in result[1]:  # the points taken are empty again
                    where[c] = len(empties)
                    empties.append(c)
                ko = result[0]
                passes = 0
            else:
                ko, passes = -1, passes + 1
            last = played
            me = 3 - me
            moves += 1
        return board

    def owners(self, board: list[int]) -> np.ndarray:
        """Area owner per point: +1 black, -1 white, 0 neither (Tromp-Taylor regions)."""
        out = np.zeros(self.cells, np.float64)
        seen = [False] * self.cells
        for i in range(self.cells):
            v = board[i]
            if v:
                out[i] = 1.0 if v == BLACK else -1.0
                continue
            if seen[i]:
                continue
            seen[i] = True
            stack, region, borders = [i], [], 0
            while stack:
                q = stack.pop()
                region.append(q)
                for r in self.nbrs[q]:
                    if board[r]:
                        borders |= board[r]
                    elif not seen[r]:
                        seen[r] = True
                        stack.append(r)
            if borders in (BLACK, WHITE):
                out[region] = 1.0 if borders == BLACK else -1.0
        return out


def ownership(size: int, board: bytes, playouts: int = PLAYOUTS, seed: int = 0) -> np.ndarray:
    """float64 ``[N*N]``: each point's owner averaged over random playouts from ``board``
    (+1 black, -1 white); half the playouts start with each colour."""
    if playouts < 1:
        raise ValueError(f"playouts must be >= 1, got {playouts}")
    light = _Playout(size)
    rng = random.Random(seed)
    start = list(board)
    total = np.zeros(size * size, np.float64)
    for i in range(playouts):
        total += light.owners(light.play_out(start, BLACK if i % 2 == 0 else WHITE, rng))
    return total / playouts


def chain_statuses(size: int, board: bytes, owned: np.ndarray) -> list[ChainStatus]:
    """Every chain of ``board`` with its status from the ownership ``owned`` ``[N*N]``."""
    light = _Playout(size)
    cells = list(board)
    chains: list[tuple[int, list[int], float]] = []
    chain_of = [-1] * (size * size)
    for p in range(size * size):
        if not cells[p] or chain_of[p] >= 0:
            continue
        chain, _ = light._chain(cells, p)
        for c in chain:
            chain_of[c] = len(chains)
        sign = 1.0 if cells[p] == BLACK else -1.0
        chains.append((cells[p], sorted(chain), float(sign * owned[chain].mean())))
    dead = []
    for color, chain, own in chains:
        if own >= ALIVE:
            dead.append(False)
            continue
        region, enclosed = _region(light, cells, chain_of, chains, chain[0])
        sign = 1.0 if color == BLACK else -1.0
        vote = float(sign * owned[region].mean()) if enclosed else own
        dead.append(vote < 0)
    seki = _seki(light, cells, chain_of, chains, dead)
    return [
        ChainStatus(color, tuple(chain), own, "dead" if d else "seki" if k else "alive")
        for (color, chain, own), d, k in zip(chains, dead, seki)
    ]


def _seki(
    light: _Playout,
    cells: list[int],
    chain_of: list[int],
    chains: list[tuple[int, list[int], float]],
    dead: list[bool],
) -> list[bool]:
    """Which chains live in seki, on the board with the dead chains taken off: a live chain
    that touches an empty region bordered by both colours (a shared liberty) and no empty
    region bordered by its colour alone (an eye, or territory)."""
    board = list(cells)
    for (_, chain, _), d in zip(chains, dead):
        if d:
            for c in chain:
                board[c] = EMPTY
    shared = [False] * len(chains)
    own = [False] * len(chains)
    seen = [False] * len(board)
    for i, v in enumerate(board):
        if v or seen[i]:
            continue
        seen[i] = True
        stack, borders, touching = [i], 0, set()
        while stack:
            q = stack.pop()
            for r in light.nbrs[q]:
                if board[r]:
                    borders |= board[r]
                    touching.add(chain_of[r])
                elif not seen[r]:
                    seen[r] = True
                    stack.append(r)
        for k in touching:
            if borders == BLACK | WHITE:
                shared[k] = True
            else:
                own[k] = True
    return [not d and sh and not ow for d, sh, ow in zip(dead, shared, own)]


def _region(
    light: _Playout,
    cells: list[int],
    chain_of: list[int],
    chains: list[tuple[int, list[int], float]],
    start: int,
) -> tuple[list[int], bool]:
    """(the points reachable from ``start`` through empty points and through chains of its
    colour that are not clearly alive; whether that region touches no stone of its colour
    that is clearly alive)."""
    color = cells[start]
    seen = {start}
    stack = [start]
    enclosed = True
    while stack:
        q = stack.pop()
        for r in light.nbrs[q]:
            if r in seen:
                continue
            v = cells[r]
            if v == color and chains[chain_of[r]][2] >= ALIVE:
                enclosed = False
            elif v in (EMPTY, color):
                seen.add(r)
                stack.append(r)
    return sorted(seen), enclosed


def without_dead(board: bytes, statuses: list[ChainStatus]) -> bytes:
    """``board`` with the dead chains taken off."""
    out = bytearray(board)
    for chain in statuses:
        if chain.status == "dead":
            for c in chain.cells:
                out[c] = EMPTY
    return bytes(out)


def dead_aware_score(game: Go, board: bytes, statuses: list[ChainStatus]) -> float:
    """Black's area minus white's minus komi, the dead chains taken off first."""
    black, white = game.areas(without_dead(board, statuses))
    return black - white - game.komi


def format_score(x: float) -> str:
    """GTP's ``final_score`` form: ``B+3.5``, ``W+0.5`` or ``0``."""
    return "0" if x == 0 else f"{'B' if x > 0 else 'W'}+{abs(x):g}"


__all__ = [
    "ALIVE",
    "PLAYOUTS",
    "ChainStatus",
    "chain_statuses",
    "dead_aware_score",
    "format_score",
    "ownership",
    "without_dead",
]
