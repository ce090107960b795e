/* Othello: the same rules as actors/games/othello.py. Blob: black u64, white u64, colour u8
 * (0 black to move), 0 u8, ply u16 (bit row * 8 + col, row 0 at the top; actions 0..63 the
 * cells, 64 the pass, legal only when no disc can be placed). */
#include "../blob.h"

#define OTH_STATE 20
#define OTH_PASS 64
#define FILE_A 0x0101010101010101ULL
#define FILE_H 0x8080808080808080ULL

static int oth_make(GameRules *r, const double *params, int n, const char **why) {
    (void)params, (void)n, (void)why;
    fixed_rules(r, 65, 128, OTH_STATE, OTH_STATE, 128);
    return 0;
}

/* One step of a set of cells in direction d (0..7), dropping what would wrap off the board. */
static uint64_t oth_shift(uint64_t b, int d) {
    switch (d) {
    case 0: return b >> 8;                 /* up */
    case 1: return b << 8;                 /* down */
    case 2: return (b << 1) & ~FILE_A;     /* right */
    case 3: return (b >> 1) & ~FILE_H;     /* left */
    case 4: return (b >> 7) & ~FILE_A;     /* up-right */
    case 5: return (b >> 9) & ~FILE_H;     /* up-left */
    case 6: return (b << 9) & ~FILE_A;     /* down-right */
    default: return (b << 7) & ~FILE_H;    /* down-left */
    }
}

static uint64_t oth_moves(uint64_t own, uint64_t opp) {
    uint64_t empty = ~(own | opp), moves = 0;
    for (int d = 0; d < 8; d++) {
        uint64_t x = oth_shift(own, d) & opp;
        for (int i = 0; i < 5; i++) x |= oth_shift(x, d) & opp;
        moves |= oth_shift(x, d) & empty;
    }
    return moves;
}

static uint64_t oth_flips(uint64_t own, uint64_t opp, uint64_t move) {
    uint64_t flips = 0;
    for (int d = 0; d < 8; d++) {
        uint64_t line = 0, f = oth_shift(move, d);
        while (f & opp) {
            line |= f;
            f = oth_shift(f, d);
        }
        if (f & own) flips |= line;
    }
    return flips;
}

static void oth_sides(const unsigned char *s, uint64_t *own, uint64_t *opp) {
    uint64_t black = get_u64(s), white = get_u64(s + 8);
    *own = s[16] ? white : black;
    *opp = s[16] ? black : white;
}

static int oth_load(const GameRules *r, const unsigned char *blob, unsigned char *state,
                    const char **why) {
    (void)r;
    if ((get_u64(blob) & get_u64(blob + 8)) || blob[16] > 1 || blob[17] != 0) {
        *why = "not an Othello position (overlapping discs, or a bad colour byte)";
        return -1;
    }
    memcpy(state, blob, OTH_STATE);
    return 0;
}

static int oth_legal(const GameRules *r, const unsigned char *s, const Repeats *rep,
                     uint16_t *out) {
    (void)r, (void)rep;
    uint64_t own, opp;
    oth_sides(s, &own, &opp);
    uint64_t moves = oth_moves(own, opp);
    int k = 0;
    for (int c = 0; c < 64; c++)
        if (moves >> c & 1) out[k++] = (uint16_t)c;
    if (!k) out[k++] = OTH_PASS;
    return k;
}

static int oth_play(const GameRules *r, const unsigned char *s, int a, unsigned char *next,
                    double *tv) {
    (void)r;
    uint64_t own, opp;
    oth_sides(s, &own, &opp);
    if (a != OTH_PASS) {
        uint64_t m = 1ULL << a, f = oth_flips(own, opp, m);
        own |= m | f;
        opp &= ~f;
    }
    int color = s[16] ^ 1; /* the side to move at next owns `opp` */
    put_u64(next, color ? own : opp);
    put_u64(next + 8, color ? opp : own);
    next[16] = (unsigned char)color;
    next[17] = 0;
    put_u16(next + 18, get_u16(s + 18) + 1);
    if (oth_moves(opp, own) || oth_moves(own, opp)) return 0;
    int mine = __builtin_popcountll(opp), theirs = __builtin_popcountll(own);
    *tv = mine > theirs ? 1.0 : mine < theirs ? -1.0 : 0.0;
    return 1;
}

static void oth_encode(const GameRules *r, const unsigned char *s, unsigned char *out) {
    (void)r;
    uint64_t own, opp;
    oth_sides(s, &own, &opp);
    for (int b = 0; b < 64; b++) out[b] = (unsigned char)(own >> b & 1);
    for (int b = 0; b < 64; b++) out[64 + b] = (unsigned char)(opp >> b & 1);
}

const GameDef GAME_othello = {
    .name = "othello",
    .params = "",
    .make = oth_make,
    .load = oth_load,
    .legal = oth_legal,
    .play = oth_play,
    .encode = oth_encode,
};
