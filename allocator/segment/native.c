/* native.c — native segments: one device malloc each.
 *
 * A segment is what one device malloc returned. Its blocks tile it; blocks of
 * different segments never merge. Records the segment and reserved-bytes
 * statistics and the segment history entries. Which segment goes back, and
 * when, is the policy's choice.
 */
#include <stdlib.h>

#include "segment.h"

static void account(ga_allocator_t *a, const ga_segment *seg, int sign) {
  ga_stats_t *s = &a->stats;
  ga_pstat_add(s->segment, seg->pool, sign);
  ga_pstat_add(s->reserved_bytes, seg->pool, sign * (int64_t)seg->size);
  if (seg->size >= a->cfg.max_split_size) ga_stat_add(&s->oversize_segments, sign);
  if (sign > 0) {
    a->space.reserved += seg->size;
    s->num_device_alloc++;
  } else {
    a->space.reserved -= seg->size;
    s->num_device_free++;
  }
}

int ga_native_new_locked(ga_allocator_t *a, size_t size, int pool, ga_stream_t stream, ga_block **out) {
  GA_ASSERT_LOCKED(a);
  ga_segment *seg;
  ga_block *b;
  void *ptr = NULL;
  int rc = ga_tiles_segment_records_locked(a, &seg, &b);
  if (rc) return rc;
  if ((rc = ga_dev_malloc(a->dev, size, &ptr))) {
    ga_tiles_segment_drop_locked(a, seg, b);
    return rc;
  }
  *seg = (ga_segment){.base = (uintptr_t)ptr, .size = size, .pool = (uint8_t)pool, .stream = stream};
  ga_tiles_segment_open_locked(a, seg, b, GA_BLOCK_FREE);
  account(a, seg, +1);
  ga_history_add_locked(a, GA_H_SEGMENT_ALLOC, seg->base, size, stream);
  *out = b;
  return 0;
}

int ga_native_release_locked(ga_allocator_t *a, ga_block *b) {
  GA_ASSERT_LOCKED(a);
  ga_segment *seg = b->seg;
  GA_ASSERT(b->state == GA_BLOCK_FREE && !b->in_tree && !ga_tiles_is_split(b) && !seg->expandable);
  int rc = ga_dev_free(a->dev, (void *)seg->base);
  if (rc) return rc;
  account(a, seg, -1);
  ga_history_add_locked(a, GA_H_SEGMENT_FREE, seg->base, seg->size, seg->stream);
  ga_tiles_unlink_locked(a, seg);
  free(seg);
  ga_tiles_delete_locked(a, b);
  return 0;
}
