/* The evaluation cache's table and its Python type (see cache.h). */
#include "cache.h"
#include "glue.h"

#include <string.h>
#include <structmember.h>

static uint64_t key_hash(long long version, int kind, const unsigned char *p, Py_ssize_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ULL ^ ((uint64_t)version * 0xFF51AFD7ED558CCDULL) ^
                 ((uint64_t)(unsigned)kind << 32) ^ (uint64_t)n;
    while (n > 0) { /* MurmurHash3's block mix, 8 bytes at a time (the tail zero-padded) */
        uint64_t w = 0;
        memcpy(&w, p, n >= 8 ? 8 : (size_t)n);
        w *= 0x87C37B91114253D5ULL;
        w = (w << 31) | (w >> 33);
        w *= 0x4CF5AD432745937FULL;
        h ^= w;
        h = ((h << 27) | (h >> 37)) * 5 + 0x52DCE729;
        p += 8;
        n -= 8;
    }
    h ^= h >> 33; /* murmur3's finaliser */
    h *= 0xFF51AFD7ED558CCDULL;
    h ^= h >> 33;
    h *= 0xC4CEB9FE1A85EC53ULL;
    return h ^ (h >> 33);
}

static void lru_unlink(CEntry *e) {
    e->prev->next = e->next;
    e->next->prev = e->prev;
}

static void lru_push(Cache *c, CEntry *e) { /* as the most recently used */
    e->prev = c->lru.prev;
    e->next = &c->lru;
    c->lru.prev->next = e;
    c->lru.prev = e;
}

static CEntry *cache_find(Cache *c, uint64_t h, long long version, int kind,
                          const unsigned char *key, Py_ssize_t klen) {
    for (CEntry *e = c->buckets[h & c->mask]; e; e = e->hnext)
        if (e->hash == h && e->version == version && e->kind == kind && e->klen == klen &&
            memcmp(e->data, key, (size_t)klen) == 0)
            return e;
    return NULL;
}

/* The entry of the key, made the most recently used and counted as a hit; or NULL, counted as
 * a miss. */
CEntry *cache_get(Cache *c, long long version, int kind, const unsigned char *key,
                         Py_ssize_t klen) {
    CEntry *e = cache_find(c, key_hash(version, kind, key, klen), version, kind, key, klen);
    if (!e) {
        c->misses++;
        return NULL;
    }
    lru_unlink(e);
    lru_push(c, e);
    c->hits++;
    return e;
}

static void cache_drop(Cache *c, CEntry *e) {
    CEntry **at = &c->buckets[e->hash & c->mask];
    while (*at != e) at = &(*at)->hnext;
    *at = e->hnext;
    lru_unlink(e);
    c->bytes -= e->klen + e->rlen + CACHE_ENTRY_OVERHEAD;
    c->entries--;
    PyMem_Free(e);
}

static int cache_grow(Cache *c) {
    size_t n = (c->mask + 1) * 2;
    CEntry **b = (CEntry **)PyMem_Calloc(n, sizeof(CEntry *));
    if (!b) return -1;
    for (size_t i = 0; i <= c->mask; i++) {
        CEntry *e = c->buckets[i];
        while (e) {
            CEntry *next = e->hnext;
            e->hnext = b[e->hash & (n - 1)];
            b[e->hash & (n - 1)] = e;
            e = next;
        }
    }
    PyMem_Free(c->buckets);
    c->buckets = b;
    c->mask = n - 1;
    return 0;
}

/* Store one answer unless its key is present (the first answer is kept); then the least
 * recently used entries go until the footprint is within max_bytes. An entry larger than the
 * whole bound is not stored. */
static int cache_put(Cache *c, long long version, int kind, const unsigned char *key,
                     Py_ssize_t klen, const char *row, Py_ssize_t rlen, int is_double,
                     double value) {
    Py_ssize_t size = klen + rlen + CACHE_ENTRY_OVERHEAD;
    if (size > c->max_bytes) return 0;
    uint64_t h = key_hash(version, kind, key, klen);
    if (cache_find(c, h, version, kind, key, klen)) return 0;
    if ((size_t)c->entries >= c->mask + 1 && cache_grow(c) < 0) {
        PyErr_NoMemory();
        return -1;
    }
    CEntry *e = (CEntry *)PyMem_Malloc(sizeof(CEntry) + (size_t)(klen + rlen));
    if (!e) {
        PyErr_NoMemory();
        return -1;
    }
    e->hash = h;
    e->version = version;
    e->kind = kind;
    e->is_double = is_double;
    e->value = value;
    e->klen = klen;
    e->rlen = rlen;
    memcpy(e->data, key, (size_t)klen);
    memcpy(e->data + klen, row, (size_t)rlen);
    e->hnext = c->buckets[h & c->mask];
    c->buckets[h & c->mask] = e;
    lru_push(c, e);
    c->entries++;
    c->bytes += size;
    while (c->bytes > c->max_bytes) {
        cache_drop(c, c->lru.next);
        c->evictions++;
    }
    return 0;
}

