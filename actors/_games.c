/* The built-in games' rules in C (see _games.h): Connect Four, tic-tac-toe, Othello and Go 9x9,
 * each the same rules as its Python reference in actors/games/ (the references are the oracles:
 * tests/test_core_rules.py plays random games through both, and tests/test_openspiel_rules.py
 * checks both against OpenSpiel). States are little-endian byte blobs, read with memcpy. */
#include "_games.h"

#include <string.h>

/* --- blob helpers ------------------------------------------------------------------------- */

static uint64_t get_u64(const unsigned char *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}
static void put_u64(unsigned char *p, uint64_t v) { memcpy(p, &v, 8); }
static int32_t get_i32(const unsigned char *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}
static void put_i32(unsigned char *p, int32_t v) { memcpy(p, &v, 4); }
static int get_u16(const unsigned char *p) { return p[0] | p[1] << 8; }
static void put_u16(unsigned char *p, int v) {
    p[0] = (unsigned char)(v & 0xff);
    p[1] = (unsigned char)(v >> 8);
}

/* --- Connect Four and tic-tac-toe: blob "<QQii" = stones, mask, ply, last_won --------------
 * (the side to move's stones, all stones, stones played, whether the last move won) */

#define BIT_STATE 24

static int bit_load(const unsigned char *blob, unsigned char *state, const char **why) {
    int32_t ply = get_i32(blob + 16), last_won = get_i32(blob + 20);
    uint64_t stones = get_u64(blob), mask = get_u64(blob + 8);
    if (ply < 0 || (last_won != 0 && last_won != 1) || (stones & ~mask)) {
        *why = "not a position (stones outside the mask, or a bad ply or flag)";
        return -1;
    }
    memcpy(state, blob, BIT_STATE);
    return 0;
}

