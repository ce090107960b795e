/* The tree's nodes: making, freeing and expanding them, backing values up, and the positions
 * that stood before (the game's history, a node's ancestors) for rules such as Go's superko.
 * actors/mcts.py's _expand, _masked_softmax and _backup, operation for operation. */
#include "tree.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

long long g_live_nodes = 0;
long long g_live_bytes = 0;

/* --- positions: the game's rules (games.h) on nodes ------------------------------------- */

static int in_history(const Tree *t, uint64_t h) {
    Py_ssize_t lo = 0, hi = t->nhistory;
    while (lo < hi) {
        Py_ssize_t mid = (lo + hi) / 2;
        if (t->history[mid] < h) lo = mid + 1;
        else hi = mid;
    }
    return lo < t->nhistory && t->history[lo] == h;
}

int seen_before(const void *ctx, uint64_t h) {
    const SeenCtx *c = (const SeenCtx *)ctx;
    const size_t at = (size_t)c->t->rules->hash_at;
    uint64_t x;
    memcpy(&x, c->state + at, 8);
    if (x == h) return 1;
    for (const Node *n = c->node; n; n = n->parent) {
        memcpy(&x, n->state + at, 8);
        if (x == h) return 1;
    }
    return in_history(c->t, h);
}

static size_t node_bytes(const GameRules *g, int k) {
    return sizeof(Node) + (size_t)k * (sizeof(Edge) + sizeof(uint16_t)) + (size_t)g->state_size;
}

/* A node for `state` (state_size bytes) below `parent`; terminal nodes get their value tv and
 * no edges. */
Node *new_node(Tree *t, Node *parent, const unsigned char *state, int terminal, double tv) {
    uint16_t *acts = t->acts;
    int k = 0;
    const GameRules *g = t->rules;
    if (!terminal) {
        SeenCtx ctx = {t, parent, state};
        Repeats rep = {seen_before, &ctx};
        k = g->def->legal(g, state, g->hash_at >= 0 ? &rep : NULL, acts);
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
    n->plies = terminal ? 0 : -1;
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
Node *new_child(Tree *t, Node *parent, int i) {
    double tv = 0.0;
    int terminal = t->rules->def->play(t->rules, parent->state, parent->actions[i], t->next, &tv);
    return new_node(t, parent, t->next, terminal, tv);
}


static void free_nodes(Tree *t, Node *n) {
    for (int j = 0; j < n->k; j++)
        if (n->e[j].child) free_nodes(t, n->e[j].child);
    g_live_nodes--;
    g_live_bytes -= (long long)node_bytes(t->rules, n->k);
    free(n);
    t->nodes--;
}

void free_tree(Tree *t, Node *n) {
    if (n) free_nodes(t, n);
}

/* --- expansion (actors/mcts.py's _expand) ---------------------------------------------- */

/* Priors from logits (float32 or float64 [A], any stride) and the node's own evaluation;
 * the value as a double into *out_v. */
int expand(Tree *t, Node *node, PyObject *logits, PyObject *value, double *out_v) {
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
void expand_row(Tree *t, Node *node, const char *base, Py_ssize_t stride, int is_double,
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


int finish_leaf(Tree *t, int b, PyObject *logits, PyObject *value) {
    double v;
    if (expand(t, t->leaves[b], logits, value, &v) < 0) return -1;
    backup(t->paths + (size_t)b * t->maxd, t->pathlen[b], v, t->vl);
    t->fed += 1;
    return 0;
}

/* --- the game's state and history from Python --------------------------------------------- */

/* A Python core_state blob as the game's state bytes into `state` (-1 with ValueError). */
int load_blob(const GameRules *g, PyObject *blob, unsigned char *state) {
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
int load_history(Tree *t, PyObject *history) {
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

