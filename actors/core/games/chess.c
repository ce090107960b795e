/* Chess on bitboards (the rules' params: max_plies, history, features; 512, 7 and 0 by default):
 * the rules actors/games/chess/rules.py plays through, checked by perft and against OpenSpiel's
 * chess. `features` adds the feature planes (below, "planes"), checked against python-chess
 * (tests/test_chess_features.py); the blob is the same with or without them.
 *
 * Blob (little-endian), what Python's core_state gives:
 *   [0, 64)    board: 0 empty, 1..6 white P N B R Q K, 7..12 black; square rank * 8 + file
 *   64         side to move (0 white, 1 black)
 *   65         castling rights (1 white O-O, 2 white O-O-O, 4 black O-O, 8 black O-O-O)
 *   66         en-passant square, or 64 for none: set only when a pawn of the side to move
 *              stands beside the pawn that just advanced two (OpenSpiel's and FEN's rule, so
 *              that the repetition key is theirs)
 *   67         halfmove clock (plies since the last capture or pawn move)
 *   68         ply u16 (plies since the start of the game; a FEN gives 2 * (fullmove - 1) + side)
 *   70         n: how many keys the window holds (<= 100)
 *   71         0
 *   [72, 872)  window: the repetition keys (u64) of the positions since the last capture or
 *              pawn move, oldest first, the current one excluded
 *   then       `history` earlier positions, most recent first, 65 bytes each: the board (as
 *              above; all zero before the game's first position) and how often it had stood
 *              then (0 for none)
 * Derived: the 12 bitboards (white P..K, black P..K), the key u64, and how often the current
 * position has stood (the window's matches + 1).
 *
 * Why the repetition history lives in the state: threefold repetition ends the game, and
 * `play` (which says whether the game is over) sees only the state, not the tree's path or the
 * game's history (games.h's Repeats serves `legal` only, and answers "seen", not "how often").
 * A capture or pawn move makes every earlier position unrepeatable, and the 50-move rule ends
 * the game 100 plies after one, so the keys since the last such move (at most 100) are all the
 * history repetition needs: each node carries its own, the root's come from Python, and the
 * tree needs no history (history_item 0).
 *
 * Actions: AlphaZero's 8x8x73, `from * 73 + type` with `from` the square seen from the side to
 * move (ranks mirrored for black): types 0..55 queen-like moves, direction * 7 + distance - 1
 * (directions N NE E SE S SW W NW from the mover's view), 56..63 knight moves, 64..72
 * under-promotions (knight, bishop, rook) x (capture towards file a, straight, capture towards
 * file h). A pawn reaching the last rank by a queen-like move promotes to a queen; castling is
 * the king's move two squares towards its rook.
 *
 * The game ends as OpenSpiel's does, checked in its order: insufficient material (draw),
 * threefold repetition (draw), no legal move (mate or stalemate), the halfmove clock at 100
 * (draw); then our ply cap (`max_plies`), adjudicated a draw. */
#include <stdlib.h>

#include "../blob.h"

#define CH_WINDOW 100
#define CH_WIN_AT 72
#define CH_HIST_AT (CH_WIN_AT + 8 * CH_WINDOW)
#define CH_ITEM 65
#define CH_NO_EP 64
#define CH_TYPES 73
#define CH_ACTIONS (64 * CH_TYPES)
#define CH_PLANES_PER 14 /* per position: 6 own pieces, 6 the opponent's, 2 repetition */
#define CH_CONST_PLANES 7
#define CH_FEATURE_PLANES 16 /* with features: attacks 2, hanging 2, check, material 10, moves */

enum { PAWN, KNIGHT, BISHOP, ROOK, QUEEN, KING };

typedef struct {
    int history;  /* earlier positions in the blob and the planes */
    int blob;     /* bytes of the blob; the derived part follows */
    int features; /* the feature planes after the others */
} Chess;

/* The derived part, after the blob. */
typedef struct {
    uint64_t bb[2][6];
    uint64_t key;
    int reps;
} Derived;

typedef struct {
    int from, to, promo; /* promo: the piece type a pawn becomes, or 0 */
} Move;

