/* Go under Tromp-Taylor rules at any size from 2x2 to 25x25 and any komi (the rules' params:
 * size, komi, features; 9, 7.5 and 0 by default): the same rules as actors/games/go/rules.py, the
 * oracle (with features: actors/games/go/features.py).
 *
 * Blob: board[N * N] (0 empty, 1 black, 2 white; cell row * N + col, row 0 at the bottom),
 * colour u8 (0 black to move), passes u8 (consecutive), ply u16; with features, then the ko
 * point u16 and the last GO_LAST moves u16 each, newest first (GO_NONE where none); then the
 * board's Zobrist hash u64 (derived). Area scoring, suicide illegal, positional superko
 * illegal, the pass always legal; over on two passes or at 2 * N * N plies. History items: the
 * earlier boards. */
#include <math.h>
#include <stdlib.h>

#include "../blob.h"

#define GO_MAX_N 25 /* GTP's columns, A..Z without I (as actors/games/go/rules.py) */
/* The hot functions are written once with the size as a parameter and inlined into a copy per
 * common size (9, 13, 19: loops of a known length) and a general one. */
#define GO_INLINE static inline __attribute__((always_inline))
#define GO_BY_SIZE(call_n, g)                                                                  \
    switch ((g)->n) {                                                                          \
    case 9: return call_n(9);                                                                  \
    case 13: return call_n(13);                                                                \
    case 19: return call_n(19);                                                                \
    default: return call_n((g)->n);                                                            \
    }
#define GO_MAX_CELLS (GO_MAX_N * GO_MAX_N)
#define GO_LAST 3        /* moves shown by the feature planes */
#define GO_NONE 0xFFFF   /* no ko point, no move */
#define GO_PLANES 4      /* planes without features */
#define GO_FEATURE_PLANES (GO_PLANES + 3 + 1 + GO_LAST) /* + liberties 1/2/3+, ko, last moves */

typedef struct {
    int n, cells, pass, blob; /* blob: bytes of the Python blob; the hash follows it */
    int features;             /* the feature planes and the state they need (ko, last moves) */
    double komi;
    int neigh[GO_MAX_CELLS][4], nneigh[GO_MAX_CELLS];
} Go;

/* [cell][colour 1 or 2]; [cell][0] stays 0. The same in every process (a fixed seed), and a
 * cell's entries the same at every size. */
static uint64_t ZOBRIST[GO_MAX_CELLS][3];
static int zobrist_ready = 0;

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

static int go_make(GameRules *r, const double *params, int n, const char **why) {
    double size = n > 0 ? params[0] : 9.0, komi = n > 1 ? params[1] : 7.5;
    double features = n > 2 ? params[2] : 0.0;
    if (features != 0.0 && features != 1.0) {
        *why = "go: features must be 0 or 1";
        return -1;
    }
    if (!(size >= 2 && size <= GO_MAX_N) || size != floor(size)) {
        *why = "go: the board size must be a whole number in 2..25";
        return -1;
    }
    if (!isfinite(komi)) {
        *why = "go: the komi must be a finite number";
        return -1;
    }
    if (!zobrist_ready) {
        uint64_t seed = 0x61A5E12BULL;
        for (int i = 0; i < GO_MAX_CELLS; i++) {
            ZOBRIST[i][0] = 0;
            ZOBRIST[i][1] = splitmix64(&seed);
            ZOBRIST[i][2] = splitmix64(&seed);
        }
        zobrist_ready = 1;
    }
    Go *g = (Go *)malloc(sizeof(Go));
    if (!g) {
        *why = "go: out of memory";
        return -1;
    }
    int N = (int)size, cells = N * N;
    g->n = N;
    g->cells = cells;
    g->pass = cells;
    g->features = features == 1.0;
    g->blob = cells + 4 + (g->features ? 2 * (1 + GO_LAST) : 0);
    g->komi = komi;
    for (int i = 0; i < cells; i++) {
        int row = i / N, c = i % N, k = 0;
        if (row > 0) g->neigh[i][k++] = i - N;
        if (row < N - 1) g->neigh[i][k++] = i + N;
        if (c > 0) g->neigh[i][k++] = i - 1;
        if (c < N - 1) g->neigh[i][k++] = i + 1;
        g->nneigh[i] = k;
    }
    snprintf(r->label, sizeof r->label, "go%d", N);
    r->num_actions = cells + 1;
    r->obs_size = (g->features ? GO_FEATURE_PLANES : GO_PLANES) * cells;
    r->blob_size = g->blob;
    r->state_size = g->blob + 8;
    r->max_plies = 2 * cells;
    r->history_item = cells;
    r->hash_at = g->blob;
    r->data = g;
    return 0;
}

