/* What the Python-facing files share: the module's types and the buffer helpers. */
#ifndef AZSERVE_GLUE_H
#define AZSERVE_GLUE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "games.h"

/* A game at its parameters, for Python: Rules(name, *params) (rules_type.c). Trees hold a
 * reference. */
typedef struct {
    PyObject_HEAD
    GameRules r;
    int ready; /* r was made (and its data is released on dealloc) */
} RulesObject;

extern PyTypeObject RulesType, TreeType, CacheType;

/* The knobs a Tree takes by keyword (tree_type.c): MCTSConfig's fields of those names. */
int knob_count(void);
const char *knob_name(int i);

/* A writable C-contiguous buffer of at least `need` bytes (-1 with ValueError). */
int write_buffer(PyObject *out, Py_buffer *view, Py_ssize_t need);

/* The buffer's item type: 0 float32, 1 float64, -1 anything else. */
int float_kind(const Py_buffer *view);

/* step_many(trees, logits, values, outs) (stepper.c). */
PyObject *step_many(PyObject *mod, PyObject *const *args, Py_ssize_t nargs);

#endif