static uint64_t KNIGHT_ATT[64], KING_ATT[64], PAWN_ATT[2][64], RAY[8][64];
static uint64_t Z_PIECE[12][64], Z_SIDE, Z_CASTLE[16], Z_EP[64];
static unsigned char CASTLE_KEEP[64]; /* the rights that survive a move from or to a square */
static int tables_ready = 0;
/* the ray directions as (file, rank) steps: N NE E SE S SW W NW */
static const int DF[8] = {0, 1, 1, 1, 0, -1, -1, -1}, DR[8] = {1, 1, 0, -1, -1, -1, 0, 1};
static const int KN_DF[8] = {1, 2, 2, 1, -1, -2, -2, -1}, KN_DR[8] = {2, 1, -1, -2, -2, -1, 1, 2};

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

static int on_board(int f, int r) { return f >= 0 && f < 8 && r >= 0 && r < 8; }

static void init_tables(void) {
    if (tables_ready) return;
    for (int sq = 0; sq < 64; sq++) {
        int f = sq % 8, r = sq / 8;
        KNIGHT_ATT[sq] = KING_ATT[sq] = PAWN_ATT[0][sq] = PAWN_ATT[1][sq] = 0;
        for (int d = 0; d < 8; d++) {
            if (on_board(f + KN_DF[d], r + KN_DR[d]))
                KNIGHT_ATT[sq] |= 1ULL << ((r + KN_DR[d]) * 8 + f + KN_DF[d]);
            if (on_board(f + DF[d], r + DR[d]))
                KING_ATT[sq] |= 1ULL << ((r + DR[d]) * 8 + f + DF[d]);
            RAY[d][sq] = 0;
            for (int k = 1; on_board(f + k * DF[d], r + k * DR[d]); k++)
                RAY[d][sq] |= 1ULL << ((r + k * DR[d]) * 8 + f + k * DF[d]);
        }
        for (int df = -1; df <= 1; df += 2) {
            if (on_board(f + df, r + 1)) PAWN_ATT[0][sq] |= 1ULL << ((r + 1) * 8 + f + df);
            if (on_board(f + df, r - 1)) PAWN_ATT[1][sq] |= 1ULL << ((r - 1) * 8 + f + df);
        }
        CASTLE_KEEP[sq] = 15;
    }
    CASTLE_KEEP[4] = 15 & ~3;   /* e1 */
    CASTLE_KEEP[7] = 15 & ~1;   /* h1 */
    CASTLE_KEEP[0] = 15 & ~2;   /* a1 */
    CASTLE_KEEP[60] = 15 & ~12; /* e8 */
    CASTLE_KEEP[63] = 15 & ~4;  /* h8 */
    CASTLE_KEEP[56] = 15 & ~8;  /* a8 */
    uint64_t seed = 0xC4E55ULL;
    for (int p = 0; p < 12; p++)
        for (int sq = 0; sq < 64; sq++) Z_PIECE[p][sq] = splitmix64(&seed);
    Z_SIDE = splitmix64(&seed);
    for (int c = 0; c < 16; c++) Z_CASTLE[c] = c ? splitmix64(&seed) : 0;
    for (int sq = 0; sq < 64; sq++) Z_EP[sq] = splitmix64(&seed);
    tables_ready = 1;
}

static int lsb(uint64_t b) { return __builtin_ctzll(b); }
static int msb(uint64_t b) { return 63 - __builtin_clzll(b); }

/* directions 0 (N), 1 (NE), 2 (E), 7 (NW) increase the square index; the others decrease it */
static uint64_t ray_att(int d, int sq, uint64_t occ) {
    uint64_t ray = RAY[d][sq], block = ray & occ;
    if (!block) return ray;
    int first = (d <= 2 || d == 7) ? lsb(block) : msb(block);
    return ray ^ RAY[d][first];
}

static uint64_t rook_att(int sq, uint64_t occ) {
    return ray_att(0, sq, occ) | ray_att(2, sq, occ) | ray_att(4, sq, occ) | ray_att(6, sq, occ);
}

