/* The compiled search trees of actors.compiled_mcts: the same PUCT search as actors/mcts.py
 * and the same Gumbel search as actors/gumbel.py (the pure-Python oracles), operation for
 * operation, on any game of the table (actors/core/games/: Connect Four, tic-tac-toe, Othello, Go).
 * One Tree type does both: a Gumbel tree (Tree(..., gumbel=True)) picks its root action by
 * sequential halving and the children below by the improved policy; expansion, backup and tree reuse are shared; the rules and the
 * encoding are the game table's.
 *
 * Exactness: every score, softmax and backup is computed with the same IEEE double operations
 * in the same order as the Python code (built with -ffp-contract=off, so no fused multiply-add),
 * and exp/sqrt come from the same libm; the tests compare visit counts, values and priors
 * bit for bit against actors.mcts.MCTS.
 *
 * The Python side (CompiledMCTS) owns the coroutine: it awaits evaluate() between calls into
 * this tree, draws the Dirichlet noise with its own generator and builds the SearchResult.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "games.h"

/* A game at its parameters, for Python: Rules(name, *params). Trees hold a reference. */
typedef struct {
    PyObject_HEAD
    GameRules r;
    int ready; /* r was made (and its data is released on dealloc) */
} RulesObject;

static PyTypeObject RulesType;

typedef struct Node Node;

typedef struct {
    double p;     /* prior */
    double w;     /* value sum for the side to move at the edge's node */
    long n;       /* visits, including leaves in flight */
    Node *child;  /* NULL until first visited */
} Edge;

struct Node {
    Node *parent;          /* NULL at the root (what came before it is the tree's history) */
    unsigned char *state;  /* the game's state bytes (GameDef.state_size), after the edges */
    uint16_t *actions;     /* the k legal actions, increasing, after the edges */
    int k;                 /* legal actions (edges) */
    int expanded;          /* priors set: the Python node's `actions is not None` */
    int has_tv;            /* terminal: tv is its value, never expanded */
    double tv;
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
    PyObject *rules_obj; /* the Rules object the tree plays by (a reference) */
    const GameRules *rules;
    int num_actions, obs_size, maxd;  /* maxd: the longest path from a root (the game's plies) */
    double c_puct, fpu_reduction, root_fpu_reduction, vl;
    int width;
    Node *root;
    uint64_t *history;   /* sorted hashes of the boards before the root (Go's superko) */
    Py_ssize_t nhistory, history_cap;
    int has_clean;
    double *clean_p;  /* [num_actions]: the root's priors before noise */
    long count, done;
    long fed;  /* leaves answered since start / gumbel_start (step, step_many, finish) */
    int nbatch;
    Node *leaves[64];
    int pathlen[64];
    Step *paths; /* width * maxd */
    long nodes;  /* live nodes, for tests */
    /* Gumbel (gumbel != 0): the search's root state, set by gumbel_start */
    int gumbel;
    double c_visit, c_scale;
    double *g;          /* [num_actions] the root's Gumbel noise, aligned with its edges */
    double *glog;       /* [num_actions] the root's log-priors, shifted so their max is 0 */
    long *counts;       /* [num_actions] this search's visits per root edge (the schedule's) */
    long *schedule;     /* visit count of the root edge chosen at each simulation */
    long schedule_cap;
    /* scratch, sized from the rules: legal actions, a child's state, per-edge doubles */
    uint16_t *acts;     /* [num_actions] */
    unsigned char *next; /* [state_size] */
    double *work;       /* [2 * num_actions] */
} Tree;

/* --- positions: the game's rules (games.h) on nodes ------------------------------------ */

static int in_history(const Tree *t, uint64_t h) {
    Py_ssize_t lo = 0, hi = t->nhistory;
    while (lo < hi) {
        Py_ssize_t mid = (lo + hi) / 2;
        if (t->history[mid] < h) lo = mid + 1;
        else hi = mid;
    }
    return lo < t->nhistory && t->history[lo] == h;
}

typedef struct {
    const Tree *t;
    const Node *node; /* the position whose moves are listed; its ancestors stood before it */
    const unsigned char *state;
} SeenCtx;

static int seen_before(const void *ctx, uint64_t h) {
    const SeenCtx *c = (const SeenCtx *)ctx;
    const GameRules *r = c->t->rules;
    uint64_t (*hash)(const GameRules *, const unsigned char *) = r->def->board_hash;
    if (hash(r, c->state) == h) return 1;
    for (const Node *n = c->node; n; n = n->parent)
        if (hash(r, n->state) == h) return 1;
    return in_history(c->t, h);
}

/* Every tree of the process together, for the actors' status and the soak (every call into
 * this module holds the GIL, so plain counters suffice). */
static long long g_live_nodes = 0;
static long long g_live_bytes = 0;

static size_t node_bytes(const GameRules *g, int k) {
    return sizeof(Node) + (size_t)k * (sizeof(Edge) + sizeof(uint16_t)) + (size_t)g->state_size;
}

/* A node for `state` (state_size bytes) below `parent`; terminal nodes get their value tv and
 * no edges. */
static Node *new_node(Tree *t, Node *parent, const unsigned char *state, int terminal, double tv) {
    uint16_t *acts = t->acts;
    int k = 0;
    const GameRules *g = t->rules;
    if (!terminal) {
        SeenCtx ctx = {t, parent, state};
        Repeats rep = {seen_before, &ctx};
        k = g->def->legal(g, state, g->def->board_hash ? &rep : NULL, acts);
    }
    size_t edges = sizeof(Node) + (size_t)k * sizeof(Edge);
    Node *n = (Node *)malloc(edges + (size_t)k * sizeof(uint16_t) + (size_t)g->state_size);
    if (!n) return NULL;
    n->parent = parent;
    n->actions = (uint16_t *)((char *)n + edges);
    n->state = (unsigned char *)(n->actions + k);
    memcpy(n->state, state, (size_t)g->state_size);
    n->k = k;
    n->expanded = 0;
    n->has_tv = terminal;
    n->tv = terminal ? tv : 0.0;
    n->visits = 0;
    n->value_sum = 0.0;
    n->visited_prior = 0.0;
    n->raw_value = 0.0;
    memcpy(n->actions, acts, (size_t)k * sizeof(uint16_t));
    for (int j = 0; j < k; j++) {
        n->e[j].p = 0.0;
        n->e[j].w = 0.0;
        n->e[j].n = 0;
        n->e[j].child = NULL;
    }
    t->nodes++;
    g_live_nodes++;
    g_live_bytes += (long long)node_bytes(g, k);
    return n;
}

/* The child reached by playing edge i of `parent`, with its terminal value if the game ends. */
static Node *new_child(Tree *t, Node *parent, int i) {
    double tv = 0.0;
    int terminal = t->rules->def->play(t->rules, parent->state, parent->actions[i], t->next, &tv);
    return new_node(t, parent, t->next, terminal, tv);
}

/* uint8 [C, H, W] planes of `n` from its side to move's perspective (as Game.encode). */
static void encode(Tree *t, const Node *n, unsigned char *out) {
    t->rules->def->encode(t->rules, n->state, out);
}

static void free_tree(Tree *t, Node *n) {
    if (!n) return;
    for (int j = 0; j < n->k; j++) free_tree(t, n->e[j].child);
    g_live_nodes--;
    g_live_bytes -= (long long)node_bytes(t->rules, n->k);
    free(n);
    t->nodes--;
}

/* --- search steps (actors/mcts.py's MCTS._simulate, _expand, _backup, _undo) -------------- */

static void backup(Step *path, int len, double value, double vl) {
    for (int s = len - 1; s >= 0; s--) {
        value = -value;
        Edge *e = &path[s].node->e[path[s].i];
        e->w += value + vl;
        path[s].node->value_sum += value;
    }
}

static void undo(Step *path, int len, double vl) {
    for (int s = 0; s < len; s++) {
        Edge *e = &path[s].node->e[path[s].i];
        e->n -= 1;
        path[s].node->visits -= 1;
        e->w += vl;
    }
}

static void expand_row(Tree *t, Node *node, const char *base, Py_ssize_t stride, int is_double,
                       double v);

/* Priors from logits (float32 or float64 [A], any stride) and the node's own evaluation;
 * the value as a double into *out_v. */
static int expand(Tree *t, Node *node, PyObject *logits, PyObject *value, double *out_v) {
    Py_buffer view;
    double v = PyFloat_AsDouble(value);
    if (v == -1.0 && PyErr_Occurred()) return -1;
    *out_v = v;
    if (PyObject_GetBuffer(logits, &view, PyBUF_RECORDS_RO) < 0) return -1;
    int shape_ok = view.ndim == 1 && view.shape[0] == t->num_actions;
    int ok = shape_ok && view.format &&
             (strcmp(view.format, "f") == 0 || strcmp(view.format, "d") == 0 ||
              strcmp(view.format, "<f") == 0 || strcmp(view.format, "<d") == 0 ||
              strcmp(view.format, "=f") == 0 || strcmp(view.format, "=d") == 0);
    if (shape_ok && !ok) {
        /* Another dtype (float16, big-endian, ints): its values as float64 are exactly the
         * Python floats the pure-Python search reads with tolist(). */
        PyBuffer_Release(&view);
        PyObject *converted = PyObject_CallMethod(logits, "astype", "s", "float64");
        if (!converted) return -1;
        int r = expand(t, node, converted, value, out_v);
        Py_DECREF(converted);
        return r;
    }
    if (!ok) {
        PyBuffer_Release(&view);
        PyObject *shape = PyObject_GetAttrString(logits, "shape");
        if (!shape) {
            PyErr_Clear();
            shape = PyUnicode_FromString("(?)");
        }
        PyErr_Format(PyExc_ValueError, "evaluate returned logits of shape %R, expected (%d,)",
                     shape, t->num_actions);
        Py_XDECREF(shape);
        return -1;
    }
    int is_double = view.format[strlen(view.format) - 1] == 'd';
    Py_ssize_t stride = view.strides ? view.strides[0] : view.itemsize;
    expand_row(t, node, (const char *)view.buf, stride, is_double, v);
    PyBuffer_Release(&view);
    return 0;
}

