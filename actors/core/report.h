/* What a searched tree reports to an engine (report.c): the root's edges and the principal
 * variations, for the Tree methods root_edges and pv (actors.compiled_mcts: Search.report). */
#ifndef AZSERVE_REPORT_H
#define AZSERVE_REPORT_H

#include "tree.h"

/* root_edges(actions int64 [A], visits int64 [A], values float64 [A], priors float32 [A])
 * -> (k, root visits, root value): the first k entries of each buffer filled. */
PyObject *root_edges(Tree *t, PyObject *args);
/* root_proof(values float64 [A], plies int64 [A], by_action=False) -> (k, root value or None,
 * root plies): the solver's proofs at the root (nodes.root_proof): each edge's exact value for
 * the root's side to move (NaN where unproven) and its plies to the end, the move included (-1
 * where unproven), in the first k entries of each buffer, or with by_action at each edge's
 * action (NaN and -1 at every other). */
PyObject *root_proof(Tree *t, PyObject *args);
/* pv(edge, limit) -> uint16 bytes: the line from the root through its edge `edge` (-1: the
 * most visited), then the most visited child at each node, at most `limit` moves. */
PyObject *principal_variation(Tree *t, PyObject *args);

#endif
