/* lifetime.c — the policy layer as a whole: its set-up for a new allocator
 * (limits, page size, the block map, the segment layer below) and its
 * teardown (pending events, host copies of sleeping memory, private pools,
 * then everything the segment layer holds).
 */
#include "policy.h"

int ga_policy_init_locked(ga_allocator_t *a, size_t total) {
  ga_policy *p = &a->pol;
  const ga_config *c = &a->cfg;
  size_t page = c->expandable_page_size ? c->expandable_page_size : c->large_segment_size;
  /* No handle can be larger than the device: a larger page is the device's
   * memory (rounded up to granules below), so that every allocation can be
   * served and a segment's reservation, with the table of its granules,
   * stays about 1.125 x the device. */
  if (total && page > total) page = total;
  int rc = ga_space_init_locked(a, total, page);
  if (rc) return rc;
  if ((rc = ga_blockmap_init(&p->map))) return rc;
  p->large_page = (page + a->space.gran - 1) / a->space.gran * a->space.gran;
  p->device_total = total;
  p->allowed_max = SIZE_MAX;
  p->fraction = 1.0;
  if (c->memory_fraction < 1.0) {
    p->fraction = c->memory_fraction;
    p->allowed_max = (size_t)(c->memory_fraction * (double)total);
  }
  a->stats.max_split_size = c->max_split_size == SIZE_MAX ? -1 : (int64_t)c->max_split_size;
  return 0;
}

void ga_policy_teardown_locked(ga_allocator_t *a) {
  (void)ga_stream_sync_all_locked(a);
  ga_stream_teardown_locked(a);
  ga_sleep_teardown_locked(a);
  ga_private_teardown_locked(a);
  ga_space_teardown_locked(a);
  ga_blockmap_destroy(&a->pol.map);
}
