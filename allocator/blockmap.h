/* blockmap.h — address -> record, an open-addressing hash table (the block
 * map: pointer handed out -> its block). A leaf: keys are non-zero addresses,
 * values opaque.
 */
#ifndef GA_BLOCKMAP_H
#define GA_BLOCKMAP_H

#include <stddef.h>
#include <stdint.h>

typedef struct ga_blockmap_slot {
  uintptr_t key; /* 0 = empty */
  void *val;
} ga_blockmap_slot;

typedef struct ga_blockmap {
  ga_blockmap_slot *slots;
  size_t cap, count; /* cap is a power of two */
  unsigned shift;    /* 64 - log2(cap) */
} ga_blockmap;

/* Fibonacci hashing: the top bits of the key times 2^64 / phi (block
 * addresses are multiples of 512; the product spreads them). */
static inline size_t ga_blockmap_home(const ga_blockmap *m, uintptr_t key) {
  return (size_t)(((uint64_t)key * 0x9e3779b97f4a7c15ULL) >> m->shift);
}

/* Starts loading the slot where key's entry would go, ahead of a put or a
 * lookup: at 10^6 entries the table is tens of MiB and a slot is a miss. */
static inline void ga_blockmap_prefetch(const ga_blockmap *m, uintptr_t key) {
  __builtin_prefetch(m->slots + ga_blockmap_home(m, key), 1);
}

/* 0, or GA_DEV_ENOMEM (host memory) for init, put and reserve. */
int ga_blockmap_init(ga_blockmap *m);
void ga_blockmap_teardown(ga_blockmap *m);
/* Room for one more entry, so that the next put cannot fail. */
int ga_blockmap_reserve(ga_blockmap *m);
/* pre: key != 0 and not in the map. */
int ga_blockmap_put(ga_blockmap *m, uintptr_t key, void *val);
void *ga_blockmap_get(const ga_blockmap *m, uintptr_t key);
/* The slot of key, or NULL: valid until the map next changes. */
ga_blockmap_slot *ga_blockmap_find(const ga_blockmap *m, uintptr_t key);
/* Removes the entry at a slot find gave; returns its value. */
void *ga_blockmap_take_at(ga_blockmap *m, ga_blockmap_slot *slot);
/* Removes the entry; returns its value, or NULL when there was none. */
void *ga_blockmap_take(ga_blockmap *m, uintptr_t key);

#endif /* GA_BLOCKMAP_H */
