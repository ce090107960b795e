"""Chess: the rules (``rules``, compiled, checked by perft and against OpenSpiel) and PGN
records (``pgn``), together."""

from actors.games.chess.rules import START_FEN, Chess, ChessState, Move

__all__ = ["START_FEN", "Chess", "ChessState", "Move"]
