/* What a searched tree reports to an engine: each root edge's visits, mean value (Q, for the
 * root's side to move) and clean prior, and principal variations (the most visited child at
 * each node, ties to the higher prior, then to the first). Read between searches only: no
 * leaf may be in flight. actors/nodes.py's report and principal_variation, step for step. */
#include "report.h"
#include "glue.h"

#include <math.h>

/* The index of the most visited edge of `n` (ties: the higher prior, then the first), or -1
 * when no edge has a visit. */
static int most_visited(const Node *n) {
    int best = -1;
    for (int j = 0; j < n->k; j++) {
        const Edge *e = &n->e[j];
        if (e->n == 0) continue;
        if (best < 0 || e->n > n->e[best].n || (e->n == n->e[best].n && e->p > n->e[best].p))
            best = j;
    }
    return best;
}

PyObject *root_edges(Tree *t, PyObject *args) {
    PyObject *objs[4];
    Py_buffer views[4];
    const Py_ssize_t sizes[4] = {sizeof(int64_t), sizeof(int64_t), sizeof(double), sizeof(float)};
    if (!PyArg_ParseTuple(args, "OOOO", &objs[0], &objs[1], &objs[2], &objs[3])) return NULL;
    const Node *r = t->root;
    if (!r || !r->expanded) return PyErr_Format(PyExc_RuntimeError, "no expanded root");
    if (t->nbatch) return PyErr_Format(PyExc_RuntimeError, "%d leaves in flight", t->nbatch);
    for (int b = 0; b < 4; b++)
        if (write_buffer(objs[b], &views[b], sizes[b] * t->num_actions) < 0) {
            while (b--) PyBuffer_Release(&views[b]);
            return NULL;
        }
    int64_t *actions = (int64_t *)views[0].buf, *visits = (int64_t *)views[1].buf;
    double *values = (double *)views[2].buf;
    float *priors = (float *)views[3].buf;
    for (int j = 0; j < r->k; j++) {
        const Edge *e = &r->e[j];
        actions[j] = r->actions[j];
        visits[j] = e->n;
        values[j] = e->n ? e->w / (double)e->n : 0.0;
        priors[j] = (float)(t->has_clean ? t->clean_p[j] : e->p);
    }
    for (int b = 0; b < 4; b++) PyBuffer_Release(&views[b]);
    return Py_BuildValue("(ild)", r->k, r->visits, r->value_sum / (double)r->visits);
}

PyObject *root_proof(Tree *t, PyObject *args) {
    PyObject *objs[2];
    Py_buffer views[2];
    int by_action = 0;
    if (!PyArg_ParseTuple(args, "OO|p", &objs[0], &objs[1], &by_action)) return NULL;
    const Node *r = t->root;
    if (!r || !r->expanded) return PyErr_Format(PyExc_RuntimeError, "no expanded root");
    if (write_buffer(objs[0], &views[0], (Py_ssize_t)sizeof(double) * t->num_actions) < 0)
        return NULL;
    if (write_buffer(objs[1], &views[1], (Py_ssize_t)sizeof(int64_t) * t->num_actions) < 0) {
        PyBuffer_Release(&views[0]);
        return NULL;
    }
    double *values = (double *)views[0].buf;
    int64_t *plies = (int64_t *)views[1].buf;
    if (by_action)
        for (int a = 0; a < t->num_actions; a++) {
            values[a] = NAN;
            plies[a] = -1;
        }
    for (int j = 0; j < r->k; j++) {
        const Node *c = r->e[j].child;
        int proven = c && c->plies >= 0, at = by_action ? r->actions[j] : j;
        values[at] = proven ? -c->tv : NAN;
        plies[at] = proven ? c->plies + 1 : -1;
    }
    PyBuffer_Release(&views[0]);
    PyBuffer_Release(&views[1]);
    if (r->plies < 0) return Py_BuildValue("(iOi)", r->k, Py_None, -1);
    return Py_BuildValue("(idi)", r->k, r->tv, r->plies);
}

PyObject *principal_variation(Tree *t, PyObject *args) {
    int edge, limit;
    if (!PyArg_ParseTuple(args, "ii", &edge, &limit)) return NULL;
    const Node *n = t->root;
    if (!n || !n->expanded) return PyErr_Format(PyExc_RuntimeError, "no expanded root");
    if (edge < -1 || edge >= n->k)
        return PyErr_Format(PyExc_IndexError, "edge %d: the root has %d", edge, n->k);
    int cap = limit < 0 ? 0 : (limit < t->maxd ? limit : t->maxd); /* no line is longer */
    uint16_t *line = PyMem_Malloc(sizeof(uint16_t) * (size_t)(cap ? cap : 1));
    if (!line) return PyErr_NoMemory();
    int len = 0, j = edge >= 0 ? edge : most_visited(n);
    while (n && j >= 0 && len < cap) {
        line[len++] = n->actions[j];
        n = n->e[j].child;
        j = n && n->expanded ? most_visited(n) : -1;
    }
    PyObject *out = PyBytes_FromStringAndSize((const char *)line, (Py_ssize_t)len * 2);
    PyMem_Free(line);
    return out;
}
