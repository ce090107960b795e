/* Little-endian reads and writes of the state blobs' fields (memcpy: no alignment assumed),
 * shared by the game files. */
#ifndef AZSERVE_BLOB_H
#define AZSERVE_BLOB_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "games.h"

static inline uint64_t get_u64(const unsigned char *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}
static inline void put_u64(unsigned char *p, uint64_t v) { memcpy(p, &v, 8); }
static inline int32_t get_i32(const unsigned char *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}
static inline void put_i32(unsigned char *p, int32_t v) { memcpy(p, &v, 4); }
static inline int get_u16(const unsigned char *p) { return p[0] | p[1] << 8; }
static inline void put_u16(unsigned char *p, int v) {
    p[0] = (unsigned char)(v & 0xff);
    p[1] = (unsigned char)(v >> 8);
}

/* make() of a game with no parameters: its fixed sizes. */
static inline void fixed_rules(GameRules *r, int num_actions, int obs_size, int blob_size,
                               int state_size, int max_plies) {
    snprintf(r->label, sizeof r->label, "%s", r->def->name);
    r->num_actions = num_actions;
    r->obs_size = obs_size;
    r->blob_size = blob_size;
    r->state_size = state_size;
    r->max_plies = max_plies;
    r->history_item = 0;
    r->hash_at = -1;
    r->data = NULL;
}

#endif
