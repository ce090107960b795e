/* The contract between the compiled search and a game's rules: each file of games/ exports one
 * GameDef (named `GAME_<file stem>`, see registry.c), and the search sees a game only through
 * the GameRules made from it. A tree never asks which game it plays; it calls the rules'
 * functions on opaque state bytes, with buffers sized from the rules' own sizes.
 *
 * A state's bytes begin with the game's Python `core_state(s)` blob (the layout each game's
 * Python file documents, byte for byte), followed by whatever the game derives from it once
 * (Go: the board's Zobrist hash). `load` derives that part; the first `blob_size` bytes are
 * what Python sees again.
 *
 * Games whose legality depends on the positions that came before (Go's positional superko)
 * keep their board's hash in the state (at `hash_at`, derived by load and play) and hash an
 * earlier board with `item_hash`; the tree answers `Repeats.seen(ctx, hash)` from the
 * position's ancestors in the tree and the game's history before the root. */
#ifndef AZSERVE_GAMES_H
#define AZSERVE_GAMES_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    /* 1 when a board of this hash has stood before (the position's own board included) */
    int (*seen)(const void *ctx, uint64_t hash);
    const void *ctx;
} Repeats;

typedef struct GameDef GameDef;

/* One game at its parameters (Go: a board size and a komi): its sizes and its own data. */
typedef struct {
    const GameDef *def;
    char label[32];       /* for messages: "connect4", "go13" */
    int num_actions;      /* A: policy width */
    int obs_size;         /* C * H * W bytes of encode's uint8 planes */
    int blob_size;        /* bytes of Python's core_state blob */
    int state_size;       /* blob_size + the derived bytes */
    int max_plies;        /* no game lasts longer: bounds a path from the root */
    int history_item;     /* bytes per earlier board in a history (0: the game keeps none) */
    int hash_at;          /* where the state keeps its board's u64 hash (-1: legality never
                           * depends on earlier positions) */
    void *data;           /* what `make` allocated (NULL for fixed games) */
} GameRules;

struct GameDef {
    const char *name;     /* the Python game's `core_name` */
    const char *params;   /* the names of make's parameters, for messages ("" if none) */
    int nparams;          /* the most parameters make takes */
    /* Fill r's label, sizes and data for `params` (n of them, n <= nparams; the game's
     * defaults for the rest): 0, or -1 with *why set. */
    int (*make)(GameRules *r, const double *params, int n, const char **why);
    void (*release)(GameRules *r); /* frees r->data (NULL: nothing to free) */
    /* Derive the state from Python's blob (already checked to be blob_size bytes): 0, or -1
     * with *why set when the blob is not a position of this game. */
    int (*load)(const GameRules *r, const unsigned char *blob, unsigned char *state,
                const char **why);
    /* Legal actions of a non-terminal state, increasing, into out (num_actions room); their
     * number. */
    int (*legal)(const GameRules *r, const unsigned char *state, const Repeats *rep,
                 uint16_t *out);
    /* The state after legal action a into next: 1 when the game is over there, with *tv its
     * value for the side to move at next (+1 win, 0 draw, -1 loss); else 0. */
    int (*play)(const GameRules *r, const unsigned char *state, int a, unsigned char *next,
                double *tv);
    /* uint8 [C, H, W] planes from the side to move's view, as the Python game's encode. */
    void (*encode)(const GameRules *r, const unsigned char *state, unsigned char *out);
    /* The hash of one history item (history_item bytes), as the state keeps at hash_at */
    uint64_t (*item_hash)(const GameRules *r, const unsigned char *item);
};

/* The games present, NULL-terminated (registry.c: one entry per file of games/). */
extern const GameDef *const GAME_TABLE[];

/* The game whose name is `name`, or NULL. */
const GameDef *find_game(const char *name);

#endif
