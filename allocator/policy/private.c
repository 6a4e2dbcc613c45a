/* private.c — private pools for CUDA-graph capture (and any caller that
 * wants allocations of some streams kept apart): while a stream is routed to
 * a pool, its allocations come from the pool's own free trees and segments
 * (expandable ones with expandable_segments:True, as in current PyTorch),
 * and go back to them when freed, so memory a captured graph uses
 * is never handed to anyone else. Releasing the pool gives its free segments
 * back (now, and at empty_cache for those freed later).
 *
 * While any stream is routed (a capture is underway) the allocator makes no
 * call that would invalidate a capture: device allocations run in the relaxed
 * capture mode, events are neither queried nor synchronised, pages are not
 * moved, and frees with recorded streams wait for the end of the capture.
 */
#include "../internal.h"

static ga_private *find(ga_allocator_t *a, uint64_t id) {
  for (ga_private *v = a->pol.capture.privates; v; v = v->next)
    if (v->id == id) return v;
  return NULL;
}

static void unlink_private(ga_allocator_t *a, ga_private *v) {
  for (ga_private **p = &a->pol.capture.privates; *p; p = &(*p)->next)
    if (*p == v) {
      *p = v->next;
      free(v);
      return;
    }
}

void ga_private_segment_gone_locked(ga_allocator_t *a, ga_private *v) {
  if (--v->nsegs == 0 && v->released && v->nstreams == 0) unlink_private(a, v);
}

/* Gives the whole free native segments of a released pool back (its
 * expandable segments go through ga_expandable_release_locked). 0 or
 * GA_DEV_*. */
static int release_free_segments(ga_allocator_t *a, ga_private *v) {
  for (int p = 0; p < 2; p++) {
    for (;;) {
      ga_block *b = NULL;
      /* Take any unsplit free block (the tree changes after each release). */
      for (ga_block *x = ga_free_tree_lower_bound(&v->trees[p], NULL, 0, 0); x;
           x = ga_free_tree_lower_bound(&v->trees[p], x->stream, x->size, x->ptr + 1))
        if (!ga_block_is_split(x) && !x->seg->expandable) {
          b = x;
          break;
        }
      if (!b) break;
      int last = v->nsegs == 1 && v->released && v->nstreams == 0;
      ga_block_from_free_tree_locked(a, b);
      int rc = ga_native_segment_release_locked(a, b);
      if (rc) {
        ga_block_to_free_tree_locked(a, b);
        return rc;
      }
      if (last) return 0; /* v is gone */
    }
  }
  return 0;
}

/* Native segments of v (the rest are expandable). */
static size_t native_segments(ga_allocator_t *a, ga_private *v) {
  size_t n = v->nsegs;
  for (ga_segment *s = a->space.segs; s; s = s->next) n -= s->priv == v && s->expandable;
  return n;
}

int ga_private_release_all_locked(ga_allocator_t *a) {
  for (ga_private *v = a->pol.capture.privates, *next; v; v = next) {
    next = v->next;
    if (!v->released || v->nstreams || !native_segments(a, v)) continue;
    int rc = release_free_segments(a, v);
    if (rc) return rc;
  }
  return 0;
}

ga_status_t ga_private_begin_locked(ga_allocator_t *a, uint64_t pool, ga_stream_t stream) {
  ga_status_t st = GA_OK;
  ga_private *v = find(a, pool);
  if (v && v->released) {
    ga_error_set("ga_begin_allocate_to_pool: pool %llu was released", (unsigned long long)pool);
    st = GA_ERR_INVALID;
  } else if (!v && !(v = calloc(1, sizeof *v))) {
    ga_error_set("ga_begin_allocate_to_pool: host out of memory");
    st = GA_ERR_HOST_MEMORY;
  } else {
    if (!find(a, pool)) { /* a new pool */
      v->id = pool;
      v->next = a->pol.capture.privates;
      a->pol.capture.privates = v;
    }
    int known = 0;
    for (int i = 0; i < v->nstreams; i++) known |= v->streams[i] == stream;
    if (!known && v->nstreams == 8) {
      ga_error_set("ga_begin_allocate_to_pool: pool %llu already serves 8 streams", (unsigned long long)pool);
      st = GA_ERR_INVALID;
    } else if (!known) {
      v->streams[v->nstreams++] = stream;
      a->pol.capture.routing++;
    }
  }
  return st;
}

/* The pool serves no stream any more; a capture that ended releases the
 * frees it deferred. */
static void stop_routing(ga_allocator_t *a, ga_private *v) {
  a->pol.capture.routing -= v->nstreams;
  v->nstreams = 0;
  if (!a->pol.capture.routing) ga_stream_capture_ended_locked(a);
}

ga_status_t ga_private_end_locked(ga_allocator_t *a, uint64_t pool) {
  ga_status_t st = GA_OK;
  ga_private *v = find(a, pool);
  if (!v) {
    ga_error_set("ga_end_allocate_to_pool: no pool %llu", (unsigned long long)pool);
    st = GA_ERR_INVALID;
  } else {
    stop_routing(a, v);
  }
  return st;
}

ga_status_t ga_private_release_locked(ga_allocator_t *a, uint64_t pool) {
  ga_status_t st = GA_OK;
  ga_private *v = find(a, pool);
  if (!v) {
    ga_error_set("ga_release_pool: no pool %llu", (unsigned long long)pool);
    st = GA_ERR_INVALID;
  } else {
    stop_routing(a, v);
    v->released = 1;
    size_t native = native_segments(a, v);
    int rc = 0;
    if (v->nsegs == 0)
      unlink_private(a, v);
    else {
      /* Expandable memory goes back now unless another capture is underway
       * (that waits for its streams); else at the next empty_cache. Either
       * step may free v once its last segment is gone. */
      if (native < v->nsegs && !a->pol.capture.routing) rc = ga_expandable_release_locked(a, v);
      if (!rc && native) rc = release_free_segments(a, v);
    }
    if (rc) {
      ga_error_set("ga_release_pool: %s", a->dev->error);
      st = GA_ERR_DEVICE;
    }
  }
  return st;
}

void ga_private_teardown_locked(ga_allocator_t *a) {
  while (a->pol.capture.privates) {
    ga_private *v = a->pol.capture.privates;
    a->pol.capture.privates = v->next;
    free(v);
  }
}
