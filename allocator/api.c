/* api.c — the public C API: validate arguments, take the allocator's lock,
 * dispatch to the policy. No policy lives here.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define CHECK_ALLOCATOR(fn)                          \
  do {                                               \
    if (!a) {                                        \
      ga_error_set("%s: the allocator is NULL", fn); \
      return GA_ERR_INVALID;                         \
    }                                                \
  } while (0)

/* ---- Lifetime ---- */

static ga_status_t create(const char *conf, const ga_config *cfg, ga_device *dev, int owns,
                          ga_allocator_t **out) {
  /* Aligned as its lock's line is (sizeof is a multiple of the alignment). */
  ga_allocator_t *a = aligned_alloc(_Alignof(ga_allocator_t), sizeof *a);
  if (a) memset(a, 0, sizeof *a);
  if (!a || ga_blockmap_init(&a->map)) {
    free(a);
    ga_error_set("ga_create: host out of memory");
    return GA_ERR_HOST_MEMORY;
  }
  size_t free_b = 0, total = 0;
  if (ga_dev_mem_info(dev, &free_b, &total)) {
    ga_error_set("ga_create: cannot query device memory: %s", dev->error);
    ga_blockmap_destroy(&a->map);
    free(a);
    return GA_ERR_DEVICE;
  }
  ga_lock_init(&a->mu);
  a->cfg = *cfg;
  snprintf(a->conf_text, sizeof a->conf_text, "%s", conf ? conf : "");
  a->dev = dev;
  a->owns_dev = owns;
  a->device_total = total;
  a->allowed_max = SIZE_MAX;
  a->fraction = 1.0;
  a->access[0] = dev->ordinal;
  a->naccess = 1;
  a->stats.max_split_size = cfg->max_split_size == SIZE_MAX ? -1 : (int64_t)cfg->max_split_size;
  if (ga_dev_granularity(dev, &a->gran) || a->gran == 0) a->gran = GA_SMALL_BUFFER;
  a->large_page = cfg->expandable_page_size ? cfg->expandable_page_size : cfg->large_segment_size;
  a->large_page = (a->large_page + a->gran - 1) / a->gran * a->gran;
  /* PyTorch reserves 1.125x the device's memory per expandable segment. */
  size_t want = total / 8 * 9;
  a->reserve_size = (want + a->large_page - 1) / a->large_page * a->large_page;
  if (cfg->memory_fraction < 1.0) {
    a->fraction = cfg->memory_fraction;
    a->allowed_max = (size_t)(cfg->memory_fraction * (double)total);
  }
  *out = a;
  return GA_OK;
}

static ga_status_t parse(const char *fn, const char *conf, ga_config *cfg) {
  char err[512];
  if (ga_config_parse(conf, cfg, err, sizeof err)) {
    ga_error_set("%s: %s", fn, err);
    return GA_ERR_CONFIG;
  }
  return GA_OK;
}

ga_status_t ga_create(const char *conf, int device, ga_allocator_t **out) {
  if (!out) {
    ga_error_set("ga_create: out is NULL");
    return GA_ERR_INVALID;
  }
  *out = NULL;
  if (!conf) conf = getenv("GARDENALLOC_CONF");
  ga_config cfg;
  ga_status_t st = parse("ga_create", conf, &cfg);
  if (st) return st;
  ga_device *dev;
  char err[512];
  const char *notice = NULL;
  int rc =
      ga_device_open(cfg.backend, device, cfg.sim_capacity, cfg.sim_devices, &dev, err, sizeof err, &notice);
  if (rc) {
    ga_error_set("ga_create: %s", err);
    return rc == GA_DEV_ENODEV ? GA_ERR_NO_BACKEND : GA_ERR_DEVICE;
  }
  static atomic_int noticed;
  if (notice && atomic_exchange(&noticed, 1) == 0) fprintf(stderr, "%s\n", notice);
  st = create(conf, &cfg, dev, 1, out);
  if (st) ga_dev_destroy(dev);
  return st;
}

