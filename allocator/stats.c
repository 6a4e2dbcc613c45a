/* stats.c — the counters of allocations and frees (stats.h) folded
 * into PyTorch's statistics, with the peaks they pass and the room left
 * before the next peak can move. A leaf: the policy counts, anything may
 * read.
 */
#include <string.h>

#include "stats.h"

/* ---- Folding the counters of allocations and frees ---- */

static void fold_one(ga_stat_t *stat, int64_t up, int64_t down) {
  stat->current += up - down;
  stat->allocated += up;
  stat->freed += down;
}

static void fold(ga_stats_t *stats, ga_hot *h) {
  for (int p = 0; p < 2; p++) {
    int64_t *d = h->d[p];
    for (int e = 0; e < 2; e++) { /* the pool's entry, then all */
      int i = e ? GA_POOL_ALL : GA_POOL_SMALL + p;
      int64_t rn = d[GA_HOT_REUSE_N], rb = d[GA_HOT_REUSE_B]; /* a free, done, and an allocation */
      fold_one(&stats->allocation[i], d[GA_HOT_ALLOC_N] + rn, d[GA_HOT_FREE_N] + rn);
      fold_one(&stats->allocated_bytes[i], d[GA_HOT_ALLOC_B] + rb, d[GA_HOT_FREE_B] + rb);
      fold_one(&stats->active[i], d[GA_HOT_ALLOC_N] + rn, d[GA_HOT_DONE_N] + rn);
      fold_one(&stats->active_bytes[i], d[GA_HOT_ALLOC_B] + rb, d[GA_HOT_DONE_B] + rb);
      fold_one(&stats->requested_bytes[i], d[GA_HOT_ALLOC_R], d[GA_HOT_DONE_R]);
      int64_t sn = d[GA_HOT_SWING_N], sb = d[GA_HOT_SWING_B]; /* down and back up */
      fold_one(&stats->inactive_split[i], d[GA_HOT_SPLIT_UP_N] + sn, d[GA_HOT_SPLIT_DOWN_N] + sn);
      fold_one(&stats->inactive_split_bytes[i], d[GA_HOT_SPLIT_UP_B] + sb, d[GA_HOT_SPLIT_DOWN_B] + sb);
    }
    memset(d, 0, sizeof h->d[p]);
  }
}

static void raise_peak(ga_stat_t *stat) {
  if (stat->current > stat->peak) stat->peak = stat->current;
}
static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

void ga_stats_peaks(ga_stats_t *stats, ga_hot *h) {
  fold(stats, h);
  for (int i = 0; i < GA_POOL_COUNT; i++) {
    raise_peak(&stats->allocation[i]);
    raise_peak(&stats->allocated_bytes[i]);
    raise_peak(&stats->active[i]);
    raise_peak(&stats->active_bytes[i]);
    raise_peak(&stats->requested_bytes[i]);
    raise_peak(&stats->inactive_split[i]);
    raise_peak(&stats->inactive_split_bytes[i]);
    int64_t *r = h->room[i];
    r[GA_ROOM_ACTIVE] = min64(stats->allocation[i].peak, stats->active[i].peak) - stats->active[i].current;
    r[GA_ROOM_BYTES] = min64(
        min64(stats->allocated_bytes[i].peak, stats->active_bytes[i].peak) - stats->active_bytes[i].current,
        stats->requested_bytes[i].peak - stats->requested_bytes[i].current);
    r[GA_ROOM_SPLIT] = stats->inactive_split[i].peak - stats->inactive_split[i].current;
    r[GA_ROOM_SPLIT_BYTES] = stats->inactive_split_bytes[i].peak - stats->inactive_split_bytes[i].current;
  }
}

__attribute__((noinline)) void ga_hot_split_swing_peak(ga_stats_t *stats, ga_hot *h, int size_class,
                                                       int64_t n, int64_t bytes) {
  ga_hot_split(stats, h, size_class, n, bytes);
  ga_hot_split(stats, h, size_class, -n, -bytes);
}
