/* check.c — ga_check: walks every segment, block, index and statistic and
 * counts the broken invariants (TLSF's tlsf_check). Each one is described on
 * stderr. Read-only.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "inspect.h"

typedef struct totals {
  int64_t allocation[3], allocated_bytes[3], active[3], active_bytes[3], requested[3];
  int64_t inactive[3], inactive_bytes[3], segment[3], reserved[3];
  int64_t oversize_alloc, oversize_seg, quarantined;
  size_t free_blocks[2], allocated_blocks, pending_blocks, pending_events, in_map;
  size_t mapped_granules, mappings, asleep_granules, expandable_segs;
  int kept_seen; /* the free kept back (a->pol.kept) was met in a segment */
} totals;

#define BROKEN(...) (fprintf(stderr, "ga_check: " __VA_ARGS__), fputc('\n', stderr), broken++)

static void add3(int64_t *v, int size_class, int64_t d) {
  v[GA_POOL_ALL] += d;
  v[size_class == GA_CLASS_SMALL ? GA_POOL_SMALL : GA_POOL_LARGE] += d;
}

/* The granules of an expandable segment's block: memory behind every granule
 * a mapped block touches, none behind an unmapped block. Each granule is
 * counted once, by the block holding its first byte... or the one starting in it. */
static int check_granules(ga_allocator_t *a, ga_segment *seg, ga_block *b, totals *t) {
  int broken = 0;
  size_t g = a->space.gran, first = (b->ptr - seg->base) / g,
         last = (b->ptr - seg->base + b->size + g - 1) / g;
  if (b->state == GA_BLOCK_UNMAPPED) {
    if (b->ptr % g || b->size % g)
      BROKEN("unmapped block %p+%zu is not granule-aligned", (void *)b->ptr, b->size);
    for (size_t i = first; i < last && i < seg->ngranules; i++)
      if (seg->granules[i].handle)
        BROKEN("granule %zu of segment %p is mapped inside an unmapped block", i, (void *)seg->base);
    return broken;
  }
  for (size_t i = first; i < last; i++) {
    int asleep = i < seg->ngranules && !seg->granules[i].handle && seg->granules[i].idx == GA_GRANULE_ASLEEP;
    if (asleep && !(b->state == GA_BLOCK_ALLOCATED && b->asleep))
      BROKEN("granule %zu of segment %p is asleep under block %p, which is not a sleeping allocation", i,
             (void *)seg->base, (void *)b->ptr);
    if (!asleep && (i >= seg->ngranules || !seg->granules[i].handle)) {
      BROKEN("granule %zu of segment %p is used by block %p but not mapped", i, (void *)seg->base,
             (void *)b->ptr);
      break;
    }
  }
  /* Count granules starting inside this block (each granule once). */
  for (size_t i = (b->ptr - seg->base + g - 1) / g;
       i * g < b->ptr - seg->base + b->size && i < seg->ngranules; i++) {
    const ga_granule *m = &seg->granules[i];
    if (!m->handle) {
      t->asleep_granules++;
      continue;
    }
    t->mapped_granules++;
    /* Each mapping is len granules of one handle, consecutive in both. */
    size_t st = i - m->off;
    const ga_granule *f = &seg->granules[st];
    if (m->off >= m->len || !f->handle || f->off || f->len != m->len || f->handle != m->handle ||
        f->idx + m->off != m->idx || st + m->len > seg->ngranules || m->idx >= m->handle->ngran)
      BROKEN("granule %zu of segment %p: its mapping (granule %u of %u, handle granule %u) is inconsistent",
             i, (void *)seg->base, m->off, m->len, m->idx);
    else if (m->off == 0)
      t->mappings++;
  }
  return broken;
}

