/* Many trees at once: step_many and Cache.step answer one pending leaf per tree from a reply's
 * rows (actors/searchpool.py's rounds), and with a cache, each tree's next leaves while they
 * hit. Each tree is stepped exactly as its own step() would. */
#include "cache.h"
#include "glue.h"
#include "select.h"

#include <string.h>

/* Record the exception raised for tree i into *errors (a list of (i, exception)), clear it. */
static int keep_error(PyObject **errors, Py_ssize_t i) {
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    if (tb) PyException_SetTraceback(value, tb);
    Py_XDECREF(type);
    Py_XDECREF(tb);
    if (!*errors && !(*errors = PyList_New(0))) {
        Py_XDECREF(value);
        return -1;
    }
    PyObject *item = Py_BuildValue("(nN)", i, value);
    if (!item || PyList_Append(*errors, item) < 0) {
        Py_XDECREF(item);
        return -1;
    }
    Py_DECREF(item);
    return 0;
}

/* While tree t's one pending leaf (encoded at buf) is in the cache, feed it the cached answer,
 * as step() would, and descend to the next: 1 when the leaf missed (waits for the server;
 * counted as a miss), 0 when the search is done, -1 on error. */
static int feed_hits(Tree *t, Cache *c, long long version, int kind, unsigned char *buf,
                     long long *hits) {
    for (;;) {
        CEntry *e = cache_get(c, version, kind, buf, t->obs_size);
        if (!e) return 1;
        int item = e->is_double ? 8 : 4;
        if (e->rlen != (Py_ssize_t)t->num_actions * item) {
            PyErr_Format(PyExc_ValueError, "cached logits of %zd values, expected %d",
                         e->rlen / item, t->num_actions);
            return -1;
        }
        *hits += 1;
        expand_row(t, t->leaves[0], (const char *)e->data + e->klen, item, e->is_double, e->value);
        backup(t->paths, t->pathlen[0], e->value, t->vl);
        t->fed += 1;
        t->done += 1;
        t->nbatch = 0;
        int more = descend(t, buf);
        if (more <= 0) return more;
    }
}

/* The checks shared by step_many and the cache's calls: trees[i] is a Tree waiting on one leaf
 * (NULL with the exception set otherwise). */
static Tree *pending_tree(PyObject *trees, Py_ssize_t i) {
    PyObject *o = PyList_GET_ITEM(trees, i);
    if (!PyObject_TypeCheck(o, &TreeType)) {
        PyErr_Format(PyExc_TypeError, "trees[%zd] is not a Tree", i);
        return NULL;
    }
    Tree *t = (Tree *)o;
    if (t->nbatch != 1) {
        PyErr_Format(PyExc_RuntimeError, "step needs exactly one pending leaf");
        return NULL;
    }
    return t;
}

static int check_lists(PyObject *trees, PyObject *outs, Py_ssize_t *n) {
    if (!PyList_Check(trees) || !PyList_Check(outs)) {
        PyErr_Format(PyExc_TypeError, "trees and outs must be lists");
        return -1;
    }
    *n = PyList_GET_SIZE(trees);
    if (PyList_GET_SIZE(outs) != *n) {
        PyErr_Format(PyExc_ValueError, "%zd trees but %zd outs", *n, PyList_GET_SIZE(outs));
        return -1;
    }
    return 0;
}

/* Tree i: its leaf's answer (row i, when logits are given), then with a cache its next leaves
 * fed from the cache while they hit; its next leaf into outs[i]. */
static int step_one(Tree *t, const char *lrow, Py_ssize_t ls1, int ld, double v, PyObject *out,
                    Cache *c, long long version, int kind, long long *hits) {
    if (lrow) {
        expand_row(t, t->leaves[0], lrow, ls1, ld, v);
        backup(t->paths, t->pathlen[0], v, t->vl);
        t->fed += 1;
        t->done += 1;
        t->nbatch = 0;
    }
    Py_buffer ov;
    if (write_buffer(out, &ov, (Py_ssize_t)t->obs_size * t->width) < 0) return -1;
    unsigned char *buf = (unsigned char *)ov.buf;
    int more = lrow ? descend(t, buf) : 1;
    if (more > 0 && c) more = feed_hits(t, c, version, kind, buf, hits);
    PyBuffer_Release(&ov);
    return more;
}

/* The loop of step_many and Cache.feed: flags (1 where tree i waits for another leaf) and
 * errors (None, or [(i, exception)]), and with a cache the number of leaves it answered. */
