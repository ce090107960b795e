/* Shogi on a mailbox of 81 squares (the rules' params: max_plies, history; 512 and 7 by
 * default): the rules actors/games/shogi/rules.py plays through, checked by perft and against
 * cshogi (tests/test_shogi_rules.py).
 *
 * Squares: sq = row * 9 + col as an SFEN reads the board, row 0 rank a (gote's back rank), col
 * 0 file 9; sente moves towards row 0. Pieces: type 1..14 = P L N S B R G K +P +L +N +S +B +R
 * (a promotable type t <= 6 promotes to t + 8); a square holds 0, the type (sente's) or the
 * type + 16 (gote's). Hands in the order P L N S B R G.
 *
 * Blob (little-endian), what Python's core_state gives:
 *   [0, 81)     board
 *   81          side to move (0 sente, who moves first; 1 gote)
 *   [82, 96)    hands: sente's 7 counts, then gote's
 *   96          ply u16 (plies since the start; an SFEN's move number less one)
 *   98          n: how many keys the window holds (<= 128)
 *   99          0
 *   [100, 1124) window: the repetition keys (u64) of the last n positions before this one,
 *               oldest first, bit 0 of each set when the side to move there was in check
 *   then        `history` earlier positions, most recent first, 96 bytes each: board, hands
 *               (as above), how often that position had stood then (0: none, before the start)
 * Derived: the key (bit 0 clear), how often the position has stood (window matches + 1),
 * whether the side to move is in check, both kings' squares.
 *
 * Why a window and not the whole game: a node's state must say whether the game is over (as
 * chess.c's), and no move of shogi makes an earlier position unreachable for good (a captured
 * piece can come back), so the keys are kept for the last 128 positions: a fourfold repetition
 * is seen when its four occurrences fall within 128 plies (cycles of up to 42 plies each).
 *
 * Actions: AlphaZero's 9x9x139, `sq * 139 + type` with sq the square seen from the side to
 * move (gote's turned 180 degrees; for a drop the square dropped on): types 0..63 moves by
 * direction * 8 + distance - 1 (directions N NE E SE S SW W NW from the mover's view, N
 * forwards, E towards the higher column), 64..65 knight moves (towards the lower, the higher
 * column), 66..131 the same 66 moves promoting, 132..138 drops of P L N S B R G.
 *
 * Rules: drops with nifu (no second unpromoted pawn of a side on a file) and no drop where the
 * piece could never move; promotion optional for a move from or into the zone (the far three
 * rows), forced where the piece could never move again; uchifuzume (mate by a pawn drop) is
 * illegal; a side with no legal move loses (mate; shogi has no stalemate). Sennichite: the same
 * position (board, hands, side) a fourth time ends the game, a draw, unless one side gave check
 * with every one of its moves since the first of the four, which loses. The entering-king
 * declaration (CSA's 27-point rule) is made for the side to move as soon as it may: the game
 * ends there, won by that side (a declaration wins whenever it is allowed, so no player would
 * hold it back). Last, the ply cap (`max_plies`) ends the game, adjudicated a draw. In that
 * order: sennichite, declaration, mate, the cap. */
#include <stdlib.h>

#include "../blob.h"

#define SH_WINDOW 128
#define SH_WIN_AT 100
#define SH_HIST_AT (SH_WIN_AT + 8 * SH_WINDOW)
#define SH_ITEM 96
#define SH_TYPES 139
#define SH_ACTIONS (81 * SH_TYPES)
#define SH_PLANES_PER 45 /* per position: 14 + 14 pieces, 7 + 7 hands, 3 repetition */
#define SH_CONST_PLANES 2
/* Room for the moves of any position load accepts (at most 40 pieces): 39 of them with 24
 * targets each, twice over for promotions, and 7 kinds of drop on 81 squares. The most legal
 * moves of a real position are 593. */
#define SH_MAX_MOVES (39 * 24 * 2 + 7 * 81)

enum { P = 1, L, N, S, B, R, G, K, PP, PL, PN, PS, PB, PR };
#define GOTE 16
#define COLOR(p) ((p) >> 4)
#define TYPE(p) ((p) & 15)

typedef struct {
    int history;
    int blob;
} Shogi;

typedef struct {
    uint64_t key;
    int reps, check, king[2];
} Derived;