static void go_release(GameRules *r) {
    free(r->data);
    r->data = NULL;
}

static uint64_t go_item_hash(const GameRules *r, const unsigned char *board) {
    const Go *g = (const Go *)r->data;
    uint64_t h = 0;
    for (int i = 0; i < g->cells; i++) h ^= ZOBRIST[i][board[i] <= 2 ? board[i] : 0];
    return h;
}

static int go_load(const GameRules *r, const unsigned char *blob, unsigned char *state,
                   const char **why) {
    const Go *g = (const Go *)r->data;
    int cells = g->cells;
    for (int i = 0; i < cells; i++)
        if (blob[i] > 2) {
            *why = "not a Go position (a cell other than 0, 1, 2)";
            return -1;
        }
    if (blob[cells] > 1 || blob[cells + 1] > 2 || get_u16(blob + cells + 2) > r->max_plies) {
        *why = "not a Go position (bad colour, passes or ply)";
        return -1;
    }
    if (g->features) {
        int ko = get_u16(blob + cells + 4);
        int bad = ko != GO_NONE && (ko >= cells || blob[ko]);
        for (int k = 0; k < GO_LAST; k++) {
            int m = get_u16(blob + cells + 6 + 2 * k);
            bad |= m != GO_NONE && m > cells;
        }
        if (bad) {
            *why = "not a Go position (bad ko point or last moves)";
            return -1;
        }
    }
    memcpy(state, blob, (size_t)g->blob);
    put_u64(state + g->blob, go_item_hash(r, blob));
    return 0;
}

/* Chains of the board: group[i] (-1 for empty), each group's liberties and Zobrist hash. */
typedef struct {
    int group[GO_MAX_CELLS];
    int libs[GO_MAX_CELLS];
    uint64_t hash[GO_MAX_CELLS];
    int n;
} Chains;

GO_INLINE void go_chains(const Go *g, const unsigned char *board, Chains *ch, const int cells) {
    int stack[GO_MAX_CELLS];
    unsigned char lib_seen[GO_MAX_CELLS];
    ch->n = 0;
    for (int i = 0; i < cells; i++) ch->group[i] = -1;
    for (int i = 0; i < cells; i++) {
        if (!board[i] || ch->group[i] >= 0) continue;
        int gi = ch->n++, color = board[i], top = 0, libs = 0;
        uint64_t h = 0;
        memset(lib_seen, 0, (size_t)cells);
        ch->group[i] = gi;
        stack[top++] = i;
        while (top) {
            int p = stack[--top];
            h ^= ZOBRIST[p][color];
            for (int j = 0; j < g->nneigh[p]; j++) {
                int q = g->neigh[p][j];
                if (!board[q]) {
                    if (!lib_seen[q]) {
                        lib_seen[q] = 1;
                        libs++;
                    }
                } else if (board[q] == color && ch->group[q] < 0) {
                    ch->group[q] = gi;
                    stack[top++] = q;
                }
            }
        }
        ch->libs[gi] = libs;
        ch->hash[gi] = h;
    }
}

/* Whether placing `color` at empty p is legal before superko; the board's hash after it. */
GO_INLINE int go_placement(const Go *g, const unsigned char *board, const Chains *ch, uint64_t h,
                        int p, int color, uint64_t *after) {
    int opp = 3 - color, ok = 0, taken[4], ntaken = 0;
    h ^= ZOBRIST[p][color];
    for (int j = 0; j < g->nneigh[p]; j++) {
        int q = g->neigh[p][j];
        if (!board[q]) {
            ok = 1;
            continue;
        }
        int gi = ch->group[q];
        if (board[q] == color) {
            if (ch->libs[gi] > 1) ok = 1;
        } else if (board[q] == opp && ch->libs[gi] == 1) {
            int dup = 0;
            for (int t = 0; t < ntaken; t++) dup |= taken[t] == gi;
            if (!dup) {
                taken[ntaken++] = gi;
                h ^= ch->hash[gi];
                ok = 1;
            }
        }
    }
    *after = h;
    return ok;
}

