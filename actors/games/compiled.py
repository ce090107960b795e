"""A game whose rules are the compiled core's own (chess, shogi): the state is the core's bytes
(``blob``) with whether the game is over and its value, and the contract's moves (legal moves,
playing one, the planes, the side to move) are the core's ``Rules`` calls. A subclass names its
core entry (``core_name``), its state type, where the side to move sits in the blob, and how a
position is written (``position_text``, for errors); its rules, formats and records are its own.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from actors.games.base import Game


class BlobState(NamedTuple):
    """The shape every compiled game's state has (a subclass's own NamedTuple with these
    fields): the core's bytes, whether the game is over, and then the result for the side to
    move (+1, 0, -1; 0 while it is not over)."""

    blob: bytes
    over: bool
    value: float


class CompiledGame(Game):
    """The contract on the compiled core's rules (module docstring). ``max_plies``: the ply
    cap (adjudicated a draw); ``history``: earlier positions in the planes."""

    state_type: Any = BlobState
    """The subclass's state (a NamedTuple of ``blob``, ``over``, ``value``)."""
    side_at: int = 0
    """The blob's byte that holds the side to move."""

    def __init__(self, max_plies: int, history: int) -> None:
        from actors.compiled_mcts import compiled_available, core_rules

        self.max_plies = int(max_plies)
        self.history = int(history)
        self.core_params = (float(self.max_plies), float(self.history))
        if not compiled_available(self):
            raise ValueError(f"{self.name} needs the compiled core (pip install -e . builds it)")
        self._rules: Any = core_rules(self)  # ValueError for a bad cap or history

    def position_text(self, s: Any) -> str:
        """The position as its game writes it (FEN, SFEN): for error messages."""
        raise NotImplementedError

    # --- the contract -------------------------------------------------------------------

    def initial_state(self) -> Any:
        return self._start

    def core_state(self, s: Any) -> tuple[bytes, bytes]:
        return s.blob, b""

    def legal_actions(self, s: Any) -> list[int]:
        return [] if s.over else self._rules.legal(s.blob, b"")

    def apply(self, s: Any, a: int) -> Any:
        if s.over:
            raise ValueError(f"{self.name}: the game is over")
        if not 0 <= a < self.num_actions:
            raise ValueError(f"{self.name}: action {a} is out of range 0..{self.num_actions - 1}")
        try:
            blob, over, value = self._rules.play(s.blob, b"", a)
        except ValueError:
            raise ValueError(
                f"{self.name}: action {a} is illegal in {self.position_text(s)}"
            ) from None
        return self.state_type(blob, over, value)

    def is_terminal(self, s: Any) -> bool:
        return bool(s.over)

    def terminal_value(self, s: Any) -> float:
        if not s.over:
            raise ValueError(f"{self.name}: terminal_value of a position that is not terminal")
        return float(s.value)

    def to_play(self, s: Any) -> int:
        return s.blob[self.side_at]

    def encode(self, s: Any) -> np.ndarray:
        planes = np.frombuffer(self._rules.encode(s.blob), dtype=np.uint8)
        return planes.reshape(self.obs_shape)


__all__ = ["BlobState", "CompiledGame"]