/* A position being worked on: moves are made and taken back in place. */
typedef struct {
    unsigned char b[81];
    unsigned char hand[2][7];
    int side, king[2];
} Pos;

typedef struct {
    unsigned char from, to, promo, drop; /* drop: the type dropped (from unused), or 0 */
} Move;

/* (row, col) steps of the directions N NE E SE S SW W NW, sente's view */
static const int DR[8] = {-1, -1, 0, 1, 1, 1, 0, -1}, DC[8] = {0, 1, 1, 1, 0, -1, -1, -1};
static const int HAND_MAX[7] = {18, 4, 4, 4, 2, 2, 4};
static signed char NEXT[8][81];  /* the neighbour in a direction, or -1 */
static signed char KNIGHT_TO[2][81][2];
static unsigned char STEP[32], SLIDE[32]; /* direction masks of each square code */
static uint64_t Z_PIECE[32][81], Z_SIDE, Z_HAND[2][7][19];
static int tables_ready = 0;

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

static unsigned char rot4(unsigned char m) { return (unsigned char)((m << 4 | m >> 4) & 0xff); }

static signed char square_at(int r, int c) {
    return (signed char)(r >= 0 && r < 9 && c >= 0 && c < 9 ? r * 9 + c : -1);
}

static void init_tables(void) {
    if (tables_ready) return;
    for (int sq = 0; sq < 81; sq++) {
        int r = sq / 9, c = sq % 9;
        for (int d = 0; d < 8; d++) NEXT[d][sq] = square_at(r + DR[d], c + DC[d]);
        for (int k = 0; k < 2; k++) {
            KNIGHT_TO[0][sq][k] = square_at(r - 2, c + (k ? 1 : -1));
            /* gote's, seen from its side: towards its lower column first */
            KNIGHT_TO[1][sq][k] = square_at(r + 2, c + (k ? -1 : 1));
        }
    }
    /* sente's masks: bit d for direction d */
    const unsigned char orth = 0x55, diag = 0xAA, gold = 0x01 | 0x02 | 0x80 | 0x04 | 0x40 | 0x10;
    unsigned char step[15] = {0}, slide[15] = {0};
    step[P] = 0x01;
    slide[L] = 0x01;
    step[S] = 0x01 | 0x02 | 0x80 | 0x08 | 0x20;
    slide[B] = diag;
    slide[R] = orth;
    step[G] = step[PP] = step[PL] = step[PN] = step[PS] = gold;
    step[K] = 0xFF;
    slide[PB] = diag;
    step[PB] = orth;
    slide[PR] = orth;
    step[PR] = diag;
    for (int t = 1; t <= 14; t++) {
        STEP[t] = step[t];
        SLIDE[t] = slide[t];
        STEP[t + GOTE] = rot4(step[t]);
        SLIDE[t + GOTE] = rot4(slide[t]);
    }
    uint64_t seed = 0x5809177ULL;
    for (int p = 0; p < 32; p++)
        for (int sq = 0; sq < 81; sq++) Z_PIECE[p][sq] = splitmix64(&seed);
    Z_SIDE = splitmix64(&seed);
    for (int c = 0; c < 2; c++)
        for (int h = 0; h < 7; h++)
            for (int n = 0; n < 19; n++) Z_HAND[c][h][n] = n ? splitmix64(&seed) : 0;
    tables_ready = 1;
}

/* The row a side's piece counts from: 0 for its far row. */
static int row_ahead(int side, int sq) { return side ? 8 - sq / 9 : sq / 9; }

/* Whether side `by` attacks square sq. */
static int attacked(const unsigned char *b, int sq, int by) {
    for (int d = 0; d < 8; d++) {
        int s = NEXT[d][sq], back = 1 << ((d + 4) & 7);
        if (s < 0) continue;
        int p = b[s];
        if (p) {
            if (COLOR(p) == by && ((STEP[p] | SLIDE[p]) & back)) return 1;
            continue;
        }
        for (s = NEXT[d][s]; s >= 0; s = NEXT[d][s]) {
            p = b[s];
            if (!p) continue;
            if (COLOR(p) == by && (SLIDE[p] & back)) return 1;
            break;
        }
    }
    for (int k = 0; k < 2; k++) {
        int s = KNIGHT_TO[by ^ 1][sq][k];
        if (s >= 0 && b[s] == N + by * GOTE) return 1;
    }
    return 0;
}

