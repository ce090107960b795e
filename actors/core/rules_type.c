/* The Python Rules type: a game of the table (games.h) at its parameters, which trees play by;
 * and its rules alone (legal, play, encode), for the tests against the Python references and
 * OpenSpiel. */
#include "glue.h"
#include "tree.h"

#include <stdlib.h>
#include <string.h>

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
    int k = g->def->legal(g, state, g->hash_at >= 0 ? &rep : NULL, acts);
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

PyTypeObject RulesType = {
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