static int check_block(ga_allocator_t *a, ga_segment *seg, ga_block *b, uintptr_t at, totals *t) {
  int broken = 0;
  if (b->seg != seg) BROKEN("block %p does not point to its segment %p", (void *)b->ptr, (void *)seg->base);
  if (b->ptr != at)
    BROKEN("block at %p should start at %p (segment %p)", (void *)b->ptr, (void *)at, (void *)seg->base);
  if (b->size == 0 || b->size % GA_MIN_BLOCK)
    BROKEN("block %p has size %zu, not a positive multiple of 512", (void *)b->ptr, b->size);
  if (b->next && b->next->prev != b) BROKEN("block %p: next->prev is not the block", (void *)b->ptr);
  if (b->size_class != seg->size_class || b->stream != seg->stream)
    BROKEN("block %p: pool or stream differs from its segment's", (void *)b->ptr);
  if (b->tie != (a->cfg.deterministic ? (uint32_t)seg->created : 0))
    BROKEN("block %p: free tree tie %u, not its segment's (created %llu)", (void *)b->ptr, b->tie,
           (unsigned long long)seg->created);
  if (seg->expandable) broken += check_granules(a, seg, b, t);
  if (b->in_map) {
    t->in_map++;
    if (ga_blockmap_get(&a->pol.map, b->ptr) != b)
      BROKEN("block %p says it is in the block map but is not", (void *)b->ptr);
  }
  if (b->state == GA_BLOCK_UNMAPPED) {
    if (!seg->expandable) BROKEN("block %p is unmapped in a native segment", (void *)b->ptr);
    if (b->next && b->next->state == GA_BLOCK_UNMAPPED)
      BROKEN("unmapped blocks %p and %p are neighbours but not merged", (void *)b->ptr, (void *)b->next->ptr);
    return broken;
  }
  if (b->state == GA_BLOCK_FREE) {
    t->free_blocks[b->size_class]++;
    if (b->next && b->next->state == GA_BLOCK_FREE)
      BROKEN("free blocks %p and %p are neighbours but not merged", (void *)b->ptr, (void *)b->next->ptr);
    if (!ga_free_tree_holds(&ga_trees_of(a, b)[b->size_class], b))
      BROKEN("free block %p is not in its free tree", (void *)b->ptr);
    if (b->counted_split != (uint8_t)(ga_tiles_is_split(b) && !seg->expandable))
      BROKEN("free block %p: split flag out of date", (void *)b->ptr);
    if (ga_tiles_is_split(b) && !seg->expandable)
      add3(t->inactive, b->size_class, 1), add3(t->inactive_bytes, b->size_class, (int64_t)b->size);
    return broken;
  }
  add3(t->active, b->size_class, 1);
  add3(t->active_bytes, b->size_class, (int64_t)b->size);
  add3(t->requested, b->size_class, (int64_t)b->requested);
  if (b->requested > b->size)
    BROKEN("block %p: requested %zu > size %zu", (void *)b->ptr, b->requested, b->size);
  /* The free kept back (policy/block.c) is PENDING on no event, out of the
   * trees, and until it completes the map and the statistics still count it
   * as allocated. */
  int kept = b == a->pol.kept;
  if (kept) {
    t->kept_seen = 1;
    if (b->state != GA_BLOCK_PENDING || b->event_count || b->in_tree)
      BROKEN("the free kept back %p is not pending on no event out of the trees", (void *)b->ptr);
  }
  if (b->state == GA_BLOCK_ALLOCATED || kept) {
    t->allocated_blocks++;
    add3(t->allocation, b->size_class, 1);
    add3(t->allocated_bytes, b->size_class, (int64_t)b->size);
    if (b->size >= a->cfg.max_split_size && !kept) t->oversize_alloc++; /* its free took it off */
    if (!b->in_map || ga_blockmap_get(&a->pol.map, b->ptr) != b)
      BROKEN("allocated block %p is not in the block map", (void *)b->ptr);
  } else if (b->state == GA_BLOCK_PENDING) {
    t->pending_blocks++;
    t->pending_events += b->event_count;
    if (b->event_count == 0) BROKEN("pending block %p waits on no event", (void *)b->ptr);
    if (b->nquarantined > b->event_count)
      BROKEN("pending block %p: %u entries without an event, %u in all", (void *)b->ptr, b->nquarantined,
             b->event_count);
    if (b->nquarantined) t->quarantined += (int64_t)b->size;
  } else {
    BROKEN("block %p has unknown state %d", (void *)b->ptr, b->state);
  }
  return broken;
}

