/* The table of games: one entry per file of games/, named GAME_<file stem>. setup.py lists the
 * stems it finds in AZ_GAME_LIST (X(connect4) X(go) ...), so adding a game is adding its file. */
#include <string.h>

#include "games.h"

#ifndef AZ_GAME_LIST
#error "AZ_GAME_LIST is defined by setup.py: X(stem) for each file of actors/core/games/"
#endif

#define X(stem) extern const GameDef GAME_##stem;
AZ_GAME_LIST
#undef X

const GameDef *const GAME_TABLE[] = {
#define X(stem) &GAME_##stem,
    AZ_GAME_LIST
#undef X
    NULL,
};

const GameDef *find_game(const char *name) {
    for (int i = 0; GAME_TABLE[i]; i++)
        if (strcmp(GAME_TABLE[i]->name, name) == 0) return GAME_TABLE[i];
    return NULL;
}
