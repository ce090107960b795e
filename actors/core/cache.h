/* The evaluation cache (actors/evalcache.py's compiled store): an LRU table of network
 * answers keyed by (weights version, observation kind, observation bytes), bounded in bytes.
 * The stepper (stepper.c) feeds trees from it between server replies. */
#ifndef AZSERVE_CACHE_H
#define AZSERVE_CACHE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

/* One cached evaluation: the key (weights version, the observation's kind, i.e. its shape and
 * dtype as numbered by the Python side, and its bytes) and the answer (one row of logits, as
 * float32 or float64 bytes, and the value as the double the search reads). Entries sit in a
 * chained hash table and on a doubly linked list from least to most recently used. */
typedef struct CEntry {
    struct CEntry *hnext, *prev, *next;
    uint64_t hash;
    long long version;
    int kind, is_double;
    double value;
    Py_ssize_t klen, rlen;
    unsigned char data[]; /* the key's bytes, then the row's */
} CEntry;

/* Bytes an entry costs besides its key and row: the header, its share of the bucket array
 * (at most two pointers: the table doubles when it is full) and the allocator's rounding. */
#define CACHE_ENTRY_OVERHEAD ((Py_ssize_t)(sizeof(CEntry) + 2 * sizeof(CEntry *) + 8))

typedef struct {
    PyObject_HEAD
    Py_ssize_t max_bytes, bytes, entries;
    long long hits, misses, evictions;
    CEntry **buckets;
    size_t mask; /* buckets - 1 (a power of two) */
    CEntry lru;  /* sentinel: lru.next is the least recently used entry, lru.prev the most */
} Cache;

/* The entry of the key, made the most recently used and counted as a hit; or NULL, counted as
 * a miss. */
CEntry *cache_get(Cache *c, long long version, int kind, const unsigned char *key,
                  Py_ssize_t klen);

/* 0, or -1 with RuntimeError when the Cache was made with __new__ and never initialised. */
int cache_ready(Cache *c);

/* (version, kind) from two Python ints. */
int parse_key(PyObject *const *args, long long *version, int *kind);

/* Cache.step (stepper.c). */
PyObject *Cache_step(Cache *c, PyObject *const *args, Py_ssize_t nargs);

#endif
