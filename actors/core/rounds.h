/* The steps of a descent that every selection rule takes the same way: walking an edge,
 * meeting a terminal node, leaving a new leaf for the network. */
#ifndef AZSERVE_ROUNDS_H
#define AZSERVE_ROUNDS_H

#include "tree.h"

/* Walk edge i of `node`: counted in flight, pushed onto the path. */
static inline Edge *walk(Node *node, int i, Step *path, int *len) {
    Edge *e = &node->e[i];
    e->n += 1;
    node->visits += 1;
    path[*len].node = node;
    path[*len].i = i;
    *len += 1;
    return e;
}

/* A terminal node reached: its value backed up at once, one simulation done. */
static inline void reach_terminal(Tree *t, Node *child, Step *path, int len, double vl) {
    child->visits += 1;
    child->value_sum += child->tv;
    backup(path, len, child->tv, vl);
    t->done++;
}

/* A new non-terminal leaf: pending until its evaluation comes back. */
static inline void add_leaf(Tree *t, Node *child, int len) {
    t->leaves[t->nbatch] = child;
    t->pathlen[t->nbatch] = len;
    t->nbatch++;
}

#endif
