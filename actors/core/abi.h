/* The interface version of actors._mcts_core: actors/games/compiled.py's _ABI must equal it.
 * Bump it with every change a caller can see (a method, an argument, a knob, a game's blob), so
 * that a stale build is told apart and not run. */
#ifndef AZSERVE_ABI_H
#define AZSERVE_ABI_H

#define CORE_ABI 10

#endif
