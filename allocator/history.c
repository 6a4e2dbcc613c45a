/* history.c — the allocation history (PyTorch's device trace) and the
 * memory snapshot as JSON in the schema of torch.cuda.memory._snapshot().
 *
 * Recording is off by default; when on, every alloc, free (requested and
 * completed), segment alloc/free, map/unmap and OOM goes into a ring buffer of
 * max_entries entries. The snapshot lists segments (each mapped range of an
 * expandable segment as its own segment, as PyTorch does) with their blocks,
 * the trace, and the allocator settings. Python turns it into the pickle that
 * PyTorch's memory viewer opens.
 */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "internal.h"

static const char *const action_names[] = {
    [GA_H_ALLOC] = "alloc",
    [GA_H_FREE_REQUESTED] = "free_requested",
    [GA_H_FREE_COMPLETED] = "free_completed",
    [GA_H_SEGMENT_ALLOC] = "segment_alloc",
    [GA_H_SEGMENT_FREE] = "segment_free",
    [GA_H_SEGMENT_MAP] = "segment_map",
    [GA_H_SEGMENT_UNMAP] = "segment_unmap",
    [GA_H_OOM] = "oom",
};

static int64_t now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_REALTIME, &t);
  return (int64_t)t.tv_sec * 1000000 + t.tv_nsec / 1000;
}

void ga_history_add_locked(ga_allocator_t *a, int action, uintptr_t addr, size_t size, ga_stream_t stream) {
  ga_history *h = &a->history;
  if (!h->cap) return;
  ga_history_entry *e = &h->v[h->next];
  *e = (ga_history_entry){
      .action = action, .addr = addr, .size = size, .stream = (uintptr_t)stream, .time_us = now_us()};
  h->next = (h->next + 1) % h->cap;
  if (h->n < h->cap) h->n++;
}

ga_status_t ga_record_history(ga_allocator_t *a, int enabled, size_t max_entries) {
  if (!a) {
    ga_error_set("ga_record_history: the allocator is NULL");
    return GA_ERR_INVALID;
  }
  if (enabled && max_entries == 0) max_entries = 100000;
  ga_history_entry *v = NULL;
  if (enabled && !(v = calloc(max_entries, sizeof *v))) {
    ga_error_set("ga_record_history: host out of memory for %zu entries", max_entries);
    return GA_ERR_HOST_MEMORY;
  }
  ga_lock_acquire(&a->mu);
  free(a->history.v);
  a->history = (ga_history){.v = v, .cap = enabled ? max_entries : 0};
  ga_lock_release(&a->mu);
  return GA_OK;
}

/* ---- JSON ---- */

static const char *block_state(const ga_block *b) {
  return b->state == GA_BLOCK_ALLOCATED ? "active_allocated"
         : b->state == GA_BLOCK_PENDING ? "active_pending_free"
                                        : "inactive";
}

/* One snapshot segment: the blocks [first, last] (none UNMAPPED). */
static void segment(ga_text *o, const ga_allocator_t *a, const ga_segment *s, const ga_block *first,
                    const ga_block *last, int *comma) {
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
      (unsigned long long)(uintptr_t)s->stream, s->pool == GA_P_SMALL ? "small" : "large",
      s->expandable ? "true" : "false");
  *comma = 1;
  for (const ga_block *b = first;; b = b->next) {
    ga_text_put(o, "%s{\"address\":%llu,\"size\":%zu,\"requested_size\":%zu,\"state\":\"%s\",\"frames\":[]}",
                b == first ? "" : ",", (unsigned long long)b->ptr, b->size,
                b->state == GA_BLOCK_FREE ? (size_t)0 : b->requested, block_state(b));
    if (b == last) break;
  }
  ga_text_put(o, "]}");
}

static int by_address(const void *x, const void *y) {
  const ga_segment *a = *(ga_segment *const *)x, *b = *(ga_segment *const *)y;
  return a->base < b->base ? -1 : a->base > b->base;
}

size_t ga_snapshot_json(ga_allocator_t *a, char *buf, size_t cap) {
  ga_text o = {buf, cap, 0};
  if (!a) {
    if (cap) buf[0] = 0;
    return 0;
  }
  ga_lock_acquire(&a->mu);
  ga_segment **segs = malloc((a->nsegs + 1) * sizeof *segs);
  size_t n = 0;
  for (ga_segment *s = a->segs; s && segs; s = s->next) segs[n++] = s;
  if (segs) qsort(segs, n, sizeof *segs, by_address);
  ga_text_put(&o, "{\"segments\":[");
  int comma = 0;
  for (size_t i = 0; i < n; i++) {
    const ga_block *first = NULL;
    for (const ga_block *b = segs[i]->head; b; b = b->next) {
      if (b->state != GA_BLOCK_UNMAPPED && !first) first = b;
      int ends = !b->next || b->next->state == GA_BLOCK_UNMAPPED;
      if (first && b->state != GA_BLOCK_UNMAPPED && ends) {
        segment(&o, a, segs[i], first, b, &comma);
        first = NULL;
      }
    }
  }
  free(segs);
  ga_text_put(&o, "],\"device_traces\":[");
  for (int d = 0; d <= a->dev->ordinal; d++) {
    ga_text_put(&o, "%s[", d ? "," : "");
    const ga_history *h = &a->history;
    for (size_t k = 0; d == a->dev->ordinal && k < h->n; k++) {
      const ga_history_entry *e = &h->v[(h->next + h->cap - h->n + k) % h->cap];
      ga_text_put(&o, "%s{\"action\":\"%s\",", k ? "," : "", action_names[e->action]);
      if (e->action == GA_H_OOM)
        ga_text_put(&o, "\"device_free\":%llu,", (unsigned long long)e->addr);
      else
        ga_text_put(&o, "\"addr\":%llu,", (unsigned long long)e->addr);
      ga_text_put(
          &o,
          "\"size\":%zu,\"stream\":%llu,\"time_us\":%lld,\"compile_context\":\"N/A\",\"user_metadata\":\"\"}",
          e->size, (unsigned long long)e->stream, (long long)e->time_us);
    }
    ga_text_put(&o, "]");
  }
  const ga_config *c = &a->cfg;
  ga_text_put(&o, "],\"allocator_settings\":{\"PYTORCH_CUDA_ALLOC_CONF\":\"");
  for (const char *p = a->conf_text; *p; p++) ga_text_put(&o, (*p == '"' || *p == '\\') ? "\\%c" : "%c", *p);
  ga_text_put(&o,
              "\",\"max_split_size\":%lld,\"garbage_collection_threshold\":%g,\"expandable_segments\":%s,"
              "\"pinned_num_register_threads\":%d,\"release_lock_on_cudamalloc\":%s,\"pinned_use_cuda_host_"
              "register\":%s,"
              "\"graph_capture_record_stream_reuse\":%s,\"roundup_power2_divisions\":{",
              c->max_split_size == SIZE_MAX ? -1LL : (long long)c->max_split_size, c->gc_threshold,
              c->expandable_segments ? "true" : "false", c->pinned_num_register_threads,
              c->release_lock_on_cudamalloc ? "true" : "false",
              c->pinned_use_host_register ? "true" : "false",
              c->graph_capture_record_stream_reuse ? "true" : "false");
  for (int i = 0; i < GA_ROUNDUP_INTERVALS; i++)
    ga_text_put(&o, "%s\"%d\":%zu", i ? "," : "", 1 << i, c->roundup_divisions[i]);
  ga_text_put(&o, "}},\"external_annotations\":[]}");
  ga_lock_release(&a->mu);
  return ga_text_end(&o);
}