static int check_stat(const char *name, const ga_stat_t *stat, const int64_t *want) {
  int broken = 0;
  static const char *const pools[3] = {"all", "small_pool", "large_pool"};
  for (int p = 0; p < 3; p++) {
    if (stat[p].current != want[p])
      BROKEN("%s.%s.current is %lld, the blocks say %lld", name, pools[p], (long long)stat[p].current,
             (long long)want[p]);
    if (stat[p].peak < stat[p].current)
      BROKEN("%s.%s.peak %lld < current %lld", name, pools[p], (long long)stat[p].peak,
             (long long)stat[p].current);
  }
  return broken;
}

/* A free tree is ordered, a heap, and holds what its count says; adds its
 * blocks to *total. */
static int check_tree(const ga_allocator_t *a, const ga_free_tree *tree, int p, size_t *total) {
  int broken = 0;
  size_t n;
  const ga_block *bad;
  if (!ga_free_tree_valid(tree, &n)) BROKEN("free tree %d is out of order", p);
  if (n != tree->count) BROKEN("free tree %d holds %zu blocks, its count says %zu", p, n, tree->count);
  if (tree->space != &a->space)
    BROKEN("free tree %d counts the granules of another allocator's segments", p);
  else if (!ga_free_tree_sums_valid(tree, &bad)) {
    if (bad)
      BROKEN("free tree %d: block %p's marks of whole granules are wrong", p, (void *)bad->ptr);
    else
      BROKEN("free tree %d: its sums (%zu bytes, %zu in whole granules, %zu stranded) are not its blocks'", p,
             tree->bytes, tree->whole_bytes, tree->stranded);
  }
  *total += n;
  return broken;
}

/* Handles, the page cache and the granule counts agree. */
static int check_pages(ga_allocator_t *a, totals *t, size_t *reserved) {
  int broken = 0;
  size_t nphys = 0, mapped = 0;
  for (ga_handle *ph = a->space.handles; ph; ph = ph->next) {
    nphys++;
    *reserved += ph->size;
    add3(t->reserved, ph->size_class, (int64_t)ph->size);
    mapped += ph->nmapped;
    size_t cached = 0;
    for (size_t i = 0; i < a->space.ncache; i++) cached += a->space.cache[i].handle == ph;
    if (ph->nmapped + cached != ph->ngran)
      BROKEN("handle %p: %u mapped + %zu cached granules != %u", (void *)ph, ph->nmapped, cached, ph->ngran);
  }
  if (nphys != a->space.nhandles) BROKEN("%zu handles listed, %zu counted", nphys, a->space.nhandles);
  if (mapped != t->mapped_granules)
    BROKEN("handles say %zu granules are mapped, segments use %zu", mapped, t->mapped_granules);
  if (a->stats.mapped_bytes.current != (int64_t)(mapped * a->space.gran))
    BROKEN("mapped_bytes %lld != %zu granules", (long long)a->stats.mapped_bytes.current, mapped);
  if (a->stats.page_cache_bytes.current != (int64_t)(a->space.ncache * a->space.gran))
    BROKEN("page_cache_bytes %lld != %zu cached granules", (long long)a->stats.page_cache_bytes.current,
           a->space.ncache);
  return broken;
}

/* The unmapped index of seg holds each of its UNMAPPED blocks once, each with
 * a bound at least its reach, and its counters equal a recount. */
