"""The players of matches and ladders: a checkpoint's net and search, uniform random play, the
greedy mover, any GTP, UCI or USI engine, and OpenSpiel's MCTS. Every player is told every move
and asked for its own; the referee (``azserve.arena.referee``) alone decides what is legal and
who won, and asks each player that can score a finished game for its own verdict
(``final_score``).

A player spec (``--opponent``, the ladder's ``--anchor``):

- ``random``: uniform random legal moves (the ladder's 0 Elo);
- ``greedy``: chess and shogi, the one-ply material-greedy mover
  (``azserve.arena.players.greedy``);
- ``uci:CMD[;NAME=VALUE...]``: chess only, a UCI engine with its options and ``go`` limits
  (``uci:stockfish;Skill Level=0;movetime=50``; ``azserve.arena.players.uci``);
- ``usi:CMD[;NAME=VALUE...]``: shogi only, a USI engine with its options and ``go`` limits
  (``usi:fairy-stockfish;Skill Level=-20;byoyomi=50``; ``azserve.arena.players.usi``);
- ``gtp:CMD`` or a bare command line: a GTP engine (``gnugo --mode gtp --level 1``); a command
  not found on PATH is looked for in /usr/games (where Debian puts GnuGo);
- ``openspiel-mcts:SIMS``: OpenSpiel's MCTS bot (random rollouts, UCT c = 2), for the games
  that name their OpenSpiel equivalent (``Game.openspiel``);
- ``checkpoint:PATH``: another checkpoint (a file or a run directory's newest).

GnuGo is run under the rules our referee keeps: ``--chinese-rules`` (area scoring),
``--capture-all-dead`` (it removes dead stones from its territory before it passes, so that
the game is played out and the board as it stands is the score) and ``--positional-superko``;
GnuGo under Japanese rules cannot be refereed by area and is refused.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from azserve.arena.players.base import (
    GNUGO_RULES,
    RESIGN,
    AgentPlayer,
    Player,
    PlayerError,
    RandomPlayer,
    Refused,
    Verdict,
    find_command,
    honest_argv,
)
from azserve.arena.players.gtp import GtpPlayer, parse_gtp_score
from azserve.arena.players.openspiel import OpenSpielMctsPlayer
from azserve.config.player_spec import parse_spec
from azserve.errors import ConfigError


def make_player(spec: str, seed: int, log: Path | None = None, agent_player: Any = None) -> Player:
    """The player a spec names. ``agent_player(path, seed)`` builds a checkpoint's player (the
    caller's, which knows the simulations and the config)."""
    kind, arg = parse_spec(spec)
    if kind == "random":
        return RandomPlayer(seed)
    if kind == "greedy":
        from azserve.arena.players.greedy import GreedyPlayer

        return GreedyPlayer(seed)
    if kind == "uci":
        from azserve.arena.players.uci import UciPlayer

        return UciPlayer(arg, log=log)
    if kind == "usi":
        from azserve.arena.players.usi import UsiPlayer

        return UsiPlayer(arg, log=log)
    if kind == "openspiel-mcts":
        return OpenSpielMctsPlayer(int(arg), seed)
    if kind == "checkpoint":
        if agent_player is None:
            raise ConfigError(f"player {spec!r}: a checkpoint cannot play here")
        return agent_player(arg, seed)
    return GtpPlayer(arg, log=log)


__all__ = [
    "GNUGO_RULES",
    "RESIGN",
    "AgentPlayer",
    "GtpPlayer",
    "OpenSpielMctsPlayer",
    "Player",
    "PlayerError",
    "RandomPlayer",
    "Refused",
    "Verdict",
    "find_command",
    "honest_argv",
    "make_player",
    "parse_gtp_score",
    "parse_spec",
]
