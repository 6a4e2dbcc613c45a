/* keep.h — the one test on the hot path for the free kept back (block.c):
 * every entry point but ga_malloc and ga_free completes it before it looks
 * at the blocks, the trees or the statistics. Apart from policy.h so that
 * block.c, which defines the slow half, does not include its own caller.
 */
#ifndef GA_KEEP_H
#define GA_KEEP_H

#include "policy.h"

/* Completes the free kept back, if any. */
static inline void ga_block_keep_flush_locked(ga_allocator_t *a) {
  GA_ASSERT_LOCKED(a);
  if (a->pol.kept) ga_block_keep_flush_slow_locked(a);
}

#endif
