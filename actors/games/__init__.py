"""Board games behind one interface (see ``base.Game``)."""

from actors.games.base import Game, State
from actors.games.connect4 import ConnectFour
from actors.games.tictactoe import TicTacToe

__all__ = ["ConnectFour", "Game", "State", "TicTacToe", "make_game"]

_GAMES: dict[str, type[Game]] = {cls.name: cls for cls in (TicTacToe, ConnectFour)}


def make_game(name: str) -> Game:
    """The game registered as ``name``; ValueError listing the known names otherwise."""
    try:
        return _GAMES[name]()
    except KeyError:
        raise ValueError(
            f"unknown game {name!r}; known games: {', '.join(sorted(_GAMES))}"
        ) from None
