/* layout.c — ga_mem_ranges: which physical memory lies behind an
 * allocation, for RDMA and NCCL registration (a region must not span
 * handles they cannot see as one).
 */
#include "policy.h"

static void put(ga_mem_range_t *out, size_t cap, size_t *n, ga_mem_range_t r) {
  if (*n < cap) out[*n] = r;
  ++*n;
}

ga_status_t ga_layout_ranges_locked(ga_allocator_t *a, void *ptr, ga_mem_range_t *out, size_t cap,
                                    size_t *n) {
  GA_ASSERT_LOCKED(a);
  const ga_block *b = ga_block_live_locked(a, (uintptr_t)ptr);
  if (!b) b = ga_alloc_containing_locked(a, (uintptr_t)ptr);
  if (!b) {
    ga_error_set("ga_mem_ranges: %p is not inside a live allocation", ptr);
    return GA_ERR_BAD_POINTER;
  }
  const ga_segment *seg = b->seg;
  if (!seg->expandable) {
    put(out, cap, n,
        (ga_mem_range_t){(void *)b->ptr, b->size, 0, (size_t)(b->ptr - seg->base), (void *)seg->base});
    return GA_OK;
  }
  if (b->asleep) {
    ga_error_set("ga_mem_ranges: the allocation at %p is asleep (ga_sleep): no memory lies behind it",
                 (void *)b->ptr);
    return GA_ERR_INVALID;
  }
  size_t g = a->space.gran;
  ga_mem_range_t cur = {0};
  for (uintptr_t p = b->ptr, end = b->ptr + b->size; p < end;) {
    size_t i = (p - seg->base) / g, in = (p - seg->base) % g;
    size_t take = g - in < end - p ? g - in : end - p;
    const ga_granule *m = &seg->granules[i];
    uint64_t h = m->handle->h;
    size_t off = (size_t)m->idx * g + in;
    if (cur.size && cur.handle == h && cur.offset + cur.size == off)
      cur.size += take;
    else {
      if (cur.size) put(out, cap, n, cur);
      cur = (ga_mem_range_t){(void *)p, take, h, off, NULL};
    }
    p += take;
  }
  if (cur.size) put(out, cap, n, cur);
  return GA_OK;
}
