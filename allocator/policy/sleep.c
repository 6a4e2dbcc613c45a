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
  GA_ASSERT_LOCKED(a);
  ga_status_t st = GA_OK;
  ga_block *b = ga_block_live_locked(a, (uintptr_t)ptr);
  int idx = b && tag && *tag ? tag_index(a, tag, strlen(tag), 1) : -1;
  if (!b)
    st = ga_bad_pointer_locked(a, "ga_tag", ptr);
  else if (tag && *tag && idx < 0) {
    ga_error_set("ga_tag: '%s' is refused (tags have at most 31 characters, and 32 distinct tags at most)",
                 tag);
    st = GA_ERR_INVALID;
  } else if (idx >= 0 && a->pol.ipc && ga_ipc_exported_locked(a, b->ptr)) {
    ga_error_set("ga_tag: %p is exported (ga_ipc_export): an exported allocation must not sleep", ptr);
    st = GA_ERR_INVALID;
  } else {
    b->tag = (uint8_t)(idx + 1);
  }
  return st;
}

ga_status_t ga_sleep_mode_locked(ga_allocator_t *a, const char *tag, int mode) {
  GA_ASSERT_LOCKED(a);
  if (mode != GA_RESTORE_NONE && mode != GA_RESTORE_ZERO && mode != GA_RESTORE_HOST) {
    ga_error_set("ga_sleep_mode: mode %d is not GA_RESTORE_NONE, GA_RESTORE_ZERO or GA_RESTORE_HOST", mode);
    return GA_ERR_INVALID;
  }
  int idx = tag && *tag ? tag_index(a, tag, strlen(tag), 1) : -1;
  if (idx < 0) {
    ga_error_set("ga_sleep_mode: tag '%s' is refused (1 to 31 characters, 32 distinct tags at most)",
                 tag ? tag : "(null)");
    return GA_ERR_INVALID;
  }
  a->pol.sleep.modes[idx] = (uint8_t)(mode + 1);
  return GA_OK;
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

/* ---- Host stores: where offloaded granules wait ----
 * Each offloaded granule's bytes go to a buffer of their own (one granule,
 * copied in one call), pinned host memory when the device gives it: the
 * copies then run at the bus's pinned rate instead of being staged by the
 * driver through its own pinned buffers. A bounded pinned buffer reused per
 * chunk would not be faster: with synchronous copies it adds a host memcpy
 * per chunk, which is what the driver's staging of pageable memory does.
 * So a 100 GiB sleep pins 100 GiB, a granule (2 MiB) per host_alloc, as
 * vLLM's sleep mode pins its CPU copy of the weights. After the wake the
 * buffers stay pinned for the next sleep (pinning costs more than a copy);
 * ga_sleep(a, NULL, 0) and ga_destroy give them back. When the device
 * refuses to pin, that granule and the rest of the sleep go to plain
 * (pageable) memory: slower, nothing lost (device_failures counts it). */

static void *store_get(ga_allocator_t *a, int *pinned) {
  size_t g = a->space.gran;
  *pinned = 1;
  if (a->pol.sleep.npinned) return a->pol.sleep.pinned[--a->pol.sleep.npinned];
  void *p = NULL;
  /* Room to keep it first, so that giving it back never needs memory. */
  if (!a->pol.sleep.pin_refused &&
      !GA_VEC_ROOM(a->pol.sleep.pinned, a->pol.sleep.cap_pinned, a->pol.sleep.pinned_total + 1)) {
    if (ga_dev_host_alloc(a->dev, g, &p) == 0) {
      a->pol.sleep.pinned_total++;
      return p;
    }
    a->pol.sleep.pin_refused = 1;
  }
  *pinned = 0;
  return ga_host_malloc(g);
}

/* A store no sleeper needs any more: a pinned one is kept for the next. */
static void store_put(ga_allocator_t *a, void *p, int pinned) {
  if (!pinned) {
    free(p);
    return;
  }
  GA_ASSERT(a->pol.sleep.npinned < a->pol.sleep.cap_pinned);
  a->pol.sleep.pinned[a->pol.sleep.npinned++] = p;
}

/* Gives the kept pinned buffers back to the device. One it refuses stays
 * kept (the next call tries again). */
static int pinned_release(ga_allocator_t *a) {
  while (a->pol.sleep.npinned) {
    int rc = ga_dev_host_free(a->dev, a->pol.sleep.pinned[a->pol.sleep.npinned - 1]);
    if (rc) return rc;
    a->pol.sleep.npinned--;
    a->pol.sleep.pinned_total--;
  }
  return 0;
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

/* The mapping of n granules at granule i of seg goes to sleep: its bytes to the
 * host when offloading, its memory to the page cache, each granule's place
 * recorded for the wake. */
static int sleep_mapping(ga_allocator_t *a, ga_segment *seg, size_t i, size_t n, int mode) {
  int offload = mode == GA_RESTORE_HOST;
  void **hosts = ga_host_calloc(n, sizeof *hosts);
  int *pinned = ga_host_calloc(n, sizeof *pinned);
  int rc = hosts && pinned ? 0 : GA_DEV_ENOMEM;
  if (!rc) rc = GA_VEC_ROOM(a->pol.sleep.sleepers, a->pol.sleep.cap_sleepers, a->pol.sleep.nsleepers + n);
  for (size_t j = 0; !rc && offload && j < n; j++)
    if (!(hosts[j] = store_get(a, &pinned[j]))) rc = GA_DEV_ENOMEM;
  if (!rc) rc = ga_expandable_sleep_locked(&a->space, seg, i, hosts);
  /* Contents discarded under a graph pool's addresses: its graphs must know. */
  if (!rc && mode != GA_RESTORE_HOST && seg->priv) seg->priv->generation++;
  for (size_t j = 0; !rc && j < n; j++)
    a->pol.sleep.sleepers[a->pol.sleep.nsleepers++] =
        (ga_sleeper){seg, i + j, hosts[j], 0, mode == GA_RESTORE_ZERO, pinned[j]};
  for (size_t j = 0; rc && hosts && pinned && j < n; j++)
    if (hosts[j]) store_put(a, hosts[j], pinned[j]);
  free(hosts);
  free(pinned);
  return rc;
}

/* A granule sleeps with its whole mapping (one unmap call), so a mapping
 * shared with memory that stays awake stays mapped. */
/* The restore mode of a tag: its own (ga_sleep_mode), else the flags'. */
static int mode_of(ga_allocator_t *a, const ga_block *b, int offload) {
  int m = a->pol.sleep.modes[b->tag - 1];
  return m ? m - 1 : offload ? GA_RESTORE_HOST : GA_RESTORE_NONE;
}

/* The mode of a mapping: the most any of its allocations asks for. */
static int mapping_mode(ga_allocator_t *a, ga_block *b, size_t i, size_t n, int offload) {
  uintptr_t lo = b->seg->base + i * a->space.gran, hi = lo + n * a->space.gran;
  int mode = GA_RESTORE_NONE;
  for (b = block_at(b, lo); b && b->ptr < hi; b = b->next) {
    int m = mode_of(a, b, offload);
    if (m == GA_RESTORE_HOST || (m == GA_RESTORE_ZERO && mode == GA_RESTORE_NONE)) mode = m;
  }
  return mode;
}

static int sleep_segment(ga_allocator_t *a, ga_segment *seg, uint32_t mask, int offload) {
  size_t g = a->space.gran;
  for (ga_block *b = seg->head; b; b = b->next) {
    if (!sleeps(mask, b)) continue;
    size_t i0 = (b->ptr - seg->base) / g, i1 = (b->ptr - seg->base + b->size + g - 1) / g;
    for (size_t i = i0, start, n; i < i1; i++) {
      if (!ga_expandable_mapping_locked(seg, i, &start, &n)) continue; /* asleep already */
      if (!granules_sleep(a, mask, b, start, n)) continue;
      int rc = sleep_mapping(a, seg, start, n, mapping_mode(a, b, start, n, offload));
      if (rc) return rc;
      uintptr_t lo = seg->base + start * g, hi = lo + n * g;
      for (ga_block *x = block_at(b, lo); x && x->ptr < hi; x = x->next) x->asleep = 1;
    }
  }
  return 0;
}

/* Nothing sleeps any more: every allocation may be freed again. */
static void all_awake(ga_allocator_t *a) {
  for (ga_segment *seg = a->space.segs; seg; seg = seg->next)
    for (ga_block *b = seg->head; b; b = b->next) b->asleep = 0;
}

ga_status_t ga_free_at_wake_locked(ga_allocator_t *a, void *ptr) {
  GA_ASSERT_LOCKED(a);
  ga_block *b = ga_block_live_locked(a, (uintptr_t)ptr);
  if (!b || !b->asleep) return ga_free_locked(a, ptr);
  if (!b->free_at_wake) a->pol.sleep.nfree_at_wake++;
  b->free_at_wake = 1;
  return GA_OK;
}

/* Everything is awake: free what PyTorch freed while it slept. */
static void free_woken(ga_allocator_t *a) {
  while (a->pol.sleep.nfree_at_wake) {
    ga_block *hit = NULL;
    for (ga_segment *seg = a->space.segs; seg && !hit; seg = seg->next)
      for (ga_block *b = seg->head; b && !hit; b = b->next)
        if (b->free_at_wake) hit = b;
    if (!hit) break;
    hit->free_at_wake = 0;
    a->pol.sleep.nfree_at_wake--;
    /* Freed as ga_free frees (a failed stream wait quarantines it). */
    (void)ga_free_locked(a, (void *)hit->ptr);
  }
  a->pol.sleep.nfree_at_wake = 0;
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
    void *zbuf = z->zero ? ga_host_calloc(1, a->space.gran) : NULL;
    if (z->zero && !zbuf) return GA_DEV_ENOMEM;
    int rc = ga_expandable_fill_locked(&a->space, z->seg, z->granule, z->zero ? zbuf : z->host);
    free(zbuf);
    if (rc) return rc;
    if (z->host) store_put(a, z->host, z->pinned);
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
  GA_ASSERT_LOCKED(a);
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

/* Waits for the streams that used the allocations about to sleep (their own
 * and those of ga_record_stream), each once, so that no kernel still running
 * on them loses its memory; other streams and the rest of the device are not
 * waited for. */
static int wait_sleepers(ga_allocator_t *a, uint32_t mask) {
  ga_stream_t done[64];
  size_t ndone = 0;
  int all = 0;
  for (ga_segment *seg = a->space.segs; seg; seg = seg->next) {
    if (!seg->expandable) continue;
    for (ga_block *b = seg->head; b; b = b->next) {
      if (!sleeps(mask, b)) continue;
      for (uint32_t k = 0; k <= b->nuses; k++) {
        ga_stream_t st = k ? b->uses[k - 1] : b->stream;
        size_t j = 0;
        while (j < ndone && done[j] != st) j++;
        if (j < ndone) continue;
        if (ndone == sizeof done / sizeof done[0]) {
          all = 1; /* too many streams to track: wait for every one */
          break;
        }
        done[ndone++] = st;
        int rc = ga_dev_stream_synchronize(a->dev, st);
        if (rc) return rc;
      }
    }
  }
  return all ? ga_dev_synchronize(a->dev) : 0;
}

static ga_status_t sleep_locked(ga_allocator_t *a, const char *tags, unsigned flags) {
  GA_ASSERT_LOCKED(a);
  ga_status_t st = GA_OK;
  int rc = 0;
  uint32_t mask = tag_mask(a, tags);
  a->pol.sleep.pin_refused = 0;
  if ((rc = restore_pending(a))) {
    ga_error_set("ga_sleep: a previous ga_wake left contents to restore, and that failed: %s", a->dev->error);
    st = GA_ERR_DEVICE;
  } else if ((!a->pol.capture.routing && (rc = wait_sleepers(a, mask))) || (rc = ga_reclaim_all_locked(a))) {
    st = ga_fail(rc, "ga_sleep", a->dev->error, NULL);
  } else if (mask) {
    for (ga_segment *seg = a->space.segs; seg && !rc; seg = seg->next)
      if (seg->expandable) rc = sleep_segment(a, seg, mask, flags & GA_SLEEP_OFFLOAD);
    if (rc) {
      ga_error_set("ga_sleep: %s; %zu granules sleep, the rest stays mapped", ga_err_words(rc, a->dev->error),
                   a->pol.sleep.nsleepers);
      st = ga_err_status(rc);
    }
    /* Pages with nothing mapped go back. One the device refuses stays in
     * the cache (ga_empty_cache tries again): the call says so. */
    int trc = ga_pages_release_locked(&a->space, 0);
    if (trc && st == GA_OK) {
      ga_error_set(
          "ga_sleep: everything tagged sleeps, but giving its pages back failed: %s; they stay cached",
          ga_err_words(trc, a->dev->error));
      st = ga_err_status(trc);
    }
  } else if (!(tags && *tags) && (rc = pinned_release(a))) {
    /* No tags: the pinned host buffers kept for offloading go back too. */
    char kept[32];
    ga_format_size(a->pol.sleep.npinned * a->space.gran, kept, sizeof kept);
    ga_error_set(
        "ga_sleep: the cache is empty, but unpinning host memory failed: %s; %s stays pinned (the next "
        "ga_sleep(a, NULL, 0) tries again)",
        ga_err_words(rc, a->dev->error), kept);
    st = ga_err_status(rc);
  }
  return st;
}

/* ---- Wake ---- */

/* The granule of sleeper z, mapped by this wake, goes back to sleep (its
 * contents are still on the host when it had any). */
static int unwake(ga_allocator_t *a, ga_sleeper *z) {
  void *none = NULL;
  return ga_expandable_sleep_locked(&a->space, z->seg, z->granule, &none);
}

/* A failed wake gives back the pages it obtained. One the device refuses
 * stays cached (ga_empty_cache tries again); the refusal's words go to
 * `refused` (left as it is when every page went back), and the wake's own
 * failure stays in a->dev->error. */
static void give_back(ga_allocator_t *a, char *refused, size_t cap) {
  char why[sizeof a->dev->error];
  memcpy(why, a->dev->error, sizeof why);
  int rc = ga_pages_release_locked(&a->space, 0);
  if (rc && !refused[0]) snprintf(refused, cap, "%s", ga_err_words(rc, a->dev->error));
  memcpy(a->dev->error, why, sizeof why);
}

/* Maps every sleeper again, from the last. On a failure, those mapped here
 * go back to sleep (all or nothing) and their pages back to the device
 * (`refused` says why one could not). */
static int wake_all(ga_allocator_t *a, char *refused, size_t cap) {
  size_t n = a->pol.sleep.nsleepers, k = n;
  int rc = 0;
  void *zbuf = NULL; /* a granule of zeros, for GA_RESTORE_ZERO */
  while (k > 0 && !rc) {
    ga_sleeper *z = &a->pol.sleep.sleepers[k - 1];
    if (z->zero && !zbuf) zbuf = ga_host_calloc(1, a->space.gran);
    const void *src = z->zero ? zbuf : z->host;
    int stuck = 0;
    if (z->zero && !src) {
      rc = GA_DEV_ENOMEM;
      break;
    }
    if (!a->space.ncache) {
      rc = GA_DEV_EOOM;
      break;
    }
    rc = ga_expandable_map_granule_locked(&a->space, z->seg, z->granule, src, &stuck);
    if (rc) {
      z->restore = stuck; /* mapped, to be finished by the next call */
      if (stuck) {        /* it is awake now but for its contents: keep it in the roll-back */
        char why[sizeof a->dev->error];
        memcpy(why, a->dev->error, sizeof why);
        if (unwake(a, z) == 0) z->restore = 0;
        memcpy(a->dev->error, why, sizeof why);
      }
      break;
    }
    k--;
  }
  if (rc) {
    /* Roll back: what this wake mapped sleeps again. */
    char why[sizeof a->dev->error];
    memcpy(why, a->dev->error, sizeof why);
    for (size_t i = k; i < n; i++) {
      ga_sleeper *z = &a->pol.sleep.sleepers[i];
      if (z->restore) continue;
      if (unwake(a, z)) z->restore = 1; /* mapped with its contents: the next call finishes it */
    }
    memcpy(a->dev->error, why, sizeof why);
    give_back(a, refused, cap); /* what this wake obtained goes back */
    free(zbuf);
    return rc;
  }
  free(zbuf);
  for (size_t i = 0; i < n; i++) {
    ga_sleeper *z = &a->pol.sleep.sleepers[i];
    if (z->host) store_put(a, z->host, z->pinned);
  }
  a->pol.sleep.nsleepers = 0;
  return 0;
}

static ga_status_t wake_locked(ga_allocator_t *a);

/* During a capture, in the relaxed capture mode (nothing moves then, as in
 * ga_malloc: the memory comes from the cache or new handles). */
ga_status_t ga_wake_locked(ga_allocator_t *a) {
  GA_ASSERT_LOCKED(a);
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
  GA_ASSERT_LOCKED(a);
  int rc = restore_pending(a), restore_failed = rc != 0;
  ga_request r = {.size_class = GA_CLASS_LARGE}; /* the sleepers' granules, as one request */
  size_t g = a->space.gran;
  char kept[sizeof a->dev->error] = ""; /* a page the roll-back could not give back */
  if (a->pol.sleep.nsleepers && !rc) {
    rc = ga_move_obtain_locked(a, &r, a->pol.sleep.nsleepers, 0, 0);
    if (rc) give_back(a, kept, sizeof kept); /* nothing obtained stays */
  }
  if (a->pol.sleep.nsleepers && !rc) rc = wake_all(a, kept, sizeof kept);
  ga_status_t st = GA_OK;
  if (a->pol.sleep.nsleepers) {
    char left[32], also[sizeof kept + 128] = "";
    ga_format_size(a->pol.sleep.nsleepers * g, left, sizeof left);
    /* Memory the device would not take back is held: the caller must know
     * (GA_ERR_DEVICE), whatever failed the wake. */
    if (kept[0])
      snprintf(also, sizeof also,
               "; giving back the pages it had obtained failed too: %s; they stay cached (ga_empty_cache "
               "tries again)",
               kept);
    if (rc == GA_DEV_EOOM && !restore_failed) {
      ga_alloc_report_oom_locked(a, a->pol.sleep.nsleepers * g, a->pol.sleep.nsleepers * g, r.limit_refused);
      char report[1800];
      snprintf(report, sizeof report, "%s", ga_error_text());
      ga_error_set("ga_wake: nothing woke, %s still asleep%s. %s", left, also, report);
      st = kept[0] ? GA_ERR_DEVICE : GA_ERR_OOM;
    } else {
      ga_error_set("ga_wake: nothing woke, %s still asleep: %s%s", left, ga_err_words(rc, a->dev->error),
                   also);
      st = kept[0] ? GA_ERR_DEVICE : ga_err_status(rc);
    }
  } else {
    all_awake(a);
    free_woken(a);
  }
  return st;
}

void ga_sleep_teardown_locked(ga_allocator_t *a) {
  GA_ASSERT_LOCKED(a);
  for (size_t i = 0; i < a->pol.sleep.nsleepers; i++) {
    ga_sleeper *z = &a->pol.sleep.sleepers[i];
    if (z->host) store_put(a, z->host, z->pinned);
  }
  /* What the device refuses to unpin now stays pinned: the allocator is gone. */
  while (a->pol.sleep.npinned) (void)ga_dev_host_free(a->dev, a->pol.sleep.pinned[--a->pol.sleep.npinned]);
  free(a->pol.sleep.pinned);
  free(a->pol.sleep.sleepers);
  a->pol.sleep.sleepers = NULL;
  a->pol.sleep.pinned = NULL;
  a->pol.sleep.nsleepers = a->pol.sleep.cap_sleepers = 0;
  a->pol.sleep.npinned = a->pol.sleep.cap_pinned = a->pol.sleep.pinned_total = 0;
}
