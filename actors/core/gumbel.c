/* Gumbel AlphaZero's selection (actors/gumbel.py, operation for operation): at the root,
 * Gumbel-top-k and sequential halving over the schedule gumbel_start is given (the visit count
 * of the root edge each simulation takes); below it, the deterministic choice by the improved
 * policy from completed Q-values. One leaf at a time (sequential). gumbel_start and
 * gumbel_result are the Tree's methods of the same names. With the solver (PUCT's steps,
 * tree.h and rounds.h): a proven node is met as a terminal one, a proven child's completed Q
 * is its exact value, the halving skips the root's closed edges (root_open) and a proven root
 * ends the search. */
#include "glue.h"
#include "rounds.h"
#include "select.h"

#include <math.h>

#define LOW_LOGIT -1e9 /* gumbel._LOW_LOGIT */
#define TINY 1e-30     /* gumbel._TINY */
#define EPSILON 1e-8   /* gumbel._EPSILON */

/* sigma(completed Q) of `nd`'s edges into out[k] (gumbel.completed_q, same operations; out
 * holds the completed Q first, then its transform). With the solver a proven child's Q is
 * its exact value. */
static void completed_q(const Node *nd, double c_visit, double c_scale, int solver,
                        double *out) {
    long total = 0, top = 0;
    double mass = 0.0, weighted = 0.0, *q = out;
    int k = nd->k;
    for (int j = 0; j < k; j++) {
        long ni = nd->e[j].n;
        if (ni) {
            double qi = nd->e[j].w / (double)ni, p = nd->e[j].p;
            const Node *c = nd->e[j].child;
            if (solver && c && c->plies >= 0) qi = -c->tv;
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
static int interior_action(const Node *nd, double c_visit, double c_scale, int solver,
                           double *work) {
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
    completed_q(nd, c_visit, c_scale, solver, sigma);
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

/* With the solver, whether sequential halving may still visit root edge j (gumbel._open):
 * while the root is unproven, unless proven lost; a won root searched on, unless proven. */
static inline int root_open(const Node *r, int j) {
    const Node *c = r->e[j].child;
    if (!c || c->plies < 0) return 1;
    return r->plies < 0 && c->tv < SOLVED_WIN;
}

/* With the solver, whether root edge j may be chosen as the move (search.Proof.kept): while
 * the root is unproven, unless proven lost; at a proven root, if proven to keep its value. */
static inline int root_kept(const Node *r, int j) {
    const Node *c = r->e[j].child;
    int proven = c && c->plies >= 0;
    if (r->plies < 0) return !(proven && -c->tv == -SOLVED_WIN);
    return proven && -c->tv == r->tv;
}

/* The root edge of simulation t->done: among the edges with the schedule's visit count, the
 * highest max(LOW_LOGIT, g + logits + sigma) (gumbel._halve's loop body). With the solver,
 * among the open edges, and when none has that count, the open edge with the highest count
 * below it, else the lowest above it (gumbel._solver_root_action's key, compared in order). */
static int gumbel_root_action(Tree *t) {
    Node *r = t->root;
    double *sigma = t->work, best = -INFINITY;
    completed_q(r, t->c_visit, t->c_scale, t->solver, sigma);
    long want = t->schedule[t->done];
    int i = -1;
    if (t->solver) {
        int ibelow = 0;
        long ikey = 0;
        for (int j = 0; j < r->k; j++) {
            if (!root_open(r, j)) continue;
            long c = t->counts[j];
            int below = c <= want;
            long key = below ? c : -c;
            double score = t->g[j] + t->glog[j] + sigma[j];
            if (!(score > LOW_LOGIT)) score = LOW_LOGIT;
            if (i < 0 || below > ibelow ||
                (below == ibelow && (key > ikey || (key == ikey && score > best)))) {
                i = j;
                ibelow = below;
                ikey = key;
                best = score;
            }
        }
        return i;
    }
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
    while (t->done < t->count && !root_solved(t)) {
        int i = gumbel_root_action(t);
        if (i < 0) {
            PyErr_SetString(PyExc_RuntimeError, "the schedule named no considered action");
            return -1;
        }
        t->counts[i] += 1;
        Node *node = t->root;
        int len = 0;
        for (;;) {
            Edge *e = walk(node, i, path, &len);
            Node *child = e->child;
            if (!child) {
                child = e->child = new_child(t, node, i);
                if (!child) {
                    PyErr_NoMemory();
                    return -1;
                }
                if (!child->has_tv) {
                    add_leaf(t, child, len);
                    encode(t, child, out);
                    return 1;
                }
            }
            if (exact_for(t, child)) {
                reach_terminal(t, child, path, len, 0.0);
                break;
            }
            if (!child->expanded) {
                PyErr_SetString(PyExc_RuntimeError,
                                "an unexpanded interior node (reset the tree)");
                return -1;
            }
            node = child;
            i = interior_action(node, c_visit, c_scale, t->solver, t->work);
        }
    }
    return 0;
}

/* gumbel_start(noise, schedule): a Gumbel search of len(schedule) simulations from the
 * expanded root; noise is a sequence of k floats (the root's Gumbel draws) or None (zeros),
 * schedule the visit counts of gumbel.considered_visits. */
PyObject *gumbel_start(Tree *t, PyObject *args) {
    PyObject *noise, *schedule;
    if (!PyArg_ParseTuple(args, "OO", &noise, &schedule)) return NULL;
    Node *r = t->root;
    if (t->sel != &SELECT_GUMBEL) return PyErr_Format(PyExc_RuntimeError, "not a Gumbel tree");
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
PyObject *gumbel_result(Tree *t, PyObject *args) {
    PyObject *objs[5];
    Py_buffer views[5];
    static const Py_ssize_t item[5] = {sizeof(float), sizeof(double), sizeof(double),
                                       sizeof(int64_t), sizeof(float)};
    if (!PyArg_ParseTuple(args, "OOOOO", &objs[0], &objs[1], &objs[2], &objs[3], &objs[4]))
        return NULL;
    Node *r = t->root;
    if (t->sel != &SELECT_GUMBEL) return PyErr_Format(PyExc_RuntimeError, "not a Gumbel tree");
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
    /* improved[j] replaces sigma[j] */
    completed_q(r, t->c_visit, t->c_scale, t->solver, sigma);
    long most = 0;
    double top = -INFINITY;
    for (int j = 0; j < k; j++) {
        improved[j] = t->glog[j] + sigma[j];
        if (improved[j] > top) top = improved[j];
        if (t->counts[j] > most && (!t->solver || root_kept(r, j))) most = t->counts[j];
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
        if (t->counts[j] == most && (!t->solver || root_kept(r, j))) scores[a] = improved[j];
        noise[a] = t->g[j];
        visits[a] = r->e[j].n;
        prior[a] = (float)r->e[j].p;
    }
    for (int b = 0; b < 5; b++) PyBuffer_Release(&views[b]);
    return PyFloat_FromDouble(r->value_sum / (double)r->visits);
}


const Selection SELECT_GUMBEL = {
    .name = "gumbel",
    .sequential = 1,
    .descend = gumbel_descend,
};