static uint64_t position_key(const unsigned char *s) {
    uint64_t k = 0;
    for (int sq = 0; sq < 81; sq++)
        if (s[sq]) k ^= Z_PIECE[s[sq]][sq];
    if (s[81]) k ^= Z_SIDE;
    for (int c = 0; c < 2; c++)
        for (int h = 0; h < 7; h++) k ^= Z_HAND[c][h][s[82 + 7 * c + h]];
    return k & ~1ULL;
}

static void pos_of(const unsigned char *s, const Derived *d, Pos *p) {
    memcpy(p->b, s, 81);
    memcpy(p->hand, s + 82, 14);
    p->side = s[81];
    p->king[0] = d->king[0];
    p->king[1] = d->king[1];
}

/* --- moves ---------------------------------------------------------------------------------- */

static int gen_legal(Pos *p, Move *out, int any, int with_drops);

/* Whether the move leaves the mover's king safe (made and taken back in place). */
static int safe_after(Pos *p, const Move *m) {
    int us = p->side, ks;
    if (m->drop) {
        p->b[m->to] = (unsigned char)(m->drop + us * GOTE);
        int ok = !attacked(p->b, p->king[us], us ^ 1);
        p->b[m->to] = 0;
        return ok;
    }
    int moved = p->b[m->from], taken = p->b[m->to];
    p->b[m->to] = (unsigned char)moved;
    p->b[m->from] = 0;
    ks = TYPE(moved) == K ? m->to : p->king[us];
    int ok = !attacked(p->b, ks, us ^ 1);
    p->b[m->from] = (unsigned char)moved;
    p->b[m->to] = (unsigned char)taken;
    return ok;
}

/* Whether a pawn dropped by the side to move on sq, giving check, mates: the opponent then has
 * no legal move (uchifuzume). */
static int pawn_drop_mates(Pos *p, int sq) {
    int us = p->side;
    Move any[1];
    p->b[sq] = (unsigned char)(P + us * GOTE);
    p->hand[us][P - 1]--;
    p->side = us ^ 1;
    /* the opponent answers a pawn's check without drops: nothing can stand between */
    int n = gen_legal(p, any, 1, 0);
    p->side = us;
    p->hand[us][P - 1]++;
    p->b[sq] = 0;
    return n == 0;
}

/* The legal moves of the side to move into out (SH_MAX_MOVES room); their number. Stops after
 * the first when `any` is set; leaves the drops out when `with_drops` is 0. */
