/* native.c — native segments: one device malloc each.
 *
 * A segment is what one device malloc returned. Its blocks tile it; blocks of
 * different segments never merge. This file owns the segment list, the
 * reserved-bytes total and the segment/reserved statistics; it must not look
 * at free trees (the policy decides what to give back).
 */
#include <stdlib.h>

#include "../internal.h"

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

int ga_native_segment_new_locked(ga_allocator_t *a, size_t size, int pool, ga_stream_t stream,
                                 ga_block **out) {
  ga_segment *seg = malloc(sizeof *seg);
  ga_block *b = ga_block_new_locked(a);
  void *ptr = NULL;
  int rc = -1;
  if (!seg || !b) goto fail;
  if ((rc = ga_dev_malloc(a->dev, size, &ptr))) goto fail;
  *seg =
      (ga_segment){.base = (uintptr_t)ptr, .size = size, .pool = (uint8_t)pool, .stream = stream, .head = b};
  b->ptr = seg->base;
  b->size = size;
  b->stream = stream;
  b->pool = (uint8_t)pool;
  b->seg = seg;
  seg->next = a->space.segs;
  if (a->space.segs) a->space.segs->prev = seg;
  a->space.segs = seg;
  a->space.nsegs++;
  account(a, seg, +1);
  ga_history_add_locked(a, GA_H_SEGMENT_ALLOC, seg->base, size, stream);
  *out = b;
  return 0;
fail:
  free(seg);
  if (b) ga_block_delete_locked(a, b);
  return rc;
}

int ga_native_segment_release_locked(ga_allocator_t *a, ga_block *b) {
  ga_segment *seg = b->seg;
  int rc = ga_dev_free(a->dev, (void *)seg->base);
  if (rc) return rc;
  account(a, seg, -1);
  if (seg->priv) ga_private_segment_gone_locked(a, seg->priv);
  ga_history_add_locked(a, GA_H_SEGMENT_FREE, seg->base, seg->size, seg->stream);
  if (seg->prev)
    seg->prev->next = seg->next;
  else
    a->space.segs = seg->next;
  if (seg->next) seg->next->prev = seg->prev;
  a->space.nsegs--;
  free(seg);
  ga_block_delete_locked(a, b);
  return 0;
}