static void Cache_clear_all(Cache *c) {
    while (c->lru.next != &c->lru) cache_drop(c, c->lru.next);
}

static void Cache_dealloc(Cache *c) {
    if (c->buckets) Cache_clear_all(c);
    PyMem_Free(c->buckets);
    Py_TYPE(c)->tp_free((PyObject *)c);
}

static int Cache_init(Cache *c, PyObject *args, PyObject *kw) {
    static char *names[] = {"max_bytes", NULL};
    Py_ssize_t max_bytes;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "n", names, &max_bytes)) return -1;
    if (max_bytes <= 0) {
        PyErr_Format(PyExc_ValueError, "max_bytes must be > 0, got %zd", max_bytes);
        return -1;
    }
    if (c->buckets) {
        Cache_clear_all(c);
        PyMem_Free(c->buckets);
    }
    c->lru.next = c->lru.prev = &c->lru;
    c->mask = 1023;
    c->buckets = (CEntry **)PyMem_Calloc(c->mask + 1, sizeof(CEntry *));
    if (!c->buckets) {
        PyErr_NoMemory();
        return -1;
    }
    c->max_bytes = max_bytes;
    c->bytes = c->entries = 0;
    c->hits = c->misses = c->evictions = 0;
    return 0;
}

/* A Cache made with __new__ and never initialised has no table. */
int cache_ready(Cache *c) {
    if (c->buckets) return 0;
    PyErr_SetString(PyExc_RuntimeError, "Cache was not initialised: call Cache(max_bytes)");
    return -1;
}

int parse_key(PyObject *const *args, long long *version, int *kind) {
    *version = PyLong_AsLongLong(args[0]);
    if (*version == -1 && PyErr_Occurred()) return -1;
    long k = PyLong_AsLong(args[1]);
    if (k == -1 && PyErr_Occurred()) return -1;
    *kind = (int)k;
    return 0;
}

/* lookup(version, kind, obs) -> None (a miss) or (row bytes, is_double, value) (a hit). */
static PyObject *Cache_lookup(Cache *c, PyObject *const *args, Py_ssize_t nargs) {
    if (cache_ready(c) < 0) return NULL;
    long long version;
    int kind;
    Py_buffer view;
    if (nargs != 3) return PyErr_Format(PyExc_TypeError, "lookup(version, kind, obs)");
    if (parse_key(args, &version, &kind) < 0) return NULL;
    if (PyObject_GetBuffer(args[2], &view, PyBUF_C_CONTIGUOUS) < 0) return NULL;
    CEntry *e = cache_get(c, version, kind, (const unsigned char *)view.buf, view.len);
    PyBuffer_Release(&view);
    if (!e) Py_RETURN_NONE;
    return Py_BuildValue("(y#id)", (const char *)e->data + e->klen, e->rlen, e->is_double,
                         e->value);
}

/* The item type of a float32/float64 buffer (0/1), or -1 with a TypeError naming `what`. */
static int row_kind(const Py_buffer *view, const char *what) {
    int d = float_kind(view);
    if (d < 0) PyErr_Format(PyExc_TypeError, "%s must be float32 or float64", what);
    return d;
}