static int gen_legal(Pos *p, Move *out, int any, int with_drops) {
    int us = p->side, them = us ^ 1, n = 0;
    unsigned char *b = p->b;
    int in_check = attacked(b, p->king[us], them);
    int kr = p->king[us] / 9, kc = p->king[us] % 9;
    /* A move needs the attack test only when in check, for the king, or for a piece on a line
     * from its king (it may be pinned): any other move uncovers nothing. */
#define ADD(from_, to_, promo_)                                                                \
    do {                                                                                       \
        Move m_ = {(unsigned char)(from_), (unsigned char)(to_), (unsigned char)(promo_), 0};  \
        if (!test || safe_after(p, &m_)) {                                                     \
            out[n++] = m_;                                                                     \
            if (any) return n;                                                                 \
        }                                                                                      \
    } while (0)
    for (int from = 0; from < 81; from++) {
        int pc = b[from];
        if (!pc || COLOR(pc) != us) continue;
        int t = TYPE(pc), targets[24], nt = 0;
        int dr = from / 9 - kr, dc = from % 9 - kc;
        int test = in_check || t == K || dr == 0 || dc == 0 || dr == dc || dr == -dc;
        for (int d = 0; d < 8; d++) {
            int bit = 1 << d;
            if (STEP[pc] & bit) {
                int s = NEXT[d][from];
                if (s >= 0 && (!b[s] || COLOR(b[s]) != us)) targets[nt++] = s;
            }
            if (SLIDE[pc] & bit)
                for (int s = NEXT[d][from]; s >= 0; s = NEXT[d][s]) {
                    if (b[s] && COLOR(b[s]) == us) break;
                    targets[nt++] = s;
                    if (b[s]) break;
                }
        }
        if (t == N)
            for (int k = 0; k < 2; k++) {
                int s = KNIGHT_TO[us][from][k];
                if (s >= 0 && (!b[s] || COLOR(b[s]) != us)) targets[nt++] = s;
            }
        for (int i = 0; i < nt; i++) {
            int to = targets[i], row = row_ahead(us, to);
            int can = t <= R && (row < 3 || row_ahead(us, from) < 3);
            int must = ((t == P || t == L) && row == 0) || (t == N && row < 2);
            if (can) ADD(from, to, 1);
            if (!must) ADD(from, to, 0);
        }
    }
    if (!with_drops) return n;
    unsigned pawn_files = 0;
    for (int sq = 0; sq < 81; sq++)
        if (b[sq] == P + us * GOTE) pawn_files |= 1u << (sq % 9);
    /* the square a pawn of ours checks the enemy king from: in front of it, from our view */
    int ahead_of_king = NEXT[us ? 0 : 4][p->king[them]];
    for (int h = 0; h < 7; h++) {
        if (!p->hand[us][h]) continue;
        int t = h + 1;
        int min_row = (t == P || t == L) ? 1 : t == N ? 2 : 0;
        for (int to = 0; to < 81; to++) {
            if (b[to] || row_ahead(us, to) < min_row) continue;
            if (t == P && (pawn_files >> (to % 9) & 1)) continue;
            Move m = {0, (unsigned char)to, 0, (unsigned char)t};
            /* a drop never uncovers an attack: it matters only when in check */
            if (in_check && !safe_after(p, &m)) continue;
            if (t == P && to == ahead_of_king && pawn_drop_mates(p, to)) continue;
            out[n++] = m;
            if (any) return n;
        }
    }
#undef ADD
    return n;
}

/* --- the game's interface -------------------------------------------------------------------- */

static int sh_make(GameRules *r, const double *params, int n, const char **why) {
    double cap = n > 0 ? params[0] : 512.0, hist = n > 1 ? params[1] : 7.0;
    if (!(cap >= 1 && cap <= 60000) || cap != (double)(int)cap) {
        *why = "shogi: max_plies must be a whole number in 1..60000";
        return -1;
    }
    if (!(hist >= 0 && hist <= 15) || hist != (double)(int)hist) {
        *why = "shogi: history (earlier positions in the planes) must be a whole number in 0..15";
        return -1;
    }
    init_tables();
    Shogi *g = (Shogi *)malloc(sizeof(Shogi));
    if (!g) {
        *why = "shogi: out of memory";
        return -1;
    }
    g->history = (int)hist;
    g->blob = SH_HIST_AT + SH_ITEM * g->history;
    snprintf(r->label, sizeof r->label, "shogi");
    r->num_actions = SH_ACTIONS;
    r->obs_size = (SH_PLANES_PER * (g->history + 1) + SH_CONST_PLANES) * 81;
    r->blob_size = g->blob;
    r->state_size = g->blob + (int)sizeof(Derived);
    r->max_plies = (int)cap;
    r->history_item = 0;
    r->hash_at = -1;
    r->data = g;
    return 0;
}

static void sh_release(GameRules *r) {
    free(r->data);
    r->data = NULL;
}

static void derived_get(const Shogi *g, const unsigned char *state, Derived *d) {
    memcpy(d, state + g->blob, sizeof *d);
}

static void derived_put(const Shogi *g, unsigned char *state, const Derived *d) {
    memcpy(state + g->blob, d, sizeof *d);
}

/* How often the position of key k has stood (the window's matches and itself); the index of
 * the window's first match into *first (n when none). */
static int repetitions(const unsigned char *s, uint64_t k, int *first) {
    int n = s[98], reps = 1;
    *first = n;
    for (int i = n - 1; i >= 0; i--)
        if ((get_u64(s + SH_WIN_AT + 8 * i) & ~1ULL) == k) {
            reps++;
            *first = i;
        }
    return reps;
}

/* Board checks shared by the blob and its earlier positions: piece codes, no piece where it
 * could never move, no nifu, hands and pieces within the set (40 pieces, one king a side). */