GO_INLINE int go_legal_n(const Go *g, const unsigned char *s, const Repeats *rep, uint16_t *out,
                         const int cells) {
    Chains ch;
    go_chains(g, s, &ch, cells);
    int color = s[cells] + 1, k = 0;
    uint64_t h = get_u64(s + g->blob), after;
    for (int p = 0; p < cells; p++)
        if (!s[p] && go_placement(g, s, &ch, h, p, color, &after) &&
            !(rep && rep->seen(rep->ctx, after)))
            out[k++] = (uint16_t)p;
    out[k++] = (uint16_t)cells;
    return k;
}

static int go_legal(const GameRules *r, const unsigned char *s, const Repeats *rep,
                    uint16_t *out) {
    const Go *g = (const Go *)r->data;
#define LEGAL_N(n) go_legal_n(g, s, rep, out, (n) * (n))
    GO_BY_SIZE(LEGAL_N, g)
#undef LEGAL_N
}

/* Tromp-Taylor: black's area minus white's, minus komi. */
static double go_score(const Go *g, const unsigned char *board) {
    int area[3] = {0, 0, 0}, stack[GO_MAX_CELLS], cells = g->cells;
    unsigned char seen[GO_MAX_CELLS];
    memset(seen, 0, (size_t)cells);
    for (int i = 0; i < cells; i++) {
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
            for (int j = 0; j < g->nneigh[p]; j++) {
                int q = g->neigh[p][j];
                if (board[q]) borders |= board[q];
                else if (!seen[q]) {
                    seen[q] = 1;
                    stack[top++] = q;
                }
            }
        }
        if (borders == 1 || borders == 2) area[borders] += size;
    }
    return (double)area[1] - (double)area[2] - g->komi;
}

/* With features: the ko point and the last moves of `next`, after `a` took `taken` stones (the
 * last at `taken_at`) from `s`. The ko point is the one stone just taken when the stone that
 * took it stands alone with that point as its only liberty: retaking it at once would repeat
 * the board, which positional superko forbids. */
static void go_features_after(const Go *g, unsigned char *next, const unsigned char *s, int a,
                              int taken, int taken_at) {
    int cells = g->cells, ko = GO_NONE;
    if (a < cells && taken == 1) {
        int alone = 1, libs = 0;
        for (int j = 0; j < g->nneigh[a]; j++) {
            int q = g->neigh[a][j];
            alone &= next[q] != next[a];
            libs += !next[q];
        }
        if (alone && libs == 1) ko = taken_at;
    }
    put_u16(next + cells + 4, ko);
    for (int k = GO_LAST - 1; k > 0; k--)
        put_u16(next + cells + 6 + 2 * k, get_u16(s + cells + 6 + 2 * (k - 1)));
    put_u16(next + cells + 6, a);
}

