"""Self-play actors: games, the pure MCTS core, the self-play loop and where finished games go.
torch-free: an actor process imports numpy, ZeroMQ and the library floor only."""

from __future__ import annotations

from azserve.lazy import lazy_getattr

_LAZY = {
    "ActorsConfig": "actors.config",
    "Game": "actors.games",
    "State": "actors.games",
    "make_game": "actors.games",
    "MCTS": "actors.mcts",
    "MCTSConfig": "actors.search",
    "Search": "actors.search",
    "CompiledMCTS": "actors.compiled_mcts",
    "CompiledGumbel": "actors.compiled_mcts",
    "GumbelSearch": "actors.gumbel",
    "make_search": "actors.searches",
    "SelfPlay": "actors.selfplay",
    "SelfPlayStats": "actors.selfplay",
    "play_game": "actors.selfplay",
    "TrajectorySink": "actors.sinks",
    "NullSink": "actors.sinks",
    "FileSink": "actors.sinks",
    "read_trajectory_file": "actors.sinks",
    "TrajectorySender": "actors.sender",
    "open_sink": "actors.main",
    "run_actors": "actors.main",
}

__all__ = list(_LAZY)

__getattr__ = lazy_getattr(__name__, _LAZY)