static const char *check_board(const unsigned char *board, const unsigned char *hands,
                               int need_kings) {
    int kings[2] = {0, 0}, pieces = 0;
    unsigned pawn_files[2] = {0, 0};
    for (int h = 0; h < 14; h++) pieces += hands[h];
    for (int sq = 0; sq < 81; sq++) {
        int pc = board[sq];
        if (!pc) continue;
        if (++pieces > 40) return "not a shogi position (more than the set's 40 pieces)";
        int t = TYPE(pc), c = COLOR(pc);
        if (t < 1 || t > 14 || pc > 31) return "not a shogi position (a square's code is no piece)";
        int row = row_ahead(c, sq);
        if (((t == P || t == L) && row == 0) || (t == N && row < 2))
            return "not a shogi position (a piece where it could never move)";
        if (t == P) {
            if (pawn_files[c] >> (sq % 9) & 1)
                return "not a shogi position (two unpromoted pawns of a side on a file)";
            pawn_files[c] |= 1u << (sq % 9);
        }
        if (t == K) kings[c]++;
    }
    /* the board may hold more of a kind than a set has (published perft positions do), not
     * more pieces; a hand holds no more than the set has (18 pawns: the keys' table) */
    for (int c = 0; c < 2; c++)
        for (int h = 0; h < 7; h++)
            if (hands[7 * c + h] > HAND_MAX[h])
                return "not a shogi position (more pieces of a kind in hand than the set has)";
    if (kings[0] > 1 || kings[1] > 1 || (need_kings && (kings[0] != 1 || kings[1] != 1)))
        return "not a shogi position (each side needs exactly one king)";
    return NULL;
}

static int sh_load(const GameRules *r, const unsigned char *blob, unsigned char *state,
                   const char **why) {
    const Shogi *g = (const Shogi *)r->data;
    const char *bad = check_board(blob, blob + 82, 1);
    if (bad) {
        *why = bad;
        return -1;
    }
    if (blob[81] > 1 || blob[98] > SH_WINDOW || blob[99] || get_u16(blob + 96) > r->max_plies) {
        *why = "not a shogi position (bad side, window or ply)";
        return -1;
    }
    for (int i = 0; i < g->history; i++) {
        const unsigned char *h = blob + SH_HIST_AT + SH_ITEM * i;
        if (h[95] && check_board(h, h + 81, 0)) {
            *why = "not a shogi position (an earlier position is not one)";
            return -1;
        }
    }
    Derived d;
    memset(&d, 0, sizeof d);
    for (int sq = 0; sq < 81; sq++)
        if (TYPE(blob[sq]) == K) d.king[COLOR(blob[sq])] = sq;
    int us = blob[81];
    if (attacked(blob, d.king[us ^ 1], us)) {
        *why = "not a shogi position (the side not to move is in check)";
        return -1;
    }
    memcpy(state, blob, (size_t)g->blob);
    int first;
    d.key = position_key(blob);
    d.reps = repetitions(blob, d.key, &first);
    d.check = attacked(blob, d.king[us], us ^ 1);
    derived_put(g, state, &d);
    return 0;
}

/* The action of move m by side `us` (the layout in the header). */
static int move_action(const Move *m, int us) {
    if (m->drop) return (us ? 80 - m->to : m->to) * SH_TYPES + 132 + m->drop - 1;
    int vf = us ? 80 - m->from : m->from, vt = us ? 80 - m->to : m->to;
    int dr = vt / 9 - vf / 9, dc = vt % 9 - vf % 9, type;
    if (dr == -2 && (dc == 1 || dc == -1)) {
        type = 64 + (dc > 0);
    } else {
        int sr = (dr > 0) - (dr < 0), sc = (dc > 0) - (dc < 0), d = 0;
        while (DR[d] != sr || DC[d] != sc) d++;
        int dist = abs(dr) > abs(dc) ? abs(dr) : abs(dc);
        type = d * 8 + dist - 1;
    }
    return vf * SH_TYPES + type + (m->promo ? 66 : 0);
}

