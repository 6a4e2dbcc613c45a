/* private.c — the records of private pools (CUDA-graph capture, see
 * capture.c): finding one by id or by the stream it serves, its segment
 * count, and freeing it once it is released, serves no stream and has no
 * segment left. Policy code calls ga_private_segment_new/gone_locked after a
 * segment of a pool was obtained or given back.
 */
#include "policy.h"

ga_private *ga_private_find_locked(ga_allocator_t *a, uint64_t id) {
  GA_ASSERT_LOCKED(a);
  for (ga_private *v = a->pol.capture.privates; v; v = v->next)
    if (v->id == id) return v;
  return NULL;
}

int ga_private_new_locked(ga_allocator_t *a, uint64_t id, ga_private **out) {
  GA_ASSERT_LOCKED(a);
  ga_private *v = ga_host_calloc(1, sizeof *v);
  if (!v) return GA_DEV_ENOMEM;
  v->id = id;
  for (int pool = 0; pool < 2; pool++) ga_free_tree_init(&v->trees[pool], a->space.gran);
  v->next = a->pol.capture.privates;
  a->pol.capture.privates = v;
  *out = v;
  return 0;
}

void ga_private_drop_locked(ga_allocator_t *a, ga_private *v) {
  GA_ASSERT_LOCKED(a);
  for (ga_private **p = &a->pol.capture.privates; *p; p = &(*p)->next)
    if (*p == v) {
      *p = v->next;
      free(v);
      return;
    }
}

ga_private *ga_private_routed_locked(ga_allocator_t *a, ga_stream_t stream) {
  GA_ASSERT_LOCKED(a);
  for (ga_private *v = a->pol.capture.privates; v; v = v->next)
    for (int i = 0; i < v->nstreams; i++)
      if (v->streams[i] == stream) return v;
  return NULL;
}

void ga_private_segment_new_locked(ga_allocator_t *a, ga_private *v) {
  GA_ASSERT_LOCKED(a);
  (void)a;
  v->nsegs++;
}

void ga_private_segment_gone_locked(ga_allocator_t *a, ga_private *v) {
  GA_ASSERT_LOCKED(a);
  GA_ASSERT(v->nsegs > 0);
  v->generation++; /* its addresses are gone */
  if (--v->nsegs == 0 && v->released && v->nstreams == 0) ga_private_drop_locked(a, v);
}

size_t ga_private_native_segments_locked(ga_allocator_t *a, ga_private *v) {
  GA_ASSERT_LOCKED(a);
  size_t n = v->nsegs;
  for (ga_segment *s = a->space.segs; s; s = s->next) n -= s->priv == v && s->expandable;
  return n;
}

void ga_private_teardown_locked(ga_allocator_t *a) {
  GA_ASSERT_LOCKED(a);
  while (a->pol.capture.privates) {
    ga_private *v = a->pol.capture.privates;
    a->pol.capture.privates = v->next;
    free(v);
  }
}

ga_status_t ga_private_generation_locked(ga_allocator_t *a, uint64_t id, uint64_t *gen) {
  GA_ASSERT_LOCKED(a);
  ga_private *v = ga_private_find_locked(a, id);
  if (!v) {
    ga_error_set("ga_pool_generation: there is no private pool %llu (never used, or released and gone)",
                 (unsigned long long)id);
    return GA_ERR_INVALID;
  }
  *gen = v->generation;
  return GA_OK;
}