static PyObject *step_trees(PyObject *trees, PyObject *logits, PyObject *values, PyObject *outs,
                            Cache *c, long long version, int kind) {
    Py_ssize_t n;
    if (check_lists(trees, outs, &n) < 0) return NULL;
    Py_buffer lv, vv;
    int ld = 0, vd = 0, have = logits != NULL;
    PyObject *flags = NULL, *errors = NULL;
    long long hits = 0;
    if (have) {
        if (PyObject_GetBuffer(logits, &lv, PyBUF_RECORDS_RO) < 0) return NULL;
        if (PyObject_GetBuffer(values, &vv, PyBUF_RECORDS_RO) < 0) {
            PyBuffer_Release(&lv);
            return NULL;
        }
        ld = float_kind(&lv);
        vd = float_kind(&vv);
        if (lv.ndim != 2 || vv.ndim != 1 || ld < 0 || vd < 0 || lv.shape[0] < n ||
            vv.shape[0] < n) {
            PyErr_Format(PyExc_ValueError,
                         "step_many: logits must be [n, A] and values [n], float32 or float64");
            goto done;
        }
    }
    if (!(flags = PyBytes_FromStringAndSize(NULL, n))) goto done;
    char *f = PyBytes_AS_STRING(flags);
    for (Py_ssize_t i = 0; i < n; i++) {
        f[i] = 0;
        int more = -1;
        Tree *t = pending_tree(trees, i);
        if (t && have && lv.shape[1] != t->num_actions) {
            PyErr_Format(PyExc_ValueError, "evaluate returned logits of shape (%zd,), "
                         "expected (%d,)", lv.shape[1], t->num_actions);
            t = NULL;
        }
        if (t) {
            const char *lrow = NULL;
            double v = 0.0;
            if (have) {
                const char *vat = (const char *)vv.buf + vv.strides[0] * i;
                v = vd ? *(const double *)vat : (double)*(const float *)vat;
                lrow = (const char *)lv.buf + lv.strides[0] * i;
            }
            more = step_one(t, lrow, have ? lv.strides[1] : 0, ld, v, PyList_GET_ITEM(outs, i),
                            c, version, kind, &hits);
        }
        if (more < 0) {
            if (keep_error(&errors, i) < 0) {
                Py_CLEAR(flags);
                goto done;
            }
        } else {
            f[i] = more > 0;
        }
    }
done:
    if (have) {
        PyBuffer_Release(&lv);
        PyBuffer_Release(&vv);
    }
    if (!flags) {
        Py_XDECREF(errors);
        return NULL;
    }
    PyObject *r = c ? Py_BuildValue("(NOL)", flags, errors ? errors : Py_None, hits)
                    : Py_BuildValue("(NO)", flags, errors ? errors : Py_None);
    Py_XDECREF(errors);
    return r;
}

/* step_many(trees, logits, values, outs) -> (flags, errors): tree i's one pending leaf takes
 * row i of logits ([n', A] float32 or float64, n' >= n) and values ([n'] float32 or float64),
 * exactly as trees[i].step(logits[i], float(values[i]), outs[i]) does, and its next leaf goes
 * into outs[i]. flags: bytes, 1 where the tree waits for another leaf, 0 where its search is
 * done or it failed; errors: None, or [(i, exception)] for the trees that failed (the others
 * are stepped all the same). */
PyObject *step_many(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4) return PyErr_Format(PyExc_TypeError, "step_many(trees, logits, values, outs)");
    return step_trees(args[0], args[1], args[2], args[3], NULL, 0, 0);
}

/* Cache.step(trees, logits, values, outs, version, kind) -> (flags, errors, hits): step_many,
 * then each tree's next leaves answered from this cache while they hit (each as step() with
 * the cached row and value); a flag of 1 means the tree waits on a leaf that missed (counted
 * as a miss). logits=None: no reply to take, only the trees' pending leaves (in outs) looked
 * up, e.g. the first leaf of a search. hits: the leaves answered from the cache. */
PyObject *Cache_step(Cache *c, PyObject *const *args, Py_ssize_t nargs) {
    if (cache_ready(c) < 0) return NULL;
    long long version;
    int kind;
    if (nargs != 6)
        return PyErr_Format(PyExc_TypeError,
                            "step(trees, logits, values, outs, version, kind)");
    if (parse_key(args + 4, &version, &kind) < 0) return NULL;
    PyObject *logits = args[1] == Py_None ? NULL : args[1];
    return step_trees(args[0], logits, args[2], args[3], c, version, kind);
}

