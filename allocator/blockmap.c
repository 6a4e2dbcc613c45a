/* blockmap.c — address -> record, an open-addressing hash table.
 *
 * Linear probing with backward-shift deletion (no tombstones), load factor at
 * most 1/2, so a free finds its block in O(1) without scanning segments.
 * Keys are block addresses (never 0). A key and its value share a slot, so a
 * lookup reads one cache line of the table, not one in each of two arrays;
 * the table comes from ga_host_table (huge pages once it is large).
 */
#include <stdlib.h>

#include "blockmap.h"

#include "errors.h"
#include "host.h"

static int grow(ga_blockmap *m, size_t cap) {
  ga_blockmap_slot *slots = ga_host_table(cap * sizeof *slots);
  if (!slots) return GA_DEV_ENOMEM;
  ga_blockmap n = {slots, cap, 0, (unsigned)__builtin_clzll((unsigned long long)cap) + 1};
  for (size_t i = 0; i < m->cap; i++) {
    if (!m->slots[i].key) continue;
    size_t slot = ga_blockmap_home(&n, m->slots[i].key);
    while (n.slots[slot].key) slot = (slot + 1) & (cap - 1);
    n.slots[slot] = m->slots[i];
    n.count++;
  }
  ga_host_table_free(m->slots, m->cap * sizeof *m->slots);
  *m = n;
  return 0;
}

int ga_blockmap_init(ga_blockmap *m) {
  *m = (ga_blockmap){0};
  return grow(m, 1024);
}

void ga_blockmap_teardown(ga_blockmap *m) {
  ga_host_table_free(m->slots, m->cap * sizeof *m->slots);
  *m = (ga_blockmap){0};
}

int ga_blockmap_reserve(ga_blockmap *m) { return (m->count + 1) * 2 > m->cap ? grow(m, m->cap * 2) : 0; }

int ga_blockmap_put(ga_blockmap *m, uintptr_t key, void *val) {
  int rc = ga_blockmap_reserve(m);
  if (rc) return rc;
  size_t slot = ga_blockmap_home(m, key);
  while (m->slots[slot].key) slot = (slot + 1) & (m->cap - 1);
  m->slots[slot] = (ga_blockmap_slot){key, val};
  m->count++;
  return 0;
}

ga_blockmap_slot *ga_blockmap_find(const ga_blockmap *m, uintptr_t ptr) {
  if (!ptr) return NULL;
  for (ga_blockmap_slot *s = m->slots + ga_blockmap_home(m, ptr); s->key;) {
    if (s->key == ptr) return s;
    if (++s == m->slots + m->cap) s = m->slots; /* probing wraps around */
  }
  return NULL;
}

void *ga_blockmap_get(const ga_blockmap *m, uintptr_t ptr) {
  ga_blockmap_slot *s = ga_blockmap_find(m, ptr);
  return s ? s->val : NULL;
}

void *ga_blockmap_take(ga_blockmap *m, uintptr_t ptr) {
  ga_blockmap_slot *s = ga_blockmap_find(m, ptr);
  return s ? ga_blockmap_take_at(m, s) : NULL;
}

void *ga_blockmap_take_at(ga_blockmap *m, ga_blockmap_slot *found) {
  size_t hole = (size_t)(found - m->slots), mask = m->cap - 1;
  void *b = m->slots[hole].val;
  /* Backward shift: move later entries of the cluster into the hole when
   * their home slot does not lie cyclically in (hole, j]. */
  for (size_t j = (hole + 1) & mask; m->slots[j].key; j = (j + 1) & mask) {
    size_t home = ga_blockmap_home(m, m->slots[j].key);
    if (((j - home) & mask) >= ((j - hole) & mask)) {
      m->slots[hole] = m->slots[j];
      hole = j;
    }
  }
  m->slots[hole] = (ga_blockmap_slot){0, NULL};
  m->count--;
  return b;
}