static uint64_t bishop_att(int sq, uint64_t occ) {
    return ray_att(1, sq, occ) | ray_att(3, sq, occ) | ray_att(5, sq, occ) | ray_att(7, sq, occ);
}

/* Whether side `by` attacks square sq on the board bb with occupancy occ. */
static int attacked(const uint64_t bb[2][6], uint64_t occ, int sq, int by) {
    if (KNIGHT_ATT[sq] & bb[by][KNIGHT]) return 1;
    if (KING_ATT[sq] & bb[by][KING]) return 1;
    if (PAWN_ATT[by ^ 1][sq] & bb[by][PAWN]) return 1;
    if (rook_att(sq, occ) & (bb[by][ROOK] | bb[by][QUEEN])) return 1;
    return (bishop_att(sq, occ) & (bb[by][BISHOP] | bb[by][QUEEN])) != 0;
}

static uint64_t occupancy(const uint64_t bb[2][6]) {
    uint64_t o = 0;
    for (int c = 0; c < 2; c++)
        for (int p = 0; p < 6; p++) o |= bb[c][p];
    return o;
}

static void derived_get(const Chess *g, const unsigned char *state, Derived *d) {
    memcpy(d, state + g->blob, sizeof *d);
}

static void derived_put(const Chess *g, unsigned char *state, const Derived *d) {
    memcpy(state + g->blob, d, sizeof *d);
}

static uint64_t position_key(const unsigned char *s) {
    uint64_t k = 0;
    for (int sq = 0; sq < 64; sq++)
        if (s[sq]) k ^= Z_PIECE[s[sq] - 1][sq];
    if (s[64]) k ^= Z_SIDE;
    k ^= Z_CASTLE[s[65] & 15];
    if (s[66] != CH_NO_EP) k ^= Z_EP[s[66]];
    return k;
}

/* How often the position of key k has stood: the window's matches and itself. */
static int repetitions(const unsigned char *s, uint64_t k) {
    int n = s[70], reps = 1;
    for (int i = 0; i < n; i++) reps += get_u64(s + CH_WIN_AT + 8 * i) == k;
    return reps;
}

static int ch_make(GameRules *r, const double *params, int n, const char **why) {
    double cap = n > 0 ? params[0] : 512.0, hist = n > 1 ? params[1] : 7.0;
    double features = n > 2 ? params[2] : 0.0;
    if (!(cap >= 1 && cap <= 60000) || cap != (double)(int)cap) {
        *why = "chess: max_plies must be a whole number in 1..60000";
        return -1;
    }
    if (!(hist >= 0 && hist <= 15) || hist != (double)(int)hist) {
        *why = "chess: history (earlier positions in the planes) must be a whole number in 0..15";
        return -1;
    }
    if (features != 0.0 && features != 1.0) {
        *why = "chess: features must be 0 or 1";
        return -1;
    }
    init_tables();
    Chess *g = (Chess *)malloc(sizeof(Chess));
    if (!g) {
        *why = "chess: out of memory";
        return -1;
    }
    g->history = (int)hist;
    g->blob = CH_HIST_AT + CH_ITEM * g->history;
    g->features = features == 1.0;
    snprintf(r->label, sizeof r->label, "chess");
    r->num_actions = CH_ACTIONS;
    int planes = CH_PLANES_PER * (g->history + 1) + CH_CONST_PLANES;
    r->obs_size = (planes + (g->features ? CH_FEATURE_PLANES : 0)) * 64;
    r->blob_size = g->blob;
    r->state_size = g->blob + (int)sizeof(Derived);
    r->max_plies = (int)cap;
    r->history_item = 0;
    r->hash_at = -1;
    r->data = g;
    return 0;
}

static void ch_release(GameRules *r) {
    free(r->data);
    r->data = NULL;
}

