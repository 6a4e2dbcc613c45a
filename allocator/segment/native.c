/* native.c — native segments: one device malloc each.
 *
 * A segment is what one device malloc returned. Its blocks tile it; blocks of
 * different segments never merge. Records the segment and reserved-bytes
 * statistics and the segment history entries. Which segment goes back, and
 * when, is the policy's choice.
 */
#include <stdlib.h>

#include "segment.h"

static void account(ga_space *sp, const ga_segment *seg, int sign) {
  ga_stats_t *stats = sp->stats;
  ga_pstat_add(stats->segment, seg->size_class, sign);
  ga_pstat_add(stats->reserved_bytes, seg->size_class, sign * (int64_t)seg->size);
  if (seg->size >= sp->cfg->max_split_size) ga_stat_add(&stats->oversize_segments, sign);
  if (sign > 0) {
    sp->reserved += seg->size;
    stats->num_device_alloc++;
  } else {
    sp->reserved -= seg->size;
    stats->num_device_free++;
  }
}

int ga_native_new_locked(ga_space *sp, size_t size, int size_class, ga_stream_t stream, ga_block **out) {
  GA_ASSERT_SPACE_LOCKED(sp);
  ga_segment *seg;
  ga_block *b;
  void *ptr = NULL;
  int rc = ga_tiles_segment_records_locked(sp, &seg, &b);
  if (rc) return rc;
  if ((rc = ga_dev_malloc(sp->dev, size, &ptr))) {
    ga_tiles_segment_delete_locked(sp, seg, b);
    return rc;
  }
  *seg =
      (ga_segment){.base = (uintptr_t)ptr, .size = size, .size_class = (uint8_t)size_class, .stream = stream};
  ga_tiles_segment_open_locked(sp, seg, b, GA_BLOCK_FREE);
  account(sp, seg, +1);
  ga_space_history_locked(sp, GA_H_SEGMENT_ALLOC, seg->base, size, stream);
  *out = b;
  GA_ASSERT(b->state == GA_BLOCK_FREE && !b->in_tree && b->seg == seg && seg->head == b && !b->prev &&
            !b->next && b->ptr == seg->base && b->size == size && b->size_class == size_class &&
            b->stream == stream);
  return 0;
}

int ga_native_release_locked(ga_space *sp, ga_block *b) {
  GA_ASSERT_SPACE_LOCKED(sp);
  ga_segment *seg = b->seg;
  GA_ASSERT(b->state == GA_BLOCK_FREE && !b->in_tree && !ga_tiles_is_split(b) && !seg->expandable);
  int rc = ga_dev_free(sp->dev, (void *)seg->base);
  if (rc) return rc;
  account(sp, seg, -1);
  ga_space_history_locked(sp, GA_H_SEGMENT_FREE, seg->base, seg->size, seg->stream);
  ga_tiles_unlink_locked(sp, seg);
  free(seg);
  ga_tiles_delete_locked(sp, b);
  return 0;
}
