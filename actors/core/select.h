/* The selection rules: one table, one entry per rule, each in its own file (puct.c, gumbel.c).
 * A tree holds its entry (Tree(rules, selection, **knobs)); descend() runs the entry's round.
 * A third rule is one file defining its Selection and one line in select.c's table; its
 * bit-exact lockstep test against its Python reference is tests/test_selection_table.py's. */
#ifndef AZSERVE_SELECT_H
#define AZSERVE_SELECT_H

#include "tree.h"

struct Selection {
    const char *name; /* MCTSConfig.algorithm's value */
    /* One leaf at a time: the tree runs width 1 and no virtual loss, whatever the knobs say. */
    int sequential;
    /* One round: up to t->width new leaves encoded into `out` (obs_size bytes each), leaves
     * pending in t->leaves / t->paths; 0 when the budget is spent; -1 with an exception. */
    int (*descend)(Tree *t, unsigned char *out);
};

extern const Selection SELECT_PUCT, SELECT_GUMBEL;

/* The table, NULL-terminated. */
extern const Selection *const SELECTIONS[];

/* The entry named `name`, or NULL. */
const Selection *find_selection(const char *name);

static inline int descend(Tree *t, unsigned char *out) { return t->sel->descend(t, out); }

/* Gumbel's root, for the Tree methods gumbel_start and gumbel_result (gumbel.c). */
PyObject *gumbel_start(Tree *t, PyObject *args);
PyObject *gumbel_result(Tree *t, PyObject *args);

#endif
