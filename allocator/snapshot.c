/* snapshot.c — the memory snapshot as JSON in the schema of
 * torch.cuda.memory._snapshot(): segments (each mapped range of an expandable
 * segment as its own segment, as PyTorch does) with their blocks, the
 * page cache (one segment per pool at address 0 and up, marked page_cache,
 * so that the segments add up to reserved_bytes), the
 * history as the device trace, and the allocator settings. Python turns it
 * into the pickle that PyTorch's memory viewer opens. Read-only.
 */
#include <stdlib.h>

#include "inspect.h"

/* ---- Which allocation made each live block: address -> history entry ---- */

typedef struct alloc_index {
  uintptr_t *addr; /* 0 = empty */
  size_t *entry;
  size_t cap;
} alloc_index;

static size_t home(const alloc_index *x, uintptr_t a) {
  return (size_t)((a >> 9) * 0x9e3779b97f4a7c15ULL >> 17) & (x->cap - 1);
}

/* The latest alloc entry with frames of every address (none without stacks). */
static void index_allocs(const ga_history *h, alloc_index *x) {
  *x = (alloc_index){0};
  if (!h->stacks || !h->n) return;
  size_t cap = 64;
  while (cap < h->n * 2) cap *= 2;
  x->addr = ga_host_calloc(cap, sizeof *x->addr);
  x->entry = ga_host_calloc(cap, sizeof *x->entry);
  if (!x->addr || !x->entry) {
    free(x->addr);
    free(x->entry);
    *x = (alloc_index){0};
    return;
  }
  x->cap = cap;
  for (size_t k = 0; k < h->n; k++) {
    const ga_history_entry *e = ga_history_at(h, k);
    if (e->action != GA_H_ALLOC || !e->nframes || !e->addr) continue;
    size_t i = home(x, e->addr);
    while (x->addr[i] && x->addr[i] != e->addr) i = (i + 1) & (cap - 1);
    x->addr[i] = e->addr;
    x->entry[i] = k;
  }
}

static void block_frames(ga_text *o, const ga_history *h, const alloc_index *x, uintptr_t addr) {
  if (!x->cap) {
    ga_text_put(o, "[]");
    return;
  }
  size_t i = home(x, addr);
  while (x->addr[i] && x->addr[i] != addr) i = (i + 1) & (x->cap - 1);
  if (!x->addr[i]) {
    ga_text_put(o, "[]");
    return;
  }
  ga_frames_json(o, ga_history_frames(h, x->entry[i]), ga_history_at(h, x->entry[i])->nframes);
}

static const char *block_state(const ga_block *b) {
  return b->state == GA_BLOCK_ALLOCATED ? "active_allocated"
         : b->state == GA_BLOCK_PENDING ? "active_pending_free"
                                        : "inactive";
}

/* One snapshot segment: the blocks [first, last] (none UNMAPPED). */
static void segment(ga_text *o, const ga_allocator_t *a, const ga_segment *seg, const ga_block *first,
                    const ga_block *last, const alloc_index *x, int *comma) {
  size_t total = 0, allocated = 0, active = 0, requested = 0;
  for (const ga_block *b = first;; b = b->next) {
    total += b->size;
    if (b->state == GA_BLOCK_ALLOCATED) allocated += b->size;
    if (b->state != GA_BLOCK_FREE) active += b->size, requested += b->requested;
    if (b == last) break;
  }
  ga_text_put(
      o,
      "%s{\"device\":%d,\"address\":%llu,\"total_size\":%zu,\"allocated_size\":%zu,\"active_size\":%zu,"
      "\"requested_size\":%zu,\"stream\":%llu,\"segment_type\":\"%s\",\"segment_pool_id\":[0,0],"
      "\"is_expandable\":%s,\"frames\":[],\"blocks\":[",
      *comma ? "," : "", a->dev->ordinal, (unsigned long long)first->ptr, total, allocated, active, requested,
      (unsigned long long)(uintptr_t)seg->stream, seg->size_class == GA_CLASS_SMALL ? "small" : "large",
      seg->expandable ? "true" : "false");
  *comma = 1;
  for (const ga_block *b = first;; b = b->next) {
    ga_text_put(o, "%s{\"address\":%llu,\"size\":%zu,\"requested_size\":%zu,\"state\":\"%s\",\"frames\":",
                b == first ? "" : ",", (unsigned long long)b->ptr, b->size,
                b->state == GA_BLOCK_FREE ? (size_t)0 : b->requested, block_state(b));
    if (b->state == GA_BLOCK_FREE)
      ga_text_put(o, "[]");
    else
      block_frames(o, &a->history, x, b->ptr);
    ga_text_put(o, "}");
    if (b == last) break;
  }
  ga_text_put(o, "]}");
}

static int by_address(const void *x, const void *y) {
  const ga_segment *a = *(ga_segment *const *)x, *b = *(ga_segment *const *)y;
  return a->base < b->base ? -1 : a->base > b->base;
}

