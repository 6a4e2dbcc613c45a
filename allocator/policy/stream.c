/* stream.c — stream-ordered reuse: record_stream, events, deferred frees.
 *
 * A block belongs to its allocation stream. record_stream adds other streams
 * that use it; when the client frees such a block, one event is recorded on
 * each of those streams and the block stays PENDING (active, not reusable)
 * until every event has completed. Events are recycled, not destroyed.
 * If an event cannot be created or recorded, the stream is synchronised
 * instead: slower, never unsafe.
 */
#include <stdlib.h>

#include "policy.h"

int ga_stream_record_locked(ga_allocator_t *a, ga_block *b, ga_stream_t s) {
  (void)a;
  if (s == b->stream) return 0;
  for (uint32_t i = 0; i < b->nuses; i++)
    if (b->uses[i] == s) return 0;
  if (b->nuses == b->capuses) {
    uint32_t cap = b->capuses ? b->capuses * 2 : 2;
    ga_stream_t *u = realloc(b->uses, cap * sizeof *u);
    if (!u) return -1;
    b->uses = u;
    b->capuses = cap;
  }
  b->uses[b->nuses++] = s;
  return 0;
}

static int event_get(ga_allocator_t *a, ga_event *ev) {
  if (a->pol.streams.nevent_cache) {
    *ev = a->pol.streams.event_cache[--a->pol.streams.nevent_cache];
    return 0;
  }
  return ga_dev_event_create(a->dev, ev);
}

static void event_put(ga_allocator_t *a, ga_event ev) {
  if (GA_VEC_ROOM(a->pol.streams.event_cache, a->pol.streams.cap_event_cache,
                  a->pol.streams.nevent_cache + 1)) {
    (void)ga_dev_event_destroy(a->dev, ev);
    return;
  }
  a->pol.streams.event_cache[a->pol.streams.nevent_cache++] = ev;
}

/* Defers the reuse of `b` until work now queued on `s` is done. */
static void defer_on(ga_allocator_t *a, ga_block *b, ga_stream_t s) {
  ga_event ev;
  if (GA_VEC_ROOM(a->pol.streams.pending, a->pol.streams.cap_pending, a->pol.streams.npending + 1)) goto sync;
  if (event_get(a, &ev)) goto sync;
  if (ga_dev_event_record(a->dev, ev, s)) {
    event_put(a, ev);
    goto sync;
  }
  a->pol.streams.pending[a->pol.streams.npending++] = (ga_pending){ev, b};
  b->event_count++;
  return;
sync:
  /* No event: wait for the stream now (or the whole device if that fails). */
  if (ga_dev_stream_synchronize(a->dev, s)) (void)ga_dev_synchronize(a->dev);
}

void ga_stream_free_locked(ga_allocator_t *a, ga_block *b) {
  b->state = GA_BLOCK_PENDING;
  if (b->nuses && a->pol.capture.routing) {
    /* During a capture no event is recorded: the free waits for its end. */
    if (!GA_VEC_ROOM(a->pol.capture.deferred, a->pol.capture.cap_deferred, a->pol.capture.ndeferred + 1)) {
      b->event_count = 1;
      a->pol.capture.deferred[a->pol.capture.ndeferred++] = b;
      return;
    }
  }
  for (uint32_t i = 0; i < b->nuses; i++) defer_on(a, b, b->uses[i]);
  b->nuses = 0;
  if (b->event_count == 0) ga_block_free_locked(a, b);
}

/* Retires pending entry i (its event completed). */
static void retire(ga_allocator_t *a, size_t i) {
  ga_pending p = a->pol.streams.pending[i];
  a->pol.streams.pending[i] = a->pol.streams.pending[--a->pol.streams.npending];
  event_put(a, p.ev);
  if (--p.block->event_count == 0) ga_block_free_locked(a, p.block);
}

void ga_stream_process_events_locked(ga_allocator_t *a) {
  for (size_t i = 0; i < a->pol.streams.npending;) {
    if (ga_dev_event_query(a->dev, a->pol.streams.pending[i].ev) == 0)
      retire(a, i);
    else
      i++;
  }
}

int ga_stream_sync_all_locked(ga_allocator_t *a) {
  a->stats.num_sync_all_streams++;
  int rc = 0;
  for (size_t i = 0; i < a->pol.streams.npending;) {
    int r = ga_dev_event_synchronize(a->dev, a->pol.streams.pending[i].ev);
    if (r == 0)
      retire(a, i);
    else
      rc = r, i++;
  }
  return rc;
}

