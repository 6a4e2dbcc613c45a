/* sleep.c — ga_sleep / ga_wake: give physical memory back while keeping
 * virtual addresses, for engines that park a model (weights offloaded to the
 * host, KV caches discarded) and resume it with every pointer and captured
 * graph still valid.
 *
 * Only expandable segments can do this: a granule that only tagged live
 * allocations occupy is (copied out and) unmapped, its place in the segment
 * marked asleep, and its memory goes to the page cache, from which whole
 * pages go back to the device. Wake maps memory again at the same addresses.
 * Sleeping allocations cannot be freed until then (ga_free refuses them).
 * This file decides (tags, which granules sleep, the wake ladder); the
 * granule mechanics are segment/expandable.c's.
 */
#include <stdio.h>
#include <string.h>

#include "policy.h"

/* ---- Tags ---- */

static int tag_index(ga_allocator_t *a, const char *tag, size_t len, int create) {
  for (int i = 0; i < a->pol.sleep.ntags; i++)
    if (strlen(a->pol.sleep.tags[i]) == len && strncmp(a->pol.sleep.tags[i], tag, len) == 0) return i;
  if (!create || a->pol.sleep.ntags == 32 || len >= sizeof a->pol.sleep.tags[0]) return -1;
  memcpy(a->pol.sleep.tags[a->pol.sleep.ntags], tag, len);
  a->pol.sleep.tags[a->pol.sleep.ntags][len] = 0;
  return a->pol.sleep.ntags++;
}

ga_status_t ga_tag_locked(ga_allocator_t *a, void *ptr, const char *tag) {
  ga_status_t st = GA_OK;
  ga_block *b = ga_blockmap_get(&a->pol.map, (uintptr_t)ptr);
  int idx = b && tag && *tag ? tag_index(a, tag, strlen(tag), 1) : -1;
  if (!b)
    st = ga_bad_pointer_locked(a, "ga_tag", ptr);
  else if (tag && *tag && idx < 0) {
    ga_error_set("ga_tag: '%s' is refused (tags have at most 31 characters, and 32 distinct tags at most)",
                 tag);
    st = GA_ERR_INVALID;
  } else {
    b->tag = (uint8_t)(idx + 1);
  }
  return st;
}

/* Bit i set for tag i named in the comma-separated list. */
static uint32_t tag_mask(ga_allocator_t *a, const char *tags) {
  uint32_t mask = 0;
  for (const char *p = tags; p && *p;) {
    const char *e = strchr(p, ',');
    size_t len = e ? (size_t)(e - p) : strlen(p);
    int i = tag_index(a, p, len, 0);
    if (i >= 0) mask |= 1u << i;
    p = e ? e + 1 : p + len;
  }
  return mask;
}

/* ---- Sleep ---- */

static int sleeps(uint32_t mask, const ga_block *b) {
  return b->state == GA_BLOCK_ALLOCATED && b->tag && (mask >> (b->tag - 1)) & 1;
}

/* The block of s holding address p (walking from b). */
static ga_block *block_at(ga_block *b, uintptr_t p) {
  while (b->prev && b->ptr > p) b = b->prev;
  while (b->next && b->ptr + b->size <= p) b = b->next;
  return b;
}

/* Does only sleeping memory occupy granules [i, i + n) of b's segment? */
static int granules_sleep(ga_allocator_t *a, uint32_t mask, ga_block *b, size_t i, size_t n) {
  uintptr_t lo = b->seg->base + i * a->space.gran, hi = lo + n * a->space.gran;
  for (b = block_at(b, lo); b && b->ptr < hi; b = b->next)
    if (!sleeps(mask, b)) return 0;
  return 1;
}

/* The mapping of n granules at granule i of s goes to sleep: its bytes to the
 * host when offloading, its memory to the page cache, each granule's place
 * recorded for the wake. */
static int sleep_mapping(ga_allocator_t *a, ga_segment *s, size_t i, size_t n, int offload) {
  void **hosts = calloc(n, sizeof *hosts);
  int rc = hosts ? 0 : GA_DEV_ENOMEM;
  if (!rc) rc = GA_VEC_ROOM(a->pol.sleep.sleepers, a->pol.sleep.cap_sleepers, a->pol.sleep.nsleepers + n);
  for (size_t j = 0; !rc && offload && j < n; j++)
    if (!(hosts[j] = malloc(a->space.gran))) rc = GA_DEV_ENOMEM;
  if (!rc) rc = ga_expandable_sleep_locked(a, s, i, hosts);
  /* Contents discarded under a graph pool's addresses: its graphs must know. */
  if (!rc && !offload && s->priv) s->priv->generation++;
  for (size_t j = 0; !rc && j < n; j++)
    a->pol.sleep.sleepers[a->pol.sleep.nsleepers++] = (ga_sleeper){s, i + j, hosts[j], 0};
  for (size_t j = 0; rc && hosts && j < n; j++) free(hosts[j]);
  free(hosts);
  return rc;
}

