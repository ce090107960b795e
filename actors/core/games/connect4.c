/* Connect Four on bitboards: the same rules as actors/games/connect4.py (the oracle; bit
 * c * 7 + r is column c, row r from the bottom, row 6 of each column a sentinel). */
#include "../bitboard.h"

static int c4_make(GameRules *r, const double *params, int n, const char **why) {
    (void)params, (void)n, (void)why;
    fixed_rules(r, 7, 84, BIT_STATE, BIT_STATE, 42);
    return 0;
}

static int c4_four(uint64_t b) {
    uint64_t m = b & (b >> 7);
    if (m & (m >> 14)) return 1;
    m = b & (b >> 1);
    if (m & (m >> 2)) return 1;
    m = b & (b >> 6);
    if (m & (m >> 12)) return 1;
    m = b & (b >> 8);
    return (m & (m >> 16)) != 0;
}

static int c4_legal(const GameRules *r, const unsigned char *s, const Repeats *rep,
                    uint16_t *out) {
    (void)r, (void)rep;
    uint64_t mask = get_u64(s + 8);
    int k = 0;
    for (int c = 0; c < 7; c++)
        if (!(mask & (1ULL << (c * 7 + 5)))) out[k++] = (uint16_t)c;
    return k;
}

static int c4_play(const GameRules *r, const unsigned char *s, int a, unsigned char *next,
                   double *tv) {
    (void)r;
    uint64_t stones = get_u64(s), mask = get_u64(s + 8);
    uint64_t new_mask = mask | (mask + (1ULL << (a * 7)));
    uint64_t mine = stones | (new_mask ^ mask);
    int won = c4_four(mine), ply = get_i32(s + 16) + 1;
    bit_put(next, mine ^ new_mask, new_mask, ply, won);
    *tv = won ? -1.0 : 0.0;
    return won || ply == 42;
}

static void c4_encode(const GameRules *r, const unsigned char *s, unsigned char *out) {
    (void)r;
    uint64_t stones = get_u64(s), boards[2] = {stones, stones ^ get_u64(s + 8)};
    for (int p = 0; p < 2; p++)
        for (int row = 0; row < 6; row++)
            for (int c = 0; c < 7; c++)
                *out++ = (unsigned char)(boards[p] >> (c * 7 + 5 - row) & 1);
}

const GameDef GAME_connect4 = {
    .name = "connect4",
    .params = "",
    .make = c4_make,
    .load = bit_load,
    .legal = c4_legal,
    .play = c4_play,
    .encode = c4_encode,
};