/* The move of (legal) action a by side `us`. */
static Move action_move(int a, int us) {
    int vsq = a / SH_TYPES, type = a % SH_TYPES;
    Move m = {0, 0, 0, 0};
    if (type >= 132) {
        m.to = (unsigned char)(us ? 80 - vsq : vsq);
        m.drop = (unsigned char)(type - 132 + 1);
        return m;
    }
    m.promo = type >= 66;
    int k = type % 66, dr, dc;
    if (k < 64) {
        dr = DR[k / 8] * (k % 8 + 1);
        dc = DC[k / 8] * (k % 8 + 1);
    } else {
        dr = -2;
        dc = k == 65 ? 1 : -1;
    }
    int vt = (vsq / 9 + dr) * 9 + vsq % 9 + dc;
    m.from = (unsigned char)(us ? 80 - vsq : vsq);
    m.to = (unsigned char)(us ? 80 - vt : vt);
    return m;
}

static int sh_legal(const GameRules *r, const unsigned char *s, const Repeats *rep,
                    uint16_t *out) {
    (void)rep;
    const Shogi *g = (const Shogi *)r->data;
    Derived d;
    Pos p;
    Move moves[SH_MAX_MOVES];
    uint64_t seen[(SH_ACTIONS + 63) / 64];
    derived_get(g, s, &d);
    pos_of(s, &d, &p);
    int n = gen_legal(&p, moves, 0, 1), us = s[81], k = 0;
    memset(seen, 0, sizeof seen);
    for (int i = 0; i < n; i++) {
        int a = move_action(&moves[i], us);
        seen[a >> 6] |= 1ULL << (a & 63);
    }
    for (int w = 0; w < (SH_ACTIONS + 63) / 64; w++)
        for (uint64_t bits = seen[w]; bits; bits &= bits - 1)
            out[k++] = (uint16_t)(w * 64 + __builtin_ctzll(bits));
    return k;
}

/* Whether the side to move at s (its king on ksq, in check or not) may declare an entering
 * king and win (CSA's 27-point rule): its king in the zone and not in check, at least 10 of its
 * other pieces in the zone, and 28 points (sente) or 27 (gote) from those pieces and its hand,
 * a bishop or rook (promoted or not) 5, any other piece 1. */
static int can_declare(const unsigned char *s, int ksq, int check) {
    int us = s[81], pieces = 0, points = 0;
    if (check || row_ahead(us, ksq) >= 3) return 0;
    for (int sq = us ? 54 : 0; sq < (us ? 81 : 27); sq++) {
        int pc = s[sq];
        if (!pc || COLOR(pc) != us || TYPE(pc) == K) continue;
        int t = TYPE(pc);
        pieces++;
        points += (t == B || t == R || t == PB || t == PR) ? 5 : 1;
    }
    for (int h = 0; h < 7; h++) points += s[82 + 7 * us + h] * (h + 1 == B || h + 1 == R ? 5 : 1);
    return pieces >= 10 && points >= (us ? 27 : 28);
}

/* The end by sennichite at a fourth occurrence whose first is window entry `first`: the value
 * for the side to move at s (who did not make the last move): +1 when the other side checked
 * with every move since, -1 when this side did, else 0. */
static double sennichite_value(const unsigned char *s, int first, int check_now) {
    int n = s[98], movers_all = 1, others_all = 1;
    for (int j = first + 1; j <= n; j++) {
        int checked = j == n ? check_now : (int)(get_u64(s + SH_WIN_AT + 8 * j) & 1);
        /* the move into position j was the last mover's when (n - j) is even */
        if ((n - j) % 2 == 0) movers_all &= checked;
        else others_all &= checked;
    }
    if (movers_all && !others_all) return 1.0;
    if (others_all && !movers_all) return -1.0;
    return 0.0;
}

