"""The game contract every actor, learner and test codes against.

Games are two-player, zero-sum, with strictly alternating turns: MCTS relies on the last
point to flip the sign of a value at every ply (a game whose side may have no move, such as
Othello or Go, has a pass action, so turns still alternate). States are immutable, hashable
tuples (each game uses its own NamedTuple); ``apply`` returns a new state.

One game is one file: a ``Game`` subclass. The search, actors, learner, evaluation, ``play``,
``analyze`` and the server's shapes take everything from it (docs/games.md walks through
adding one). A built-in game may also name its entry in the compiled core's table of games
(``core_name``, ``core_params``, ``core_state``: actors/core/games/), so the compiled search plays it; every
other game runs the pure-Python search. A game may name its benchmarks (``benchmarks``), what
``azserve eval`` scores it on.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypeAlias

import numpy as np

if TYPE_CHECKING:
    from actors.games.benchmark import Benchmark

State: TypeAlias = Any
"""An immutable, hashable game position (each game defines a NamedTuple)."""


class Game(abc.ABC):
    """Rules, observation encoding and symmetries of one board game.

    Instances hold no per-game data, so one instance serves any number of games.
    """

    name: str
    """Registry name, e.g. ``"tictactoe"``, ``"connect4"``."""
    num_actions: int
    """A: size of the action space (policy vectors are ``float32 [A]``)."""
    obs_shape: tuple[int, int, int]
    """(C, H, W) of ``encode``'s uint8 planes."""

    @property
    def rules(self) -> str:
        """The built-in game whose rules this one plays: its own name, but for a game that only
        encodes the same rules otherwise (``go9-features`` plays ``go9``). Players of games
        with the same rules can meet (``azserve ladder``, ``match --opponent checkpoint:``)."""
        return self.name

    sides: tuple[str, str] = ("first", "second")
    """What the game's own records call player 0 (who moves first) and player 1: Go and
    Othello ``("black", "white")``, chess ``("white", "black")``. Results, logs and
    ``azserve match``'s summary keys (``as_first``; chess ``as_white``) name the sides by them."""
    protocols: tuple[str, ...] = ()
    """The engine protocols that speak this game (``"gtp"`` for Go, ``"uci"`` for chess): what
    ``azserve gtp``/``uci``, the analysis engine's Go requests and the UCI players check."""
    record_suffix: str = ".txt"
    position_field: str | None = None
    """The analysis request field that sets up a position in the game's own notation
    (``"fen"`` for chess), read by ``from_position``; None where positions come only as the
    moves from the initial state."""
    """The file suffix of ``record``'s text: ``.sgf`` for Go, ``.pgn`` for chess."""
    pass_action: int | None = None
    """The pass action where the game has one (Go, Othello), else None."""
    core_name: str | None = None
    """The game's name in the compiled core's table (its file in actors/core/games/), or None
    when only the pure-Python search plays it."""
    core_params: tuple[float, ...] = ()
    """The parameters of those compiled rules (Go: size, komi); () for the game's defaults."""
    openspiel: str | None = None
    """The same game in OpenSpiel, as ``pyspiel.load_game`` takes it (``"connect_four"``,
    ``"go(board_size=9,komi=7.5)"``), or None where OpenSpiel has none: what the OpenSpiel
    opponents, the rules tests and the MCTS benchmark load."""
    score_scale: float | None = None
    """What the net's ``score`` (and ``material_ahead``) head predicts the target divided by,
    so that it is of order 1: None (the default) the board's cells, as for Go's and Othello's
    margins; chess and shogi, whose score is a material balance, set their own."""

    def benchmarks(self) -> tuple[Benchmark, ...]:
        """What ``azserve eval`` and training's evaluations score the game on
        (actors/games/benchmark.py); none by default, and a game without one is scored by
        matches against uniform random play."""
        return ()

    def core_state(self, s: State) -> tuple[bytes, bytes]:
        """(blob, history): ``s`` in the compiled core's layout (each built-in game's module
        documents its bytes) and the boards that stood before it (b"" where legality never
        depends on them). Only games with a ``core_name`` implement it."""
        raise NotImplementedError(f"{self.name} has no compiled rules")

    @abc.abstractmethod
    def initial_state(self) -> State:
        """The empty board, first player to move."""

    @abc.abstractmethod
    def legal_actions(self, s: State) -> list[int]:
        """Legal actions at ``s`` in increasing order; empty at a terminal state.

        The returned list may be shared between calls: callers must not mutate it.
        """

    def legal_mask(self, s: State) -> np.ndarray:
        """bool [A], True where the action is legal at ``s``."""
        mask = np.zeros(self.num_actions, dtype=bool)
        mask[self.legal_actions(s)] = True
        return mask

    @abc.abstractmethod
    def apply(self, s: State, a: int) -> State:
        """The state after the side to move plays ``a``; ValueError if illegal or over."""

    @abc.abstractmethod
    def is_terminal(self, s: State) -> bool:
        """True when the game is over at ``s``."""

    @abc.abstractmethod
    def terminal_value(self, s: State) -> float:
        """Outcome at terminal ``s`` for the side to move there: +1 win, 0 draw, -1 loss.

        ValueError if ``s`` is not terminal.
        """

    @abc.abstractmethod
    def to_play(self, s: State) -> int:
        """The side to move: 0 for the first player, 1 for the second."""

    @abc.abstractmethod
    def encode(self, s: State) -> np.ndarray:
        """uint8 [C, H, W] planes from the side to move's perspective.

        Plane 0 holds the side to move's stones, plane 1 the opponent's.
        """

    def encode_batch(self, states: Sequence[State]) -> np.ndarray:
        """uint8 [N, C, H, W]: ``encode`` of each state."""
        out = np.empty((len(states), *self.obs_shape), dtype=np.uint8)
        for i, s in enumerate(states):
            out[i] = self.encode(s)
        return out

    @abc.abstractmethod
    def symmetries(
        self, obs: np.ndarray, policy: np.ndarray
    ) -> list[tuple[np.ndarray, np.ndarray]]:
        """All board symmetries, identity first, applied consistently to boards and policies.

        Args:
            obs: uint8 [N, C, H, W] encoded positions.
            policy: float32 [N, A] policies over those positions' actions.

        Returns:
            One (obs uint8 [N, C, H, W], policy float32 [N, A]) pair per symmetry.
        """

    def final_targets(self, s: State) -> tuple[np.ndarray, float] | None:
        """What the end of a game says of each point and of the margin, from the first
        player's view: (ownership int8 [H, W] in the planes' layout, +1 the first player's,
        -1 the second's, 0 neither; the final score margin), or None where the game gives no
        such targets (the default). ``s`` is a terminal state (``azserve.targets``)."""
        return None

    def material_balance(self, s: State) -> float | None:
        """The first player's material lead in ``s`` (any state, not only a final one), in
        the game's own units (chess: pawns, P1 N3 B3 R5 Q9), or None where the game has no
        material (the default). The material targets come from it (``azserve.targets``)."""
        return None

    def cap_score(self, s: State, repetitions: bool = False) -> float | None:
        """Where ``s`` ended as a draw at the game's ply cap (an adjudication of ours, not the
        game's own rules) or, with ``repetitions``, by a rule that stops a game still in play
        (chess: threefold repetition, the 50-move rule): how far the side to move is ahead, in
        the game's own units (chess: material in pawns, P1 N3 B3 R5 Q9); None elsewhere, and
        for games with no such draws (the default). Self-play's ``mcts.cap_win_margin`` turns
        it into a training result."""
        return None

    @abc.abstractmethod
    def render(self, s: State) -> str:
        """ASCII board (first player X, second player O), top row first."""

    def parse_move(self, text: str) -> int:
        """A zero-based action from its decimal text; ValueError otherwise."""
        try:
            a = int(text.strip())
        except ValueError:
            raise ValueError(
                f"{self.name}: move {text!r} is not an integer in 0..{self.num_actions - 1}"
            ) from None
        if not 0 <= a < self.num_actions:
            raise ValueError(f"{self.name}: move {a} is out of range 0..{self.num_actions - 1}")
        return a

    def format_move(self, a: int) -> str:
        """The text ``parse_move`` reads back as ``a``."""
        if not 0 <= a < self.num_actions:
            raise ValueError(f"{self.name}: move {a} is out of range 0..{self.num_actions - 1}")
        return str(a)

    def from_position(self, text: str) -> State:
        """The position ``text`` writes in the game's own notation (``position_field``);
        ValueError saying what is wrong, or that the game has none."""
        raise ValueError(f"{self.name}: no position notation; give the moves from the start")

    def parse_move_at(self, s: State, text: str) -> int:
        """A move typed at ``s`` (the games whose notation depends on the position read it
        there: chess's SAN and UCI); ``parse_move`` by default. ValueError otherwise; the
        move may still be illegal at ``s``."""
        return self.parse_move(text)

    def format_move_at(self, s: State, a: int) -> str:
        """Legal action ``a`` at ``s`` as the game's players write it (chess: SAN);
        ``format_move`` by default. ``parse_move_at`` reads it back at ``s``."""
        return self.format_move(a)

    def move_help(self) -> str:
        """How a person types a move (``azserve play``'s prompt): ``cells 0-8, row-major``,
        ``UCI (e2e4) or SAN (e4, Nf3)``; the action numbers by default."""
        return f"action numbers 0-{self.num_actions - 1}"

    # --- results and records ------------------------------------------------------------

    def result_text(self, winner: int | None, reason: str = "score") -> str:
        """A game's result as the game's records write it, for a game ``winner`` (0, 1, None
        for a draw) won by ``reason`` (``score``, ``resign``, ``forfeit``: the loser's move was
        illegal, ``disputed``: no one's win). By default in words, naming ``sides``:
        ``first wins``, ``draw``, ``void`` for a disputed game; Go writes SGF's ``B+R``,
        chess PGN's ``1-0``."""
        if reason == "disputed":
            return "void"
        return "draw" if winner is None else f"{self.sides[winner]} wins"

    def score_text(self, s: State) -> str:
        """How terminal ``s`` scores, as ``result_text`` writes a result: Go's area score
        (``B+3.5``), Othello's disc count (``black wins 40-24``); by default the winner the
        rules name (``result_text``)."""
        return self.result_text(self.winner(s))

    def winner(self, s: State) -> int | None:
        """Who won at terminal ``s``: 0 the first player, 1 the second, None for a draw."""
        tv = self.terminal_value(s)
        first = tv if self.to_play(s) == 0 else -tv
        return None if first == 0 else (0 if first > 0 else 1)

    def record(
        self,
        moves: Sequence[int],
        players: tuple[str, str] = ("?", "?"),
        result: str = "",
        reason: str = "",
        comment: str = "",
        date: str = "",
        event: str = "",
    ) -> str:
        """A game, finished or going on, as the game's own record text (a file named
        ``*{record_suffix}``): Go SGF, chess PGN, by default plain text (a ``#`` header, then
        the moves as ``format_move`` writes them, one line).

        Args:
            moves: every action played from the initial state (a last, illegal one as the
                referee keeps a forfeit's included).
            players: the players' names by side (``sides``' order).
            result: as ``result_text``/``score_text`` write it; "" while the game goes on.
            reason: how it ended (the referee's ``score``, ``resign``, ``forfeit``,
                ``disputed``).
            comment: on the whole game (why it was disputed, each scorer's verdict).
            date: ISO ``YYYY-MM-DD``.
            event: what it was played for (``azserve match``, ``azserve ladder``).
        """
        head = [f"{self.name}: {players[0]} ({self.sides[0]}) v {players[1]} ({self.sides[1]})"]
        head += [x for x in (event, date) if x]
        lines = ["# " + ", ".join(head)]
        if result:
            lines.append(f"# result: {result}" + (f" ({reason})" if reason else ""))
        if comment:
            lines.append("# " + " ".join(comment.split()))
        words = [self.format_move(a) if 0 <= a < self.num_actions else str(a) for a in moves]
        lines.append(" ".join(words))
        return "\n".join(lines) + "\n"

    def from_moves(self, moves: Sequence[int]) -> State:
        """The state reached by playing ``moves`` from the initial state.

        ValueError naming the index of the first move that is illegal or comes after the end.
        """
        s = self.initial_state()
        for i, a in enumerate(moves):
            if self.is_terminal(s):
                raise ValueError(f"{self.name}: move #{i} ({a}) comes after the game ended")
            try:
                s = self.apply(s, a)
            except ValueError as e:
                raise ValueError(f"{self.name}: move #{i} ({a}) is illegal: {e}") from None
        return s
