"""Shogi: the rules (``rules``, compiled, checked by perft and against cshogi) and CSA records
(``csa``), together."""

from actors.games.shogi.rules import START_SFEN, Move, Shogi, ShogiState

__all__ = ["START_SFEN", "Move", "Shogi", "ShogiState"]
