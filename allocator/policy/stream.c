/* stream.c — stream-ordered reuse: record_stream, events, deferred frees.
 *
 * A block belongs to its allocation stream. record_stream adds other streams
 * that use it; when the client frees such a block, one event is recorded on
 * each of those streams and the block stays PENDING (active, not reusable)
 * until every event has completed. Events are recycled, not destroyed.
 * If an event cannot be created or recorded, the stream is synchronised
 * instead (slower, never unsafe); if that fails too, and so does a wait for
 * the whole device (a sticky driver error), nothing says when the stream is
 * done with the memory: the block is quarantined, a pending entry without an
 * event, counted in quarantined_bytes, and stays out of use until an event
 * can be recorded on the stream (tried at every malloc) or a wait for it
 * succeeds (ga_empty_cache, the OOM ladder). Whatever the driver answers, no
 * block is reused before its streams have passed its free.
 */
#include <stdlib.h>

#include "policy.h"

ga_err ga_stream_record_locked(ga_allocator_t *a, ga_block *b, ga_stream_t stream) {
  GA_ASSERT_LOCKED(a);
  (void)a;
  if (stream == b->stream) return 0;
  for (uint32_t i = 0; i < b->nuses; i++)
    if (b->uses[i] == stream) return 0;
  if (b->nuses == b->capuses) {
    uint32_t cap = b->capuses ? b->capuses * 2 : 2;
    ga_stream_t *u = ga_host_realloc(b->uses, cap * sizeof *u);
    if (!u) return GA_DEV_ENOMEM;
    b->uses = u;
    b->capuses = cap;
  }
  b->uses[b->nuses++] = stream;
  return 0;
}