static int ch_load(const GameRules *r, const unsigned char *blob, unsigned char *state,
                   const char **why) {
    const Chess *g = (const Chess *)r->data;
    Derived d;
    memset(&d, 0, sizeof d);
    int kings[2] = {0, 0};
    for (int sq = 0; sq < 64; sq++) {
        int p = blob[sq];
        if (p > 12) {
            *why = "not a chess position (a square's piece is not 0..12)";
            return -1;
        }
        if (!p) continue;
        int c = (p - 1) / 6, t = (p - 1) % 6;
        d.bb[c][t] |= 1ULL << sq;
        kings[c] += t == KING;
    }
    if (kings[0] != 1 || kings[1] != 1) {
        *why = "not a chess position (each side needs exactly one king)";
        return -1;
    }
    if (blob[64] > 1 || blob[65] > 15 || blob[66] > CH_NO_EP || blob[67] > 100 ||
        blob[70] > CH_WINDOW || blob[70] > blob[67] || get_u16(blob + 68) > r->max_plies) {
        *why = "not a chess position (bad side, castling, en passant, clock, window or ply)";
        return -1;
    }
    if ((d.bb[0][PAWN] | d.bb[1][PAWN]) & 0xFF000000000000FFULL) {
        *why = "not a chess position (a pawn on the first or last rank)";
        return -1;
    }
    static const int CORNER[4] = {7, 0, 63, 56};
    for (int b = 0; b < 4; b++)
        if ((blob[65] >> b & 1) && (blob[b < 2 ? 4 : 60] != (b < 2 ? 6 : 12) ||
                                    blob[CORNER[b]] != (b < 2 ? 4 : 10))) {
            *why = "not a chess position (a castling right without its king and rook at home)";
            return -1;
        }
    int ep = blob[66];
    if (ep != CH_NO_EP) {
        int pushed = blob[64] ? ep + 8 : ep - 8; /* the pawn that advanced two */
        if (ep / 8 != (blob[64] ? 2 : 5) || blob[pushed] != (blob[64] ? 1 : 7) ||
            blob[ep] || !(PAWN_ATT[blob[64] ^ 1][ep] & d.bb[blob[64]][PAWN])) {
            *why = "not a chess position (an en-passant square no pawn can take on)";
            return -1;
        }
    }
    for (int i = 0; i < g->history; i++)
        for (int sq = 0; sq < 64; sq++)
            if (blob[CH_HIST_AT + CH_ITEM * i + sq] > 12) {
                *why = "not a chess position (an earlier board's piece is not 0..12)";
                return -1;
            }
    memcpy(state, blob, (size_t)g->blob);
    d.key = position_key(blob);
    d.reps = repetitions(blob, d.key);
    derived_put(g, state, &d);
    return 0;
}

/* --- moves ---------------------------------------------------------------------------------- */

/* The action of a move by side `us` (the layout in the header). */
static int move_action(const Move *m, int us) {
    int flip = us ? 56 : 0, from = m->from ^ flip, to = m->to ^ flip;
    int df = to % 8 - from % 8, dr = to / 8 - from / 8;
    if (m->promo && m->promo != QUEEN)
        return from * CH_TYPES + 64 + (m->promo - KNIGHT) * 3 + (df + 1);
    for (int k = 0; k < 8; k++)
        if (df == KN_DF[k] && dr == KN_DR[k]) return from * CH_TYPES + 56 + k;
    int dist = abs(df) > abs(dr) ? abs(df) : abs(dr);
    int sf = (df > 0) - (df < 0), sr = (dr > 0) - (dr < 0);
    for (int d = 0; d < 8; d++)
        if (DF[d] == sf && DR[d] == sr) return from * CH_TYPES + d * 7 + dist - 1;
    return -1; /* not reached for a legal move */
}

/* The move of action a by side `us` on board s (a legal action). */
static Move action_move(const unsigned char *s, int a, int us) {
    int flip = us ? 56 : 0, from = a / CH_TYPES, type = a % CH_TYPES, df, dr, promo = 0;
    if (type < 56) {
        df = DF[type / 7] * (type % 7 + 1);
        dr = DR[type / 7] * (type % 7 + 1);
    } else if (type < 64) {
        df = KN_DF[type - 56];
        dr = KN_DR[type - 56];
    } else {
        df = (type - 64) % 3 - 1;
        dr = 1;
        promo = KNIGHT + (type - 64) / 3;
    }
    Move m;
    m.from = from ^ flip;
    m.to = ((from / 8 + dr) * 8 + from % 8 + df) ^ flip;
    int piece = s[m.from] ? (s[m.from] - 1) % 6 : -1;
    if (!promo && piece == PAWN && (m.to / 8 == 0 || m.to / 8 == 7)) promo = QUEEN;
    m.promo = promo;
    return m;
}

