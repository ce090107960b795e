"""``azserve play``: a checkpoint against a person at the terminal, under the referee
(``azserve.arena.referee``) like every judged game. The person is a player (``HumanPlayer``)
that shows the board and reads a move as the game writes moves (``Game.parse_move_at``: Go's
``D4``, chess's ``e4``/``Nf3``/``e2e4``, Connect Four's columns); the agent's moves are
shown with its value and priors (``ShownAgent``)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from actors.games import Game, State
from azserve.arena.players import RESIGN, AgentPlayer, Player
from azserve.arena.referee import GameRecord, play_game

QUIT = ("q", "quit", "exit", "resign")
"""What a person types to give up (end of input too)."""


class HumanPlayer(Player):
    """The person at the terminal: the board before each of their moves, then a move read
    until it is legal; ``q`` or the end of input resigns."""

    def __init__(self, read: Callable[[str], str], write: Callable[[str], None]) -> None:
        self.name = "you"
        self.read, self.write = read, write
        self.game: Game | None = None

    def new_game(self, game: Game) -> None:
        self.game = game

    def genmove(self, color: int, state: State) -> int:
        game = self.game
        assert game is not None
        self.write("\n" + game.render(state))
        legal = game.legal_actions(state)
        shown = " ".join(game.format_move_at(state, a) for a in legal)
        while True:
            try:
                text = self.read(f"your move ({shown}): ").strip()
            except EOFError:  # stdin closed: give up as "q" does
                self.write("")
                return RESIGN
            if text.lower() in QUIT:
                return RESIGN
            try:
                a = game.parse_move_at(state, text)
            except ValueError as exc:
                self.write(f"  {exc}")
                continue
            if a in legal:
                return a
            self.write(f"  {text} is not legal here")


class ShownAgent(AgentPlayer):
    """A checkpoint's player that says each move it makes: the move, its value for the agent
    and the net's three highest priors."""

    def __init__(self, agent: Any, sims: int, write: Callable[[str], None] = print) -> None:
        super().__init__(agent, sims, sample_moves=0, seed=0, name="agent")
        self.write = write

    def genmove(self, color: int, state: State) -> int:
        game = self.agent.game
        move = super().genmove(color, state)
        a = self.last
        top = sorted(game.legal_actions(state), key=lambda i: -a.policy[i])[:3]
        priors = ", ".join(f"{game.format_move_at(state, i)}:{a.policy[i]:.2f}" for i in top)
        said = "resigns" if move == RESIGN else f"plays {game.format_move_at(state, move)}"
        self.write(f"agent {said}  (value for agent {a.value:+.2f}; prior {priors})")
        return move


def play_in_terminal(
    game: Game,
    human: int,
    opponent: Player,
    read: Callable[[str], str] | None = None,
    write: Callable[[str], None] = print,
) -> GameRecord:
    """One refereed game of the person (side ``human``: 0 moves first) against ``opponent``,
    their moves read with ``read`` (``input`` by default); the final board and the result
    written at the end."""
    person = HumanPlayer(read or input, write)
    black, white = (person, opponent) if human == 0 else (opponent, person)
    side, order = game.sides[human], ("first", "second")[human]
    you = side if side == order else f"{side}, moving {order}"
    write(f"{game.name}: you are {you}; moves are {game.move_help()}; q resigns.")
    r = play_game(game, black, white)
    legal = r.moves[:-1] if r.reason == "forfeit" else r.moves  # a forfeit's move never stood
    write("\n" + game.render(game.from_moves(legal)))
    verdict = {None: "a draw", human: "you win"}.get(r.winner, "the agent wins")
    how = {"resign": ", by resignation", "forfeit": ", by forfeit"}.get(r.reason, "")
    write(f"{r.result}: {verdict}{how} after {len(r.moves)} moves")
    return r


def run_play(args: argparse.Namespace) -> int:
    """The ``azserve play`` main."""
    import torch

    from azserve.arena.agent import agent_from_checkpoint

    torch.set_num_threads(1)  # one position at a time: more threads only add overhead
    cfg, agent = agent_from_checkpoint(args.checkpoint, args.config, args.overrides, args.game)
    sims = cfg.eval.sims if args.sims is None else args.sims
    human = 0 if args.first == "human" else 1
    try:
        play_in_terminal(agent.game, human, ShownAgent(agent, sims))
    finally:
        agent.close()
    return 0
