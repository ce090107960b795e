"""The compiled core's loader, and the base of a game whose rules are its own.

The loader: ``actors._mcts_core`` (built by ``pip install -e .`` from actors/core/) when it was
built from this source's ABI, else None and why (``core``, ``compiled_available``); a game's
entry in its table (``core_name``, ``core_params``) and its ``Rules``, made once per process
(``core_rules``). The searches on it are in ``actors.compiled_mcts``.

A game whose rules are the compiled core's own (chess, shogi): the state is the core's bytes
(``blob``) with whether the game is over and its value, and the contract's moves (legal moves,
playing one, the planes, the side to move) are the core's ``Rules`` calls. A subclass names its
core entry (``core_name``), its state type, where the side to move sits in the blob, and how a
position is written (``position_text``, for errors); its rules, formats and records are its own.
"""

from __future__ import annotations

import logging
from typing import Any, NamedTuple

import numpy as np

from actors.games.base import Game

log = logging.getLogger("actors.games.compiled")

_ABI = 10
"""The interface of actors/core/ this code drives (its ``ABI``); a build of an older
source (the C file changed, ``pip install -e .`` not run again) is not used."""


def _checked_core(module: Any) -> tuple[Any, str]:
    """(the compiled core, or None; why not, when None)."""
    if module is None:
        return None, "it was not built"
    abi = getattr(module, "ABI", 1)
    if abi != _ABI:
        why = (
            f"{module.__file__} was built from an older actors/core/ (ABI {abi}, this "
            f"code needs {_ABI}); rebuild it with `pip install -e .`"
        )
        log.warning("the compiled core is not used: %s", why)
        return None, why
    return module, ""


try:
    from actors import _mcts_core as _built
except ImportError:  # built by `pip install -e .` when a C compiler is present
    _built = None
_mcts_core, _UNAVAILABLE = _checked_core(_built)

core: Any = _mcts_core
"""The compiled core (``actors._mcts_core``: ``Tree``, ``Cache``, ``step_many``), or None when
it was not built or is stale."""

step_many: Any = getattr(_mcts_core, "step_many", None)
"""``step_many(trees, logits [n, A], values [n], outs) -> (flags, errors)``: ``tree.step`` of
many trees at once, each on its own row (``actors.searchpool``); None when not built."""


def live_trees() -> tuple[int, int]:
    """(nodes, bytes) held by every compiled tree of this process: what the trees of its games
    hold now (each grows by at most a search's simulations per move, and a played move frees
    every branch but its own); (0, 0) without the core."""
    fn = getattr(_mcts_core, "live_trees", None)
    return tuple(fn()) if fn is not None else (0, 0)  # type: ignore[return-value]


def compiled_available(game: Game) -> bool:
    """Whether the compiled core was built and knows ``game``'s rules."""
    return _mcts_core is not None and core_name(game) in _mcts_core.GAMES


def core_name(game: Game) -> str | None:
    """The compiled rules ``game`` names for itself: on its instance or its own class, never
    inherited, since a subclass may change the rules the name stands for."""
    name = vars(game).get("core_name", type(game).__dict__.get("core_name"))
    return name if isinstance(name, str) else None


def core_params(game: Game) -> tuple[float, ...]:
    """The parameters of ``game``'s compiled rules (Go: size, komi), read as ``core_name``."""
    params = vars(game).get("core_params", type(game).__dict__.get("core_params", ()))
    return tuple(params)


_RULES: dict[tuple[str | None, tuple[float, ...]], Any] = {}


def core_rules(game: Game) -> Any:
    """``game``'s compiled rules (``_mcts_core.Rules``), made once per name and parameters and
    shared by every tree of the process."""
    key = (core_name(game), core_params(game))
    rules = _RULES.get(key)
    if rules is None:
        rules = _RULES[key] = _mcts_core.Rules(key[0], *key[1])  # type: ignore[union-attr]
    return rules


class BlobState(NamedTuple):
    """The shape every compiled game's state has (a subclass's own NamedTuple with these
    fields): the core's bytes, whether the game is over, and then the result for the side to
    move (+1, 0, -1; 0 while it is not over)."""

    blob: bytes
    over: bool
    value: float


class CompiledGame(Game):
    """The contract on the compiled core's rules (module docstring). ``max_plies``: the ply
    cap (adjudicated a draw); ``history``: earlier positions in the planes; ``extra``: the
    rules' further parameters, if any (chess: ``features``)."""

    state_type: Any = BlobState
    """The subclass's state (a NamedTuple of ``blob``, ``over``, ``value``)."""
    side_at: int = 0
    """The blob's byte that holds the side to move."""
    _start: Any
    """The start position, made by the subclass (from its FEN or SFEN)."""

    def __init__(self, max_plies: int, history: int, *extra: float) -> None:
        self.max_plies = int(max_plies)
        self.history = int(history)
        self.core_params = (float(self.max_plies), float(self.history), *map(float, extra))
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