/* The bitboards after move m by `us` (pseudo-legal), into out. */
static void make_bb(const uint64_t bb[2][6], const unsigned char *s, const Move *m, int us,
                    uint64_t out[2][6]) {
    memcpy(out, bb, sizeof(uint64_t) * 12);
    int them = us ^ 1, piece = (s[m->from] - 1) % 6;
    uint64_t from = 1ULL << m->from, to = 1ULL << m->to;
    if (s[m->to]) out[them][(s[m->to] - 1) % 6] &= ~to;
    out[us][piece] &= ~from;
    out[us][m->promo ? m->promo : piece] |= to;
    if (piece == PAWN && m->to == s[66]) out[them][PAWN] &= ~(1ULL << (m->to + (us ? 8 : -8)));
    if (piece == KING && abs(m->to - m->from) == 2) {
        int rook_from = m->to > m->from ? m->from + 3 : m->from - 4;
        int rook_to = m->to > m->from ? m->from + 1 : m->from - 1;
        out[us][ROOK] &= ~(1ULL << rook_from);
        out[us][ROOK] |= 1ULL << rook_to;
    }
}

static int leaves_king_safe(const uint64_t bb[2][6], const unsigned char *s, const Move *m,
                            int us) {
    uint64_t after[2][6];
    make_bb(bb, s, m, us, after);
    return !attacked(after, occupancy(after), lsb(after[us][KING]), us ^ 1);
}

/* The legal moves of state s into out (room for 256); their number. Stops after the first
 * when `any` is set. */
static int gen_legal(const unsigned char *s, const Derived *d, Move *out, int any) {
    int us = s[64], them = us ^ 1, n = 0;
    uint64_t own = 0, opp = 0;
    for (int p = 0; p < 6; p++) {
        own |= d->bb[us][p];
        opp |= d->bb[them][p];
    }
    uint64_t occ = own | opp;
#define ADD(f, t, pr)                                                                          \
    do {                                                                                       \
        Move m_ = {(f), (t), (pr)};                                                            \
        if (leaves_king_safe(d->bb, s, &m_, us)) {                                             \
            out[n++] = m_;                                                                     \
            if (any) return n;                                                                 \
        }                                                                                      \
    } while (0)
    /* pawns */
    int fwd = us ? -8 : 8, last = us ? 0 : 7;
    for (uint64_t b = d->bb[us][PAWN]; b; b &= b - 1) {
        int from = lsb(b), rank = from / 8;
        int promo_rank = (from + fwd) / 8 == last;
        uint64_t targets = PAWN_ATT[us][from] & opp;
        if (s[66] != CH_NO_EP && (PAWN_ATT[us][from] >> s[66] & 1)) targets |= 1ULL << s[66];
        if (!(occ >> (from + fwd) & 1)) {
            targets |= 1ULL << (from + fwd);
            if (rank == (us ? 6 : 1) && !(occ >> (from + 2 * fwd) & 1))
                targets |= 1ULL << (from + 2 * fwd);
        }
        for (; targets; targets &= targets - 1) {
            int to = lsb(targets);
            if (promo_rank) {
                for (int pr = QUEEN; pr >= KNIGHT; pr--) ADD(from, to, pr);
            } else {
                ADD(from, to, 0);
            }
        }
    }
    /* pieces */
    for (int p = KNIGHT; p <= KING; p++)
        for (uint64_t b = d->bb[us][p]; b; b &= b - 1) {
            int from = lsb(b);
            uint64_t t = p == KNIGHT ? KNIGHT_ATT[from]
                         : p == BISHOP ? bishop_att(from, occ)
                         : p == ROOK   ? rook_att(from, occ)
                         : p == QUEEN  ? rook_att(from, occ) | bishop_att(from, occ)
                                       : KING_ATT[from];
            for (t &= ~own; t; t &= t - 1) ADD(from, lsb(t), 0);
        }
    /* castling: the squares between empty, the king not in check nor crossing an attack */
    int rights = s[65] >> (2 * us) & 3, home = us ? 60 : 4;
    if (rights && !attacked(d->bb, occ, home, them)) {
        if ((rights & 1) && !(occ & (3ULL << (home + 1))) &&
            !attacked(d->bb, occ, home + 1, them))
            ADD(home, home + 2, 0);
        if ((rights & 2) && !(occ & (7ULL << (home - 3))) &&
            !attacked(d->bb, occ, home - 1, them))
            ADD(home, home - 2, 0);
    }
#undef ADD
    return n;
}

