/* What a searched tree reports to an engine (report.c): the root's edges and the principal
 * variations, for the Tree methods root_edges and pv (actors.compiled_mcts: Search.report). */
#ifndef AZSERVE_REPORT_H
#define AZSERVE_REPORT_H

#include "tree.h"

/* root_edges(actions int64 [A], visits int64 [A], values float64 [A], priors float32 [A])
 * -> (k, root visits, root value): the first k entries of each buffer filled. */
PyObject *root_edges(Tree *t, PyObject *args);
/* pv(edge, limit) -> uint16 bytes: the line from the root through its edge `edge` (-1: the
 * most visited), then the most visited child at each node, at most `limit` moves. */
PyObject *principal_variation(Tree *t, PyObject *args);

#endif
