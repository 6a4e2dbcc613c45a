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
 */
#include <stdio.h>
#include <string.h>

#include "../internal.h"

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

/* Does only sleeping memory occupy granule g (absolute index) of s? b is the
 * block holding its first byte. */
static int granule_sleeps(ga_allocator_t *a, uint32_t mask, const ga_block *b, size_t g) {
  uintptr_t end = (g + 1) * a->space.gran;
  for (; b && b->ptr < end; b = b->next)
    if (!sleeps(mask, b)) return 0;
  return 1;
}

static int sleep_granule(ga_allocator_t *a, ga_segment *s, size_t g, int offload) {
  size_t i = g - s->base / a->space.gran;
  void *va = (void *)(g * a->space.gran), *host = NULL;
  if (GA_VEC_ROOM(a->pol.sleep.sleepers, a->pol.sleep.cap_sleepers, a->pol.sleep.nsleepers + 1) ||
      ga_pages_room_locked(a, 1))
    return -1;
  if (offload) {
    if (!(host = malloc(a->space.gran))) return -1;
    int rc = ga_dev_copy(a->dev, host, va, a->space.gran, 1);
    if (rc) {
      free(host);
      return rc;
    }
  }
  int rc = ga_dev_unmap(a->dev, va, a->space.gran);
  if (rc) {
    free(host);
    return rc;
  }
  ga_granule p = s->granules[i];
  p.handle->nmapped--;
  (void)ga_pages_put_locked(a, p);
  s->granules[i] = (ga_granule){.handle = NULL, .idx = GA_GRANULE_ASLEEP};
  a->pol.sleep.sleepers[a->pol.sleep.nsleepers++] = (ga_sleeper){s, i, host, 0};
  ga_stat_dec(&a->stats.mapped_bytes, a->space.gran);
  ga_history_add_locked(a, GA_H_SEGMENT_UNMAP, (uintptr_t)va, a->space.gran, s->stream);
  return 0;
}

