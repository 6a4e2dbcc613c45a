/* stats.h — updating PyTorch-style statistics ({current, peak, allocated,
 * freed}) and writing them as JSON. The update helpers are leaves (inline);
 * the field lists live in gardenalloc.h (GA_POOL_STATS, GA_SCALAR_STATS, ...).
 */
#ifndef GA_STATS_H
#define GA_STATS_H

#include <stdint.h>

#include "debug.h"
#include "gardenalloc.h"
#include "text.h"

/* The size class of a request: small (<= 1 MiB rounded) or large. */
enum { GA_CLASS_SMALL = 0, GA_CLASS_LARGE = 1 };

static inline void ga_stat_add(ga_stat_t *stat, int64_t delta) {
  stat->current += delta;
  if (delta > 0) {
    stat->allocated += delta;
    if (stat->current > stat->peak) stat->peak = stat->current;
  } else {
    stat->freed -= delta;
  }
  GA_ASSERT(stat->current >= 0); /* nothing is freed that was not counted in */
}
/* Known-sign variants, for the hot path. */
static inline void ga_stat_inc(ga_stat_t *stat, uint64_t d) {
  stat->current += (int64_t)d;
  stat->allocated += (int64_t)d;
  if (stat->current > stat->peak) stat->peak = stat->current;
}
static inline void ga_stat_dec(ga_stat_t *stat, uint64_t d) {
  stat->current -= (int64_t)d;
  stat->freed += (int64_t)d;
  GA_ASSERT(stat->current >= 0);
}
_Static_assert(GA_POOL_SMALL + GA_CLASS_SMALL == 1 && GA_POOL_SMALL + GA_CLASS_LARGE == GA_POOL_LARGE,
               "the statistics index of a size class is GA_POOL_SMALL + the class");
static inline ga_stat_t *ga_pool_stat(ga_stat_t *st, int size_class) {
  return &st[GA_POOL_SMALL + size_class];
}
/* The [all] and [pool] entries of a per-pool stat array together. */
static inline void ga_pstat_inc(ga_stat_t *st, int size_class, uint64_t d) {
  ga_stat_inc(&st[GA_POOL_ALL], d);
  ga_stat_inc(ga_pool_stat(st, size_class), d);
}
static inline void ga_pstat_dec(ga_stat_t *st, int size_class, uint64_t d) {
  ga_stat_dec(&st[GA_POOL_ALL], d);
  ga_stat_dec(ga_pool_stat(st, size_class), d);
}
static inline void ga_pstat_add(ga_stat_t *st, int size_class, int64_t delta) {
  ga_stat_add(&st[GA_POOL_ALL], delta);
  ga_stat_add(ga_pool_stat(st, size_class), delta);
}

/* ---- The counters of every allocation and free ----
 * What each allocation and free changes (allocation, active,
 * allocated_bytes, active_bytes, requested_bytes, inactive_split and
 * inactive_split_bytes, per pool and for all: 14 PyTorch stats, 56 keys) is
 * counted here per pool and kind of event, and folded into ga_stats_t when
 * the statistics are read (ga_stats_sync), so an event adds to a few
 * counters instead of updating every key.
 *
 * Peaks stay exact without a comparison per key: room[] holds, for the
 * [all, small, large] entries, how far the currents may still rise before a
 * peak could move. An event that uses up more than its room folds, raises
 * the peaks passed and measures the room again (ga_stats_peaks). The rooms:
 *   active   min(allocation.peak, active.peak) - active.current. An
 *            allocation adds one to both currents, a free takes one off
 *            allocation.current first and off active.current when it
 *            completes, and active >= allocation always; so the room is
 *            spent by allocations and given back by completions.
 *   bytes    min(allocated_bytes.peak, active_bytes.peak) - active_bytes
 *            .current and requested_bytes.peak - requested_bytes.current,
 *            the lesser: an allocation spends its rounded size (>= the
 *            requested one), a completion gives back its requested size.
 *   split, split_bytes  peak - current of inactive_split[_bytes].
 * Each room is a lower bound of what it names (the completion gives back
 * the least of what it frees), so a room that stays >= 0 proves every
 * current <= its peak. */
