/* fuzz_internal.h — what the harnesses that look inside the allocator
 * (fuzz_ops, fuzz_streams) ask of its state, beside fuzz.h's checks. */
#ifndef GA_FUZZ_INTERNAL_H
#define GA_FUZZ_INTERNAL_H

#include "fuzz.h"
#include "internal.h"

/* Whether the live allocation at p is asleep (its block must be in the map). */
static inline int fz_asleep(ga_allocator_t *a, const void *p) {
  const ga_block *b = ga_blockmap_get(&a->pol.map, (uintptr_t)p);
  FZ_CHECK(b != NULL, "live allocation %p is not in the block map", p);
  return b->asleep;
}

/* How many of the granules under [p, p + size) of a live allocation are
 * mapped (0 for a native segment, which has no granules to count). */
static inline size_t fz_mapped_granules(ga_allocator_t *a, const void *p, size_t size) {
  const ga_block *b = ga_blockmap_get(&a->pol.map, (uintptr_t)p);
  const ga_segment *seg = b->seg;
  if (!seg->expandable) return 0;
  size_t g = a->space.gran, n = 0;
  for (size_t i = (b->ptr - seg->base) / g; i < (b->ptr - seg->base + size + g - 1) / g; i++)
    n += i < seg->ngranules && seg->granules[i].handle != NULL;
  return n;
}

#endif /* GA_FUZZ_INTERNAL_H */
