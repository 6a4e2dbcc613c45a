/* private.c — the records of private pools (CUDA-graph capture, see
 * capture.c): finding one by id or by the stream it serves, its segment
 * count, and deleting it once it is released, serves no stream and has no
 * segment left. Policy code calls ga_private_segment_new/released_locked after a
 * segment of a pool was obtained or given back.
 */
#include "policy.h"

ga_private *ga_private_find_locked(ga_allocator_t *a, uint64_t id) {
  GA_ASSERT_LOCKED(a);
  for (ga_private *priv = a->pol.capture.privates; priv; priv = priv->next)
    if (priv->id == id) return priv;
  return NULL;
}

int ga_private_new_locked(ga_allocator_t *a, uint64_t id, ga_private **out) {
  GA_ASSERT_LOCKED(a);
  ga_private *priv = ga_host_calloc(1, sizeof *priv);
  if (!priv) return GA_DEV_ENOMEM;
  priv->id = id;
  for (int size_class = 0; size_class < 2; size_class++)
    ga_free_tree_init(&priv->trees[size_class], &a->space);
  priv->next = a->pol.capture.privates;
  a->pol.capture.privates = priv;
  *out = priv;
  return 0;
}

void ga_private_delete_locked(ga_allocator_t *a, ga_private *priv) {
  GA_ASSERT_LOCKED(a);
  for (ga_private **p = &a->pol.capture.privates; *p; p = &(*p)->next)
    if (*p == priv) {
      *p = priv->next;
      free(priv);
      return;
    }
}

ga_private *ga_private_routed_locked(ga_allocator_t *a, ga_stream_t stream) {
  GA_ASSERT_LOCKED(a);
  for (ga_private *priv = a->pol.capture.privates; priv; priv = priv->next)
    for (int i = 0; i < priv->nstreams; i++)
      if (priv->streams[i] == stream) return priv;
  return NULL;
}

void ga_private_segment_new_locked(ga_allocator_t *a, ga_private *priv) {
  GA_ASSERT_LOCKED(a);
  (void)a;
  priv->nsegs++;
}

void ga_private_segment_released_locked(ga_allocator_t *a, ga_private *priv) {
  GA_ASSERT_LOCKED(a);
  GA_ASSERT(priv->nsegs > 0);
  priv->generation++; /* its addresses are gone */
  if (--priv->nsegs == 0 && priv->released && priv->nstreams == 0) ga_private_delete_locked(a, priv);
}

size_t ga_private_native_segments_locked(ga_allocator_t *a, ga_private *priv) {
  GA_ASSERT_LOCKED(a);
  size_t n = priv->nsegs;
  for (ga_segment *seg = a->space.segs; seg; seg = seg->next) n -= seg->priv == priv && seg->expandable;
  return n;
}

void ga_private_teardown_locked(ga_allocator_t *a) {
  GA_ASSERT_LOCKED(a);
  while (a->pol.capture.privates) {
    ga_private *priv = a->pol.capture.privates;
    a->pol.capture.privates = priv->next;
    free(priv);
  }
}

ga_status_t ga_private_generation_locked(ga_allocator_t *a, uint64_t id, uint64_t *gen) {
  GA_ASSERT_LOCKED(a);
  ga_private *priv = ga_private_find_locked(a, id);
  if (!priv) {
    ga_error_set("ga_pool_generation: there is no private pool %llu (never used, or released and gone)",
                 (unsigned long long)id);
    return GA_ERR_INVALID;
  }
  *gen = priv->generation;
  return GA_OK;
}