enum {
  GA_HOT_ALLOC_N, /* blocks handed out */
  GA_HOT_ALLOC_B, /* their rounded bytes */
  GA_HOT_ALLOC_R, /* their requested bytes */
  GA_HOT_FREE_N,  /* blocks freed by the client */
  GA_HOT_FREE_B,
  GA_HOT_DONE_N, /* blocks no longer active (their frees completed) */
  GA_HOT_DONE_B,
  GA_HOT_DONE_R,
  GA_HOT_SPLIT_UP_N, /* inactive_split increments and decrements (net per event, as PyTorch counts) */
  GA_HOT_SPLIT_UP_B,
  GA_HOT_SPLIT_DOWN_N,
  GA_HOT_SPLIT_DOWN_B,
  GA_HOT_SWING_N, /* inactive_split down and straight back up: each counts as both */
  GA_HOT_SWING_B,
  GA_HOT_REUSE_N, /* blocks freed by the client and handed out again at once: each a free, */
  GA_HOT_REUSE_B, /* its completion and an allocation (their requested bytes in DONE_R, ALLOC_R) */
  GA_HOT_KINDS
};
enum { GA_ROOM_ACTIVE, GA_ROOM_BYTES, GA_ROOM_SPLIT, GA_ROOM_SPLIT_BYTES, GA_ROOMS };

typedef struct ga_hot {
  int64_t d[2][GA_HOT_KINDS];            /* by size class (GA_CLASS_*): since the last fold */
  int64_t room[GA_POOL_COUNT][GA_ROOMS]; /* by stats entry (GA_POOL_ALL, _SMALL, _LARGE) */
} ga_hot;

/* Folds h into stats, raises the peaks passed and measures the rooms again. */
void ga_stats_peaks(ga_stats_t *stats, ga_hot *h);
/* Makes stats exact (folds h into it): before anything reads or resets stats, and
 * again after the peaks are reset (the rooms are measured from them). */
static inline void ga_stats_sync(ga_stats_t *stats, ga_hot *h) { ga_stats_peaks(stats, h); }

/* A block of `bytes` (rounded) handed out for `requested` bytes. */
static inline void ga_hot_alloc(ga_stats_t *stats, ga_hot *h, int size_class, uint64_t bytes,
                                uint64_t requested) {
  int64_t *d = h->d[size_class], *r = h->room[GA_POOL_SMALL + size_class], *all = h->room[GA_POOL_ALL];
  d[GA_HOT_ALLOC_N]++;
  d[GA_HOT_ALLOC_B] += (int64_t)bytes;
  d[GA_HOT_ALLOC_R] += (int64_t)requested;
  r[GA_ROOM_ACTIVE]--;
  all[GA_ROOM_ACTIVE]--;
  r[GA_ROOM_BYTES] -= (int64_t)bytes;
  all[GA_ROOM_BYTES] -= (int64_t)bytes;
  if ((r[GA_ROOM_ACTIVE] | all[GA_ROOM_ACTIVE] | r[GA_ROOM_BYTES] | all[GA_ROOM_BYTES]) < 0)
    ga_stats_peaks(stats, h);
}
/* The client freed a block of `bytes` (it may stay active). */
static inline void ga_hot_free(ga_hot *h, int size_class, uint64_t bytes) {
  h->d[size_class][GA_HOT_FREE_N]++;
  h->d[size_class][GA_HOT_FREE_B] += (int64_t)bytes;
}
/* A freed block is no longer active. */
static inline void ga_hot_done(ga_hot *h, int size_class, uint64_t bytes, uint64_t requested) {
  int64_t *d = h->d[size_class], *r = h->room[GA_POOL_SMALL + size_class], *all = h->room[GA_POOL_ALL];
  d[GA_HOT_DONE_N]++;
  d[GA_HOT_DONE_B] += (int64_t)bytes;
  d[GA_HOT_DONE_R] += (int64_t)requested;
  r[GA_ROOM_ACTIVE]++;
  all[GA_ROOM_ACTIVE]++;
  r[GA_ROOM_BYTES] += (int64_t)requested;
  all[GA_ROOM_BYTES] += (int64_t)requested;
}
/* A block of `bytes` freed by the client (asked for `was` bytes), its free
 * completed, and handed out again for `requested` bytes: as ga_hot_free,
 * ga_hot_done and ga_hot_alloc in turn. Only the bytes' room can be spent
 * (the active room comes back as it goes). */