ga_status_t ga_create_on_device(const char *conf, ga_device *dev, ga_allocator_t **out) {
  if (!out || !dev) {
    ga_error_set("ga_create_on_device: NULL argument");
    return GA_ERR_INVALID;
  }
  ga_config cfg;
  ga_status_t st = parse("ga_create_on_device", conf, &cfg);
  return st ? st : create(conf, &cfg, dev, 0, out);
}

ga_device *ga_allocator_device(ga_allocator_t *a) { return a ? a->dev : NULL; }

void ga_destroy(ga_allocator_t *a) {
  if (!a) return;
  ga_lock_acquire(&a->mu);
  (void)ga_stream_sync_all_locked(a);
  ga_stream_teardown_locked(a);
  ga_sleep_teardown_locked(a);
  ga_private_teardown_locked(a);
  ga_expandable_teardown_locked(a);
  ga_pages_teardown_locked(a);
  while (a->segs) {
    ga_segment *s = a->segs;
    a->segs = s->next;
    if (!s->expandable) (void)ga_dev_free(a->dev, (void *)s->base);
    free(s->backing);
    for (ga_block *b = s->head, *n; b; b = n) {
      n = b->next;
      free(b->uses);
      free(b);
    }
    free(s);
  }
  while (a->block_cache) {
    ga_block *b = a->block_cache;
    a->block_cache = b->next;
    free(b);
  }
  ga_blockmap_destroy(&a->map);
  free(a->history.v);
  if (a->owns_dev) ga_dev_destroy(a->dev);
  ga_lock_release(&a->mu);
  free(a);
}

/* ---- Allocation ---- */

ga_status_t ga_malloc(ga_allocator_t *a, size_t size, ga_stream_t stream, void **out) {
  CHECK_ALLOCATOR("ga_malloc");
  if (!out) {
    ga_error_set("ga_malloc: out is NULL");
    return GA_ERR_INVALID;
  }
  *out = NULL;
  if (size == 0) return GA_OK;
  ga_lock_acquire(&a->mu);
  ga_status_t st = ga_alloc_locked(a, size, stream, out);
  ga_lock_release(&a->mu);
  return st;
}

ga_status_t ga_free(ga_allocator_t *a, void *ptr) {
  CHECK_ALLOCATOR("ga_free");
  if (!ptr) return GA_OK;
  ga_lock_acquire(&a->mu);
  ga_status_t st = ga_free_locked(a, ptr);
  ga_lock_release(&a->mu);
  return st;
}

ga_status_t ga_record_stream(ga_allocator_t *a, void *ptr, ga_stream_t stream) {
  CHECK_ALLOCATOR("ga_record_stream");
  ga_lock_acquire(&a->mu);
  ga_status_t st = GA_OK;
  ga_block *b = ga_blockmap_get(&a->map, (uintptr_t)ptr);
  if (!b)
    st = ga_bad_pointer_locked(a, "ga_record_stream", ptr);
  else if (ga_stream_record_locked(a, b, stream)) {
    ga_error_set("ga_record_stream: host out of memory");
    st = GA_ERR_HOST_MEMORY;
  }
  ga_lock_release(&a->mu);
  return st;
}

ga_status_t ga_allocation_info(ga_allocator_t *a, void *ptr, size_t *requested, size_t *block,
                               ga_stream_t *stream) {
  CHECK_ALLOCATOR("ga_allocation_info");
  ga_lock_acquire(&a->mu);
  ga_status_t st = GA_OK;
  ga_block *b = ga_blockmap_get(&a->map, (uintptr_t)ptr);
  if (!b)
    st = ga_bad_pointer_locked(a, "ga_allocation_info", ptr);
  else {
    if (requested) *requested = b->requested;
    if (block) *block = b->size;
    if (stream) *stream = b->stream;
  }
  ga_lock_release(&a->mu);
  return st;
}