static int sh_play(const GameRules *r, const unsigned char *s, int a, unsigned char *next,
                   double *tv) {
    const Shogi *g = (const Shogi *)r->data;
    Derived d, nd;
    derived_get(g, s, &d);
    int us = s[81], them = us ^ 1;
    Move m = action_move(a, us);
    memcpy(next, s, 96);
    nd = d;
    if (m.drop) {
        next[m.to] = (unsigned char)(m.drop + us * GOTE);
        next[82 + 7 * us + m.drop - 1]--;
    } else {
        int pc = s[m.from], taken = s[m.to];
        if (taken) {
            int t = TYPE(taken);
            next[82 + 7 * us + (t > K ? t - 8 : t) - 1]++;
        }
        next[m.to] = (unsigned char)(m.promo ? pc + 8 : pc);
        next[m.from] = 0;
        if (TYPE(pc) == K) nd.king[us] = m.to;
    }
    next[81] = (unsigned char)them;
    int ply = get_u16(s + 96) + 1;
    put_u16(next + 96, ply);
    next[99] = 0;
    /* the window: the position just left joins it, the oldest leaves a full one */
    int nwin = s[98];
    if (nwin == SH_WINDOW) {
        memcpy(next + SH_WIN_AT, s + SH_WIN_AT + 8, 8 * (SH_WINDOW - 1));
        nwin--;
    } else {
        memcpy(next + SH_WIN_AT, s + SH_WIN_AT, 8 * (size_t)nwin);
    }
    put_u64(next + SH_WIN_AT + 8 * nwin, d.key | (uint64_t)(d.check != 0));
    nwin++;
    memset(next + SH_WIN_AT + 8 * nwin, 0, 8 * (size_t)(SH_WINDOW - nwin));
    next[98] = (unsigned char)nwin;
    /* the earlier positions: the one just left first */
    if (g->history > 0) {
        unsigned char *h = next + SH_HIST_AT;
        memmove(h + SH_ITEM, s + SH_HIST_AT, (size_t)SH_ITEM * (g->history - 1));
        memcpy(h, s, 81);
        memcpy(h + 81, s + 82, 14);
        h[95] = (unsigned char)d.reps;
    }
    int first;
    nd.key = position_key(next);
    nd.reps = repetitions(next, nd.key, &first);
    nd.check = attacked(next, nd.king[them], us);
    derived_put(g, next, &nd);
    *tv = 0.0;
    if (nd.reps >= 4) {
        *tv = sennichite_value(next, first, nd.check);
        return 1;
    }
    if (can_declare(next, nd.king[them], nd.check)) {
        *tv = 1.0;
        return 1;
    }
    Pos p;
    Move any[1];
    pos_of(next, &nd, &p);
    if (!gen_legal(&p, any, 1, 1)) {
        *tv = -1.0;
        return 1;
    }
    return ply >= r->max_plies;
}

/* --- planes ----------------------------------------------------------------------------------- */

/* One position's 45 planes from side `us`'s view (row 0 the far row, gote's turned): its
 * pieces by type, the opponent's, its hand's counts, the opponent's (the first `count` cells
 * set), and whether the position had stood twice, three times, four times. */
static void encode_position(const unsigned char *board, const unsigned char *hands, int reps,
                            int us, unsigned char *out) {
    for (int sq = 0; sq < 81; sq++) {
        int pc = board[sq];
        if (!pc) continue;
        int cell = us ? 80 - sq : sq;
        out[((COLOR(pc) != us) * 14 + TYPE(pc) - 1) * 81 + cell] = 1;
    }
    for (int c = 0; c < 2; c++)
        for (int h = 0; h < 7; h++)
            memset(out + (28 + (c != us) * 7 + h) * 81, 1, hands[7 * c + h]);
    for (int k = 0; k < 3; k++) memset(out + (42 + k) * 81, reps >= k + 2, 81);
}

static void sh_encode(const GameRules *r, const unsigned char *s, unsigned char *out) {
    const Shogi *g = (const Shogi *)r->data;
    Derived d;
    derived_get(g, s, &d);
    int us = s[81];
    memset(out, 0, (size_t)r->obs_size);
    encode_position(s, s + 82, d.reps, us, out);
    for (int i = 0; i < g->history; i++) {
        const unsigned char *h = s + SH_HIST_AT + SH_ITEM * i;
        if (h[95])
            encode_position(h, h + 81, h[95], us, out + (size_t)SH_PLANES_PER * 81 * (i + 1));
    }
    /* 0/1 planes only (the server's rule): the plies played as filled cells */
    unsigned char *c = out + (size_t)SH_PLANES_PER * 81 * (g->history + 1);
    int ply = get_u16(s + 96);
    memset(c, us, 81);
    memset(c + 81, 1, (size_t)(ply >= r->max_plies ? 81 : ply * 81 / r->max_plies));
}

const GameDef GAME_shogi = {
    .name = "shogi",
    .params = "max_plies, history",
    .nparams = 2,
    .make = sh_make,
    .release = sh_release,
    .load = sh_load,
    .legal = sh_legal,
    .play = sh_play,
    .encode = sh_encode,
    .item_hash = NULL,
};