static int ch_legal(const GameRules *r, const unsigned char *s, const Repeats *rep,
                    uint16_t *out) {
    (void)rep;
    const Chess *g = (const Chess *)r->data;
    Derived d;
    Move moves[256];
    derived_get(g, s, &d);
    int n = gen_legal(s, &d, moves, 0);
    for (int i = 0; i < n; i++) {
        int a = move_action(&moves[i], s[64]), j = i;
        while (j > 0 && out[j - 1] > a) {
            out[j] = out[j - 1];
            j--;
        }
        out[j] = (uint16_t)a;
    }
    return n;
}

/* OpenSpiel's HasSufficientMaterial: mate is impossible with kings alone, one minor piece
 * against a bare king, or only bishops all on squares of one colour. */
static int sufficient_material(const Derived *d) {
    if (d->bb[0][PAWN] | d->bb[1][PAWN] | d->bb[0][ROOK] | d->bb[1][ROOK] | d->bb[0][QUEEN] |
        d->bb[1][QUEEN])
        return 1;
    const uint64_t dark = 0xAA55AA55AA55AA55ULL; /* a1 is dark: (file + rank) even */
    int kn[2], db[2], lb[2];
    for (int c = 0; c < 2; c++) {
        kn[c] = __builtin_popcountll(d->bb[c][KNIGHT]);
        db[c] = __builtin_popcountll(d->bb[c][BISHOP] & dark);
        lb[c] = __builtin_popcountll(d->bb[c][BISHOP] & ~dark);
    }
    if (kn[0] > 1 || kn[1] > 1) return 1;
    for (int c = 0; c < 2; c++)
        if (kn[c] == 1) return db[c] + lb[c] > 0 || kn[c ^ 1] + db[c ^ 1] + lb[c ^ 1] > 0;
    return db[0] + db[1] > 0 && lb[0] + lb[1] > 0;
}