void ga_stream_capture_ended_locked(ga_allocator_t *a) {
  size_t n = a->pol.capture.ndeferred;
  a->pol.capture.ndeferred = 0;
  for (size_t i = 0; i < n; i++) {
    ga_block *b = a->pol.capture.deferred[i];
    b->event_count = 0;
    ga_stream_free_locked(a, b);
  }
}

/* ---- Fences: knowing, without waiting, that freed memory is idle ---- */

static struct ga_fence *fence_of(ga_allocator_t *a, ga_stream_t s, int create) {
  for (int i = 0; i < a->pol.streams.nfences; i++)
    if (a->pol.streams.fences[i].stream == s) return &a->pol.streams.fences[i];
  if (!create ||
      a->pol.streams.nfences == (int)(sizeof a->pol.streams.fences / sizeof a->pol.streams.fences[0]))
    return NULL;
  a->pol.streams.fences[a->pol.streams.nfences] = (struct ga_fence){.stream = s};
  return &a->pol.streams.fences[a->pol.streams.nfences++];
}

/* Records f's event on its stream now: everything freed until now is idle
 * once it completes. 0, or -1 when no event could be had or recorded. */
static int fence_record(ga_allocator_t *a, struct ga_fence *f) {
  if (!f->ev && event_get(a, &f->ev)) return -1;
  if (ga_dev_event_record(a->dev, f->ev, f->stream) == 0) {
    f->ev_seq = a->pol.streams.free_clock;
    return 0;
  }
  f->ev_seq = 0;
  return -1;
}

int ga_stream_fence_locked(ga_allocator_t *a, ga_stream_t stream, uint64_t free_seq, int wait, int *idle,
                           int *waited) {
  struct ga_fence *f = fence_of(a, stream, 1);
  *idle = *waited = 0;
  if (f && free_seq <= f->safe_seq) return *idle = 1, 0;
  if (f && f->ev && f->ev_seq >= free_seq && ga_dev_event_query(a->dev, f->ev) == 0) {
    f->safe_seq = f->ev_seq; /* the stream passed the fence: everything freed before it is idle */
    return *idle = 1, 0;
  }
  /* A fence recorded now passes at once on a stream with nothing queued. */
  if (f && (!f->ev || f->ev_seq < free_seq) && fence_record(a, f) == 0 &&
      ga_dev_event_query(a->dev, f->ev) == 0) {
    f->safe_seq = f->ev_seq;
    return *idle = 1, 0;
  }
  if (!wait) return 0;
  int rc = ga_dev_stream_synchronize(a->dev, stream);
  if (rc) return rc;
  *idle = *waited = 1;
  if (f) f->safe_seq = a->pol.streams.free_clock;
  return 0;
}

void ga_stream_fence_watch_locked(ga_allocator_t *a, ga_stream_t stream) { (void)fence_of(a, stream, 1); }

void ga_stream_fences_refresh_locked(ga_allocator_t *a) {
  for (int i = 0; i < a->pol.streams.nfences; i++) {
    struct ga_fence *f = &a->pol.streams.fences[i];
    if (f->ev && f->ev_seq == a->pol.streams.free_clock) continue; /* nothing freed since */
    (void)fence_record(a, f);
  }
}

void ga_stream_teardown_locked(ga_allocator_t *a) {
  for (int i = 0; i < a->pol.streams.nfences; i++)
    if (a->pol.streams.fences[i].ev) (void)ga_dev_event_destroy(a->dev, a->pol.streams.fences[i].ev);
  a->pol.streams.nfences = 0;
  free(a->pol.capture.deferred);
  a->pol.capture.deferred = NULL;
  a->pol.capture.ndeferred = a->pol.capture.cap_deferred = 0;
  for (size_t i = 0; i < a->pol.streams.npending; i++)
    (void)ga_dev_event_destroy(a->dev, a->pol.streams.pending[i].ev);
  for (size_t i = 0; i < a->pol.streams.nevent_cache; i++)
    (void)ga_dev_event_destroy(a->dev, a->pol.streams.event_cache[i]);
  free(a->pol.streams.pending);
  free(a->pol.streams.event_cache);
  a->pol.streams.pending = NULL;
  a->pol.streams.event_cache = NULL;
  a->pol.streams.npending = a->pol.streams.nevent_cache = 0;
}
