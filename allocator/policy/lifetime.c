/* lifetime.c — the policy layer as a whole: its set-up for a new allocator
 * (limits, page size, the block map, the segment layer below) and its
 * teardown (pending events, host copies of sleeping memory, private pools,
 * then everything the segment layer holds).
 */
#include "policy.h"

int ga_policy_init_locked(ga_allocator_t *a, size_t total) {
  GA_ASSERT_LOCKED(a);
  ga_policy *p = &a->pol;
  const ga_config *c = &a->cfg;
  a->dev->shareable = c->shareable_handles; /* handles created from now on can be exported */
  size_t page = c->expandable_page_size ? c->expandable_page_size : c->large_segment_size;
  /* No handle can be larger than the device: a larger page is the device's
   * memory (rounded up to granules below), so that every allocation can be
   * served and a segment's reservation, with the table of its granules,
   * stays about 1.125 x the device. */
  if (total && page > total) page = total;
  /* The segment layer works with the allocator's lock, device, statistics,
   * history, block map (a record it deletes leaves the map) and settings. */
  a->space = (ga_space){.mu = &a->mu,
                        .dev = a->dev,
                        .stats = &a->stats,
                        .history = &a->history,
                        .map = &p->map,
                        .cfg = &a->cfg};
  int rc = ga_space_init_locked(&a->space, total, page);
  if (rc) return rc;
  if ((rc = ga_blockmap_init(&p->map))) return rc;
  for (int size_class = 0; size_class < 2; size_class++) ga_free_tree_init(&p->trees[size_class], &a->space);
  p->large_page = (page + a->space.gran - 1) / a->space.gran * a->space.gran;
  p->fit_walks = (uint8_t)(c->expandable_segments && (c->expandable_pytorch || c->expandable_move_when_full));
  p->fit_weighs =
      (uint8_t)(c->expandable_segments && !c->expandable_pytorch && p->large_page == a->space.gran);
  p->device_total = total;
  p->budget_max = SIZE_MAX;
  if (c->max_reserved) p->budget_max = c->max_reserved;
  if (c->headroom) {
    size_t left = total > c->headroom ? total - c->headroom : 0;
    if (left < p->budget_max) p->budget_max = left;
  }
  ga_policy_set_fraction_locked(a, c->memory_fraction);
  a->stats.max_split_size = c->max_split_size == SIZE_MAX ? -1 : (int64_t)c->max_split_size;
  return 0;
}

void ga_policy_set_fraction_locked(ga_allocator_t *a, double fraction) {
  GA_ASSERT_LOCKED(a);
  ga_policy *p = &a->pol;
  p->fraction = fraction;
  p->fraction_max = fraction < 1.0 ? (size_t)(fraction * (double)p->device_total) : SIZE_MAX;
  p->allowed_max = p->budget_max < p->fraction_max ? p->budget_max : p->fraction_max;
}

void ga_policy_teardown_locked(ga_allocator_t *a) {
  GA_ASSERT_LOCKED(a);
  (void)ga_stream_sync_all_locked(a);
  ga_ipc_teardown_locked(a);
  ga_stream_teardown_locked(a);
  ga_sleep_teardown_locked(a);
  ga_private_teardown_locked(a);
  ga_space_teardown_locked(&a->space);
  ga_blockmap_teardown(&a->pol.map);
}
