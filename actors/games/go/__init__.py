"""Go: the rules (``rules``: Tromp-Taylor, positional superko), the input features
(``features``), SGF records (``sgf``) and dead-stone status (``status``), together."""

from actors.games.go.rules import BLACK, EMPTY, WHITE, Go, Go13, Go19, GoState

__all__ = ["BLACK", "EMPTY", "WHITE", "Go", "Go13", "Go19", "GoState"]
