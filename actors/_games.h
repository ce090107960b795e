/* The rules of the built-in games, for the compiled search trees (actors/_mcts_core.c): one
 * table of games, each entry a GameDef. A tree never asks which game it plays; it calls the
 * entry's functions on opaque state bytes.
 *
 * A state's bytes begin with the game's Python `core_state(s)` blob (the layout each game's
 * Python file documents, byte for byte), followed by whatever the game derives from it once
 * (Go: the board's Zobrist hash). `load` derives that part; the first `blob_size` bytes are
 * what Python sees again.
 *
 * Games whose legality depends on the positions that came before (Go's positional superko)
 * give a `board_hash`; the tree answers `Repeats.seen(ctx, hash)` from the position's
 * ancestors in the tree and the game's history before the root. */
#ifndef AZSERVE_GAMES_H
#define AZSERVE_GAMES_H

#include <stddef.h>
#include <stdint.h>

#define GAME_MAX_ACTIONS 512 /* the most actions of any game in the table, with room to grow */
#define GAME_MAX_STATE 128   /* the most state bytes of any game in the table */

typedef struct {
    /* 1 when a board of this hash has stood before (the position's own board included) */
    int (*seen)(const void *ctx, uint64_t hash);
    const void *ctx;
} Repeats;

typedef struct {
    const char *name;     /* the Python game's `core_name` */
    int num_actions;      /* A: policy width */
    int obs_size;         /* C * H * W bytes of encode's uint8 planes */
    int blob_size;        /* bytes of Python's core_state blob */
    int state_size;       /* blob_size + the derived bytes (<= GAME_MAX_STATE) */
    int max_plies;        /* no game lasts longer: bounds a path from the root */
    int history_item;     /* bytes per earlier board in a history (0: the game keeps none) */
    /* Derive the state from Python's blob (already checked to be blob_size bytes): 0, or -1
     * with *why set when the blob is not a position of this game. */
    int (*load)(const unsigned char *blob, unsigned char *state, const char **why);
    /* Legal actions of a non-terminal state, increasing, into out; their number. */
    int (*legal)(const unsigned char *state, const Repeats *rep, uint16_t *out);
    /* The state after legal action a into next: 1 when the game is over there, with *tv its
     * value for the side to move at next (+1 win, 0 draw, -1 loss); else 0. */
    int (*play)(const unsigned char *state, int a, unsigned char *next, double *tv);
    /* uint8 [C, H, W] planes from the side to move's view, as the Python game's encode. */
    void (*encode)(const unsigned char *state, unsigned char *out);
    /* The hash of the state's board (NULL: legality never depends on earlier positions) */
    uint64_t (*board_hash)(const unsigned char *state);
    /* The hash of one history item (history_item bytes), the same as board_hash's */
    uint64_t (*item_hash)(const unsigned char *item);
} GameDef;

/* The game whose name is `name`, or NULL. */
const GameDef *find_game(const char *name);

/* The table's names, NULL-terminated (for the module's GAMES tuple). */
extern const GameDef *const GAME_TABLE[];

/* Fill the Zobrist tables (once, at module import). */
void games_init(void);

#endif