/* Priors from one row of logits at `base` (float32, or float64 when is_double; `stride` bytes
 * apart) and the node's own evaluation v: what expand() does once it has the buffer. */
static void expand_row(Tree *t, Node *node, const char *base, Py_ssize_t stride, int is_double,
                       double v) {
    double *legal_x = t->work;
    int k = node->k;
    for (int j = 0; j < k; j++) {
        const char *at = base + stride * node->actions[j];
        legal_x[j] = is_double ? *(const double *)at : (double)*(const float *)at;
    }
    /* _masked_softmax: max, exp(x - top), a left-to-right sum, e / total */
    if (k > 0) {
        double top = legal_x[0];
        for (int j = 1; j < k; j++)
            if (legal_x[j] > top) top = legal_x[j];
        double total = 0.0;
        for (int j = 0; j < k; j++) {
            legal_x[j] = exp(legal_x[j] - top);
            total += legal_x[j];
        }
        for (int j = 0; j < k; j++) node->e[j].p = legal_x[j] / total;
    }
    node->expanded = 1;
    node->visits += 1;
    node->value_sum += v;
    node->raw_value = v;
}

static int write_buffer(PyObject *out, Py_buffer *view, Py_ssize_t need) {
    if (PyObject_GetBuffer(out, view, PyBUF_CONTIG) < 0) return -1;
    if (view->len < need) {
        PyBuffer_Release(view);
        PyErr_Format(PyExc_ValueError, "obs buffer of %zd bytes, need %zd", view->len, need);
        return -1;
    }
    return 0;
}

/* --- Gumbel (actors/gumbel.py's completed_q, _interior_action, _halve and _simulate) -------- */

#define LOW_LOGIT -1e9 /* gumbel._LOW_LOGIT */
#define TINY 1e-30     /* gumbel._TINY */
#define EPSILON 1e-8   /* gumbel._EPSILON */

/* sigma(completed Q) of `nd`'s edges into out[k] (gumbel.completed_q, same operations; out
 * holds the completed Q first, then its transform). */
static void completed_q(const Node *nd, double c_visit, double c_scale, double *out) {
    long total = 0, top = 0;
    double mass = 0.0, weighted = 0.0, *q = out;
    int k = nd->k;
    for (int j = 0; j < k; j++) {
        long ni = nd->e[j].n;
        if (ni) {
            double qi = nd->e[j].w / (double)ni, p = nd->e[j].p;
            double pm = p > TINY ? p : TINY;
            total += ni;
            mass += pm;
            weighted += pm * qi;
            if (ni > top) top = ni;
            q[j] = qi;
        }
    }
    double mixed = total ? (nd->raw_value + (double)total * weighted / mass) / (double)(total + 1)
                         : nd->raw_value;
    for (int j = 0; j < k; j++)
        if (!nd->e[j].n) q[j] = mixed;
    double lo = q[0], hi = q[0];
    for (int j = 1; j < k; j++) {
        if (q[j] < lo) lo = q[j];
        if (q[j] > hi) hi = q[j];
    }
    double span = hi - lo;
    double scale = (c_visit + (double)top) * c_scale / (span > EPSILON ? span : EPSILON);
    for (int j = 0; j < k; j++) out[j] = (q[j] - lo) * scale;
}

/* Deterministic selection below the root (gumbel._interior_action); work: k doubles. */
static int interior_action(const Node *nd, double c_visit, double c_scale, double *work) {
    int k = nd->k, i = 0;
    long sum = 0;
    for (int j = 0; j < k; j++) sum += nd->e[j].n;
    long denom = 1 + sum;
    if (denom == 1) { /* p.index(max(p)) */
        double best = nd->e[0].p;
        for (int j = 1; j < k; j++)
            if (nd->e[j].p > best) {
                best = nd->e[j].p;
                i = j;
            }
        return i;
    }
    double *sigma = work, *e = work; /* e[j] replaces sigma[j] once read */
    completed_q(nd, c_visit, c_scale, sigma);
    double top = sigma[0];
    for (int j = 1; j < k; j++)
        if (sigma[j] > top) top = sigma[j];
    double z = 0.0;
    for (int j = 0; j < k; j++) {
        e[j] = nd->e[j].p * exp(sigma[j] - top);
        z += e[j];
    }
    double best = -INFINITY;
    for (int j = 0; j < k; j++) {
        double score = e[j] / z - (double)nd->e[j].n / (double)denom;
        if (score > best) {
            i = j;
            best = score;
        }
    }
    return i;
}

/* The root edge of simulation t->done: among the edges with the schedule's visit count, the
 * highest max(LOW_LOGIT, g + logits + sigma) (gumbel._halve's loop body). */
static int gumbel_root_action(Tree *t) {
    Node *r = t->root;
    double *sigma = t->work, best = -INFINITY;
    completed_q(r, t->c_visit, t->c_scale, sigma);
    long want = t->schedule[t->done];
    int i = -1;
    for (int j = 0; j < r->k; j++)
        if (t->counts[j] == want) {
            double score = t->g[j] + t->glog[j] + sigma[j];
            if (!(score > LOW_LOGIT)) score = LOW_LOGIT;
            if (score > best) {
                i = j;
                best = score;
            }
        }
    return i;
}

/* descend() of a Gumbel tree: simulations until one reaches a new non-terminal leaf (encoded
 * into `out`: returns 1) or the budget is spent (returns 0). No virtual loss: one leaf at a
 * time, as the schedule is sequential. */
static int gumbel_descend(Tree *t, unsigned char *out) {
    const double c_visit = t->c_visit, c_scale = t->c_scale;
    Step *path = t->paths;
    t->nbatch = 0;
    while (t->done < t->count) {
        int i = gumbel_root_action(t);
        if (i < 0) {
            PyErr_SetString(PyExc_RuntimeError, "the schedule named no considered action");
            return -1;
        }
        t->counts[i] += 1;
        Node *node = t->root;
        int len = 0;
        for (;;) {
            Edge *e = &node->e[i];
            e->n += 1;
            node->visits += 1;
            path[len].node = node;
            path[len].i = i;
            len++;
            Node *child = e->child;
            if (!child) {
                child = e->child = new_child(t, node, i);
                if (!child) {
                    PyErr_NoMemory();
                    return -1;
                }
                if (!child->has_tv) {
                    t->leaves[0] = child;
                    t->pathlen[0] = len;
                    t->nbatch = 1;
                    encode(t, child, out);
                    return 1;
                }
            }
            if (child->has_tv) {
                child->visits += 1;
                child->value_sum += child->tv;
                backup(path, len, child->tv, 0.0);
                t->done++;
                break;
            }
            if (!child->expanded) {
                PyErr_SetString(PyExc_RuntimeError, "an unexpanded interior node (reset the tree)");
                return -1;
            }
            node = child;
            i = interior_action(node, c_visit, c_scale, t->work);
        }
    }
    return 0;
}

/* One round of descents: up to `width` new leaves (encoded into `out`), or none when the
 * simulation budget is spent. Terminal leaves are backed up at once, as in the Python loop. */
static int descend(Tree *t, unsigned char *out) {
    if (t->gumbel) return gumbel_descend(t, out);
    const double c_puct = t->c_puct, fpu_reduction = t->fpu_reduction, vl = t->vl;
    t->nbatch = 0;
    while (t->done < t->count) {
        t->nbatch = 0;
        while (t->done + t->nbatch < t->count && t->nbatch < t->width) {
            Node *node = t->root, *child;
            double reduction = t->root_fpu_reduction;
            Step *path = t->paths + (size_t)t->nbatch * t->maxd;
            int len = 0, created = 0;
            for (;;) {
                long visits = node->visits;
                double sqrt_n = c_puct * sqrt((double)visits);
                double fpu = node->value_sum / (double)visits - reduction * sqrt(node->visited_prior);
                reduction = fpu_reduction;
                int i = 0;
                double best = -INFINITY;
                for (int j = 0; j < node->k; j++) {
                    const Edge *e = &node->e[j];
                    long nj = e->n;
                    double score = nj ? e->w / (double)nj + e->p * sqrt_n / (double)(1 + nj)
                                      : fpu + e->p * sqrt_n;
                    if (score > best) {
                        i = j;
                        best = score;
                    }
                }
                Edge *e = &node->e[i];
                if (!e->n) node->visited_prior += e->p;
                e->n += 1;
                node->visits = visits + 1;
                if (vl != 0.0) e->w -= vl;
                path[len].node = node;
                path[len].i = i;
                len++;
                child = e->child;
                if (!child) {
                    child = e->child = new_child(t, node, i);
                    if (!child) {
                        PyErr_NoMemory();
                        return -1;
                    }
                    created = 1;
                    if (!child->has_tv) {
                        t->leaves[t->nbatch] = child;
                        t->pathlen[t->nbatch] = len;
                        t->nbatch++;
                    }
                    break;
                }
                if (!child->expanded) break;
                node = child;
            }
            if (child->has_tv) {
                child->visits += 1;
                child->value_sum += child->tv;
                backup(path, len, child->tv, vl);
                t->done++;
            } else if (!created) {
                undo(path, len, vl);
                break;
            }
        }
        if (t->nbatch) {
            for (int b = 0; b < t->nbatch; b++) encode(t, t->leaves[b], out + (size_t)b * t->obs_size);
            return t->nbatch;
        }
    }
    return 0;
}

static int finish_leaf(Tree *t, int b, PyObject *logits, PyObject *value) {
    double v;
    if (expand(t, t->leaves[b], logits, value, &v) < 0) return -1;
    backup(t->paths + (size_t)b * t->maxd, t->pathlen[b], v, t->vl);
    t->fed += 1;
    return 0;
}

/* --- the Python type ---------------------------------------------------------------------- */

