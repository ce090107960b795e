/* The blob of Connect Four and tic-tac-toe, "<QQii": the side to move's stones, all stones,
 * stones played, whether the last move won. */
#ifndef AZSERVE_BITBOARD_H
#define AZSERVE_BITBOARD_H

#include "blob.h"

#define BIT_STATE 24

static inline int bit_load(const GameRules *r, const unsigned char *blob, unsigned char *state,
                           const char **why) {
    (void)r;
    int32_t ply = get_i32(blob + 16), last_won = get_i32(blob + 20);
    uint64_t stones = get_u64(blob), mask = get_u64(blob + 8);
    if (ply < 0 || (last_won != 0 && last_won != 1) || (stones & ~mask)) {
        *why = "not a position (stones outside the mask, or a bad ply or flag)";
        return -1;
    }
    memcpy(state, blob, BIT_STATE);
    return 0;
}

static inline void bit_put(unsigned char *next, uint64_t stones, uint64_t mask, int ply,
                           int won) {
    put_u64(next, stones);
    put_u64(next + 8, mask);
    put_i32(next + 16, ply);
    put_i32(next + 20, won);
}

#endif
