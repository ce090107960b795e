/* The Python Tree type: a search tree for one game (a Rules), built by keyword from the
 * search config, and the calls actors/compiled_mcts.py makes between awaited leaves. */
#include "glue.h"
#include "report.h"
#include "select.h"

#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

static void Tree_dealloc(Tree *t) {
    if (t->rules) free_tree(t, t->root);
    Py_XDECREF(t->rules_obj);
    free(t->paths);
    free(t->leaves);
    free(t->pathlen);
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

/* The knobs: MCTSConfig's fields of these names, each a double or an int of the Tree. A new
 * knob is a field of MCTSConfig, a member of Tree and a line here; actors/compiled_mcts.py
 * passes every name of KNOBS from the config. */
typedef struct {
    const char *name;
    size_t offset; /* of the Tree member */
    int is_int;
} Knob;

static const Knob KNOBS[] = {
    {"c_puct", offsetof(Tree, c_puct), 0},
    {"fpu_reduction", offsetof(Tree, fpu_reduction), 0},
    {"root_fpu_reduction", offsetof(Tree, root_fpu_reduction), 0},
    {"leaves_in_flight", offsetof(Tree, width), 1},
    {"virtual_loss", offsetof(Tree, vl), 0},
    {"c_visit", offsetof(Tree, c_visit), 0},
    {"c_scale", offsetof(Tree, c_scale), 0},
    {"solver", offsetof(Tree, solver), 1},
};
#define NKNOBS ((int)(sizeof KNOBS / sizeof KNOBS[0]))

int knob_count(void) { return NKNOBS; }

const char *knob_name(int i) { return KNOBS[i].name; }

/* Every knob from the keywords (each required: a missing or unknown one is a TypeError). */
static int set_knobs(Tree *t, PyObject *kw) {
    Py_ssize_t given = kw ? PyDict_GET_SIZE(kw) : 0;
    for (int k = 0; k < NKNOBS; k++) {
        PyObject *v = kw ? PyDict_GetItemString(kw, KNOBS[k].name) : NULL;
        if (!v) {
            PyErr_Format(PyExc_TypeError, "Tree: the knob %s is missing (KNOBS names them all)",
                         KNOBS[k].name);
            return -1;
        }
        char *at = (char *)t + KNOBS[k].offset;
        if (KNOBS[k].is_int) {
            long x = PyLong_AsLong(v);
            if (x == -1 && PyErr_Occurred()) return -1;
            if (x < INT_MIN || x > INT_MAX) {
                PyErr_Format(PyExc_ValueError, "Tree: %s=%ld is out of range", KNOBS[k].name, x);
                return -1;
            }
            *(int *)at = (int)x;
        } else {
            double x = PyFloat_AsDouble(v);
            if (x == -1.0 && PyErr_Occurred()) return -1;
            *(double *)at = x;
        }
    }
    if (given != NKNOBS) {
        PyErr_Format(PyExc_TypeError, "Tree: %zd keywords, but the knobs are %d (KNOBS)", given,
                     NKNOBS);
        return -1;
    }
    return 0;
}

/* Tree(rules, selection, **knobs): a tree for the game `rules` (a Rules), searching by the
 * selection rule named `selection` (SELECTIONS), with every knob of KNOBS by keyword. */
static int Tree_init(Tree *t, PyObject *args, PyObject *kw) {
    PyObject *rules;
    const char *selection;
    if (!PyArg_ParseTuple(args, "O!s", &RulesType, &rules, &selection)) return -1;
    if (!((RulesObject *)rules)->ready) {
        PyErr_SetString(PyExc_RuntimeError, "Rules was not initialised: call Rules(name, ...)");
        return -1;
    }
    const Selection *sel = find_selection(selection);
    if (!sel) {
        PyErr_Format(PyExc_ValueError, "compiled MCTS: no selection rule %s", selection);
        return -1;
    }
    if (t->rules) free_tree(t, t->root); /* a second __init__: the old tree, by its own rules */
    t->root = NULL;
    t->rules = NULL;
    if (set_knobs(t, kw) < 0) return -1;
    if (t->width < 1) {
        PyErr_Format(PyExc_ValueError, "compiled MCTS: leaves_in_flight must be >= 1, got %d",
                     t->width);
        return -1;
    }
    if (sel->sequential) t->width = 1;
    if (t->width == 1) t->vl = 0.0; /* one leaf in flight: no virtual loss (as actors/mcts.py) */
    t->sel = sel;
    Py_INCREF(rules);
    Py_XSETREF(t->rules_obj, rules);
    t->rules = &((RulesObject *)rules)->r;
    const GameRules *g = t->rules;
    size_t a = (size_t)g->num_actions, w = (size_t)t->width;
    t->num_actions = g->num_actions;
    t->obs_size = g->obs_size;
    t->maxd = g->max_plies + 1;
    if (alloc_into((void **)&t->paths, sizeof(Step) * w * (size_t)t->maxd) < 0 ||
        alloc_into((void **)&t->leaves, sizeof(Node *) * w) < 0 ||
        alloc_into((void **)&t->pathlen, sizeof(int) * w) < 0 ||
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
    t->nbatch = 0;
    return 0;
}

static PyObject *Tree_reset(Tree *t, PyObject *unused) {
    free_tree(t, t->root);
    t->root = NULL;
    t->has_clean = 0;
    t->nbatch = 0;
    Py_RETURN_NONE;
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

/* leaf_actions(b) -> bytes: the legal actions (uint16, increasing) of pending leaf b, or of
 * the root for b = -1: what a sparse evaluation asks the server for (azserve/sparse.py). */
static PyObject *Tree_leaf_actions(Tree *t, PyObject *arg) {
    long b = PyLong_AsLong(arg);
    if (b == -1 && PyErr_Occurred()) return NULL;
    const Node *n = b == -1 ? t->root : (b >= 0 && b < t->nbatch ? t->leaves[b] : NULL);
    if (!n) return PyErr_Format(PyExc_IndexError, "leaf %ld: %d leaves pending%s", b, t->nbatch,
                                t->root ? "" : ", no root");
    return PyBytes_FromStringAndSize((const char *)n->actions, (Py_ssize_t)n->k * 2);
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
    {"leaf_actions", (PyCFunction)Tree_leaf_actions, METH_O,
     "leaf_actions(b) -> uint16 bytes: the legal actions of pending leaf b (-1: the root)."},
    {"root_result", (PyCFunction)Tree_root_result, METH_VARARGS,
     "root_result(visits, prior) -> root value."},
    {"advance", (PyCFunction)Tree_advance, METH_VARARGS, "advance(action, reuse)."},
    {"root_edges", (PyCFunction)root_edges, METH_VARARGS,
     "root_edges(actions, visits, values, priors) -> (k, root visits, root value)."},
    {"root_proof", (PyCFunction)root_proof, METH_VARARGS,
     "root_proof(values, plies, by_action=False) -> (k, root's exact value or None, root's "
     "plies)."},
    {"pv", (PyCFunction)principal_variation, METH_VARARGS,
     "pv(edge, limit) -> uint16 bytes: the most visited line through root edge (-1: best)."},
    {"gumbel_start", (PyCFunction)gumbel_start, METH_VARARGS,
     "gumbel_start(noise or None, schedule): a Gumbel search from the expanded root."},
    {"gumbel_result", (PyCFunction)gumbel_result, METH_VARARGS,
     "gumbel_result(policy, scores, noise, visits, prior) -> root value."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Tree_getset[] = {
    {"nodes", (getter)Tree_get_nodes, NULL, "Live nodes of this tree.", NULL},
    {"fed", (getter)Tree_get_fed, NULL, "Leaves answered since the search's start.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject TreeType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "actors._mcts_core.Tree",
    .tp_basicsize = sizeof(Tree),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Tree(rules, selection, **knobs): a search tree for a Rules, by the selection rule "
              "named (SELECTIONS), with every knob of KNOBS by keyword.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Tree_init,
    .tp_dealloc = (destructor)Tree_dealloc,
    .tp_methods = Tree_methods,
    .tp_getset = Tree_getset,
};