static int check_unmapped(const ga_segment *seg) {
  int broken = 0;
  size_t n = 0, bytes = 0, in = 0, in_bytes = 0;
  for (const ga_block *b = seg->head; b; b = b->next) {
    if (b->state != GA_BLOCK_UNMAPPED) continue;
    n++;
    bytes += b->size;
    if (ga_unmapped_lookup(seg, b->ptr) != b) {
      BROKEN("unmapped block %p of segment %p is not in its unmapped index", (void *)b->ptr,
             (void *)seg->base);
      continue;
    }
    size_t reach = ga_unmapped_reach(b);
    if (b->reach < reach)
      BROKEN("unmapped block %p: its bound %zu is below its reach %zu", (void *)b->ptr, b->reach, reach);
  }
  if (!ga_unmapped_valid(seg, &in, &in_bytes))
    BROKEN("the unmapped index of segment %p is out of order", (void *)seg->base);
  if (in != n || in_bytes != bytes)
    BROKEN("the unmapped index of segment %p holds %zu blocks (%zu bytes), the segment %zu (%zu bytes)",
           (void *)seg->base, in, in_bytes, n, bytes);
  if (seg->nunmapped != n || seg->unmapped_bytes != bytes)
    BROKEN("segment %p counts %zu unmapped blocks (%zu bytes), a recount %zu (%zu bytes)", (void *)seg->base,
           seg->nunmapped, seg->unmapped_bytes, n, bytes);
  return broken;
}

/* The events a holds: cached, pending on a free, and its fences. */
static size_t events_held(const ga_allocator_t *a) {
  size_t events = a->pol.streams.nevent_cache;
  for (size_t i = 0; i < a->pol.streams.npending; i++) events += a->pol.streams.pending[i].ev != NULL;
  for (int i = 0; i < a->pol.streams.nfences; i++) events += a->pol.streams.fences[i].ev != NULL;
  return events;
}

/* ---- Allocators sharing a device ----
 * The device's objects are those of every allocator on it, so ga_check
 * adds up the others' (ga_create_on_device lets several share one). They
 * are listed here from creation to destruction. The list's mutex is never
 * held while waiting for an allocator's lock: another allocator's lock is
 * only tried, and a busy one makes the device's figures unknown for this
 * check. So two allocators checking each other cannot deadlock. */
static pthread_mutex_t on_devices_mu = PTHREAD_MUTEX_INITIALIZER;
static ga_allocator_t **on_devices;
static size_t n_on_devices, cap_on_devices;

int ga_check_register(ga_allocator_t *a) {
  int rc = 0;
  pthread_mutex_lock(&on_devices_mu);
  if (n_on_devices == cap_on_devices) {
    size_t cap = cap_on_devices ? 2 * cap_on_devices : 16;
    ga_allocator_t **v = realloc(on_devices, cap * sizeof *v);
    if (v) on_devices = v, cap_on_devices = cap;
  }
  if (n_on_devices < cap_on_devices)
    on_devices[n_on_devices++] = a;
  else
    rc = GA_DEV_ENOMEM;
  pthread_mutex_unlock(&on_devices_mu);
  return rc;
}

void ga_check_unregister(ga_allocator_t *a) {
  pthread_mutex_lock(&on_devices_mu);
  for (size_t i = 0; i < n_on_devices; i++)
    if (on_devices[i] == a) {
      on_devices[i] = on_devices[--n_on_devices];
      break;
    }
  if (n_on_devices == 0) {
    free(on_devices);
    on_devices = NULL;
    cap_on_devices = 0;
  }
  pthread_mutex_unlock(&on_devices_mu);
}

/* What b holds on its device. Caller holds b's lock. */
static void held_on_device(ga_allocator_t *b, ga_device_usage *w) {
  size_t ih, im, ir, expandable = 0, mappings = 0;
  ga_ipc_usage_locked(b, &ih, &im, &ir);
  for (const ga_segment *seg = b->space.segs; seg; seg = seg->next) {
    if (!seg->expandable) continue;
    expandable++;
    for (size_t i = 0; i < seg->ngranules; i++)
      mappings += seg->granules[i].handle && seg->granules[i].off == 0;
  }
  w->live_mallocs += b->space.nsegs - expandable;
  w->live_reservations += expandable + ir;
  w->live_handles += b->space.nhandles + ih;
  w->live_mappings += mappings + im;
  w->live_events += events_held(b);
}

/* Adds to *w what the other allocators on a's device hold; nonzero (and *w
 * partial) when one of them is busy. Caller holds a's lock. */