static void bit_put(unsigned char *next, uint64_t stones, uint64_t mask, int ply, int won) {
    put_u64(next, stones);
    put_u64(next + 8, mask);
    put_i32(next + 16, ply);
    put_i32(next + 20, won);
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

static int c4_legal(const unsigned char *s, const Repeats *rep, uint16_t *out) {
    (void)rep;
    uint64_t mask = get_u64(s + 8);
    int k = 0;
    for (int c = 0; c < 7; c++)
        if (!(mask & (1ULL << (c * 7 + 5)))) out[k++] = (uint16_t)c;
    return k;
}

static int c4_play(const unsigned char *s, int a, unsigned char *next, double *tv) {
    uint64_t stones = get_u64(s), mask = get_u64(s + 8);
    uint64_t new_mask = mask | (mask + (1ULL << (a * 7)));
    uint64_t mine = stones | (new_mask ^ mask);
    int won = c4_four(mine), ply = get_i32(s + 16) + 1;
    bit_put(next, mine ^ new_mask, new_mask, ply, won);
    *tv = won ? -1.0 : 0.0;
    return won || ply == 42;
}

static void c4_encode(const unsigned char *s, unsigned char *out) {
    uint64_t stones = get_u64(s), boards[2] = {stones, stones ^ get_u64(s + 8)};
    for (int p = 0; p < 2; p++)
        for (int r = 0; r < 6; r++)
            for (int c = 0; c < 7; c++) *out++ = (unsigned char)(boards[p] >> (c * 7 + 5 - r) & 1);
}

static const uint16_t TTT_LINES[8] = {0007, 0070, 0700, 0111, 0222, 0444, 0421, 0124};

static int ttt_legal(const unsigned char *s, const Repeats *rep, uint16_t *out) {
    (void)rep;
    uint64_t mask = get_u64(s + 8);
    int k = 0;
    for (int c = 0; c < 9; c++)
        if (!(mask >> c & 1)) out[k++] = (uint16_t)c;
    return k;
}

static int ttt_play(const unsigned char *s, int a, unsigned char *next, double *tv) {
    uint64_t stones = get_u64(s), mask = get_u64(s + 8), bit = 1ULL << a;
    uint64_t mine = stones | bit;
    int won = 0, ply = get_i32(s + 16) + 1;
    for (int l = 0; l < 8; l++)
        if ((TTT_LINES[l] >> a & 1) && (mine & TTT_LINES[l]) == TTT_LINES[l]) won = 1;
    bit_put(next, stones ^ mask, mask | bit, ply, won);
    *tv = won ? -1.0 : 0.0;
    return won || ply == 9;
}

static void ttt_encode(const unsigned char *s, unsigned char *out) {
    uint64_t stones = get_u64(s), boards[2] = {stones, stones ^ get_u64(s + 8)};
    for (int p = 0; p < 2; p++)
        for (int b = 0; b < 9; b++) *out++ = (unsigned char)(boards[p] >> b & 1);
}

/* --- Othello: blob = black u64, white u64, color u8, 0 u8, ply u16 (bit row * 8 + col, row 0
 * at the top; actions 0..63 the cells, 64 the pass, legal only when no disc can be placed) --- */

#define OTH_STATE 20
#define OTH_PASS 64
#define FILE_A 0x0101010101010101ULL
#define FILE_H 0x8080808080808080ULL

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

static int oth_load(const unsigned char *blob, unsigned char *state, const char **why) {
    if ((get_u64(blob) & get_u64(blob + 8)) || blob[16] > 1 || blob[17] != 0) {
        *why = "not an Othello position (overlapping discs, or a bad colour byte)";
        return -1;
    }
    memcpy(state, blob, OTH_STATE);
    return 0;
}

static int oth_legal(const unsigned char *s, const Repeats *rep, uint16_t *out) {
    (void)rep;
    uint64_t own, opp;
    oth_sides(s, &own, &opp);
    uint64_t moves = oth_moves(own, opp);
    int k = 0;
    for (int c = 0; c < 64; c++)
        if (moves >> c & 1) out[k++] = (uint16_t)c;
    if (!k) out[k++] = OTH_PASS;
    return k;
}

static int popcount64(uint64_t x) { return __builtin_popcountll(x); }

static int oth_play(const unsigned char *s, int a, unsigned char *next, double *tv) {
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
    int mine = popcount64(opp), theirs = popcount64(own);
    *tv = mine > theirs ? 1.0 : mine < theirs ? -1.0 : 0.0;
    return 1;
}

static void oth_encode(const unsigned char *s, unsigned char *out) {
    uint64_t own, opp;
    oth_sides(s, &own, &opp);
    for (int b = 0; b < 64; b++) out[b] = (unsigned char)(own >> b & 1);
    for (int b = 0; b < 64; b++) out[64 + b] = (unsigned char)(opp >> b & 1);
}

/* --- Go 9x9: blob = board[81] (0 empty, 1 black, 2 white; cell row * 9 + col, row 0 at the
 * bottom), color u8 (0 black to move), passes u8 (consecutive), ply u16; then the board's
 * Zobrist hash u64 (derived). Tromp-Taylor: area scoring, komi 7.5, suicide illegal, positional
 * superko illegal, the pass always legal; over on two passes or at 162 plies. ----------------- */

#define GO_N 9
#define GO_CELLS (GO_N * GO_N)
#define GO_PASS GO_CELLS
#define GO_MAX_PLIES (2 * GO_CELLS)
#define GO_BLOB (GO_CELLS + 4)
#define GO_STATE (GO_BLOB + 8)
#define GO_KOMI 7.5

static uint64_t ZOBRIST[GO_CELLS][3]; /* [cell][colour 1 or 2]; [cell][0] stays 0 */
static int NEIGH[GO_CELLS][4], NNEIGH[GO_CELLS];

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

static uint64_t go_item_hash(const unsigned char *board) {
    uint64_t h = 0;
    for (int i = 0; i < GO_CELLS; i++) h ^= ZOBRIST[i][board[i] <= 2 ? board[i] : 0];
    return h;
}

static uint64_t go_board_hash(const unsigned char *s) { return get_u64(s + GO_BLOB); }

static int go_load(const unsigned char *blob, unsigned char *state, const char **why) {
    for (int i = 0; i < GO_CELLS; i++)
        if (blob[i] > 2) {
            *why = "not a Go 9x9 position (a cell other than 0, 1, 2)";
            return -1;
        }
    if (blob[GO_CELLS] > 1 || blob[GO_CELLS + 1] > 2 || get_u16(blob + GO_CELLS + 2) > GO_MAX_PLIES) {
        *why = "not a Go 9x9 position (bad colour, passes or ply)";
        return -1;
    }
    memcpy(state, blob, GO_BLOB);
    put_u64(state + GO_BLOB, go_item_hash(blob));
    return 0;
}

/* Chains of the board: group[i] (-1 for empty), each group's liberties and Zobrist hash. */
typedef struct {
    int group[GO_CELLS];
    int libs[GO_CELLS];
    uint64_t hash[GO_CELLS];
    int n;
} Chains;

static void go_chains(const unsigned char *board, Chains *ch) {
    int stack[GO_CELLS];
    unsigned char lib_seen[GO_CELLS];
    ch->n = 0;
    for (int i = 0; i < GO_CELLS; i++) ch->group[i] = -1;
    for (int i = 0; i < GO_CELLS; i++) {
        if (!board[i] || ch->group[i] >= 0) continue;
        int g = ch->n++, color = board[i], top = 0, libs = 0;
        uint64_t h = 0;
        memset(lib_seen, 0, sizeof lib_seen);
        ch->group[i] = g;
        stack[top++] = i;
        while (top) {
            int p = stack[--top];
            h ^= ZOBRIST[p][color];
            for (int j = 0; j < NNEIGH[p]; j++) {
                int q = NEIGH[p][j];
                if (!board[q]) {
                    if (!lib_seen[q]) {
                        lib_seen[q] = 1;
                        libs++;
                    }
                } else if (board[q] == color && ch->group[q] < 0) {
                    ch->group[q] = g;
                    stack[top++] = q;
                }
            }
        }
        ch->libs[g] = libs;
        ch->hash[g] = h;
    }
}

/* Whether placing `color` at empty p is legal before superko; the board's hash after it. */
static int go_placement(const unsigned char *board, const Chains *ch, uint64_t h, int p, int color,
                        uint64_t *after) {
    int opp = 3 - color, ok = 0, taken[4], ntaken = 0;
    h ^= ZOBRIST[p][color];
    for (int j = 0; j < NNEIGH[p]; j++) {
        int q = NEIGH[p][j];
        if (!board[q]) {
            ok = 1;
            continue;
        }
        int g = ch->group[q];
        if (board[q] == color) {
            if (ch->libs[g] > 1) ok = 1;
        } else if (board[q] == opp && ch->libs[g] == 1) {
            int dup = 0;
            for (int t = 0; t < ntaken; t++) dup |= taken[t] == g;
            if (!dup) {
                taken[ntaken++] = g;
                h ^= ch->hash[g];
                ok = 1;
            }
        }
    }
    *after = h;
    return ok;
}

static int go_legal(const unsigned char *s, const Repeats *rep, uint16_t *out) {
    Chains ch;
    go_chains(s, &ch);
    int color = s[GO_CELLS] + 1, k = 0;
    uint64_t h = go_board_hash(s), after;
    for (int p = 0; p < GO_CELLS; p++)
        if (!s[p] && go_placement(s, &ch, h, p, color, &after) && !(rep && rep->seen(rep->ctx, after)))
            out[k++] = (uint16_t)p;
    out[k++] = GO_PASS;
    return k;
}

/* Tromp-Taylor: black's area minus white's, minus komi. */
static double go_score(const unsigned char *board) {
    int area[3] = {0, 0, 0}, stack[GO_CELLS];
    unsigned char seen[GO_CELLS];
    memset(seen, 0, sizeof seen);
    for (int i = 0; i < GO_CELLS; i++) {
        if (board[i]) {
            area[board[i]]++;
            continue;
        }
        if (seen[i]) continue;
        int top = 0, size = 0, borders = 0;
        seen[i] = 1;
        stack[top++] = i;
        while (top) {
            int p = stack[--top];
            size++;
            for (int j = 0; j < NNEIGH[p]; j++) {
                int q = NEIGH[p][j];
                if (board[q]) borders |= board[q];
                else if (!seen[q]) {
                    seen[q] = 1;
                    stack[top++] = q;
                }
            }
        }
        if (borders == 1 || borders == 2) area[borders] += size;
    }
    return (double)area[1] - (double)area[2] - GO_KOMI;
}

static int go_play(const unsigned char *s, int a, unsigned char *next, double *tv) {
    int color = s[GO_CELLS] + 1, passes = s[GO_CELLS + 1], ply = get_u16(s + GO_CELLS + 2) + 1;
    uint64_t h = go_board_hash(s);
    memcpy(next, s, GO_CELLS);
    if (a == GO_PASS) {
        passes++;
    } else {
        int opp = 3 - color, stack[GO_CELLS];
        next[a] = (unsigned char)color;
        h ^= ZOBRIST[a][color];
        passes = 0;
        for (int j = 0; j < NNEIGH[a]; j++) {
            int q = NEIGH[a][j];
            if (next[q] != opp) continue;
            /* the opponent's chain through q: taken when it has no liberty left */
            unsigned char in[GO_CELLS];
            int top = 0, n = 0, free = 0, cells[GO_CELLS];
            memset(in, 0, sizeof in);
            in[q] = 1;
            stack[top++] = q;
            while (top && !free) {
                int p = stack[--top];
                cells[n++] = p;
                for (int t = 0; t < NNEIGH[p]; t++) {
                    int r = NEIGH[p][t];
                    if (!next[r]) free = 1;
                    else if (next[r] == opp && !in[r]) {
                        in[r] = 1;
                        stack[top++] = r;
                    }
                }
            }
            if (free) continue;
            for (int c = 0; c < n; c++) {
                next[cells[c]] = 0;
                h ^= ZOBRIST[cells[c]][opp];
            }
        }
    }
    next[GO_CELLS] = (unsigned char)(color == 1); /* the other side: 1 (white) after black */
    next[GO_CELLS + 1] = (unsigned char)passes;
    put_u16(next + GO_CELLS + 2, ply);
    put_u64(next + GO_BLOB, h);
    if (passes < 2 && ply < GO_MAX_PLIES) return 0;
    double black = go_score(next);
    double mine = next[GO_CELLS] ? -black : black;
    *tv = mine > 0 ? 1.0 : mine < 0 ? -1.0 : 0.0;
    return 1;
}

/* Planes: the side to move's stones, the opponent's, ones when black is to move, ones when the
 * last move was a pass; obs row 0 is the top row (board row 8). */
static void go_encode(const unsigned char *s, unsigned char *out) {
    int me = s[GO_CELLS] + 1;
    unsigned char black = s[GO_CELLS] == 0, passed = s[GO_CELLS + 1] > 0;
    for (int r = 0; r < GO_N; r++)
        for (int c = 0; c < GO_N; c++) {
            int v = s[(GO_N - 1 - r) * GO_N + c], o = r * GO_N + c;
            out[o] = (unsigned char)(v == me);
            out[GO_CELLS + o] = (unsigned char)(v && v != me);
            out[2 * GO_CELLS + o] = black;
            out[3 * GO_CELLS + o] = passed;
        }
}

/* --- the table ---------------------------------------------------------------------------- */

static const GameDef CONNECT4 = {"connect4", 7, 84, BIT_STATE, BIT_STATE, 42, 0,
                                 bit_load, c4_legal, c4_play, c4_encode, NULL, NULL};
static const GameDef TICTACTOE = {"tictactoe", 9, 18, BIT_STATE, BIT_STATE, 9, 0,
                                  bit_load, ttt_legal, ttt_play, ttt_encode, NULL, NULL};
static const GameDef OTHELLO = {"othello", 65, 128, OTH_STATE, OTH_STATE, 128, 0,
                                oth_load, oth_legal, oth_play, oth_encode, NULL, NULL};
static const GameDef GO9 = {"go9", GO_CELLS + 1, 4 * GO_CELLS, GO_BLOB, GO_STATE, GO_MAX_PLIES,
                            GO_CELLS, go_load, go_legal, go_play, go_encode, go_board_hash,
                            go_item_hash};

const GameDef *const GAME_TABLE[] = {&CONNECT4, &TICTACTOE, &OTHELLO, &GO9, NULL};

const GameDef *find_game(const char *name) {
    for (int i = 0; GAME_TABLE[i]; i++)
        if (strcmp(GAME_TABLE[i]->name, name) == 0) return GAME_TABLE[i];
    return NULL;
}

void games_init(void) {
    uint64_t seed = 0x61A5E12BULL; /* fixed: hashes are the same in every process */
    for (int i = 0; i < GO_CELLS; i++) {
        ZOBRIST[i][0] = 0;
        ZOBRIST[i][1] = splitmix64(&seed);
        ZOBRIST[i][2] = splitmix64(&seed);
        int r = i / GO_N, c = i % GO_N, n = 0;
        if (r > 0) NEIGH[i][n++] = i - GO_N;
        if (r < GO_N - 1) NEIGH[i][n++] = i + GO_N;
        if (c > 0) NEIGH[i][n++] = i - 1;
        if (c < GO_N - 1) NEIGH[i][n++] = i + 1;
        NNEIGH[i] = n;
    }
}