static ga_err event_get(ga_allocator_t *a, ga_event *ev) {
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

/* ---- Quarantine: frees whose streams could not be waited for ---- */

static void quarantine_add(ga_allocator_t *a, ga_block *b) {
  if (b->nquarantined++ == 0) ga_stat_inc(&a->stats.quarantined_bytes, b->size);
}
static void quarantine_remove(ga_allocator_t *a, ga_block *b) {
  if (--b->nquarantined == 0) ga_stat_dec(&a->stats.quarantined_bytes, b->size);
}

/* An event recorded on stream now: 0, or the code of the call that failed. */
static ga_err event_on(ga_allocator_t *a, ga_stream_t stream, ga_event *ev) {
  ga_err rc = event_get(a, ev);
  if (rc) return rc;
  if ((rc = ga_dev_event_record(a->dev, *ev, stream)) == 0) return 0;
  event_put(a, *ev);
  *ev = NULL;
  return rc;
}

/* Defers the reuse of `b` until work now queued on `stream` is done; 1 when that
 * cannot be known (quarantined). Room for the entry was made by the caller. */
static int defer_on(ga_allocator_t *a, ga_block *b, ga_stream_t stream) {
  ga_event ev = NULL;
  GA_ASSERT(a->pol.streams.npending < a->pol.streams.cap_pending);
  if (event_on(a, stream, &ev) != 0) {
    /* No event: wait for the stream now (or the whole device if that fails). */
    if (ga_dev_stream_synchronize(a->dev, stream) == 0 || ga_dev_synchronize(a->dev) == 0) return 0;
    quarantine_add(a, b);
  }
  a->pol.streams.pending[a->pol.streams.npending++] = (ga_pending){ev, b, stream};
  b->event_count++;
  return ev == NULL;
}

int ga_stream_free_room_locked(ga_allocator_t *a, const ga_block *b) {
  GA_ASSERT_LOCKED(a);
  return GA_VEC_ROOM(a->pol.streams.pending, a->pol.streams.cap_pending, a->pol.streams.npending + b->nuses);
}

int ga_stream_free_locked(ga_allocator_t *a, ga_block *b) {
  GA_ASSERT_LOCKED(a);
  int quarantined = 0;
  b->state = GA_BLOCK_PENDING;
  if (b->nuses && a->pol.capture.routing) {
    /* During a capture no event is recorded: the free waits for its end. */
    if (!GA_VEC_ROOM(a->pol.capture.deferred, a->pol.capture.cap_deferred, a->pol.capture.ndeferred + 1)) {
      b->event_count = 1;
      a->pol.capture.deferred[a->pol.capture.ndeferred++] = b;
      return 0;
    }
  }
  for (uint32_t i = 0; i < b->nuses; i++) quarantined += defer_on(a, b, b->uses[i]);
  b->nuses = 0;
  if (b->event_count == 0) ga_block_free_locked(a, b);
  return quarantined;
}

/* Retires pending entry i (its stream passed the free). */
static void retire(ga_allocator_t *a, size_t i) {
  ga_pending p = a->pol.streams.pending[i];
  a->pol.streams.pending[i] = a->pol.streams.pending[--a->pol.streams.npending];
  if (p.ev)
    event_put(a, p.ev);
  else
    quarantine_remove(a, p.block);
  if (--p.block->event_count == 0) ga_block_free_locked(a, p.block);
}

void ga_stream_process_events_locked(ga_allocator_t *a) {
  GA_ASSERT_LOCKED(a);
  for (size_t i = 0; i < a->pol.streams.npending;) {
    ga_pending *p = &a->pol.streams.pending[i];
    if (!p->ev) { /* quarantined: an event recorded now follows the work it waits for */
      if (event_on(a, p->stream, &p->ev) != 0) {
        i++;
        continue;
      }
      quarantine_remove(a, p->block);
    }
    if (ga_dev_event_query(a->dev, p->ev) == 0)
      retire(a, i);
    else
      i++;
  }
}

int ga_stream_sync_all_locked(ga_allocator_t *a) {
  GA_ASSERT_LOCKED(a);
  a->stats.num_sync_all_streams++;
  int rc = 0;
  for (size_t i = 0; i < a->pol.streams.npending;) {
    ga_pending *p = &a->pol.streams.pending[i];
    int r = p->ev ? ga_dev_event_synchronize(a->dev, p->ev) : ga_dev_stream_synchronize(a->dev, p->stream);
    if (r == 0)
      retire(a, i);
    else
      rc = r, i++;
  }
  return rc;
}

void ga_stream_capture_ended_locked(ga_allocator_t *a) {
  GA_ASSERT_LOCKED(a);
  size_t n = a->pol.capture.ndeferred, kept = 0;
  a->pol.capture.ndeferred = 0;
  for (size_t i = 0; i < n; i++) {
    ga_block *b = a->pol.capture.deferred[i];
    /* Room for its pending entries, as ga_free makes it: a deferred free
     * made none. Without it (host out of memory) it stays deferred, for the
     * end of the next capture. */
    if (ga_stream_free_room_locked(a, b)) {
      a->pol.capture.deferred[kept++] = b;
      continue;
    }
    b->event_count = 0;
    (void)ga_stream_free_locked(a, b); /* a quarantine is counted in quarantined_bytes */
  }
  a->pol.capture.ndeferred = kept;
}

/* ---- Fences: knowing, without waiting, that freed memory is idle ---- */

static struct ga_fence *fence_of(ga_allocator_t *a, ga_stream_t stream, int create) {
  for (int i = 0; i < a->pol.streams.nfences; i++)
    if (a->pol.streams.fences[i].stream == stream) return &a->pol.streams.fences[i];
  if (!create ||
      a->pol.streams.nfences == (int)(sizeof a->pol.streams.fences / sizeof a->pol.streams.fences[0]))
    return NULL;
  a->pol.streams.fences[a->pol.streams.nfences] = (struct ga_fence){.stream = stream};
  return &a->pol.streams.fences[a->pol.streams.nfences++];
}

/* Records f's event on its stream now: everything freed until now is idle
 * once it completes. 0, or the code of the call that failed (no event could
 * be had or recorded). */
static ga_err fence_record(ga_allocator_t *a, struct ga_fence *f) {
  ga_err rc = f->ev ? GA_DEV_OK : event_get(a, &f->ev);
  if (rc) return rc;
  if ((rc = ga_dev_event_record(a->dev, f->ev, f->stream)) == 0) {
    f->ev_seq = a->pol.streams.free_clock;
    return 0;
  }
  f->ev_seq = 0;
  return rc;
}

int ga_stream_fence_locked(ga_allocator_t *a, ga_stream_t stream, uint64_t free_seq, int wait, int *idle,
                           int *waited) {
  GA_ASSERT_LOCKED(a);
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

void ga_stream_fence_watch_locked(ga_allocator_t *a, ga_stream_t stream) {
  GA_ASSERT_LOCKED(a);
  (void)fence_of(a, stream, 1);
}

void ga_stream_fences_refresh_locked(ga_allocator_t *a) {
  GA_ASSERT_LOCKED(a);
  for (int i = 0; i < a->pol.streams.nfences; i++) {
    struct ga_fence *f = &a->pol.streams.fences[i];
    if (f->ev && f->ev_seq == a->pol.streams.free_clock) continue; /* nothing freed since */
    (void)fence_record(a, f);
  }
}

void ga_stream_teardown_locked(ga_allocator_t *a) {
  GA_ASSERT_LOCKED(a);
  for (int i = 0; i < a->pol.streams.nfences; i++)
    if (a->pol.streams.fences[i].ev) (void)ga_dev_event_destroy(a->dev, a->pol.streams.fences[i].ev);
  a->pol.streams.nfences = 0;
  free(a->pol.capture.deferred);
  a->pol.capture.deferred = NULL;
  a->pol.capture.ndeferred = a->pol.capture.cap_deferred = 0;
  for (size_t i = 0; i < a->pol.streams.npending; i++)
    if (a->pol.streams.pending[i].ev) (void)ga_dev_event_destroy(a->dev, a->pol.streams.pending[i].ev);
  for (size_t i = 0; i < a->pol.streams.nevent_cache; i++)
    (void)ga_dev_event_destroy(a->dev, a->pol.streams.event_cache[i]);
  free(a->pol.streams.pending);
  free(a->pol.streams.event_cache);
  a->pol.streams.pending = NULL;
  a->pol.streams.event_cache = NULL;
  a->pol.streams.npending = a->pol.streams.nevent_cache = 0;
}