/* A granule sleeps with its whole mapping (one unmap call), so a mapping
 * shared with memory that stays awake stays mapped. */
static int sleep_segment(ga_allocator_t *a, ga_segment *s, uint32_t mask, int offload) {
  size_t g = a->space.gran;
  for (ga_block *b = s->head; b; b = b->next) {
    if (!sleeps(mask, b)) continue;
    size_t i0 = (b->ptr - s->base) / g, i1 = (b->ptr - s->base + b->size + g - 1) / g;
    for (size_t i = i0, start, n; i < i1; i++) {
      if (!ga_expandable_mapping_locked(s, i, &start, &n)) continue; /* asleep already */
      if (!granules_sleep(a, mask, b, start, n)) continue;
      int rc = sleep_mapping(a, s, start, n, offload);
      if (rc) return rc;
      uintptr_t lo = s->base + start * g, hi = lo + n * g;
      for (ga_block *x = block_at(b, lo); x && x->ptr < hi; x = x->next) x->asleep = 1;
    }
  }
  return 0;
}

/* Nothing sleeps any more: every allocation may be freed again. */
static void all_awake(ga_allocator_t *a) {
  for (ga_segment *s = a->space.segs; s; s = s->next)
    for (ga_block *b = s->head; b; b = b->next) b->asleep = 0;
}

/* Granules a failed wake mapped again but could neither fill nor unmap:
 * finish them now (access, contents). */
static int restore_pending(ga_allocator_t *a) {
  for (size_t i = 0; i < a->pol.sleep.nsleepers;) {
    ga_sleeper *z = &a->pol.sleep.sleepers[i];
    if (!z->restore) {
      i++;
      continue;
    }
    int rc = ga_expandable_fill_locked(a, z->seg, z->granule, z->host);
    if (rc) return rc;
    free(z->host);
    *z = a->pol.sleep.sleepers[--a->pol.sleep.nsleepers];
    if (!a->pol.sleep.nsleepers) all_awake(a);
  }
  return 0;
}

/* During a capture the device calls below run in the relaxed capture mode;
 * a call that would invalidate the capture even so (waiting for the device)
 * is not made. */
static ga_status_t sleep_locked(ga_allocator_t *a, const char *tags, unsigned flags);

ga_status_t ga_sleep_locked(ga_allocator_t *a, const char *tags, unsigned flags) {
  ga_relax r;
  /* The arguments first: a refused call makes no device call. */
  if (tags && *tags && !a->cfg.expandable_segments) {
    ga_error_set(
        "ga_sleep: releasing live allocations needs expandable_segments:True (native segments cannot "
        "keep their addresses without their memory)");
    return GA_ERR_UNSUPPORTED;
  }
  if (tags && *tags && a->pol.capture.routing) {
    ga_error_set(
        "ga_sleep: a CUDA-graph capture is underway (a stream is routed to a private pool): live "
        "allocations can be released only once the device is idle, and waiting for it would invalidate "
        "the capture; nothing was put to sleep (call ga_sleep after ga_end_allocate_to_pool)");
    return GA_ERR_INVALID;
  }
  if (ga_capture_relax_locked(a, &r)) {
    ga_error_set("ga_sleep: cannot enter the relaxed capture mode during a capture: %s", a->dev->error);
    return GA_ERR_DEVICE;
  }
  ga_status_t st = sleep_locked(a, tags, flags);
  ga_capture_unrelax_locked(a, &r);
  return st;
}