int ga_check_others_on_device(ga_allocator_t *a, ga_device_usage *w) {
  int busy = 0;
  pthread_mutex_lock(&on_devices_mu);
  for (size_t i = 0; i < n_on_devices && !busy; i++) {
    ga_allocator_t *b = on_devices[i];
    if (b == a || b->dev != a->dev) continue;
    if (!ga_lock_try(&b->mu)) {
      busy = 1;
      break;
    }
    held_on_device(b, w);
    ga_lock_release(&b->mu);
  }
  pthread_mutex_unlock(&on_devices_mu);
  return busy;
}

int ga_check_locked(ga_allocator_t *a) {
  GA_ASSERT_LOCKED(a);
  int broken = 0;
  totals t = {0};
  size_t nsegs = 0, reserved = 0;
  for (ga_segment *seg = a->space.segs; seg; seg = seg->next) {
    nsegs++;
    if (seg->expandable) {
      t.expandable_segs++;
      if (seg->base % a->space.gran || seg->size % a->space.gran)
        BROKEN("expandable segment %p is not granule-aligned", (void *)seg->base);
      for (const ga_block *b = seg->head; b; b = b->next) /* runs of mapped blocks: the snapshot's segments */
        if (b->state != GA_BLOCK_UNMAPPED && (!b->prev || b->prev->state == GA_BLOCK_UNMAPPED))
          add3(t.segment, seg->size_class, 1);
      for (size_t i = 0; i < seg->ngranules; i++) /* a granule counts in the pool it is mapped in */
        if (seg->granules[i].handle && seg->granules[i].handle->size_class != seg->size_class) {
          add3(t.reserved, seg->granules[i].handle->size_class, -(int64_t)a->space.gran);
          add3(t.reserved, seg->size_class, (int64_t)a->space.gran);
        }
    } else {
      reserved += seg->size;
      add3(t.segment, seg->size_class, 1);
      add3(t.reserved, seg->size_class, (int64_t)seg->size);
      if (seg->size >= a->cfg.max_split_size) t.oversize_seg++;
    }
    broken += check_unmapped(seg);
    if (seg->next && seg->next->prev != seg) BROKEN("segment list broken at %p", (void *)seg->base);
    if (!seg->head || seg->head->prev) BROKEN("segment %p: bad head block", (void *)seg->base);
    uintptr_t at = seg->base;
    for (ga_block *b = seg->head; b; b = b->next) {
      broken += check_block(a, seg, b, at, &t);
      at += b->size;
    }
    if (at != seg->base + seg->size)
      BROKEN("segment %p: blocks cover %zu bytes of %zu", (void *)seg->base, (size_t)(at - seg->base),
             seg->size);
  }
  for (int p = 0; p < 2; p++) {
    size_t total = 0;
    broken += check_tree(a, &a->pol.trees[p], p, &total);
    for (ga_private *priv = a->pol.capture.privates; priv; priv = priv->next)
      broken += check_tree(a, &priv->trees[p], p, &total);
    if (total != t.free_blocks[p])
      BROKEN("free trees %d hold %zu blocks, segments have %zu free", p, total, t.free_blocks[p]);
  }
  if (a->pol.kept && !t.kept_seen) BROKEN("the free kept back %p is in no segment", (void *)a->pol.kept->ptr);
  broken += check_pages(a, &t, &reserved);
  size_t restoring = 0; /* mapped again by a failed wake, contents still to copy back */
  for (size_t i = 0; i < a->pol.sleep.nsleepers; i++) restoring += a->pol.sleep.sleepers[i].restore != 0;
  if (t.asleep_granules + restoring != a->pol.sleep.nsleepers)
    BROKEN("%zu granules are asleep in segments and %zu wait for their contents, %zu recorded",
           t.asleep_granules, restoring, a->pol.sleep.nsleepers);
  if (a->pol.map.count != t.in_map)
    BROKEN("block map holds %zu pointers, %zu blocks say they are in it", a->pol.map.count, t.in_map);
  if (a->pol.streams.npending + a->pol.capture.ndeferred != t.pending_events)
    BROKEN("%zu pending events and %zu deferred frees, blocks wait on %zu", a->pol.streams.npending,
           a->pol.capture.ndeferred, t.pending_events);
  if (nsegs != a->space.nsegs || reserved != a->space.reserved)
    BROKEN("segment count/bytes %zu/%zu, recorded %zu/%zu", nsegs, reserved, a->space.nsegs,
           a->space.reserved);
  ga_stats_sync(&a->stats, &a->hot);
  const ga_stats_t *st = &a->stats;
  broken += check_stat("allocation", st->allocation, t.allocation);
  broken += check_stat("allocated_bytes", st->allocated_bytes, t.allocated_bytes);
  broken += check_stat("active", st->active, t.active);
  broken += check_stat("active_bytes", st->active_bytes, t.active_bytes);
  broken += check_stat("requested_bytes", st->requested_bytes, t.requested);
  broken += check_stat("inactive_split", st->inactive_split, t.inactive);
  broken += check_stat("inactive_split_bytes", st->inactive_split_bytes, t.inactive_bytes);
  broken += check_stat("segment", st->segment, t.segment);
  broken += check_stat("reserved_bytes", st->reserved_bytes, t.reserved);
  if (st->oversize_allocations.current != t.oversize_alloc)
    BROKEN("oversize_allocations.current %lld, blocks say %lld", (long long)st->oversize_allocations.current,
           (long long)t.oversize_alloc);
  if (st->oversize_segments.current != t.oversize_seg)
    BROKEN("oversize_segments.current %lld, segments say %lld", (long long)st->oversize_segments.current,
           (long long)t.oversize_seg);
  /* The byte measures keep their order. */
  int64_t alloc = st->allocated_bytes[0].current, active = st->active_bytes[0].current,
          res = st->reserved_bytes[0].current;
  /* Sleeping allocations (ga_sleep) stay active without memory behind them. */
  int64_t asleep = (int64_t)(a->pol.sleep.nsleepers * a->space.gran);
  if (!(alloc <= active && active <= res + asleep))
    BROKEN("allocated %lld <= active %lld <= reserved %lld (+ %lld asleep) does not hold", (long long)alloc,
           (long long)active, (long long)res, (long long)asleep);
  if (st->quarantined_bytes.current != t.quarantined)
    BROKEN("quarantined_bytes.current %lld, blocks say %lld", (long long)st->quarantined_bytes.current,
           (long long)t.quarantined);
  if (st->requested_bytes[0].current > active)
    BROKEN("requested %lld > active %lld", (long long)st->requested_bytes[0].current, (long long)active);
  /* The device agrees on what we hold (when it can tell: the simulated
   * device), with every other allocator on the same device (devices.c). */
  ga_device_usage u;
  if (ga_dev_usage(a->dev, &u) == 0) {
    ga_device_usage want = {0};
    size_t ih, im, ir;
    ga_ipc_usage_locked(a, &ih, &im, &ir); /* what imports of other processes' memory hold */
    want.live_mallocs = a->space.nsegs - t.expandable_segs;
    want.live_reservations = t.expandable_segs + ir;
    want.live_handles = a->space.nhandles + ih;
    want.live_mappings = t.mappings + im;
    want.live_events = events_held(a);
    if (ga_check_others_on_device(a, &want)) return broken; /* another one is busy: cannot tell */
    if (u.live_mallocs != want.live_mallocs)
      BROKEN("the device has %zu live mallocs, its allocators %zu native segments", u.live_mallocs,
             want.live_mallocs);
    if (u.live_reservations != want.live_reservations)
      BROKEN("the device has %zu reservations, its allocators %zu expandable segments and imports",
             u.live_reservations, want.live_reservations);
    if (u.live_handles != want.live_handles)
      BROKEN("the device has %zu handles, its allocators %zu", u.live_handles, want.live_handles);
    if (u.live_mappings != want.live_mappings)
      BROKEN("the device has %zu mappings, its allocators %zu", u.live_mappings, want.live_mappings);
    if (u.live_events != want.live_events)
      BROKEN("the device has %zu events, its allocators hold %zu", u.live_events, want.live_events);
  }
  return broken;
}
