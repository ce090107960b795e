/* PUCT selection (actors/mcts.py's MCTS._simulate and _select): the child maximising
 * Q + c_puct * P * sqrt(N) / (1 + n), unvisited children at the first-play urgency
 * (the parent's mean value less fpu_reduction * sqrt(visited prior mass), root_fpu_reduction at
 * the root); with width > 1, several leaves per round under virtual loss. With the solver a
 * proven node is met as a terminal one and a proven root ends the search (a win in more than
 * one ply goes on among its unproven moves, for a shorter win). */
#include "rounds.h"
#include "select.h"

#include <math.h>

/* One round of descents: up to `width` new leaves (encoded into `out`), or none when the
 * simulation budget is spent. Terminal leaves are backed up at once, as in the Python loop; a
 * descent that meets a leaf already in flight is undone and ends the round. */
static int puct_descend(Tree *t, unsigned char *out) {
    const double c_puct = t->c_puct, fpu_reduction = t->fpu_reduction, vl = t->vl;
    t->nbatch = 0;
    while (t->done < t->count && !root_solved(t)) {
        t->nbatch = 0;
        while (t->done + t->nbatch < t->count && t->nbatch < t->width && !root_solved(t)) {
            Node *node = t->root, *child;
            double reduction = t->root_fpu_reduction;
            Step *path = t->paths + (size_t)t->nbatch * t->maxd;
            int len = 0, created = 0;
            for (;;) {
                long visits = node->visits;
                double sqrt_n = c_puct * sqrt((double)visits);
                double fpu = node->value_sum / (double)visits - reduction * sqrt(node->visited_prior);
                reduction = fpu_reduction;
                int i = 0;
                double best = -INFINITY;
                /* a won root searched on for a shorter win: its unproven moves only */
                const int open_only = t->solver && node == t->root && node->plies >= 0;
                for (int j = 0; j < node->k; j++) {
                    const Edge *e = &node->e[j];
                    if (open_only && e->child && e->child->plies >= 0) continue;
                    long nj = e->n;
                    double score = nj ? e->w / (double)nj + e->p * sqrt_n / (double)(1 + nj)
                                      : fpu + e->p * sqrt_n;
                    if (score > best) {
                        i = j;
                        best = score;
                    }
                }
                if (!node->e[i].n) node->visited_prior += node->e[i].p;
                Edge *e = walk(node, i, path, &len);
                if (vl != 0.0) e->w -= vl;
                child = e->child;
                if (!child) {
                    child = e->child = new_child(t, node, i);
                    if (!child) {
                        PyErr_NoMemory();
                        return -1;
                    }
                    created = 1;
                    if (!child->has_tv) add_leaf(t, child, len);
                    break;
                }
                if (!child->expanded || exact_for(t, child)) break;
                node = child;
            }
            if (exact_for(t, child)) {
                reach_terminal(t, child, path, len, vl);
            } else if (!created) {
                undo(path, len, vl);
                break;
            }
        }
        if (t->nbatch) {
            for (int b = 0; b < t->nbatch; b++)
                encode(t, t->leaves[b], out + (size_t)b * t->obs_size);
            return t->nbatch;
        }
    }
    return 0;
}

const Selection SELECT_PUCT = {
    .name = "puct",
    .sequential = 0,
    .descend = puct_descend,
};
