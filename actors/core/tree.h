/* The search tree: nodes and edges, the Tree object that owns them, and the steps every
 * selection rule shares (expansion from logits, backup, undo of virtual loss). The arithmetic
 * is actors/mcts.py's, operation for operation (see module.c on exactness).
 *
 * A tree is sized from its game's rules (games.h) when it is made: every per-edge buffer has
 * room for the rules' num_actions, a node's state is state_size bytes, a path at most
 * max_plies + 1 steps. */
#ifndef AZSERVE_TREE_H
#define AZSERVE_TREE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#include "games.h"

typedef struct Node Node;
typedef struct Selection Selection;

typedef struct {
    double p;     /* prior */
    double w;     /* value sum for the side to move at the edge's node */
    long n;       /* visits, including leaves in flight */
    Node *child;  /* NULL until first visited */
} Edge;

struct Node {
    Node *parent;          /* NULL at the root (what came before it is the tree's history) */
    unsigned char *state;  /* the game's state bytes (GameRules.state_size), after the edges */
    uint16_t *actions;     /* the k legal actions, increasing, after the edges */
    int k;                 /* legal actions (edges) */
    int expanded;          /* priors set: the Python node's `actions is not None` */
    int has_tv;            /* terminal: tv is its value, never expanded */
    int plies;             /* exact (terminal, or proven by the solver): the plies to the
                            * game's end under best play, 0 for a terminal; -1 otherwise */
    double tv;             /* exact: its value for its side to move */
    long visits;
    double value_sum, visited_prior;
    double raw_value;      /* the network's value of this node (Gumbel's mixed value) */
    Edge e[];
};

typedef struct {
    Node *node;
    int i;
} Step;

typedef struct {
    PyObject_HEAD
    PyObject *rules_obj;    /* the Rules object the tree plays by (a reference) */
    const GameRules *rules;
    const Selection *sel;   /* the selection rule (select.h) */
    int num_actions, obs_size, maxd;  /* maxd: the longest path from a root (the game's plies) */
    /* the knobs (tree_type.c's KNOBS, MCTSConfig's fields of the same names) */
    double c_puct, fpu_reduction, root_fpu_reduction, vl, c_visit, c_scale;
    int width;              /* leaves per round (leaves_in_flight) */
    int solver;             /* MCTS-solver (MCTSConfig.solver): proven nodes */
    Node *root;
    uint64_t *history;      /* sorted hashes of the boards before the root (Go's superko) */
    Py_ssize_t nhistory, history_cap;
    int has_clean;
    double *clean_p;        /* [num_actions] the root's priors before noise */
    long count, done;
    long fed;               /* leaves answered since start / gumbel_start */
    int nbatch;             /* leaves pending */
    Node **leaves;          /* [width] */
    int *pathlen;           /* [width] */
    Step *paths;            /* [width * maxd] */
    long nodes;             /* live nodes, for tests */
    /* Gumbel's root state, set by gumbel_start */
    double *g;              /* [num_actions] the root's Gumbel noise, aligned with its edges */
    double *glog;           /* [num_actions] the root's log-priors, shifted so their max is 0 */
    long *counts;           /* [num_actions] this search's visits per root edge */
    long *schedule;         /* visit count of the root edge chosen at each simulation */
    long schedule_cap;
    /* scratch: legal actions, a child's state, per-edge doubles */
    uint16_t *acts;         /* [num_actions] */
    unsigned char *next;    /* [state_size] */
    double *work;           /* [2 * num_actions] */
} Tree;

/* Every tree of the process together, for the actors' status and the soak (every call into
 * this module holds the GIL, so plain counters suffice). */
extern long long g_live_nodes, g_live_bytes;

/* The position a legality check looks back from: a Repeats context (Go's superko). */
typedef struct {
    const Tree *t;
    const Node *node; /* the position whose moves are listed; its ancestors stood before it */
    const unsigned char *state;
} SeenCtx;

int seen_before(const void *ctx, uint64_t h);