static int sleep_segment(ga_allocator_t *a, ga_segment *s, uint32_t mask, int offload) {
  for (ga_block *b = s->head; b; b = b->next) {
    if (!sleeps(mask, b)) continue;
    size_t g0 = b->ptr / a->space.gran, g1 = (b->ptr + b->size + a->space.gran - 1) / a->space.gran;
    for (size_t g = g0; g < g1; g++) {
      ga_granule *p = &s->granules[g - s->base / a->space.gran];
      if (!p->handle) continue; /* already asleep (shared with the previous block) */
      const ga_block *first = b;
      while (first->prev && first->ptr > g * a->space.gran) first = first->prev;
      if (!granule_sleeps(a, mask, first, g)) continue;
      int rc = sleep_granule(a, s, g, offload);
      if (rc) return rc;
      for (ga_block *x = (ga_block *)first; x && x->ptr < (g + 1) * a->space.gran; x = x->next) x->asleep = 1;
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
 * copy their contents back now. 0 or the failing call's code. */
static int restore_pending(ga_allocator_t *a) {
  for (size_t i = 0; i < a->pol.sleep.nsleepers;) {
    ga_sleeper *z = &a->pol.sleep.sleepers[i];
    if (!z->restore) {
      i++;
      continue;
    }
    void *va = (void *)(z->seg->base + z->granule * a->space.gran);
    int rc = ga_dev_set_access(a->dev, va, a->space.gran, a->space.access, a->space.naccess);
    if (!rc && z->host) rc = ga_dev_copy(a->dev, z->host, va, a->space.gran, 0);
    if (rc) return rc;
    free(z->host);
    *z = a->pol.sleep.sleepers[--a->pol.sleep.nsleepers];
    if (!a->pol.sleep.nsleepers) all_awake(a);
  }
  return 0;
}

ga_status_t ga_sleep_locked(ga_allocator_t *a, const char *tags, unsigned flags) {
  ga_status_t st = GA_OK;
  int rc = 0;
  uint32_t mask = tag_mask(a, tags);
  if (tags && *tags && !a->cfg.expandable_segments) {
    ga_error_set(
        "ga_sleep: releasing live allocations needs expandable_segments:True (native segments cannot "
        "keep their addresses without their memory)");
    st = GA_ERR_UNSUPPORTED;
  } else if ((rc = restore_pending(a))) {
    ga_error_set("ga_sleep: a previous ga_wake left contents to restore, and that failed: %s", a->dev->error);
    st = GA_ERR_DEVICE;
  } else if ((rc = ga_dev_synchronize(a->dev)) || (rc = ga_reclaim_all_locked(a))) {
    ga_error_set("ga_sleep: %s", a->dev->error);
    st = GA_ERR_DEVICE;
  } else if (mask) {
    for (ga_segment *s = a->space.segs; s && !rc; s = s->next)
      if (s->expandable) rc = sleep_segment(a, s, mask, flags & GA_SLEEP_OFFLOAD);
    if (rc) {
      ga_error_set("ga_sleep: %s; %zu pages sleep, the rest stays mapped",
                   rc < 0 ? "host out of memory" : a->dev->error, a->pol.sleep.nsleepers);
      st = rc < 0 ? GA_ERR_HOST_MEMORY : GA_ERR_DEVICE;
    }
    (void)ga_pages_trim_locked(a, 0); /* pages with nothing mapped go back */
  }
  return st;
}

/* ---- Wake ---- */

ga_status_t ga_wake_locked(ga_allocator_t *a) {
  int refused = 0, rc = restore_pending(a), restore_failed = rc != 0;
  if (a->pol.sleep.nsleepers && !rc)
    rc = ga_pages_obtain_locked(a, a->pol.sleep.nsleepers, GA_P_LARGE, a->pol.large_page, 0, 0, &refused);
  /* Map what the cache holds now, even if not everything could be had. */
  while (!restore_failed && a->pol.sleep.nsleepers && a->space.ncache && (rc == 0 || rc == GA_DEV_EOOM)) {
    ga_sleeper *z = &a->pol.sleep.sleepers[a->pol.sleep.nsleepers - 1];
    void *va = (void *)(z->seg->base + z->granule * a->space.gran);
    ga_granule p = ga_pages_take_locked(a);
    int r = ga_dev_map(a->dev, va, a->space.gran, p.handle->h, p.idx * a->space.gran), mapped = r == 0;
    if (!r)
      r = ga_dev_set_access(a->dev, va, a->space.gran, a->space.access,
                            a->space.naccess); /* mapped without access */
    if (!r && z->host) r = ga_dev_copy(a->dev, z->host, va, a->space.gran, 0);
    if (r) { /* undo this granule; it stays asleep */
      if (mapped && ga_dev_unmap(a->dev, va, a->space.gran) != 0) {
        /* Cannot take the mapping back: it is the granule's memory now, and
         * the contents (kept) are copied in by the next ga_wake. */
        z->seg->granules[z->granule] = p;
        p.handle->nmapped++;
        ga_stat_inc(&a->stats.mapped_bytes, a->space.gran);
        z->restore = 1;
      } else {
        (void)ga_pages_put_locked(a, p); /* room: it was just taken */
      }
      rc = r;
      break;
    }
    z->seg->granules[z->granule] = p;
    p.handle->nmapped++;
    ga_stat_inc(&a->stats.mapped_bytes, a->space.gran);
    ga_history_add_locked(a, GA_H_SEGMENT_MAP, (uintptr_t)va, a->space.gran, z->seg->stream);
    free(z->host);
    a->pol.sleep.nsleepers--;
  }
  ga_status_t st = GA_OK;
  if (a->pol.sleep.nsleepers) {
    char left[32];
    ga_format_size(a->pol.sleep.nsleepers * a->space.gran, left, sizeof left);
    if (rc == GA_DEV_EOOM && !restore_failed) {
      ga_alloc_report_oom_locked(a, a->pol.sleep.nsleepers * a->space.gran,
                                 a->pol.sleep.nsleepers * a->space.gran, refused);
      char report[1800];
      snprintf(report, sizeof report, "%s", ga_last_error());
      ga_error_set("ga_wake: %s still asleep. %s", left, report);
      st = GA_ERR_OOM;
    } else {
      ga_error_set("ga_wake: %s still asleep: %s", left, rc < 0 ? "host out of memory" : a->dev->error);
      st = rc < 0 ? GA_ERR_HOST_MEMORY : GA_ERR_DEVICE;
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