static inline void ga_hot_reuse(ga_stats_t *stats, ga_hot *h, int size_class, uint64_t bytes, uint64_t was,
                                uint64_t requested) {
  int64_t *d = h->d[size_class], *r = h->room[GA_POOL_SMALL + size_class], *all = h->room[GA_POOL_ALL];
  int64_t spent = (int64_t)bytes - (int64_t)was;
  d[GA_HOT_REUSE_N]++;
  d[GA_HOT_REUSE_B] += (int64_t)bytes;
  d[GA_HOT_DONE_R] += (int64_t)was;
  d[GA_HOT_ALLOC_R] += (int64_t)requested;
  r[GA_ROOM_BYTES] -= spent;
  all[GA_ROOM_BYTES] -= spent;
  if ((r[GA_ROOM_BYTES] | all[GA_ROOM_BYTES]) < 0) ga_stats_peaks(stats, h);
}
/* inactive_split changes by n blocks and `bytes` (each a net change). */
static inline void ga_hot_split(ga_stats_t *stats, ga_hot *h, int size_class, int64_t n, int64_t bytes) {
  int64_t *d = h->d[size_class], *r = h->room[GA_POOL_SMALL + size_class], *all = h->room[GA_POOL_ALL];
  d[GA_HOT_SPLIT_UP_N] += n > 0 ? n : 0;
  d[GA_HOT_SPLIT_DOWN_N] += n < 0 ? -n : 0;
  d[GA_HOT_SPLIT_UP_B] += bytes > 0 ? bytes : 0;
  d[GA_HOT_SPLIT_DOWN_B] += bytes < 0 ? -bytes : 0;
  r[GA_ROOM_SPLIT] -= n;
  all[GA_ROOM_SPLIT] -= n;
  r[GA_ROOM_SPLIT_BYTES] -= bytes;
  all[GA_ROOM_SPLIT_BYTES] -= bytes;
  if ((r[GA_ROOM_SPLIT] | all[GA_ROOM_SPLIT] | r[GA_ROOM_SPLIT_BYTES] | all[GA_ROOM_SPLIT_BYTES]) < 0)
    ga_stats_peaks(stats, h);
}

/* The two calls of ga_hot_split that ga_hot_split_swing stands for (stats.c). */
void ga_hot_split_swing_peak(ga_stats_t *stats, ga_hot *h, int size_class, int64_t n, int64_t bytes);
/* inactive_split changes by n blocks and `bytes`, then straight back (a
 * merge and the split that undoes it): as the two calls of ga_hot_split,
 * without either when no peak can move between them. */
__attribute__((always_inline)) static inline void ga_hot_split_swing(ga_stats_t *stats, ga_hot *h,
                                                                     int size_class, int64_t n,
                                                                     int64_t bytes) {
  int64_t *d = h->d[size_class], *r = h->room[GA_POOL_SMALL + size_class], *all = h->room[GA_POOL_ALL];
  if (n > r[GA_ROOM_SPLIT] || n > all[GA_ROOM_SPLIT] || bytes > r[GA_ROOM_SPLIT_BYTES] ||
      bytes > all[GA_ROOM_SPLIT_BYTES]) {
    ga_hot_split_swing_peak(stats, h, size_class, n, bytes);
    return;
  }
  d[GA_HOT_SWING_N] += n < 0 ? -n : n;
  d[GA_HOT_SWING_B] += bytes < 0 ? -bytes : bytes;
}
/* inactive_split falls by n blocks and `bytes` and rises straight back: no
 * peak can move. */
static inline void ga_hot_split_dip(ga_hot *h, int size_class, uint64_t n, uint64_t bytes) {
  h->d[size_class][GA_HOT_SWING_N] += (int64_t)n;
  h->d[size_class][GA_HOT_SWING_B] += (int64_t)bytes;
}

#endif /* GA_STATS_H */