ga_status_t ga_allocation_size(ga_allocator_t *a, void *ptr, size_t *requested, size_t *block) {
  return ga_allocation_info(a, ptr, requested, block, NULL);
}

ga_status_t ga_allocation_base(ga_allocator_t *a, void *ptr, void **base, size_t *size) {
  CHECK_ALLOCATOR("ga_allocation_base");
  uintptr_t p = (uintptr_t)ptr;
  ga_status_t st = GA_ERR_BAD_POINTER;
  ga_lock_acquire(&a->mu);
  for (ga_segment *s = a->segs; s && st; s = s->next) {
    if (p < s->base || p - s->base >= s->size) continue;
    for (ga_block *b = s->head; b; b = b->next)
      if (p >= b->ptr && p - b->ptr < b->size && b->state == GA_BLOCK_ALLOCATED) {
        if (base) *base = (void *)b->ptr;
        if (size) *size = b->size;
        st = GA_OK;
        break;
      }
  }
  if (st) ga_error_set("ga_allocation_base: %p is not inside a live allocation", ptr);
  ga_lock_release(&a->mu);
  return st;
}

/* ---- Cache ---- */

ga_status_t ga_empty_cache(ga_allocator_t *a) {
  CHECK_ALLOCATOR("ga_empty_cache");
  ga_lock_acquire(&a->mu);
  int rc = ga_reclaim_all_locked(a);
  if (rc) ga_error_set("ga_empty_cache: %s", a->dev->error);
  ga_lock_release(&a->mu);
  return rc ? GA_ERR_DEVICE : GA_OK;
}

ga_status_t ga_set_memory_fraction(ga_allocator_t *a, double fraction) {
  CHECK_ALLOCATOR("ga_set_memory_fraction");
  if (!(fraction >= 0.0 && fraction <= 1.0)) {
    ga_error_set("ga_set_memory_fraction: invalid fraction %g; allowed: a number in [0, 1]", fraction);
    return GA_ERR_INVALID;
  }
  ga_lock_acquire(&a->mu);
  a->fraction = fraction;
  a->allowed_max = fraction < 1.0 ? (size_t)(fraction * (double)a->device_total) : SIZE_MAX;
  ga_lock_release(&a->mu);
  return GA_OK;
}

double ga_get_memory_fraction(ga_allocator_t *a) {
  if (!a) return 1.0;
  ga_lock_acquire(&a->mu);
  double f = a->fraction;
  ga_lock_release(&a->mu);
  return f;
}

/* ---- Statistics ---- */

ga_status_t ga_stats(ga_allocator_t *a, ga_stats_t *out) {
  CHECK_ALLOCATOR("ga_stats");
  if (!out) {
    ga_error_set("ga_stats: out is NULL");
    return GA_ERR_INVALID;
  }
  ga_lock_acquire(&a->mu);
  *out = a->stats;
  out->mapped_pages = a->stats.mapped_bytes.current / (int64_t)a->gran;
  out->cached_pages = a->stats.page_cache_bytes.current / (int64_t)a->gran;
  out->asleep_pages = (int64_t)a->nsleepers;
  memcpy(out->device_calls, a->dev->calls, sizeof out->device_calls);
  memcpy(out->device_failures, a->dev->failures, sizeof out->device_failures);
  ga_lock_release(&a->mu);
  return GA_OK;
}

static void each_stat(ga_stats_t *s, void (*fn)(ga_stat_t *)) {
#define GA_X(name, doc) \
  for (int p = 0; p < GA_POOL_COUNT; p++) fn(&s->name[p]);
  GA_POOL_STATS(GA_X)
#undef GA_X
  fn(&s->oversize_allocations);
  fn(&s->oversize_segments);
#define GA_X(name, doc) fn(&s->name);
  GA_EXTRA_STATS(GA_X)
#undef GA_X
}

static void peak_to_current(ga_stat_t *s) { s->peak = s->current; }
static void zero_accumulated(ga_stat_t *s) { s->allocated = s->freed = 0; }