static int ch_play(const GameRules *r, const unsigned char *s, int a, unsigned char *next,
                   double *tv) {
    const Chess *g = (const Chess *)r->data;
    Derived d, nd;
    derived_get(g, s, &d);
    int us = s[64], them = us ^ 1;
    Move m = action_move(s, a, us);
    int piece = (s[m.from] - 1) % 6, captured = s[m.to] != 0;
    int ep_capture = piece == PAWN && m.to == s[66];
    memset(&nd, 0, sizeof nd);
    make_bb(d.bb, s, &m, us, nd.bb);
    /* the board */
    memcpy(next, s, 64);
    next[m.to] = (unsigned char)(m.promo ? us * 6 + m.promo + 1 : s[m.from]);
    next[m.from] = 0;
    if (ep_capture) next[m.to + (us ? 8 : -8)] = 0;
    if (piece == KING && abs(m.to - m.from) == 2) {
        int rook_from = m.to > m.from ? m.from + 3 : m.from - 4;
        int rook_to = m.to > m.from ? m.from + 1 : m.from - 1;
        next[rook_to] = next[rook_from];
        next[rook_from] = 0;
    }
    next[64] = (unsigned char)them;
    next[65] = s[65] & CASTLE_KEEP[m.from] & CASTLE_KEEP[m.to];
    next[66] = CH_NO_EP;
    if (piece == PAWN && abs(m.to - m.from) == 16) {
        int ep = (m.to + m.from) / 2;
        if (PAWN_ATT[us][ep] & nd.bb[them][PAWN]) next[66] = (unsigned char)ep;
    }
    int irreversible = piece == PAWN || captured;
    next[67] = (unsigned char)(irreversible ? 0 : s[67] + 1);
    int ply = get_u16(s + 68) + 1;
    put_u16(next + 68, ply);
    next[71] = 0;
    /* the window: the position just left joins it, unless the move was irreversible */
    int nwin = irreversible ? 0 : s[70];
    if (!irreversible) {
        if (nwin == CH_WINDOW) { /* not reached: the clock ends the game first */
            memmove(next + CH_WIN_AT, s + CH_WIN_AT + 8, 8 * (CH_WINDOW - 1));
            nwin--;
        } else {
            memcpy(next + CH_WIN_AT, s + CH_WIN_AT, 8 * (size_t)nwin);
        }
        put_u64(next + CH_WIN_AT + 8 * nwin, d.key);
        nwin++;
    }
    memset(next + CH_WIN_AT + 8 * nwin, 0, 8 * (size_t)(CH_WINDOW - nwin));
    next[70] = (unsigned char)nwin;
    /* the earlier positions: the one just left first */
    if (g->history > 0) {
        unsigned char *h = next + CH_HIST_AT;
        memmove(h + CH_ITEM, s + CH_HIST_AT, (size_t)CH_ITEM * (g->history - 1));
        memcpy(h, s, 64);
        h[64] = (unsigned char)d.reps;
    }
    nd.key = position_key(next);
    nd.reps = repetitions(next, nd.key);
    derived_put(g, next, &nd);
    /* the end, in OpenSpiel's order */
    *tv = 0.0;
    if (!sufficient_material(&nd) || nd.reps >= 3) return 1;
    Move any[256];
    if (!gen_legal(next, &nd, any, 1)) {
        uint64_t occ = occupancy(nd.bb);
        *tv = attacked(nd.bb, occ, lsb(nd.bb[them][KING]), us) ? -1.0 : 0.0;
        return 1;
    }
    return next[67] >= 100 || ply >= r->max_plies;
}

/* --- planes ----------------------------------------------------------------------------------- */

/* One position's 14 planes from side `us`'s view: its pieces, the opponent's, and whether the
 * position had stood twice, three times. Row 0 is the rank furthest from `us`. */
static void encode_board(const unsigned char *board, int reps, int us, unsigned char *out) {
    for (int sq = 0; sq < 64; sq++) {
        int p = board[sq];
        if (!p) continue;
        int c = (p - 1) / 6, t = (p - 1) % 6;
        int rank = us ? sq / 8 : 7 - sq / 8, cell = rank * 8 + sq % 8;
        out[((c != us) * 6 + t) * 64 + cell] = 1;
    }
    memset(out + 12 * 64, reps >= 2, 64);
    memset(out + 13 * 64, reps >= 3, 64);
}

/* Set the cells of plane `out` where bitboard b has a square, from side `us`'s view. */
static void bits_plane(uint64_t b, int us, unsigned char *out) {
    for (; b; b &= b - 1) {
        int sq = lsb(b);
        out[(us ? sq / 8 : 7 - sq / 8) * 8 + sq % 8] = 1;
    }
}

/* A count as a plane: its first n cells set, in raster order (at most 64). */
static void count_plane(int n, unsigned char *out) { memset(out, 1, (size_t)(n > 64 ? 64 : n)); }

/* Every square side c attacks: its pieces' attacks with pins ignored, a slider's ray ending at
 * the first piece in its way (of either side: a piece of its own there is defended). */
