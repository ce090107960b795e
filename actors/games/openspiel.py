"""Any two-player, perfect-information, deterministic OpenSpiel game behind ``Game``.

``game = "openspiel:NAME"`` in a config (``NAME`` as ``pyspiel.load_game`` takes it, with
parameters: ``breakthrough(rows=6,columns=6)``). The pure-Python search plays it, with the
same actors, server and learner as the built-in games; every rule call goes through pyspiel,
so it is slower than a built-in game (docs/benchmarks.md gives the figure).

- Actions are OpenSpiel's distinct actions ``0..num_distinct_actions()-1``.
- Planes are OpenSpiel's observation tensor for the side to move, as uint8: ``[C, H, W]`` as
  OpenSpiel shapes it, a ``[H, W]`` tensor as ``[1, H, W]``, a flat one as ``[1, 1, N]``.
  Whole numbers 0..255 pass as they are; a tensor with fractions in [0, 1] (chess's move
  clocks) is multiplied by 255 and rounded, binary planes becoming 0/255. Which of the two a
  game gets is found when it is loaded, from a few seeded random games.
- The value of a finished game is the side to move's return minus the other's, scaled by the
  game's utility range into [-1, 1].
- No symmetries (the identity only): OpenSpiel does not describe a game's.

Refused at construction, with the reason: games that are not two-player, have chance nodes,
hide information or are simultaneous-move. The search also needs turns to alternate: a game
in which a side moves twice running (checkers' multiple jumps, dots and boxes) is refused when
the random games at load time meet it, or else at the move that does it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from actors.games.base import Game

PROBE_GAMES = 4
PROBE_PLIES = 400
"""The random games played when a game is loaded, and their length cap."""


class OpenSpielState:
    """A position: the moves that led to it (its identity) and pyspiel's state (never mutated
    once made, so states stay immutable and safe to share)."""

    __slots__ = ("moves", "spiel")

    def __init__(self, moves: tuple[int, ...], spiel: Any) -> None:
        self.moves = moves
        self.spiel = spiel

    def __eq__(self, other: object) -> bool:
        return isinstance(other, OpenSpielState) and other.moves == self.moves

    def __hash__(self) -> int:
        return hash(self.moves)

    def __repr__(self) -> str:
        return f"OpenSpielState(moves={self.moves!r})"


def _pyspiel() -> Any:
    try:
        import pyspiel
    except ImportError as e:
        raise ValueError(
            f"openspiel games need the open_spiel package (pip install open_spiel): {e}"
        ) from None
    return pyspiel


class OpenSpielGame(Game):
    """An OpenSpiel game by its ``load_game`` string."""

    def __init__(self, spec: str) -> None:
        pyspiel = _pyspiel()
        if not spec.strip():
            raise ValueError("openspiel: expected openspiel:NAME, e.g. openspiel:breakthrough")
        try:
            game = pyspiel.load_game(spec)
        except pyspiel.SpielError as e:
            raise ValueError(f"openspiel:{spec}: {e}") from None
        t = game.get_type()
        problems = []
        if game.num_players() != 2:
            problems.append(f"has {game.num_players()} players, not 2")
        if t.chance_mode != pyspiel.GameType.ChanceMode.DETERMINISTIC:
            problems.append("has chance nodes")
        if t.information != pyspiel.GameType.Information.PERFECT_INFORMATION:
            problems.append("hides information")
        if t.dynamics != pyspiel.GameType.Dynamics.SEQUENTIAL:
            problems.append("is simultaneous-move")
        if t.utility not in (
            pyspiel.GameType.Utility.ZERO_SUM,
            pyspiel.GameType.Utility.CONSTANT_SUM,
        ):
            problems.append(f"is {t.utility.name.lower().replace('_', '-')}, not zero-sum")
        if not t.provides_observation_tensor:
            problems.append("has no observation tensor")
        if problems:
            raise ValueError(
                f"openspiel:{spec} {', '.join(problems)}; azserve trains two-player, "
                "deterministic, perfect-information, zero-sum games with alternating turns"
            )
        self.spiel_game = game
        self.name = f"openspiel:{spec}"
        self.openspiel = spec
        self.num_actions = game.num_distinct_actions()
        shape = tuple(game.observation_tensor_shape())
        if len(shape) == 3:
            self.obs_shape = (int(shape[0]), int(shape[1]), int(shape[2]))
        elif len(shape) == 2:
            self.obs_shape = (1, int(shape[0]), int(shape[1]))
        elif len(shape) == 1:
            self.obs_shape = (1, 1, int(shape[0]))
        else:
            raise ValueError(f"openspiel:{spec}: observation tensor of shape {shape}")
        self._utility_range = game.max_utility() - game.min_utility()
        root = game.new_initial_state()
        self._first = root.current_player()
        if self._first not in (0, 1):
            raise ValueError(f"openspiel:{spec}: the first node is not a player's move")
        self._initial = OpenSpielState((), root)
        self._scale = self._probe(spec)

    def _probe(self, spec: str) -> float:
        """Play a few seeded random games: refuse a game whose turns do not alternate, and
        choose how its observation tensor becomes uint8 (whole numbers as they are; fractions
        in [0, 1] times 255)."""
        rng = np.random.default_rng(0)
        whole, unit = True, True
        for _ in range(PROBE_GAMES):
            st = self.spiel_game.new_initial_state()
            for _ply in range(PROBE_PLIES):
                t = np.asarray(st.observation_tensor(st.current_player()), dtype=np.float64)
                if t.size:
                    whole &= bool(np.all(t == np.rint(t)) and t.min() >= 0 and t.max() <= 255)
                    unit &= bool(t.min() >= 0 and t.max() <= 1)
                mover = st.current_player()
                st.apply_action(int(rng.choice(st.legal_actions())))
                if st.is_terminal():
                    break
                if st.current_player() == mover:
                    raise ValueError(
                        f"openspiel:{spec}: a player can move twice in a row; azserve's search "
                        "needs turns that alternate"
                    )
        if whole:
            return 1.0
        if unit:
            return 255.0
        raise ValueError(
            f"openspiel:{spec}: its observation tensor holds fractions outside [0, 1], which "
            "azserve's uint8 planes cannot carry"
        )

    def initial_state(self) -> OpenSpielState:
        return self._initial

    def legal_actions(self, s: OpenSpielState) -> list[int]:
        if s.spiel.is_terminal():
            return []
        return sorted(s.spiel.legal_actions())

    def apply(self, s: OpenSpielState, a: int) -> OpenSpielState:
        st = s.spiel
        if st.is_terminal():
            raise ValueError(f"{self.name}: the game is over")
        if a not in st.legal_actions():
            raise ValueError(f"{self.name}: action {a} is not legal here")
        mover = st.current_player()
        nxt = st.child(a)
        if not nxt.is_terminal() and nxt.current_player() == mover:
            raise ValueError(
                f"{self.name}: player {mover} moves twice in a row after action {a}; azserve's "
                "search needs turns that alternate"
            )
        return OpenSpielState((*s.moves, a), nxt)

    def is_terminal(self, s: OpenSpielState) -> bool:
        return bool(s.spiel.is_terminal())

    def to_play(self, s: OpenSpielState) -> int:
        return (self._first + len(s.moves)) % 2

    def terminal_value(self, s: OpenSpielState) -> float:
        if not s.spiel.is_terminal():
            raise ValueError(f"{self.name}: terminal_value of a game in progress")
        r = s.spiel.returns()
        p = self.to_play(s)
        if self._utility_range <= 0:
            return 0.0
        return float(np.clip((r[p] - r[1 - p]) / self._utility_range, -1.0, 1.0))

    def encode(self, s: OpenSpielState) -> np.ndarray:
        player = self.to_play(s)
        # A terminal state has no side to move in OpenSpiel; observe it for ours.
        t = np.asarray(s.spiel.observation_tensor(player), dtype=np.float32)
        planes = np.clip(np.rint(t * self._scale), 0, 255)
        return planes.astype(np.uint8).reshape(self.obs_shape)

    def symmetries(
        self, obs: np.ndarray, policy: np.ndarray
    ) -> list[tuple[np.ndarray, np.ndarray]]:
        return [(obs, policy)]

    def render(self, s: OpenSpielState) -> str:
        return str(s.spiel)


__all__ = ["OpenSpielGame", "OpenSpielState"]
