/* Tic-tac-toe on bitboards: the same rules as actors/games/tictactoe.py (bit b is cell b,
 * row-major from the top left). */
#include "../bitboard.h"

static int ttt_make(GameRules *r, const double *params, int n, const char **why) {
    (void)params, (void)n, (void)why;
    fixed_rules(r, 9, 18, BIT_STATE, BIT_STATE, 9);
    return 0;
}

static const uint16_t TTT_LINES[8] = {0007, 0070, 0700, 0111, 0222, 0444, 0421, 0124};

static int ttt_legal(const GameRules *r, const unsigned char *s, const Repeats *rep,
                     uint16_t *out) {
    (void)r, (void)rep;
    uint64_t mask = get_u64(s + 8);
    int k = 0;
    for (int c = 0; c < 9; c++)
        if (!(mask >> c & 1)) out[k++] = (uint16_t)c;
    return k;
}

static int ttt_play(const GameRules *r, const unsigned char *s, int a, unsigned char *next,
                    double *tv) {
    (void)r;
    uint64_t stones = get_u64(s), mask = get_u64(s + 8), bit = 1ULL << a;
    uint64_t mine = stones | bit;
    int won = 0, ply = get_i32(s + 16) + 1;
    for (int l = 0; l < 8; l++)
        if ((TTT_LINES[l] >> a & 1) && (mine & TTT_LINES[l]) == TTT_LINES[l]) won = 1;
    bit_put(next, stones ^ mask, mask | bit, ply, won);
    *tv = won ? -1.0 : 0.0;
    return won || ply == 9;
}

static void ttt_encode(const GameRules *r, const unsigned char *s, unsigned char *out) {
    (void)r;
    uint64_t stones = get_u64(s), boards[2] = {stones, stones ^ get_u64(s + 8)};
    for (int p = 0; p < 2; p++)
        for (int b = 0; b < 9; b++) *out++ = (unsigned char)(boards[p] >> b & 1);
}

const GameDef GAME_tictactoe = {
    .name = "tictactoe",
    .params = "",
    .make = ttt_make,
    .load = bit_load,
    .legal = ttt_legal,
    .play = ttt_play,
    .encode = ttt_encode,
};
