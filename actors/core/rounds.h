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

/* A terminal node reached (or, with the solver, a proven one): its exact value backed up at
 * once, one simulation done. */
static inline void reach_terminal(Tree *t, Node *child, Step *path, int len, double vl) {
    child->visits += 1;
    child->value_sum += child->tv;
    if (t->solver) solve_backup(path, len, child->tv, vl);
    else backup(path, len, child->tv, vl);
    t->done++;
}

/* With the solver, a proven node: met as a terminal one, never descended below. */
static inline int exact_for(const Tree *t, const Node *n) {
    return n->has_tv || (t->solver && n->plies >= 0);
}

/* With the solver, whether the search is over (nodes.search_over): the root is proven, and not
 * a win in more than one ply with a move left unproven (a shorter win may still be found). */
static inline int root_solved(const Tree *t) {
    const Node *r = t->root;
    if (!t->solver || r->plies < 0) return 0;
    if (r->tv < SOLVED_WIN || r->plies <= 1) return 1;
    for (int j = 0; j < r->k; j++)
        if (!r->e[j].child || r->e[j].child->plies < 0) return 0;
    return 1;
}

/* A new non-terminal leaf: pending until its evaluation comes back. */
static inline void add_leaf(Tree *t, Node *child, int len) {
    t->leaves[t->nbatch] = child;
    t->pathlen[t->nbatch] = len;
    t->nbatch++;
}

#endif