static void Tree_dealloc(Tree *t) {
    if (t->rules) free_tree(t, t->root);
    Py_XDECREF(t->rules_obj);
    free(t->paths);
    free(t->clean_p);
    free(t->g);
    free(t->glog);
    free(t->counts);
    free(t->acts);
    free(t->next);
    free(t->work);
    free(t->schedule);
    free(t->history);
    Py_TYPE(t)->tp_free((PyObject *)t);
}

static int alloc_into(void **p, size_t bytes) {
    free(*p);
    *p = malloc(bytes ? bytes : 1);
    if (!*p) {
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

static int Tree_init(Tree *t, PyObject *args, PyObject *kw) {
    static char *names[] = {"rules", "c_puct", "fpu_reduction", "root_fpu_reduction", "width",
                            "virtual_loss", "gumbel", "c_visit", "c_scale", NULL};
    PyObject *rules;
    double c_puct, fpu_reduction, root_fpu_reduction, vl, c_visit = 50.0, c_scale = 0.1;
    int width, gumbel = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O!dddid|$pdd", names, &RulesType, &rules, &c_puct,
                                     &fpu_reduction, &root_fpu_reduction, &width, &vl, &gumbel,
                                     &c_visit, &c_scale))
        return -1;
    if (!((RulesObject *)rules)->ready) {
        PyErr_SetString(PyExc_RuntimeError, "Rules was not initialised: call Rules(name, ...)");
        return -1;
    }
    if (width < 1 || width > 64) {
        PyErr_Format(PyExc_ValueError, "compiled MCTS: width must be in 1..64, got %d", width);
        return -1;
    }
    if (gumbel && (width != 1 || vl != 0.0)) {
        PyErr_SetString(PyExc_ValueError, "compiled Gumbel: width 1 and no virtual loss");
        return -1;
    }
    if (t->rules) free_tree(t, t->root); /* a second __init__: the old tree, by its own rules */
    t->root = NULL;
    Py_INCREF(rules);
    Py_XSETREF(t->rules_obj, rules);
    t->rules = &((RulesObject *)rules)->r;
    t->c_puct = c_puct;
    t->fpu_reduction = fpu_reduction;
    t->root_fpu_reduction = root_fpu_reduction;
    t->width = width;
    t->vl = vl;
    t->gumbel = gumbel;
    t->c_visit = c_visit;
    t->c_scale = c_scale;
    const GameRules *g = t->rules;
    size_t a = (size_t)g->num_actions;
    t->num_actions = g->num_actions;
    t->obs_size = g->obs_size;
    t->maxd = g->max_plies + 1;
    if (alloc_into((void **)&t->paths, sizeof(Step) * (size_t)width * (size_t)t->maxd) < 0 ||
        alloc_into((void **)&t->clean_p, sizeof(double) * a) < 0 ||
        alloc_into((void **)&t->g, sizeof(double) * a) < 0 ||
        alloc_into((void **)&t->glog, sizeof(double) * a) < 0 ||
        alloc_into((void **)&t->counts, sizeof(long) * a) < 0 ||
        alloc_into((void **)&t->acts, sizeof(uint16_t) * a) < 0 ||
        alloc_into((void **)&t->next, (size_t)g->state_size) < 0 ||
        alloc_into((void **)&t->work, 2 * sizeof(double) * a) < 0)
        return -1;
    t->nhistory = 0;
    t->has_clean = 0;
    return 0;
}

static PyObject *Tree_reset(Tree *t, PyObject *unused) {
    free_tree(t, t->root);
    t->root = NULL;
    t->has_clean = 0;
    t->nbatch = 0;
    Py_RETURN_NONE;
}