/* put(version, kind, obs, logits [A], value): one answer (kept if its key is present). */
static PyObject *Cache_put(Cache *c, PyObject *const *args, Py_ssize_t nargs) {
    if (cache_ready(c) < 0) return NULL;
    long long version;
    int kind;
    if (nargs != 5) return PyErr_Format(PyExc_TypeError, "put(version, kind, obs, logits, value)");
    if (parse_key(args, &version, &kind) < 0) return NULL;
    double value = PyFloat_AsDouble(args[4]);
    if (value == -1.0 && PyErr_Occurred()) return NULL;
    Py_buffer ov, lv;
    if (PyObject_GetBuffer(args[2], &ov, PyBUF_C_CONTIGUOUS) < 0) return NULL;
    if (PyObject_GetBuffer(args[3], &lv, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
        PyBuffer_Release(&ov);
        return NULL;
    }
    int d = row_kind(&lv, "logits");
    int r = d < 0 ? -1
                  : cache_put(c, version, kind, (const unsigned char *)ov.buf, ov.len,
                              (const char *)lv.buf, lv.len, d, value);
    PyBuffer_Release(&ov);
    PyBuffer_Release(&lv);
    if (r < 0) return NULL;
    Py_RETURN_NONE;
}

/* put_rows(version, kind, stack [n, ...], logits [n, A], values [n]): a whole reply, row i of
 * logits and values the answer to stack[i] (float32 or float64 each; the value is kept as the
 * double the search reads). */
static PyObject *Cache_put_rows(Cache *c, PyObject *const *args, Py_ssize_t nargs) {
    if (cache_ready(c) < 0) return NULL;
    long long version;
    int kind;
    if (nargs != 5)
        return PyErr_Format(PyExc_TypeError, "put_rows(version, kind, stack, logits, values)");
    if (parse_key(args, &version, &kind) < 0) return NULL;
    Py_buffer sv, lv, vv;
    if (PyObject_GetBuffer(args[2], &sv, PyBUF_C_CONTIGUOUS) < 0) return NULL;
    if (PyObject_GetBuffer(args[3], &lv, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
        PyBuffer_Release(&sv);
        return NULL;
    }
    if (PyObject_GetBuffer(args[4], &vv, PyBUF_RECORDS_RO) < 0) {
        PyBuffer_Release(&sv);
        PyBuffer_Release(&lv);
        return NULL;
    }
    PyObject *r = NULL;
    int ld = row_kind(&lv, "logits"), vd = ld < 0 ? -1 : row_kind(&vv, "values");
    if (vd < 0) goto done;
    if (lv.ndim != 2 || vv.ndim != 1 || vv.shape[0] != lv.shape[0] || sv.ndim < 1 ||
        sv.shape[0] != lv.shape[0]) {
        PyErr_Format(PyExc_ValueError, "put_rows: stack [n, ...], logits [n, A] and values [n] "
                     "must have the same n");
        goto done;
    }
    Py_ssize_t n = lv.shape[0];
    if (n > 0) {
        Py_ssize_t klen = sv.len / n, rlen = lv.len / n;
        for (Py_ssize_t i = 0; i < n; i++) {
            const char *vat = (const char *)vv.buf + vv.strides[0] * i;
            double v = vd ? *(const double *)vat : (double)*(const float *)vat;
            if (cache_put(c, version, kind, (const unsigned char *)sv.buf + klen * i, klen,
                          (const char *)lv.buf + rlen * i, rlen, ld, v) < 0)
                goto done;
        }
    }
    r = Py_None;
    Py_INCREF(r);
done:
    PyBuffer_Release(&sv);
    PyBuffer_Release(&lv);
    PyBuffer_Release(&vv);
    return r;
}

/* entries() -> [(version, kind, key bytes, row bytes, is_double, value)], least recently used
 * first (for tests and inspection). */
static PyObject *Cache_entries(Cache *c, PyObject *unused) {
    if (cache_ready(c) < 0) return NULL;
    PyObject *out = PyList_New(0);
    if (!out) return NULL;
    for (CEntry *e = c->lru.next; e != &c->lru; e = e->next) {
        PyObject *item = Py_BuildValue("(Liy#y#id)", e->version, e->kind, (const char *)e->data,
                                       e->klen, (const char *)e->data + e->klen, e->rlen,
                                       e->is_double, e->value);
        if (!item || PyList_Append(out, item) < 0) {
            Py_XDECREF(item);
            Py_DECREF(out);
            return NULL;
        }
        Py_DECREF(item);
    }
    return out;
}

static Py_ssize_t Cache_len(Cache *c) { return c->entries; }

static PyMethodDef Cache_methods[] = {
    {"step", (PyCFunction)(void (*)(void))Cache_step, METH_FASTCALL,
     "step(trees, logits, values, outs, version, kind) -> (flags, errors, hits)."},
    {"lookup", (PyCFunction)(void (*)(void))Cache_lookup, METH_FASTCALL,
     "lookup(version, kind, obs) -> None or (row bytes, is_double, value)."},
    {"put", (PyCFunction)(void (*)(void))Cache_put, METH_FASTCALL,
     "put(version, kind, obs, logits, value)."},
    {"put_rows", (PyCFunction)(void (*)(void))Cache_put_rows, METH_FASTCALL,
     "put_rows(version, kind, stack, logits, values)."},
    {"entries", (PyCFunction)Cache_entries, METH_NOARGS,
     "entries() -> [(version, kind, key, row, is_double, value)], oldest first."},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef Cache_members[] = {
    {"max_bytes", T_PYSSIZET, offsetof(Cache, max_bytes), READONLY, "The memory bound."},
    {"bytes", T_PYSSIZET, offsetof(Cache, bytes), READONLY, "The entries' footprint."},
    {"hits", T_LONGLONG, offsetof(Cache, hits), READONLY, "Lookups answered."},
    {"misses", T_LONGLONG, offsetof(Cache, misses), READONLY, "Lookups not answered."},
    {"evictions", T_LONGLONG, offsetof(Cache, evictions), READONLY, "Entries dropped."},
    {NULL, 0, 0, 0, NULL},
};

static PySequenceMethods Cache_as_sequence = {.sq_length = (lenfunc)Cache_len};

PyTypeObject CacheType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "actors._mcts_core.Cache",
    .tp_basicsize = sizeof(Cache),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Cache(max_bytes): LRU store of evaluations keyed by (version, kind, obs bytes).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Cache_init,
    .tp_dealloc = (destructor)Cache_dealloc,
    .tp_methods = Cache_methods,
    .tp_members = Cache_members,
    .tp_as_sequence = &Cache_as_sequence,
};