GO_INLINE int go_play_n(const Go *g, const unsigned char *s, int a,
                        unsigned char *next, double *tv, const int cells) {
    int color = s[cells] + 1, passes = s[cells + 1], ply = get_u16(s + cells + 2) + 1;
    int taken = 0, taken_at = GO_NONE; /* stones this move takes; where the last one was */
    uint64_t h = get_u64(s + g->blob);
    memcpy(next, s, (size_t)cells);
    if (a == cells) {
        passes++;
    } else {
        int opp = 3 - color, stack[GO_MAX_CELLS];
        next[a] = (unsigned char)color;
        h ^= ZOBRIST[a][color];
        passes = 0;
        for (int j = 0; j < g->nneigh[a]; j++) {
            int q = g->neigh[a][j];
            if (next[q] != opp) continue;
            /* the opponent's chain through q: taken when it has no liberty left */
            unsigned char in[GO_MAX_CELLS];
            int top = 0, n = 0, free = 0, chain[GO_MAX_CELLS];
            memset(in, 0, (size_t)cells);
            in[q] = 1;
            stack[top++] = q;
            while (top && !free) {
                int p = stack[--top];
                chain[n++] = p;
                for (int t = 0; t < g->nneigh[p]; t++) {
                    int x = g->neigh[p][t];
                    if (!next[x]) free = 1;
                    else if (next[x] == opp && !in[x]) {
                        in[x] = 1;
                        stack[top++] = x;
                    }
                }
            }
            if (free) continue;
            for (int c = 0; c < n; c++) {
                next[chain[c]] = 0;
                h ^= ZOBRIST[chain[c]][opp];
            }
            taken += n;
            taken_at = chain[0];
        }
    }
    next[cells] = (unsigned char)(color == 1); /* the other side: 1 (white) after black */
    next[cells + 1] = (unsigned char)passes;
    put_u16(next + cells + 2, ply);
    if (g->features) go_features_after(g, next, s, a, taken, taken_at);
    put_u64(next + g->blob, h);
    if (passes < 2 && ply < 2 * cells) return 0;
    double black = go_score(g, next);
    double mine = next[cells] ? -black : black;
    *tv = mine > 0 ? 1.0 : mine < 0 ? -1.0 : 0.0;
    return 1;
}

static int go_play(const GameRules *r, const unsigned char *s, int a, unsigned char *next,
                   double *tv) {
    const Go *g = (const Go *)r->data;
#define PLAY_N(n) go_play_n(g, s, a, next, tv, (n) * (n))
    GO_BY_SIZE(PLAY_N, g)
#undef PLAY_N
}

/* Planes: the side to move's stones, the opponent's, ones when black is to move, ones when the
 * last move was a pass; obs row 0 is the top row (board row N - 1). */
GO_INLINE void go_encode_n(const unsigned char *s, unsigned char *out, const int N) {
    const int cells = N * N;
    int me = s[cells] + 1;
    unsigned char black = s[cells] == 0, passed = s[cells + 1] > 0;
    for (int row = 0; row < N; row++)
        for (int c = 0; c < N; c++) {
            int v = s[(N - 1 - row) * N + c], o = row * N + c;
            out[o] = (unsigned char)(v == me);
            out[cells + o] = (unsigned char)(v && v != me);
            out[2 * cells + o] = black;
            out[3 * cells + o] = passed;
        }
}

/* The feature planes after the first four: stones whose chain has 1, 2, 3 or more liberties;
 * the ko point; the last GO_LAST moves, newest first (a pass marks nothing). */
static void go_encode_features(const Go *g, const unsigned char *s, unsigned char *out) {
    const int N = g->n, cells = g->cells;
    Chains ch;
    go_chains(g, s, &ch, cells);
    memset(out, 0, (size_t)(GO_FEATURE_PLANES - GO_PLANES) * (size_t)cells);
    for (int i = 0; i < cells; i++) {
        int o = (N - 1 - i / N) * N + i % N; /* obs row 0 is the top row */
        if (s[i]) {
            int libs = ch.libs[ch.group[i]];
            out[(libs >= 3 ? 2 : libs - 1) * cells + o] = 1;
        }
    }
    int ko = get_u16(s + cells + 4);
    if (ko != GO_NONE) out[3 * cells + (N - 1 - ko / N) * N + ko % N] = 1;
    for (int k = 0; k < GO_LAST; k++) {
        int m = get_u16(s + cells + 6 + 2 * k);
        if (m < cells) out[(4 + k) * cells + (N - 1 - m / N) * N + m % N] = 1;
    }
}

static void go_encode(const GameRules *r, const unsigned char *s, unsigned char *out) {
    const Go *g = (const Go *)r->data;
    if (g->features) go_encode_features(g, s, out + GO_PLANES * g->cells);
    switch (g->n) {
    case 9: go_encode_n(s, out, 9); break;
    case 13: go_encode_n(s, out, 13); break;
    case 19: go_encode_n(s, out, 19); break;
    default: go_encode_n(s, out, g->n);
    }
}

const GameDef GAME_go = {
    .name = "go",
    .params = "size, komi, features",
    .nparams = 3,
    .make = go_make,
    .release = go_release,
    .load = go_load,
    .legal = go_legal,
    .play = go_play,
    .encode = go_encode,
    .item_hash = go_item_hash,
};