/* A Python core_state blob as the game's state bytes into `state` (-1 with ValueError). */
static int load_blob(const GameRules *g, PyObject *blob, unsigned char *state) {
    char *buf;
    Py_ssize_t len;
    const char *why = "";
    if (PyBytes_AsStringAndSize(blob, &buf, &len) < 0) return -1;
    if (len != g->blob_size) {
        PyErr_Format(PyExc_ValueError, "%s: a state blob of %zd bytes, expected %d", g->label,
                     len, g->blob_size);
        return -1;
    }
    if (g->def->load(g, (const unsigned char *)buf, state, &why) < 0) {
        PyErr_Format(PyExc_ValueError, "%s: %s", g->label, why);
        return -1;
    }
    return 0;
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* The boards that stood before (history_item bytes each) as the tree's sorted hashes. */
static int load_history(Tree *t, PyObject *history) {
    const GameRules *g = t->rules;
    char *buf;
    Py_ssize_t len;
    t->nhistory = 0;
    if (!history) return 0;
    if (PyBytes_AsStringAndSize(history, &buf, &len) < 0) return -1;
    if (!g->def->item_hash) {
        if (len) {
            PyErr_Format(PyExc_ValueError, "%s keeps no history, got %zd bytes", g->label, len);
            return -1;
        }
        return 0;
    }
    if (len % g->history_item) {
        PyErr_Format(PyExc_ValueError, "%s: a history of %zd bytes is not whole boards of %d",
                     g->label, len, g->history_item);
        return -1;
    }
    Py_ssize_t n = len / g->history_item;
    if (n > t->history_cap) {
        uint64_t *grown = (uint64_t *)realloc(t->history, sizeof(uint64_t) * (size_t)n);
        if (!grown) {
            PyErr_NoMemory();
            return -1;
        }
        t->history = grown;
        t->history_cap = n;
    }
    for (Py_ssize_t i = 0; i < n; i++)
        t->history[i] = g->def->item_hash(g, (const unsigned char *)buf + i * g->history_item);
    qsort(t->history, (size_t)n, sizeof(uint64_t), cmp_u64);
    t->nhistory = n;
    return 0;
}

/* set_root(blob, history=b"") -> True when the kept (expanded) root is that state. blob: the
 * game's core_state bytes; history: the boards that have stood in this game (Go). */
static PyObject *Tree_set_root(Tree *t, PyObject *args) {
    PyObject *blob, *history = NULL;
    unsigned char *state = t->next;
    if (!PyArg_ParseTuple(args, "S|S", &blob, &history)) return NULL;
    if (!t->rules) return PyErr_Format(PyExc_RuntimeError, "Tree was not initialised");
    if (load_blob(t->rules, blob, state) < 0 || load_history(t, history) < 0) return NULL;
    Node *r = t->root;
    if (r && memcmp(r->state, state, (size_t)t->rules->state_size) == 0)
        return PyBool_FromLong(r->expanded);
    free_tree(t, r);
    t->has_clean = 0;
    t->root = new_node(t, NULL, state, 0, 0.0);
    if (!t->root) return PyErr_NoMemory();
    Py_RETURN_FALSE;
}

static PyObject *Tree_root_obs(Tree *t, PyObject *out) {
    Py_buffer view;
    if (!t->root) return PyErr_Format(PyExc_RuntimeError, "no root");
    if (write_buffer(out, &view, t->obs_size) < 0) return NULL;
    encode(t, t->root, (unsigned char *)view.buf);
    PyBuffer_Release(&view);
    Py_RETURN_NONE;
}

static PyObject *Tree_expand_root(Tree *t, PyObject *args) {
    PyObject *logits, *value;
    if (!PyArg_ParseTuple(args, "OO", &logits, &value)) return NULL;
    if (!t->root) return PyErr_Format(PyExc_RuntimeError, "no root");
    double v;
    if (expand(t, t->root, logits, value, &v) < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *Tree_root_width(Tree *t, PyObject *unused) {
    if (!t->root) return PyErr_Format(PyExc_RuntimeError, "no root");
    return PyLong_FromLong(t->root->k);
}

/* root_priors(noise, fraction): restore the clean priors, mix in `noise` (a list of k floats,
 * or None), then recount the prior mass of visited children (MCTS._set_root_priors). */
static PyObject *Tree_root_priors(Tree *t, PyObject *args) {
    PyObject *noise;
    double f;
    if (!PyArg_ParseTuple(args, "Od", &noise, &f)) return NULL;
    Node *r = t->root;
    if (!r) return PyErr_Format(PyExc_RuntimeError, "no root");
    if (t->has_clean) {
        for (int j = 0; j < r->k; j++) r->e[j].p = t->clean_p[j];
        t->has_clean = 0;
    }
    if (noise != Py_None) {
        PyObject *seq = PySequence_Fast(noise, "noise must be a sequence");
        if (!seq) return NULL;
        if (PySequence_Fast_GET_SIZE(seq) != r->k) {
            Py_DECREF(seq);
            return PyErr_Format(PyExc_ValueError, "noise of %zd values for %d children",
                                PySequence_Fast_GET_SIZE(seq), r->k);
        }
        double *x = t->work;
        for (int j = 0; j < r->k; j++) {
            x[j] = PyFloat_AsDouble(PySequence_Fast_GET_ITEM(seq, j));
            if (x[j] == -1.0 && PyErr_Occurred()) {
                Py_DECREF(seq);
                return NULL;
            }
        }
        Py_DECREF(seq);
        for (int j = 0; j < r->k; j++) {
            t->clean_p[j] = r->e[j].p;
            r->e[j].p = (1.0 - f) * r->e[j].p + f * x[j];
        }
        t->has_clean = 1;
    }
    double mass = 0.0;
    for (int j = 0; j < r->k; j++)
        if (r->e[j].n) mass += r->e[j].p;
    r->visited_prior = mass;
    Py_RETURN_NONE;
}

static PyObject *Tree_start(Tree *t, PyObject *arg) {
    long count = PyLong_AsLong(arg);
    if (count == -1 && PyErr_Occurred()) return NULL;
    t->count = count;
    t->done = 0;
    t->fed = 0;
    t->nbatch = 0;
    Py_RETURN_NONE;
}

/* descend(out) -> leaves encoded into the writable buffer `out` ([width, C, H, W] uint8). */
static PyObject *Tree_descend(Tree *t, PyObject *out) {
    Py_buffer view;
    if (!t->root || !t->root->expanded) return PyErr_Format(PyExc_RuntimeError, "no expanded root");
    if (write_buffer(out, &view, (Py_ssize_t)t->obs_size * t->width) < 0) return NULL;
    int n = descend(t, (unsigned char *)view.buf);
    PyBuffer_Release(&view);
    if (n < 0) return NULL;
    return PyLong_FromLong(n);
}

/* step(logits, value, out): finish the one pending leaf, then descend (width 1). */
static PyObject *Tree_step(Tree *t, PyObject *const *args, Py_ssize_t nargs) {
    Py_buffer view;
    if (nargs != 3) return PyErr_Format(PyExc_TypeError, "step(logits, value, out)");
    if (t->nbatch != 1) return PyErr_Format(PyExc_RuntimeError, "step needs exactly one pending leaf");
    if (finish_leaf(t, 0, args[0], args[1]) < 0) return NULL;
    t->done += 1;
    t->nbatch = 0;
    if (write_buffer(args[2], &view, (Py_ssize_t)t->obs_size * t->width) < 0) return NULL;
    int n = descend(t, (unsigned char *)view.buf);
    PyBuffer_Release(&view);
    if (n < 0) return NULL;
    return PyLong_FromLong(n);
}

/* finish(results): expand and back up each pending leaf from its (logits, value), in order. */
static PyObject *Tree_finish(Tree *t, PyObject *results) {
    PyObject *seq = PySequence_Fast(results, "results must be a sequence");
    if (!seq) return NULL;
    if (PySequence_Fast_GET_SIZE(seq) != t->nbatch) {
        Py_DECREF(seq);
        return PyErr_Format(PyExc_ValueError, "%d leaves pending, %zd results", t->nbatch,
                            PySequence_Fast_GET_SIZE(seq));
    }
    for (int b = 0; b < t->nbatch; b++) {
        PyObject *pair = PySequence_Fast_GET_ITEM(seq, b), *logits, *value;
        if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2) {
            Py_DECREF(seq);
            return PyErr_Format(PyExc_TypeError, "evaluate must return (logits, value)");
        }
        logits = PyTuple_GET_ITEM(pair, 0);
        value = PyTuple_GET_ITEM(pair, 1);
        if (finish_leaf(t, b, logits, value) < 0) {
            Py_DECREF(seq);
            return NULL;
        }
    }
    Py_DECREF(seq);
    t->done += t->nbatch;
    t->nbatch = 0;
    Py_RETURN_NONE;
}

/* root_result(visits int64 [A], prior float32 [A]) -> root value; fills both arrays. */
static PyObject *Tree_root_result(Tree *t, PyObject *args) {
    PyObject *visits_obj, *prior_obj;
    Py_buffer vv, pv;
    if (!PyArg_ParseTuple(args, "OO", &visits_obj, &prior_obj)) return NULL;
    Node *r = t->root;
    if (!r || !r->expanded) return PyErr_Format(PyExc_RuntimeError, "no expanded root");
    if (write_buffer(visits_obj, &vv, (Py_ssize_t)sizeof(int64_t) * t->num_actions) < 0) return NULL;
    if (write_buffer(prior_obj, &pv, (Py_ssize_t)sizeof(float) * t->num_actions) < 0) {
        PyBuffer_Release(&vv);
        return NULL;
    }
    int64_t *visits = (int64_t *)vv.buf;
    float *prior = (float *)pv.buf;
    for (int j = 0; j < r->k; j++) {
        visits[r->actions[j]] = r->e[j].n;
        prior[r->actions[j]] = (float)(t->has_clean ? t->clean_p[j] : r->e[j].p);
    }
    PyBuffer_Release(&vv);
    PyBuffer_Release(&pv);
    return PyFloat_FromDouble(r->value_sum / (double)r->visits);
}

/* gumbel_start(noise, schedule): a Gumbel search of len(schedule) simulations from the
 * expanded root; noise is a sequence of k floats (the root's Gumbel draws) or None (zeros),
 * schedule the visit counts of gumbel.considered_visits. */
static PyObject *Tree_gumbel_start(Tree *t, PyObject *args) {
    PyObject *noise, *schedule;
    if (!PyArg_ParseTuple(args, "OO", &noise, &schedule)) return NULL;
    Node *r = t->root;
    if (!t->gumbel) return PyErr_Format(PyExc_RuntimeError, "not a Gumbel tree");
    if (!r || !r->expanded) return PyErr_Format(PyExc_RuntimeError, "no expanded root");
    int k = r->k;
    if (noise == Py_None) {
        for (int j = 0; j < k; j++) t->g[j] = 0.0;
    } else {
        PyObject *seq = PySequence_Fast(noise, "noise must be a sequence");
        if (!seq) return NULL;
        if (PySequence_Fast_GET_SIZE(seq) != k) {
            Py_DECREF(seq);
            return PyErr_Format(PyExc_ValueError, "noise of %zd values for %d children",
                                PySequence_Fast_GET_SIZE(seq), k);
        }
        for (int j = 0; j < k; j++) {
            t->g[j] = PyFloat_AsDouble(PySequence_Fast_GET_ITEM(seq, j));
            if (t->g[j] == -1.0 && PyErr_Occurred()) {
                Py_DECREF(seq);
                return NULL;
            }
        }
        Py_DECREF(seq);
    }
    PyObject *seq = PySequence_Fast(schedule, "schedule must be a sequence");
    if (!seq) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    if (n > t->schedule_cap) {
        long *grown = (long *)realloc(t->schedule, sizeof(long) * (size_t)n);
        if (!grown) {
            Py_DECREF(seq);
            return PyErr_NoMemory();
        }
        t->schedule = grown;
        t->schedule_cap = n;
    }
    for (Py_ssize_t s = 0; s < n; s++) {
        t->schedule[s] = PyLong_AsLong(PySequence_Fast_GET_ITEM(seq, s));
        if (t->schedule[s] == -1 && PyErr_Occurred()) {
            Py_DECREF(seq);
            return NULL;
        }
    }
    Py_DECREF(seq);
    /* gumbel._logits, shifted: log(max(p, TINY)) - max */
    double top = -INFINITY;
    for (int j = 0; j < k; j++) {
        double p = r->e[j].p;
        t->glog[j] = log(p > TINY ? p : TINY);
        if (t->glog[j] > top) top = t->glog[j];
    }
    for (int j = 0; j < k; j++) {
        t->glog[j] = t->glog[j] - top;
        t->counts[j] = 0;
    }
    t->count = (long)n;
    t->done = 0;
    t->fed = 0;
    t->nbatch = 0;
    Py_RETURN_NONE;
}

/* gumbel_result(policy f32 [A], scores f64 [A], noise f64 [A], visits i64 [A], prior f32 [A])
 * -> root value; fills the arrays as gumbel.GumbelSearch._halve builds its GumbelResult. */
static PyObject *Tree_gumbel_result(Tree *t, PyObject *args) {
    PyObject *objs[5];
    Py_buffer views[5];
    static const Py_ssize_t item[5] = {sizeof(float), sizeof(double), sizeof(double),
                                       sizeof(int64_t), sizeof(float)};
    if (!PyArg_ParseTuple(args, "OOOOO", &objs[0], &objs[1], &objs[2], &objs[3], &objs[4]))
        return NULL;
    Node *r = t->root;
    if (!t->gumbel) return PyErr_Format(PyExc_RuntimeError, "not a Gumbel tree");
    if (!r || !r->expanded) return PyErr_Format(PyExc_RuntimeError, "no expanded root");
    for (int b = 0; b < 5; b++)
        if (write_buffer(objs[b], &views[b], item[b] * t->num_actions) < 0) {
            while (b--) PyBuffer_Release(&views[b]);
            return NULL;
        }
    float *policy = (float *)views[0].buf, *prior = (float *)views[4].buf;
    double *scores = (double *)views[1].buf, *noise = (double *)views[2].buf;
    int64_t *visits = (int64_t *)views[3].buf;
    int k = r->k;
    double *sigma = t->work, *improved = t->work, *e = t->work + t->num_actions;
    completed_q(r, t->c_visit, t->c_scale, sigma); /* improved[j] replaces sigma[j] */
    long most = 0;
    double top = -INFINITY;
    for (int j = 0; j < k; j++) {
        improved[j] = t->glog[j] + sigma[j];
        if (improved[j] > top) top = improved[j];
        if (t->counts[j] > most) most = t->counts[j];
    }
    double z = 0.0;
    for (int j = 0; j < k; j++) {
        e[j] = exp(improved[j] - top);
        z += e[j];
    }
    for (int a = 0; a < t->num_actions; a++) {
        policy[a] = 0.0f;
        scores[a] = -INFINITY;
        noise[a] = 0.0;
        visits[a] = 0;
        prior[a] = 0.0f;
    }
    for (int j = 0; j < k; j++) {
        int a = r->actions[j];
        policy[a] = (float)(e[j] / z);
        if (t->counts[j] == most) scores[a] = improved[j];
        noise[a] = t->g[j];
        visits[a] = r->e[j].n;
        prior[a] = (float)r->e[j].p;
    }
    for (int b = 0; b < 5; b++) PyBuffer_Release(&views[b]);
    return PyFloat_FromDouble(r->value_sum / (double)r->visits);
}

/* advance(action, reuse): the played child's expanded subtree becomes the root, or none. */
static PyObject *Tree_advance(Tree *t, PyObject *args) {
    int action, reuse;
    if (!PyArg_ParseTuple(args, "ip", &action, &reuse)) return NULL;
    Node *r = t->root, *keep = NULL;
    t->root = NULL;
    t->has_clean = 0;
    if (reuse && r && r->expanded) {
        for (int j = 0; j < r->k; j++)
            if (r->actions[j] == action) {
                Node *c = r->e[j].child;
                if (c && c->expanded) {
                    keep = c;
                    keep->parent = NULL;
                    r->e[j].child = NULL;
                }
                break;
            }
    }
    free_tree(t, r);
    t->root = keep;
    Py_RETURN_NONE;
}

static PyObject *Tree_get_nodes(Tree *t, void *unused) { return PyLong_FromLong(t->nodes); }
static PyObject *Tree_get_fed(Tree *t, void *unused) { return PyLong_FromLong(t->fed); }

static PyMethodDef Tree_methods[] = {
    {"reset", (PyCFunction)Tree_reset, METH_NOARGS, "Drop the tree."},
    {"set_root", (PyCFunction)Tree_set_root, METH_VARARGS,
     "set_root(blob, history=b'') -> whether the kept expanded root is that state."},
    {"root_obs", (PyCFunction)Tree_root_obs, METH_O, "Encode the root into a uint8 buffer."},
    {"expand_root", (PyCFunction)Tree_expand_root, METH_VARARGS, "expand_root(logits, value)."},
    {"root_width", (PyCFunction)Tree_root_width, METH_NOARGS, "Children of the root."},
    {"root_priors", (PyCFunction)Tree_root_priors, METH_VARARGS,
     "root_priors(noise or None, fraction)."},
    {"start", (PyCFunction)Tree_start, METH_O, "start(count): the simulation budget."},
    {"descend", (PyCFunction)Tree_descend, METH_O, "descend(out) -> new leaves in out."},
    {"step", (PyCFunction)(void (*)(void))Tree_step, METH_FASTCALL,
     "step(logits, value, out) -> new leaves in out (width 1)."},
    {"finish", (PyCFunction)Tree_finish, METH_O, "finish([(logits, value), ...])."},
    {"root_result", (PyCFunction)Tree_root_result, METH_VARARGS,
     "root_result(visits, prior) -> root value."},
    {"advance", (PyCFunction)Tree_advance, METH_VARARGS, "advance(action, reuse)."},
    {"gumbel_start", (PyCFunction)Tree_gumbel_start, METH_VARARGS,
     "gumbel_start(noise or None, schedule): a Gumbel search from the expanded root."},
    {"gumbel_result", (PyCFunction)Tree_gumbel_result, METH_VARARGS,
     "gumbel_result(policy, scores, noise, visits, prior) -> root value."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Tree_getset[] = {
    {"nodes", (getter)Tree_get_nodes, NULL, "Live nodes of this tree.", NULL},
    {"fed", (getter)Tree_get_fed, NULL, "Leaves answered since the search's start.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject TreeType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "actors._mcts_core.Tree",
    .tp_basicsize = sizeof(Tree),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Tree(game, c_puct, fpu_reduction, root_fpu_reduction, width, virtual_loss, *, "
              "gumbel=False, c_visit=50.0, c_scale=0.1)",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Tree_init,
    .tp_dealloc = (destructor)Tree_dealloc,
    .tp_methods = Tree_methods,
    .tp_getset = Tree_getset,
};

/* --- the evaluation cache (actors/evalcache.py's store) ------------------------------------ */

/* One cached evaluation: the key (weights version, the observation's kind, i.e. its shape and
 * dtype as numbered by the Python side, and its bytes) and the answer (one row of logits, as
 * float32 or float64 bytes, and the value as the double the search reads). Entries sit in a
 * chained hash table and on a doubly linked list from least to most recently used. */
typedef struct CEntry {
    struct CEntry *hnext, *prev, *next;
    uint64_t hash;
    long long version;
    int kind, is_double;
    double value;
    Py_ssize_t klen, rlen;
    unsigned char data[]; /* the key's bytes, then the row's */
} CEntry;

/* Bytes an entry costs besides its key and row: the header, its share of the bucket array
 * (at most two pointers: the table doubles when it is full) and the allocator's rounding. */
#define CACHE_ENTRY_OVERHEAD ((Py_ssize_t)(sizeof(CEntry) + 2 * sizeof(CEntry *) + 8))

typedef struct {
    PyObject_HEAD
    Py_ssize_t max_bytes, bytes, entries;
    long long hits, misses, evictions;
    CEntry **buckets;
    size_t mask; /* buckets - 1 (a power of two) */
    CEntry lru;  /* sentinel: lru.next is the least recently used entry, lru.prev the most */
} Cache;

static uint64_t key_hash(long long version, int kind, const unsigned char *p, Py_ssize_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ULL ^ ((uint64_t)version * 0xFF51AFD7ED558CCDULL) ^
                 ((uint64_t)(unsigned)kind << 32) ^ (uint64_t)n;
    while (n > 0) { /* MurmurHash3's block mix, 8 bytes at a time (the tail zero-padded) */
        uint64_t w = 0;
        memcpy(&w, p, n >= 8 ? 8 : (size_t)n);
        w *= 0x87C37B91114253D5ULL;
        w = (w << 31) | (w >> 33);
        w *= 0x4CF5AD432745937FULL;
        h ^= w;
        h = ((h << 27) | (h >> 37)) * 5 + 0x52DCE729;
        p += 8;
        n -= 8;
    }
    h ^= h >> 33; /* murmur3's finaliser */
    h *= 0xFF51AFD7ED558CCDULL;
    h ^= h >> 33;
    h *= 0xC4CEB9FE1A85EC53ULL;
    return h ^ (h >> 33);
}

static void lru_unlink(CEntry *e) {
    e->prev->next = e->next;
    e->next->prev = e->prev;
}

static void lru_push(Cache *c, CEntry *e) { /* as the most recently used */
    e->prev = c->lru.prev;
    e->next = &c->lru;
    c->lru.prev->next = e;
    c->lru.prev = e;
}

static CEntry *cache_find(Cache *c, uint64_t h, long long version, int kind,
                          const unsigned char *key, Py_ssize_t klen) {
    for (CEntry *e = c->buckets[h & c->mask]; e; e = e->hnext)
        if (e->hash == h && e->version == version && e->kind == kind && e->klen == klen &&
            memcmp(e->data, key, (size_t)klen) == 0)
            return e;
    return NULL;
}

/* The entry of the key, made the most recently used and counted as a hit; or NULL, counted as
 * a miss. */
static CEntry *cache_get(Cache *c, long long version, int kind, const unsigned char *key,
                         Py_ssize_t klen) {
    CEntry *e = cache_find(c, key_hash(version, kind, key, klen), version, kind, key, klen);
    if (!e) {
        c->misses++;
        return NULL;
    }
    lru_unlink(e);
    lru_push(c, e);
    c->hits++;
    return e;
}

static void cache_drop(Cache *c, CEntry *e) {
    CEntry **at = &c->buckets[e->hash & c->mask];
    while (*at != e) at = &(*at)->hnext;
    *at = e->hnext;
    lru_unlink(e);
    c->bytes -= e->klen + e->rlen + CACHE_ENTRY_OVERHEAD;
    c->entries--;
    PyMem_Free(e);
}

static int cache_grow(Cache *c) {
    size_t n = (c->mask + 1) * 2;
    CEntry **b = (CEntry **)PyMem_Calloc(n, sizeof(CEntry *));
    if (!b) return -1;
    for (size_t i = 0; i <= c->mask; i++) {
        CEntry *e = c->buckets[i];
        while (e) {
            CEntry *next = e->hnext;
            e->hnext = b[e->hash & (n - 1)];
            b[e->hash & (n - 1)] = e;
            e = next;
        }
    }
    PyMem_Free(c->buckets);
    c->buckets = b;
    c->mask = n - 1;
    return 0;
}

/* Store one answer unless its key is present (the first answer is kept); then the least
 * recently used entries go until the footprint is within max_bytes. An entry larger than the
 * whole bound is not stored. */
static int cache_put(Cache *c, long long version, int kind, const unsigned char *key,
                     Py_ssize_t klen, const char *row, Py_ssize_t rlen, int is_double,
                     double value) {
    Py_ssize_t size = klen + rlen + CACHE_ENTRY_OVERHEAD;
    if (size > c->max_bytes) return 0;
    uint64_t h = key_hash(version, kind, key, klen);
    if (cache_find(c, h, version, kind, key, klen)) return 0;
    if ((size_t)c->entries >= c->mask + 1 && cache_grow(c) < 0) {
        PyErr_NoMemory();
        return -1;
    }
    CEntry *e = (CEntry *)PyMem_Malloc(sizeof(CEntry) + (size_t)(klen + rlen));
    if (!e) {
        PyErr_NoMemory();
        return -1;
    }
    e->hash = h;
    e->version = version;
    e->kind = kind;
    e->is_double = is_double;
    e->value = value;
    e->klen = klen;
    e->rlen = rlen;
    memcpy(e->data, key, (size_t)klen);
    memcpy(e->data + klen, row, (size_t)rlen);
    e->hnext = c->buckets[h & c->mask];
    c->buckets[h & c->mask] = e;
    lru_push(c, e);
    c->entries++;
    c->bytes += size;
    while (c->bytes > c->max_bytes) {
        cache_drop(c, c->lru.next);
        c->evictions++;
    }
    return 0;
}

static void Cache_clear_all(Cache *c) {
    while (c->lru.next != &c->lru) cache_drop(c, c->lru.next);
}

static void Cache_dealloc(Cache *c) {
    if (c->buckets) Cache_clear_all(c);
    PyMem_Free(c->buckets);
    Py_TYPE(c)->tp_free((PyObject *)c);
}

static int Cache_init(Cache *c, PyObject *args, PyObject *kw) {
    static char *names[] = {"max_bytes", NULL};
    Py_ssize_t max_bytes;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "n", names, &max_bytes)) return -1;
    if (max_bytes <= 0) {
        PyErr_Format(PyExc_ValueError, "max_bytes must be > 0, got %zd", max_bytes);
        return -1;
    }
    if (c->buckets) {
        Cache_clear_all(c);
        PyMem_Free(c->buckets);
    }
    c->lru.next = c->lru.prev = &c->lru;
    c->mask = 1023;
    c->buckets = (CEntry **)PyMem_Calloc(c->mask + 1, sizeof(CEntry *));
    if (!c->buckets) {
        PyErr_NoMemory();
        return -1;
    }
    c->max_bytes = max_bytes;
    c->bytes = c->entries = 0;
    c->hits = c->misses = c->evictions = 0;
    return 0;
}

/* A Cache made with __new__ and never initialised has no table. */
static int cache_ready(Cache *c) {
    if (c->buckets) return 0;
    PyErr_SetString(PyExc_RuntimeError, "Cache was not initialised: call Cache(max_bytes)");
    return -1;
}

static int parse_key(PyObject *const *args, long long *version, int *kind) {
    *version = PyLong_AsLongLong(args[0]);
    if (*version == -1 && PyErr_Occurred()) return -1;
    long k = PyLong_AsLong(args[1]);
    if (k == -1 && PyErr_Occurred()) return -1;
    *kind = (int)k;
    return 0;
}

/* lookup(version, kind, obs) -> None (a miss) or (row bytes, is_double, value) (a hit). */
static PyObject *Cache_lookup(Cache *c, PyObject *const *args, Py_ssize_t nargs) {
    if (cache_ready(c) < 0) return NULL;
    long long version;
    int kind;
    Py_buffer view;
    if (nargs != 3) return PyErr_Format(PyExc_TypeError, "lookup(version, kind, obs)");
    if (parse_key(args, &version, &kind) < 0) return NULL;
    if (PyObject_GetBuffer(args[2], &view, PyBUF_C_CONTIGUOUS) < 0) return NULL;
    CEntry *e = cache_get(c, version, kind, (const unsigned char *)view.buf, view.len);
    PyBuffer_Release(&view);
    if (!e) Py_RETURN_NONE;
    return Py_BuildValue("(y#id)", (const char *)e->data + e->klen, e->rlen, e->is_double,
                         e->value);
}

/* The item type of a float32/float64 buffer (0/1), or -1 with a TypeError naming `what`. */
static int float_kind(const Py_buffer *view);

static int row_kind(const Py_buffer *view, const char *what) {
    int d = float_kind(view);
    if (d < 0) PyErr_Format(PyExc_TypeError, "%s must be float32 or float64", what);
    return d;
}

/* put(version, kind, obs, logits [A], value): one answer (kept if its key is present). */
static PyObject *Cache_put(Cache *c, PyObject *const *args, Py_ssize_t nargs) {
    if (cache_ready(c) < 0) return NULL;
    long long version;
    int kind;
    if (nargs != 5) return PyErr_Format(PyExc_TypeError, "put(version, kind, obs, logits, value)");
    if (parse_key(args, &version, &kind) < 0) return NULL;
    double value = PyFloat_AsDouble(args[4]);
    if (value == -1.0 && PyErr_Occurred()) return NULL;
    Py_buffer ov, lv;
    if (PyObject_GetBuffer(args[2], &ov, PyBUF_C_CONTIGUOUS) < 0) return NULL;
    if (PyObject_GetBuffer(args[3], &lv, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
        PyBuffer_Release(&ov);
        return NULL;
    }
    int d = row_kind(&lv, "logits");
    int r = d < 0 ? -1
                  : cache_put(c, version, kind, (const unsigned char *)ov.buf, ov.len,
                              (const char *)lv.buf, lv.len, d, value);
    PyBuffer_Release(&ov);
    PyBuffer_Release(&lv);
    if (r < 0) return NULL;
    Py_RETURN_NONE;
}

/* put_rows(version, kind, stack [n, ...], logits [n, A], values [n]): a whole reply, row i of
 * logits and values the answer to stack[i] (float32 or float64 each; the value is kept as the
 * double the search reads). */
static PyObject *Cache_put_rows(Cache *c, PyObject *const *args, Py_ssize_t nargs) {
    if (cache_ready(c) < 0) return NULL;
    long long version;
    int kind;
    if (nargs != 5)
        return PyErr_Format(PyExc_TypeError, "put_rows(version, kind, stack, logits, values)");
    if (parse_key(args, &version, &kind) < 0) return NULL;
    Py_buffer sv, lv, vv;
    if (PyObject_GetBuffer(args[2], &sv, PyBUF_C_CONTIGUOUS) < 0) return NULL;
    if (PyObject_GetBuffer(args[3], &lv, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
        PyBuffer_Release(&sv);
        return NULL;
    }
    if (PyObject_GetBuffer(args[4], &vv, PyBUF_RECORDS_RO) < 0) {
        PyBuffer_Release(&sv);
        PyBuffer_Release(&lv);
        return NULL;
    }
    PyObject *r = NULL;
    int ld = row_kind(&lv, "logits"), vd = ld < 0 ? -1 : row_kind(&vv, "values");
    if (vd < 0) goto done;
    if (lv.ndim != 2 || vv.ndim != 1 || vv.shape[0] != lv.shape[0] || sv.ndim < 1 ||
        sv.shape[0] != lv.shape[0]) {
        PyErr_Format(PyExc_ValueError, "put_rows: stack [n, ...], logits [n, A] and values [n] "
                     "must have the same n");
        goto done;
    }
    Py_ssize_t n = lv.shape[0];
    if (n > 0) {
        Py_ssize_t klen = sv.len / n, rlen = lv.len / n;
        for (Py_ssize_t i = 0; i < n; i++) {
            const char *vat = (const char *)vv.buf + vv.strides[0] * i;
            double v = vd ? *(const double *)vat : (double)*(const float *)vat;
            if (cache_put(c, version, kind, (const unsigned char *)sv.buf + klen * i, klen,
                          (const char *)lv.buf + rlen * i, rlen, ld, v) < 0)
                goto done;
        }
    }
    r = Py_None;
    Py_INCREF(r);
done:
    PyBuffer_Release(&sv);
    PyBuffer_Release(&lv);
    PyBuffer_Release(&vv);
    return r;
}

/* entries() -> [(version, kind, key bytes, row bytes, is_double, value)], least recently used
 * first (for tests and inspection). */
static PyObject *Cache_entries(Cache *c, PyObject *unused) {
    if (cache_ready(c) < 0) return NULL;
    PyObject *out = PyList_New(0);
    if (!out) return NULL;
    for (CEntry *e = c->lru.next; e != &c->lru; e = e->next) {
        PyObject *item = Py_BuildValue("(Liy#y#id)", e->version, e->kind, (const char *)e->data,
                                       e->klen, (const char *)e->data + e->klen, e->rlen,
                                       e->is_double, e->value);
        if (!item || PyList_Append(out, item) < 0) {
            Py_XDECREF(item);
            Py_DECREF(out);
            return NULL;
        }
        Py_DECREF(item);
    }
    return out;
}

static Py_ssize_t Cache_len(Cache *c) { return c->entries; }

static PyObject *Cache_step(Cache *c, PyObject *const *args, Py_ssize_t nargs);

static PyMethodDef Cache_methods[] = {
    {"step", (PyCFunction)(void (*)(void))Cache_step, METH_FASTCALL,
     "step(trees, logits, values, outs, version, kind) -> (flags, errors, hits)."},
    {"lookup", (PyCFunction)(void (*)(void))Cache_lookup, METH_FASTCALL,
     "lookup(version, kind, obs) -> None or (row bytes, is_double, value)."},
    {"put", (PyCFunction)(void (*)(void))Cache_put, METH_FASTCALL,
     "put(version, kind, obs, logits, value)."},
    {"put_rows", (PyCFunction)(void (*)(void))Cache_put_rows, METH_FASTCALL,
     "put_rows(version, kind, stack, logits, values)."},
    {"entries", (PyCFunction)Cache_entries, METH_NOARGS,
     "entries() -> [(version, kind, key, row, is_double, value)], oldest first."},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef Cache_members[] = {
    {"max_bytes", T_PYSSIZET, offsetof(Cache, max_bytes), READONLY, "The memory bound."},
    {"bytes", T_PYSSIZET, offsetof(Cache, bytes), READONLY, "The entries' footprint."},
    {"hits", T_LONGLONG, offsetof(Cache, hits), READONLY, "Lookups answered."},
    {"misses", T_LONGLONG, offsetof(Cache, misses), READONLY, "Lookups not answered."},
    {"evictions", T_LONGLONG, offsetof(Cache, evictions), READONLY, "Entries dropped."},
    {NULL, 0, 0, 0, NULL},
};

static PySequenceMethods Cache_as_sequence = {.sq_length = (lenfunc)Cache_len};

static PyTypeObject CacheType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "actors._mcts_core.Cache",
    .tp_basicsize = sizeof(Cache),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Cache(max_bytes): LRU store of evaluations keyed by (version, kind, obs bytes).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Cache_init,
    .tp_dealloc = (destructor)Cache_dealloc,
    .tp_methods = Cache_methods,
    .tp_members = Cache_members,
    .tp_as_sequence = &Cache_as_sequence,
};

/* --- many trees at once ------------------------------------------------------------------- */

/* The buffer's item type: 0 float32, 1 float64, -1 anything else. */
static int float_kind(const Py_buffer *view) {
    const char *f = view->format;
    if (!f) return -1;
    if (strcmp(f, "f") == 0 || strcmp(f, "<f") == 0 || strcmp(f, "=f") == 0) return 0;
    if (strcmp(f, "d") == 0 || strcmp(f, "<d") == 0 || strcmp(f, "=d") == 0) return 1;
    return -1;
}

/* Record the exception raised for tree i into *errors (a list of (i, exception)), clear it. */
static int keep_error(PyObject **errors, Py_ssize_t i) {
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    if (tb) PyException_SetTraceback(value, tb);
    Py_XDECREF(type);
    Py_XDECREF(tb);
    if (!*errors && !(*errors = PyList_New(0))) {
        Py_XDECREF(value);
        return -1;
    }
    PyObject *item = Py_BuildValue("(nN)", i, value);
    if (!item || PyList_Append(*errors, item) < 0) {
        Py_XDECREF(item);
        return -1;
    }
    Py_DECREF(item);
    return 0;
}

/* While tree t's one pending leaf (encoded at buf) is in the cache, feed it the cached answer,
 * as step() would, and descend to the next: 1 when the leaf missed (waits for the server;
 * counted as a miss), 0 when the search is done, -1 on error. */
static int feed_hits(Tree *t, Cache *c, long long version, int kind, unsigned char *buf,
                     long long *hits) {
    for (;;) {
        CEntry *e = cache_get(c, version, kind, buf, t->obs_size);
        if (!e) return 1;
        int item = e->is_double ? 8 : 4;
        if (e->rlen != (Py_ssize_t)t->num_actions * item) {
            PyErr_Format(PyExc_ValueError, "cached logits of %zd values, expected %d",
                         e->rlen / item, t->num_actions);
            return -1;
        }
        *hits += 1;
        expand_row(t, t->leaves[0], (const char *)e->data + e->klen, item, e->is_double, e->value);
        backup(t->paths, t->pathlen[0], e->value, t->vl);
        t->fed += 1;
        t->done += 1;
        t->nbatch = 0;
        int more = descend(t, buf);
        if (more <= 0) return more;
    }
}

/* The checks shared by step_many and the cache's calls: trees[i] is a Tree waiting on one leaf
 * (NULL with the exception set otherwise). */
static Tree *pending_tree(PyObject *trees, Py_ssize_t i) {
    PyObject *o = PyList_GET_ITEM(trees, i);
    if (!PyObject_TypeCheck(o, &TreeType)) {
        PyErr_Format(PyExc_TypeError, "trees[%zd] is not a Tree", i);
        return NULL;
    }
    Tree *t = (Tree *)o;
    if (t->nbatch != 1) {
        PyErr_Format(PyExc_RuntimeError, "step needs exactly one pending leaf");
        return NULL;
    }
    return t;
}

static int check_lists(PyObject *trees, PyObject *outs, Py_ssize_t *n) {
    if (!PyList_Check(trees) || !PyList_Check(outs)) {
        PyErr_Format(PyExc_TypeError, "trees and outs must be lists");
        return -1;
    }
    *n = PyList_GET_SIZE(trees);
    if (PyList_GET_SIZE(outs) != *n) {
        PyErr_Format(PyExc_ValueError, "%zd trees but %zd outs", *n, PyList_GET_SIZE(outs));
        return -1;
    }
    return 0;
}

/* Tree i: its leaf's answer (row i, when logits are given), then with a cache its next leaves
 * fed from the cache while they hit; its next leaf into outs[i]. */
static int step_one(Tree *t, const char *lrow, Py_ssize_t ls1, int ld, double v, PyObject *out,
                    Cache *c, long long version, int kind, long long *hits) {
    if (lrow) {
        expand_row(t, t->leaves[0], lrow, ls1, ld, v);
        backup(t->paths, t->pathlen[0], v, t->vl);
        t->fed += 1;
        t->done += 1;
        t->nbatch = 0;
    }
    Py_buffer ov;
    if (write_buffer(out, &ov, (Py_ssize_t)t->obs_size * t->width) < 0) return -1;
    unsigned char *buf = (unsigned char *)ov.buf;
    int more = lrow ? descend(t, buf) : 1;
    if (more > 0 && c) more = feed_hits(t, c, version, kind, buf, hits);
    PyBuffer_Release(&ov);
    return more;
}

/* The loop of step_many and Cache.feed: flags (1 where tree i waits for another leaf) and
 * errors (None, or [(i, exception)]), and with a cache the number of leaves it answered. */
static PyObject *step_trees(PyObject *trees, PyObject *logits, PyObject *values, PyObject *outs,
                            Cache *c, long long version, int kind) {
    Py_ssize_t n;
    if (check_lists(trees, outs, &n) < 0) return NULL;
    Py_buffer lv, vv;
    int ld = 0, vd = 0, have = logits != NULL;
    PyObject *flags = NULL, *errors = NULL;
    long long hits = 0;
    if (have) {
        if (PyObject_GetBuffer(logits, &lv, PyBUF_RECORDS_RO) < 0) return NULL;
        if (PyObject_GetBuffer(values, &vv, PyBUF_RECORDS_RO) < 0) {
            PyBuffer_Release(&lv);
            return NULL;
        }
        ld = float_kind(&lv);
        vd = float_kind(&vv);
        if (lv.ndim != 2 || vv.ndim != 1 || ld < 0 || vd < 0 || lv.shape[0] < n ||
            vv.shape[0] < n) {
            PyErr_Format(PyExc_ValueError,
                         "step_many: logits must be [n, A] and values [n], float32 or float64");
            goto done;
        }
    }
    if (!(flags = PyBytes_FromStringAndSize(NULL, n))) goto done;
    char *f = PyBytes_AS_STRING(flags);
    for (Py_ssize_t i = 0; i < n; i++) {
        f[i] = 0;
        int more = -1;
        Tree *t = pending_tree(trees, i);
        if (t && have && lv.shape[1] != t->num_actions) {
            PyErr_Format(PyExc_ValueError, "evaluate returned logits of shape (%zd,), "
                         "expected (%d,)", lv.shape[1], t->num_actions);
            t = NULL;
        }
        if (t) {
            const char *lrow = NULL;
            double v = 0.0;
            if (have) {
                const char *vat = (const char *)vv.buf + vv.strides[0] * i;
                v = vd ? *(const double *)vat : (double)*(const float *)vat;
                lrow = (const char *)lv.buf + lv.strides[0] * i;
            }
            more = step_one(t, lrow, have ? lv.strides[1] : 0, ld, v, PyList_GET_ITEM(outs, i),
                            c, version, kind, &hits);
        }
        if (more < 0) {
            if (keep_error(&errors, i) < 0) {
                Py_CLEAR(flags);
                goto done;
            }
        } else {
            f[i] = more > 0;
        }
    }
done:
    if (have) {
        PyBuffer_Release(&lv);
        PyBuffer_Release(&vv);
    }
    if (!flags) {
        Py_XDECREF(errors);
        return NULL;
    }
    PyObject *r = c ? Py_BuildValue("(NOL)", flags, errors ? errors : Py_None, hits)
                    : Py_BuildValue("(NO)", flags, errors ? errors : Py_None);
    Py_XDECREF(errors);
    return r;
}

/* step_many(trees, logits, values, outs) -> (flags, errors): tree i's one pending leaf takes
 * row i of logits ([n', A] float32 or float64, n' >= n) and values ([n'] float32 or float64),
 * exactly as trees[i].step(logits[i], float(values[i]), outs[i]) does, and its next leaf goes
 * into outs[i]. flags: bytes, 1 where the tree waits for another leaf, 0 where its search is
 * done or it failed; errors: None, or [(i, exception)] for the trees that failed (the others
 * are stepped all the same). */
static PyObject *step_many(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4) return PyErr_Format(PyExc_TypeError, "step_many(trees, logits, values, outs)");
    return step_trees(args[0], args[1], args[2], args[3], NULL, 0, 0);
}

/* Cache.step(trees, logits, values, outs, version, kind) -> (flags, errors, hits): step_many,
 * then each tree's next leaves answered from this cache while they hit (each as step() with
 * the cached row and value); a flag of 1 means the tree waits on a leaf that missed (counted
 * as a miss). logits=None: no reply to take, only the trees' pending leaves (in outs) looked
 * up, e.g. the first leaf of a search. hits: the leaves answered from the cache. */
static PyObject *Cache_step(Cache *c, PyObject *const *args, Py_ssize_t nargs) {
    if (cache_ready(c) < 0) return NULL;
    long long version;
    int kind;
    if (nargs != 6)
        return PyErr_Format(PyExc_TypeError,
                            "step(trees, logits, values, outs, version, kind)");
    if (parse_key(args + 4, &version, &kind) < 0) return NULL;
    PyObject *logits = args[1] == Py_None ? NULL : args[1];
    return step_trees(args[0], logits, args[2], args[3], c, version, kind);
}

/* --- the Rules type: a game at its parameters; its rules alone, for tests ---------------- */

/* The game table's entry named `name`, or NULL with ValueError listing the known names. */
static const GameDef *game_named(const char *name) {
    const GameDef *g = find_game(name);
    if (!g) {
        PyObject *known = PyUnicode_FromString("");
        for (int i = 0; known && GAME_TABLE[i]; i++)
            Py_SETREF(known, PyUnicode_FromFormat("%U%s%s", known, i ? ", " : "",
                                                  GAME_TABLE[i]->name));
        if (known)
            PyErr_Format(PyExc_ValueError,
                         "compiled MCTS: unsupported game %s (the core knows %U)", name, known);
        Py_XDECREF(known);
    }
    return g;
}

static void Rules_dealloc(RulesObject *self) {
    if (self->ready && self->r.def->release) self->r.def->release(&self->r);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* Rules(name, *params): the game `name` of the table at its parameters (Go: size, komi). */
static int Rules_init(RulesObject *self, PyObject *args, PyObject *kw) {
    if (self->ready) {
        PyErr_SetString(PyExc_RuntimeError, "Rules are made once");
        return -1;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(args);
    if (kw && PyDict_GET_SIZE(kw)) {
        PyErr_SetString(PyExc_TypeError, "Rules(name, *params) takes no keywords");
        return -1;
    }
    if (n < 1 || !PyUnicode_Check(PyTuple_GET_ITEM(args, 0))) {
        PyErr_SetString(PyExc_TypeError, "Rules(name, *params): name must be a str");
        return -1;
    }
    const char *name = PyUnicode_AsUTF8(PyTuple_GET_ITEM(args, 0));
    const GameDef *def = name ? game_named(name) : NULL;
    if (!def) return -1;
    if (n - 1 > def->nparams) {
        PyErr_Format(PyExc_TypeError, "Rules(%s): at most %d parameters (%s), got %zd", name,
                     def->nparams, def->params, n - 1);
        return -1;
    }
    double params[n > 1 ? n - 1 : 1];
    for (Py_ssize_t i = 1; i < n; i++) {
        params[i - 1] = PyFloat_AsDouble(PyTuple_GET_ITEM(args, i));
        if (params[i - 1] == -1.0 && PyErr_Occurred()) return -1;
    }
    const char *why = "";
    memset(&self->r, 0, sizeof self->r);
    self->r.def = def;
    if (def->make(&self->r, params, (int)(n - 1), &why) < 0) {
        PyErr_Format(PyExc_ValueError, "%s", why);
        return -1;
    }
    self->ready = 1;
    return 0;
}

static int rules_ready(RulesObject *self) {
    if (self->ready) return 0;
    PyErr_SetString(PyExc_RuntimeError, "Rules was not initialised: call Rules(name, ...)");
    return -1;
}

/* The legal actions of `state` under `history` (bytes) into acts: their number, or -1. */
static int rules_legal(const GameRules *g, const unsigned char *state, PyObject *history,
                       uint16_t *acts) {
    Tree t;
    memset(&t, 0, sizeof t);
    t.rules = g;
    if (!PyBytes_Check(history)) {
        PyErr_SetString(PyExc_TypeError, "the history must be bytes");
        return -1;
    }
    if (load_history(&t, history) < 0) return -1;
    SeenCtx ctx = {&t, NULL, state};
    Repeats rep = {seen_before, &ctx};
    int k = g->def->legal(g, state, g->def->board_hash ? &rep : NULL, acts);
    free(t.history);
    return k;
}

/* The state of `blob` (bytes) into a new buffer of state_size bytes (NULL on error). */
static unsigned char *rules_state(const GameRules *g, PyObject *blob) {
    if (!PyBytes_Check(blob)) {
        PyErr_SetString(PyExc_TypeError, "the state must be bytes");
        return NULL;
    }
    unsigned char *state = (unsigned char *)PyMem_Malloc((size_t)g->state_size);
    if (!state) {
        PyErr_NoMemory();
        return NULL;
    }
    if (load_blob(g, blob, state) < 0) {
        PyMem_Free(state);
        return NULL;
    }
    return state;
}

/* legal(blob, history) -> [actions]: the legal actions of a non-terminal state. */
static PyObject *Rules_legal(RulesObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (rules_ready(self) < 0) return NULL;
    if (nargs != 2) return PyErr_Format(PyExc_TypeError, "legal(blob, history)");
    const GameRules *g = &self->r;
    unsigned char *state = rules_state(g, args[0]);
    if (!state) return NULL;
    uint16_t *acts = (uint16_t *)PyMem_Malloc(sizeof(uint16_t) * (size_t)g->num_actions);
    PyObject *out = NULL;
    int k = acts ? rules_legal(g, state, args[1], acts) : -1;
    if (!acts) PyErr_NoMemory();
    if (k >= 0 && (out = PyList_New(k)))
        for (int j = 0; j < k; j++) PyList_SET_ITEM(out, j, PyLong_FromLong(acts[j]));
    PyMem_Free(acts);
    PyMem_Free(state);
    return out;
}

/* play(blob, history, action) -> (blob, terminal, value): the state after a legal action
 * (ValueError for an illegal one), whether the game is over there, and then its value for the
 * side to move there. */
static PyObject *Rules_play(RulesObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (rules_ready(self) < 0) return NULL;
    if (nargs != 3) return PyErr_Format(PyExc_TypeError, "play(blob, history, action)");
    const GameRules *g = &self->r;
    long a = PyLong_AsLong(args[2]);
    if (a == -1 && PyErr_Occurred()) return NULL;
    unsigned char *state = rules_state(g, args[0]);
    if (!state) return NULL;
    PyObject *out = NULL;
    uint16_t *acts = (uint16_t *)PyMem_Malloc(sizeof(uint16_t) * (size_t)g->num_actions);
    unsigned char *next = (unsigned char *)PyMem_Malloc((size_t)g->state_size);
    int k = acts && next ? rules_legal(g, state, args[1], acts) : -1, legal = 0;
    if (!acts || !next) PyErr_NoMemory();
    for (int j = 0; j < k; j++) legal |= acts[j] == a;
    if (k >= 0 && !legal) PyErr_Format(PyExc_ValueError, "%s: action %ld is illegal", g->label, a);
    if (legal) {
        double tv = 0.0;
        int terminal = g->def->play(g, state, (int)a, next, &tv);
        out = Py_BuildValue("(y#Od)", (const char *)next, (Py_ssize_t)g->blob_size,
                            terminal ? Py_True : Py_False, terminal ? tv : 0.0);
    }
    PyMem_Free(acts);
    PyMem_Free(next);
    PyMem_Free(state);
    return out;
}

/* encode(blob) -> bytes: the uint8 planes of encode, C * H * W bytes. */
static PyObject *Rules_encode(RulesObject *self, PyObject *blob) {
    if (rules_ready(self) < 0) return NULL;
    const GameRules *g = &self->r;
    unsigned char *state = rules_state(g, blob);
    if (!state) return NULL;
    PyObject *out = PyBytes_FromStringAndSize(NULL, g->obs_size);
    if (out) g->def->encode(g, state, (unsigned char *)PyBytes_AS_STRING(out));
    PyMem_Free(state);
    return out;
}

static PyObject *Rules_get(RulesObject *self, void *which) {
    if (rules_ready(self) < 0) return NULL;
    const GameRules *g = &self->r;
    switch ((int)(intptr_t)which) {
    case 0: return PyUnicode_FromString(g->label);
    case 1: return PyUnicode_FromString(g->def->name);
    case 2: return PyLong_FromLong(g->num_actions);
    case 3: return PyLong_FromLong(g->obs_size);
    case 4: return PyLong_FromLong(g->blob_size);
    case 5: return PyLong_FromLong(g->state_size);
    case 6: return PyLong_FromLong(g->max_plies);
    default: return PyLong_FromLong(g->history_item);
    }
}

static PyMethodDef Rules_methods[] = {
    {"legal", (PyCFunction)(void (*)(void))Rules_legal, METH_FASTCALL,
     "legal(blob, history) -> the legal actions of a non-terminal state."},
    {"play", (PyCFunction)(void (*)(void))Rules_play, METH_FASTCALL,
     "play(blob, history, action) -> (blob, terminal, value)."},
    {"encode", (PyCFunction)Rules_encode, METH_O, "encode(blob) -> the planes as bytes."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Rules_getset[] = {
    {"label", (getter)Rules_get, NULL, "The rules' name in messages (go13).", (void *)0},
    {"game", (getter)Rules_get, NULL, "The game's name in the table (go).", (void *)1},
    {"num_actions", (getter)Rules_get, NULL, "A: the policy's width.", (void *)2},
    {"obs_size", (getter)Rules_get, NULL, "Bytes of the encoded planes.", (void *)3},
    {"blob_size", (getter)Rules_get, NULL, "Bytes of core_state's blob.", (void *)4},
    {"state_size", (getter)Rules_get, NULL, "Bytes of a node's state.", (void *)5},
    {"max_plies", (getter)Rules_get, NULL, "The longest game.", (void *)6},
    {"history_item", (getter)Rules_get, NULL, "Bytes per earlier board (0: none).", (void *)7},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject RulesType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "actors._mcts_core.Rules",
    .tp_basicsize = sizeof(RulesObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Rules(name, *params): a game of the table at its parameters (Go: size, komi).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Rules_init,
    .tp_dealloc = (destructor)Rules_dealloc,
    .tp_methods = Rules_methods,
    .tp_getset = Rules_getset,
};

static PyObject *live_trees(PyObject *self, PyObject *unused) {
    return Py_BuildValue("(LL)", g_live_nodes, g_live_bytes);
}

static PyMethodDef module_methods[] = {
    {"live_trees", (PyCFunction)live_trees, METH_NOARGS,
     "live_trees() -> (nodes, bytes) held by every tree of this process."},
    {"step_many", (PyCFunction)(void (*)(void))step_many, METH_FASTCALL,
     "step_many(trees, logits, values, outs) -> (flags, errors): each tree's step at once."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "actors._mcts_core",
    "The compiled trees behind actors.compiled_mcts (CompiledMCTS, CompiledGumbel).", -1,
    module_methods,
};

PyMODINIT_FUNC PyInit__mcts_core(void) {
    if (PyType_Ready(&TreeType) < 0 || PyType_Ready(&CacheType) < 0 ||
        PyType_Ready(&RulesType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    int ngames = 0;
    while (GAME_TABLE[ngames]) ngames++;
    PyObject *names = PyTuple_New(ngames);
    if (!names) {
        Py_DECREF(m);
        return NULL;
    }
    for (int i = 0; i < ngames; i++)
        PyTuple_SET_ITEM(names, i, PyUnicode_FromString(GAME_TABLE[i]->name));
    if (PyModule_AddObject(m, "GAMES", names) < 0) {
        Py_DECREF(names);
        Py_DECREF(m);
        return NULL;
    }
    /* actors/compiled_mcts.py's _ABI: bumped with every change of this module's interface, so
     * that a stale build is told apart and not run. */
    if (PyModule_AddIntConstant(m, "ABI", 5) < 0 ||
        PyModule_AddIntConstant(m, "CACHE_ENTRY_OVERHEAD", (long)CACHE_ENTRY_OVERHEAD) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    Py_INCREF(&TreeType);
    if (PyModule_AddObject(m, "Tree", (PyObject *)&TreeType) < 0) {
        Py_DECREF(&TreeType);
        Py_DECREF(m);
        return NULL;
    }
    Py_INCREF(&RulesType);
    if (PyModule_AddObject(m, "Rules", (PyObject *)&RulesType) < 0) {
        Py_DECREF(&RulesType);
        Py_DECREF(m);
        return NULL;
    }
    Py_INCREF(&CacheType);
    if (PyModule_AddObject(m, "Cache", (PyObject *)&CacheType) < 0) {
        Py_DECREF(&CacheType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