ga_status_t ga_reset_peak_stats(ga_allocator_t *a) {
  CHECK_ALLOCATOR("ga_reset_peak_stats");
  ga_lock_acquire(&a->mu);
  each_stat(&a->stats, peak_to_current);
  ga_lock_release(&a->mu);
  return GA_OK;
}

ga_status_t ga_reset_accumulated_stats(ga_allocator_t *a) {
  CHECK_ALLOCATOR("ga_reset_accumulated_stats");
  ga_lock_acquire(&a->mu);
  each_stat(&a->stats, zero_accumulated);
  ga_stats_t *s = &a->stats;
  s->num_alloc_retries = s->num_ooms = s->num_sync_all_streams = 0;
  s->num_device_alloc = s->num_device_free = 0;
  s->num_unmap_syncs = s->num_pages_moved = 0;
  ga_lock_release(&a->mu);
  return GA_OK;
}

/* ---- Checking and errors ---- */

int ga_check(ga_allocator_t *a) {
  if (!a) return 1;
  ga_lock_acquire(&a->mu);
  int broken = ga_check_locked(a);
  ga_lock_release(&a->mu);
  return broken;
}

const char *ga_status_str(ga_status_t status) {
  switch (status) {
    case GA_OK: return "GA_OK";
    case GA_ERR_INVALID: return "GA_ERR_INVALID";
    case GA_ERR_OOM: return "GA_ERR_OOM";
    case GA_ERR_CONFIG: return "GA_ERR_CONFIG";
    case GA_ERR_DEVICE: return "GA_ERR_DEVICE";
    case GA_ERR_BAD_POINTER: return "GA_ERR_BAD_POINTER";
    case GA_ERR_NO_BACKEND: return "GA_ERR_NO_BACKEND";
    case GA_ERR_UNSUPPORTED: return "GA_ERR_UNSUPPORTED";
    case GA_ERR_HOST_MEMORY: return "GA_ERR_HOST_MEMORY";
  }
  return "GA_ERR_UNKNOWN";
}

const char *ga_backend_name(ga_allocator_t *a) { return a ? a->dev->ops->name : "none"; }

ga_status_t ga_enable_peer_access(ga_allocator_t *a, int peer) {
  CHECK_ALLOCATOR("ga_enable_peer_access");
  if (peer < 0 || peer >= 64 || peer == a->dev->ordinal) {
    ga_error_set("ga_enable_peer_access: %d is not a peer of device %d (allowed: another device, 0 to 63)",
                 peer, a->dev->ordinal);
    return GA_ERR_INVALID;
  }
  ga_lock_acquire(&a->mu);
  ga_status_t st = GA_OK;
  int known = 0;
  for (int i = 0; i < a->naccess; i++) known |= a->access[i] == peer;
  if (!known) {
    a->access[a->naccess] = peer;
    int rc = ga_expandable_grant_locked(a, a->access, a->naccess + 1);
    if (rc) {
      ga_error_set("ga_enable_peer_access: %s", a->dev->error);
      (void)ga_expandable_grant_locked(a, a->access, a->naccess); /* back to what it was */
      st = GA_ERR_DEVICE;
    } else {
      a->naccess++;
    }
  }
  ga_lock_release(&a->mu);
  return st;
}

ga_status_t ga_mem_get_info(ga_allocator_t *a, size_t *free_bytes, size_t *total_bytes) {
  CHECK_ALLOCATOR("ga_mem_get_info");
  size_t f = 0, t = 0;
  ga_lock_acquire(&a->mu);
  int rc = ga_dev_mem_info(a->dev, &f, &t);
  if (rc) ga_error_set("ga_mem_get_info: %s", a->dev->error);
  ga_lock_release(&a->mu);
  if (rc) return GA_ERR_DEVICE;
  if (free_bytes) *free_bytes = f;
  if (total_bytes) *total_bytes = t;
  return GA_OK;
}