static ga_status_t sleep_locked(ga_allocator_t *a, const char *tags, unsigned flags) {
  ga_status_t st = GA_OK;
  int rc = 0;
  uint32_t mask = tag_mask(a, tags);
  if ((rc = restore_pending(a))) {
    ga_error_set("ga_sleep: a previous ga_wake left contents to restore, and that failed: %s", a->dev->error);
    st = GA_ERR_DEVICE;
  } else if ((!a->pol.capture.routing && (rc = ga_dev_synchronize(a->dev))) ||
             (rc = ga_reclaim_all_locked(a))) {
    ga_error_set("ga_sleep: %s", rc == GA_DEV_ENOMEM ? "host out of memory" : a->dev->error);
    st = rc == GA_DEV_ENOMEM ? GA_ERR_HOST_MEMORY : GA_ERR_DEVICE;
  } else if (mask) {
    for (ga_segment *s = a->space.segs; s && !rc; s = s->next)
      if (s->expandable) rc = sleep_segment(a, s, mask, flags & GA_SLEEP_OFFLOAD);
    if (rc) {
      ga_error_set("ga_sleep: %s; %zu pages sleep, the rest stays mapped",
                   rc == GA_DEV_ENOMEM ? "host out of memory" : a->dev->error, a->pol.sleep.nsleepers);
      st = rc == GA_DEV_ENOMEM ? GA_ERR_HOST_MEMORY : GA_ERR_DEVICE;
    }
    (void)ga_pages_trim_locked(a, 0); /* pages with nothing mapped go back */
  }
  return st;
}

/* ---- Wake ---- */

/* Maps the last sleeper's granule again with its contents. */
static int wake_one(ga_allocator_t *a) {
  ga_sleeper *z = &a->pol.sleep.sleepers[a->pol.sleep.nsleepers - 1];
  int stuck;
  int rc = ga_expandable_map_granule_locked(a, z->seg, z->granule, z->host, &stuck);
  if (rc) {
    /* It stays asleep; a mapping that could not be taken back is its memory
     * now, and the contents (kept) are copied in by the next wake. */
    z->restore = stuck;
    return rc;
  }
  free(z->host); /* the map recorded its history event */
  a->pol.sleep.nsleepers--;
  return 0;
}

static ga_status_t wake_locked(ga_allocator_t *a);

/* During a capture, in the relaxed capture mode (nothing moves then, as in
 * ga_malloc: the memory comes from the cache or new handles). */
ga_status_t ga_wake_locked(ga_allocator_t *a) {
  ga_relax r;
  if (ga_capture_relax_locked(a, &r)) {
    ga_error_set("ga_wake: cannot enter the relaxed capture mode during a capture: %s", a->dev->error);
    return GA_ERR_DEVICE;
  }
  ga_status_t st = wake_locked(a);
  ga_capture_unrelax_locked(a, &r);
  return st;
}

static ga_status_t wake_locked(ga_allocator_t *a) {
  int refused = 0, rc = restore_pending(a), restore_failed = rc != 0;
  size_t g = a->space.gran;
  if (a->pol.sleep.nsleepers && !rc)
    rc = ga_move_obtain_locked(a, a->pol.sleep.nsleepers, GA_P_LARGE, a->pol.large_page, 0, 0, &refused);
  /* Map what the cache holds now, even if not everything could be had. */
  while (!restore_failed && a->pol.sleep.nsleepers && a->space.ncache && (rc == 0 || rc == GA_DEV_EOOM)) {
    int r = wake_one(a);
    if (r) {
      rc = r;
      break;
    }
  }
  ga_status_t st = GA_OK;
  if (a->pol.sleep.nsleepers) {
    char left[32];
    ga_format_size(a->pol.sleep.nsleepers * g, left, sizeof left);
    if (rc == GA_DEV_EOOM && !restore_failed) {
      ga_alloc_report_oom_locked(a, a->pol.sleep.nsleepers * g, a->pol.sleep.nsleepers * g, refused);
      char report[1800];
      snprintf(report, sizeof report, "%s", ga_error_text());
      ga_error_set("ga_wake: %s still asleep. %s", left, report);
      st = GA_ERR_OOM;
    } else {
      ga_error_set("ga_wake: %s still asleep: %s", left,
                   rc == GA_DEV_ENOMEM ? "host out of memory" : a->dev->error);
      st = rc == GA_DEV_ENOMEM ? GA_ERR_HOST_MEMORY : GA_ERR_DEVICE;
    }
  } else {
    all_awake(a);
  }
  return st;
}

void ga_sleep_teardown_locked(ga_allocator_t *a) {
  for (size_t i = 0; i < a->pol.sleep.nsleepers; i++) free(a->pol.sleep.sleepers[i].host);
  free(a->pol.sleep.sleepers);
  a->pol.sleep.sleepers = NULL;
  a->pol.sleep.nsleepers = a->pol.sleep.cap_sleepers = 0;
}