/* A node for `state` (state_size bytes) below `parent`; terminal nodes get their value tv and
 * no edges. NULL when out of memory. */
Node *new_node(Tree *t, Node *parent, const unsigned char *state, int terminal, double tv);
/* The child reached by playing edge i of `parent`, with its terminal value if the game ends. */
Node *new_child(Tree *t, Node *parent, int i);
void free_tree(Tree *t, Node *n);

/* Priors from logits (a Python buffer, float32 or float64 [A], any stride; other dtypes
 * converted) and the node's own evaluation; the value as a double into *out_v. */
int expand(Tree *t, Node *node, PyObject *logits, PyObject *value, double *out_v);
/* The same from one row of logits at `base` (`stride` bytes apart) and the value v. */
void expand_row(Tree *t, Node *node, const char *base, Py_ssize_t stride, int is_double,
                double v);
/* Leaf b's answer: expanded, backed up, counted. */
int finish_leaf(Tree *t, int b, PyObject *logits, PyObject *value);

/* A Python core_state blob as the game's state bytes into `state` (-1 with ValueError). */
int load_blob(const GameRules *g, PyObject *blob, unsigned char *state);
/* The boards that stood before (history_item bytes each) as the tree's sorted hashes. */
int load_history(Tree *t, PyObject *history);

/* uint8 [C, H, W] planes of `n` from its side to move's perspective (as Game.encode). */
static inline void encode(const Tree *t, const Node *n, unsigned char *out) {
    t->rules->def->encode(t->rules, n->state, out);
}

/* actors/mcts.py's _backup: the value, negated at each step up, into the path's edges. */
static inline void backup(Step *path, int len, double value, double vl) {
    for (int s = len - 1; s >= 0; s--) {
        value = -value;
        Edge *e = &path[s].node->e[path[s].i];
        e->w += value + vl;
        path[s].node->value_sum += value;
    }
}

/* The solver (actors/nodes.py's prove and solve_backup, operation for operation). */

/* Whether the exact value v reached in p plies beats bv in bp for the side choosing: the
 * higher value, then the shorter way (the longer for a loss). search.better_proof. */
static inline int better_proof(double v, int p, double bv, int bp) {
    if (v != bv) return v > bv;
    return v < 0.0 ? p > bp : p < bp;
}

/* The best result a game gives (search.SOLVED_WIN): a child proven lost proves a win. */
#define SOLVED_WIN 1.0

/* Whether n is proven now, from its children (tv and plies set when it is): a child proven
 * lost for its side to move makes it a win; every child proven, the best of them. */
static inline int prove(Node *n) {
    int best = -1, complete = 1, bp = 0;
    double bv = 0.0;
    for (int j = 0; j < n->k; j++) {
        const Node *c = n->e[j].child;
        if (!c || c->plies < 0) {
            complete = 0;
            continue;
        }
        double v = -c->tv;
        int p = c->plies + 1;
        if (best < 0 || better_proof(v, p, bv, bp)) {
            best = j;
            bv = v;
            bp = p;
        }
    }
    if (best >= 0 && (complete || bv >= SOLVED_WIN)) {
        n->tv = bv;
        n->plies = bp;
        return 1;
    }
    return 0;
}

/* backup() of a simulation that ended at an exact node (value: its exact value), proving
 * the nodes above it while each is proven in turn; from a node newly proven up, the value
 * backed up is that node's exact value. */
static inline void solve_backup(Step *path, int len, double value, double vl) {
    int solving = 1;
    for (int s = len - 1; s >= 0; s--) {
        Node *n = path[s].node;
        value = -value;
        n->e[path[s].i].w += value + vl;
        if (solving && prove(n)) value = n->tv;
        else solving = 0;
        n->value_sum += value;
    }
}

/* actors/mcts.py's _undo: a path that reached a leaf already in flight, taken back. */
static inline void undo(Step *path, int len, double vl) {
    for (int s = 0; s < len; s++) {
        Edge *e = &path[s].node->e[path[s].i];
        e->n -= 1;
        path[s].node->visits -= 1;
        e->w += vl;
    }
}

#endif
