/* blockmap.c — address -> record, an open-addressing hash table.
 *
 * Linear probing with backward-shift deletion (no tombstones), load factor at
 * most 1/2, so a free finds its block in O(1) without scanning segments.
 * Keys are block addresses (never 0).
 */
#include <stdlib.h>

#include "blockmap.h"

#include "errors.h"
#include "host.h"

/* Fibonacci hashing: the top bits of the key times 2^64 / phi (block
 * addresses are multiples of 512; the product spreads them). */
static size_t slot_of(const ga_blockmap *m, uintptr_t key) {
  return (size_t)(((uint64_t)key * 0x9e3779b97f4a7c15ULL) >> m->shift);
}

static int grow(ga_blockmap *m, size_t cap) {
  uintptr_t *keys = ga_host_calloc(cap, sizeof *keys);
  void **vals = ga_host_calloc(cap, sizeof *vals);
  if (!keys || !vals) {
    free(keys);
    free(vals);
    return GA_DEV_ENOMEM;
  }
  ga_blockmap n = {keys, vals, cap, 0, (unsigned)__builtin_clzll((unsigned long long)cap) + 1};
  for (size_t i = 0; i < m->cap; i++) {
    if (!m->keys[i]) continue;
    size_t slot = slot_of(&n, m->keys[i]);
    while (n.keys[slot]) slot = (slot + 1) & (cap - 1);
    n.keys[slot] = m->keys[i];
    n.vals[slot] = m->vals[i];
    n.count++;
  }
  free(m->keys);
  free(m->vals);
  *m = n;
  return 0;
}

int ga_blockmap_init(ga_blockmap *m) {
  *m = (ga_blockmap){0};
  return grow(m, 1024);
}

void ga_blockmap_teardown(ga_blockmap *m) {
  free(m->keys);
  free(m->vals);
  *m = (ga_blockmap){0};
}

int ga_blockmap_reserve(ga_blockmap *m) { return (m->count + 1) * 2 > m->cap ? grow(m, m->cap * 2) : 0; }

int ga_blockmap_put(ga_blockmap *m, uintptr_t key, void *val) {
  int rc = ga_blockmap_reserve(m);
  if (rc) return rc;
  size_t slot = slot_of(m, key);
  while (m->keys[slot]) slot = (slot + 1) & (m->cap - 1);
  m->keys[slot] = key;
  m->vals[slot] = val;
  m->count++;
  return 0;
}

long ga_blockmap_find(const ga_blockmap *m, uintptr_t ptr) {
  if (!ptr) return -1;
  for (size_t slot = slot_of(m, ptr); m->keys[slot]; slot = (slot + 1) & (m->cap - 1))
    if (m->keys[slot] == ptr) return (long)slot;
  return -1;
}

void *ga_blockmap_get(const ga_blockmap *m, uintptr_t ptr) {
  long slot = ga_blockmap_find(m, ptr);
  return slot < 0 ? NULL : m->vals[slot];
}

void *ga_blockmap_take(ga_blockmap *m, uintptr_t ptr) {
  long found = ga_blockmap_find(m, ptr);
  return found < 0 ? NULL : ga_blockmap_take_at(m, found);
}

void *ga_blockmap_take_at(ga_blockmap *m, long found) {
  size_t hole = (size_t)found, mask = m->cap - 1;
  void *b = m->vals[hole];
  /* Backward shift: move later entries of the cluster into the hole when
   * their home slot does not lie cyclically in (hole, j]. */
  for (size_t j = (hole + 1) & mask; m->keys[j]; j = (j + 1) & mask) {
    size_t home = slot_of(m, m->keys[j]);
    if (((j - home) & mask) >= ((j - hole) & mask)) {
      m->keys[hole] = m->keys[j];
      m->vals[hole] = m->vals[j];
      hole = j;
    }
  }
  m->keys[hole] = 0;
  m->vals[hole] = NULL;
  m->count--;
  return b;
}
