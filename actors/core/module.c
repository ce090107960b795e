/* The module actors._mcts_core: the compiled search trees behind actors.compiled_mcts
 * (CompiledMCTS, CompiledGumbel). Its parts, one concern a file:
 *
 *   games.h, games/, registry.c     the games' rules, one C file a game (GameDef)
 *   rules_type.c                    Rules: a game at its parameters, for Python
 *   tree.h, tree.c                  nodes, expansion, backup, the positions that stood before
 *   select.h, select.c              the table of selection rules
 *   puct.c, gumbel.c                its entries; rounds.h, the steps they share
 *   tree_type.c                     Tree: built by keyword from the search config
 *   report.h, report.c              what a searched tree reports: root edges, variations
 *   cache.h, cache.c                the LRU evaluation cache
 *   stepper.c                       step_many and Cache.step: many trees at once
 *   abi.h                           the interface version
 *
 * Exactness: every score, softmax and backup is computed with the same IEEE double operations
 * in the same order as the Python searches (actors/mcts.py, actors/gumbel.py: the oracles),
 * built with -ffp-contract=off, so no fused multiply-add, and exp/sqrt from the same libm; the
 * tests compare visit counts, values and priors bit for bit.
 *
 * The Python side owns the coroutine: it awaits evaluate() between calls into a tree, draws
 * the Dirichlet or Gumbel noise with its own generator and builds the results. */
#include "abi.h"
#include "cache.h"
#include "glue.h"
#include "select.h"
#include "tree.h"

#include <string.h>

int write_buffer(PyObject *out, Py_buffer *view, Py_ssize_t need) {
    if (PyObject_GetBuffer(out, view, PyBUF_CONTIG) < 0) return -1;
    if (view->len < need) {
        PyBuffer_Release(view);
        PyErr_Format(PyExc_ValueError, "obs buffer of %zd bytes, need %zd", view->len, need);
        return -1;
    }
    return 0;
}

/* The buffer's item type: 0 float32, 1 float64, -1 anything else. */
int float_kind(const Py_buffer *view) {
    const char *f = view->format;
    if (!f) return -1;
    if (strcmp(f, "f") == 0 || strcmp(f, "<f") == 0 || strcmp(f, "=f") == 0) return 0;
    if (strcmp(f, "d") == 0 || strcmp(f, "<d") == 0 || strcmp(f, "=d") == 0) return 1;
    return -1;
}

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

/* A tuple of the names `count` entries give (NULL on error). */
static PyObject *names_tuple(const char *(*name)(int), int count) {
    PyObject *out = PyTuple_New(count);
    for (int i = 0; out && i < count; i++) {
        PyObject *s = PyUnicode_FromString(name(i));
        if (!s) Py_CLEAR(out);
        else PyTuple_SET_ITEM(out, i, s);
    }
    return out;
}

static const char *game_name(int i) { return GAME_TABLE[i]->name; }
static const char *selection_name(int i) { return SELECTIONS[i]->name; }

static int count_games(void) {
    int n = 0;
    while (GAME_TABLE[n]) n++;
    return n;
}

static int count_selections(void) {
    int n = 0;
    while (SELECTIONS[n]) n++;
    return n;
}

/* Add `value` (a new reference, or NULL) to the module as `name`: 0, or -1. */
static int add(PyObject *m, const char *name, PyObject *value) {
    if (!value) return -1;
    if (PyModule_AddObject(m, name, value) < 0) {
        Py_DECREF(value);
        return -1;
    }
    return 0;
}

PyMODINIT_FUNC PyInit__mcts_core(void) {
    if (PyType_Ready(&TreeType) < 0 || PyType_Ready(&CacheType) < 0 ||
        PyType_Ready(&RulesType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    Py_INCREF(&TreeType);
    Py_INCREF(&RulesType);
    Py_INCREF(&CacheType);
    if (add(m, "GAMES", names_tuple(game_name, count_games())) < 0 ||
        add(m, "SELECTIONS", names_tuple(selection_name, count_selections())) < 0 ||
        add(m, "KNOBS", names_tuple(knob_name, knob_count())) < 0 ||
        PyModule_AddIntConstant(m, "ABI", CORE_ABI) < 0 ||
        PyModule_AddIntConstant(m, "CACHE_ENTRY_OVERHEAD", (long)CACHE_ENTRY_OVERHEAD) < 0 ||
        add(m, "Tree", (PyObject *)&TreeType) < 0 || add(m, "Rules", (PyObject *)&RulesType) < 0 ||
        add(m, "Cache", (PyObject *)&CacheType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