void ga_snapshot_write_locked(ga_allocator_t *a, ga_text *o) {
  GA_ASSERT_LOCKED(a);
  ga_segment **segs = ga_host_malloc((a->space.nsegs + 1) * sizeof *segs);
  size_t n = 0;
  for (ga_segment *seg = a->space.segs; seg && segs; seg = seg->next) segs[n++] = seg;
  if (segs) qsort(segs, n, sizeof *segs, by_address);
  alloc_index x;
  index_allocs(&a->history, &x);
  ga_text_put(o, "{\"segments\":[");
  int comma = 0;
  /* The page cache: memory held (in reserved_bytes) but mapped nowhere, one
   * segment per pool at addresses no mapping has, so the segments add up to
   * memory_stats()' reserved bytes, per pool as well. */
  uintptr_t at = 0;
  for (int size_class = GA_CLASS_SMALL; size_class <= GA_CLASS_LARGE; size_class++) {
    size_t bytes = ga_pages_cached_bytes_locked(&a->space, size_class);
    if (!bytes) continue;
    ga_text_put(o,
                "%s{\"device\":%d,\"address\":%llu,\"total_size\":%zu,\"allocated_size\":0,\"active_size\":0,"
                "\"requested_size\":0,\"stream\":0,\"segment_type\":\"%s\",\"segment_pool_id\":[0,0],"
                "\"is_expandable\":true,\"page_cache\":true,\"frames\":[],\"blocks\":[{\"address\":%llu,"
                "\"size\":%zu,\"requested_size\":0,\"state\":\"inactive\",\"frames\":[]}]}",
                comma ? "," : "", a->dev->ordinal, (unsigned long long)at, bytes,
                size_class == GA_CLASS_SMALL ? "small" : "large", (unsigned long long)at, bytes);
    comma = 1;
    at += bytes;
  }
  for (size_t i = 0; i < n; i++) {
    const ga_block *first = NULL;
    for (const ga_block *b = segs[i]->head; b; b = b->next) {
      if (b->state != GA_BLOCK_UNMAPPED && !first) first = b;
      int ends = !b->next || b->next->state == GA_BLOCK_UNMAPPED;
      if (first && b->state != GA_BLOCK_UNMAPPED && ends) {
        segment(o, a, segs[i], first, b, &x, &comma);
        first = NULL;
      }
    }
  }
  free(segs);
  free(x.addr);
  free(x.entry);
  ga_text_put(o, "],\"device_traces\":[");
  for (int d = 0; d <= a->dev->ordinal; d++) {
    ga_text_put(o, "%s[", d ? "," : "");
    const ga_history *h = &a->history;
    for (size_t k = 0; d == a->dev->ordinal && k < h->n; k++) {
      const ga_history_entry *e = ga_history_at(h, k);
      ga_text_put(o, "%s{\"action\":\"%s\",", k ? "," : "", ga_history_action_name(e->action));
      if (e->action == GA_H_OOM)
        ga_text_put(o, "\"device_free\":%llu,", (unsigned long long)e->addr);
      else
        ga_text_put(o, "\"addr\":%llu,", (unsigned long long)e->addr);
      ga_text_put(
          o,
          "\"size\":%zu,\"stream\":%llu,\"time_us\":%lld,\"compile_context\":\"N/A\",\"user_metadata\":\"\"",
          e->size, (unsigned long long)e->stream, (long long)e->time_us);
      if (h->stacks) {
        ga_text_put(o, ",\"frames\":");
        ga_frames_json(o, ga_history_frames(h, k), e->nframes);
      }
      ga_text_put(o, "}");
    }
    ga_text_put(o, "]");
  }
  const ga_config *c = &a->cfg;
  ga_text_put(o, "],\"allocator_settings\":{\"PYTORCH_CUDA_ALLOC_CONF\":");
  ga_text_json_str(o, a->conf_text); /* tabs and newlines separate settings too */
  ga_text_put(o,
              ",\"max_split_size\":%lld,\"garbage_collection_threshold\":%g,\"expandable_segments\":%s,"
              "\"pinned_num_register_threads\":%d,\"release_lock_on_cudamalloc\":%s,"
              "\"pinned_use_cuda_host_register\":%s,"
              "\"graph_capture_record_stream_reuse\":%s,\"roundup_power2_divisions\":{",
              c->max_split_size == SIZE_MAX ? -1LL : (long long)c->max_split_size, c->gc_threshold,
              c->expandable_segments ? "true" : "false", c->pinned_num_register_threads,
              c->release_lock_on_cudamalloc ? "true" : "false",
              c->pinned_use_host_register ? "true" : "false",
              c->graph_capture_record_stream_reuse ? "true" : "false");
  for (int i = 0; i < GA_ROUNDUP_INTERVALS; i++)
    ga_text_put(o, "%s\"%d\":%zu", i ? "," : "", 1 << i, c->roundup_divisions[i]);
  ga_text_put(o, "}},\"external_annotations\":[]}");
}