static uint64_t attacks_of(const uint64_t bb[2][6], uint64_t occ, int c) {
    uint64_t a = KING_ATT[lsb(bb[c][KING])];
    for (uint64_t b = bb[c][PAWN]; b; b &= b - 1) a |= PAWN_ATT[c][lsb(b)];
    for (uint64_t b = bb[c][KNIGHT]; b; b &= b - 1) a |= KNIGHT_ATT[lsb(b)];
    for (uint64_t b = bb[c][BISHOP] | bb[c][QUEEN]; b; b &= b - 1) a |= bishop_att(lsb(b), occ);
    for (uint64_t b = bb[c][ROOK] | bb[c][QUEEN]; b; b &= b - 1) a |= rook_att(lsb(b), occ);
    return a;
}

/* The 16 feature planes, from the side to move's view: the squares the mover attacks, the
 * squares the opponent attacks; the mover's pieces (the king aside) the opponent attacks and
 * the mover does not defend, the same of the opponent's; ones when the mover is in check; the
 * mover's pawns, knights, bishops, rooks and queens as counts (8 cells a piece, so a full set
 * of pawns fills the plane), the opponent's; the legal moves as a count (one cell each, 64 and
 * more fill it). Counts are cells set, as the clocks are: the server takes 0/1 planes only. */
static void encode_features(const unsigned char *s, const Derived *d, unsigned char *out) {
    int us = s[64], them = us ^ 1;
    uint64_t occ = occupancy(d->bb), att[2], men[2];
    for (int c = 0; c < 2; c++) {
        att[c] = attacks_of(d->bb, occ, c);
        men[c] = 0;
        for (int t = PAWN; t < KING; t++) men[c] |= d->bb[c][t];
    }
    bits_plane(att[us], us, out);
    bits_plane(att[them], us, out + 64);
    bits_plane(men[us] & att[them] & ~att[us], us, out + 128);
    bits_plane(men[them] & att[us] & ~att[them], us, out + 192);
    memset(out + 256, (att[them] & d->bb[us][KING]) != 0, 64);
    for (int t = PAWN; t < KING; t++) {
        count_plane(8 * __builtin_popcountll(d->bb[us][t]), out + (5 + t) * 64);
        count_plane(8 * __builtin_popcountll(d->bb[them][t]), out + (10 + t) * 64);
    }
    Move moves[256];
    count_plane(gen_legal(s, d, moves, 0), out + 15 * 64);
}

static void ch_encode(const GameRules *r, const unsigned char *s, unsigned char *out) {
    const Chess *g = (const Chess *)r->data;
    Derived d;
    derived_get(g, s, &d);
    int us = s[64];
    memset(out, 0, (size_t)r->obs_size);
    encode_board(s, d.reps, us, out);
    for (int i = 0; i < g->history; i++) {
        const unsigned char *h = s + CH_HIST_AT + CH_ITEM * i;
        if (h[64]) encode_board(h, h[64], us, out + (size_t)CH_PLANES_PER * 64 * (i + 1));
    }
    /* the server takes 0/1 planes only: counts show as how many of a plane's 64 cells are
     * set, in raster order (the game's progress towards the cap, the clock towards 100) */
    unsigned char *c = out + (size_t)CH_PLANES_PER * 64 * (g->history + 1);
    int ply = get_u16(s + 68), rights = s[65];
    int progress = ply >= r->max_plies ? 64 : ply * 64 / r->max_plies;
    int clock = (s[67] * 64 + 99) / 100;
    memset(c, us, 64);
    memset(c + 64, 1, (size_t)progress);
    memset(c + 128, rights >> (2 * us) & 1, 64);
    memset(c + 192, rights >> (2 * us) >> 1 & 1, 64);
    memset(c + 256, rights >> (2 * (us ^ 1)) & 1, 64);
    memset(c + 320, rights >> (2 * (us ^ 1)) >> 1 & 1, 64);
    memset(c + 384, 1, (size_t)(clock > 64 ? 64 : clock));
    if (g->features) encode_features(s, &d, c + CH_CONST_PLANES * 64);
}

const GameDef GAME_chess = {
    .name = "chess",
    .params = "max_plies, history, features",
    .nparams = 3,
    .make = ch_make,
    .release = ch_release,
    .load = ch_load,
    .legal = ch_legal,
    .play = ch_play,
    .encode = ch_encode,
    .item_hash = NULL,
};
