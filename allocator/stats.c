/* stats.c — the counters of allocations and frees (stats.h) folded
 * into PyTorch's statistics, with the peaks they pass and the room left
 * before the next peak can move. A leaf: the policy counts, anything may
 * read.
 */
#include <string.h>

#include "stats.h"

/* ---- Folding the counters of allocations and frees ---- */

static void fold_one(ga_stat_t *s, int64_t up, int64_t down) {
  s->current += up - down;
  s->allocated += up;
  s->freed += down;
}

static void fold(ga_stats_t *s, ga_hot *h) {
  for (int p = 0; p < 2; p++) {
    int64_t *d = h->d[p];
    for (int e = 0; e < 2; e++) { /* the pool's entry, then all */
      int i = e ? GA_POOL_ALL : GA_POOL_SMALL + p;
      int64_t rn = d[GA_HOT_REUSE_N], rb = d[GA_HOT_REUSE_B]; /* a free, done, and an allocation */
      fold_one(&s->allocation[i], d[GA_HOT_ALLOC_N] + rn, d[GA_HOT_FREE_N] + rn);
      fold_one(&s->allocated_bytes[i], d[GA_HOT_ALLOC_B] + rb, d[GA_HOT_FREE_B] + rb);
      fold_one(&s->active[i], d[GA_HOT_ALLOC_N] + rn, d[GA_HOT_DONE_N] + rn);
      fold_one(&s->active_bytes[i], d[GA_HOT_ALLOC_B] + rb, d[GA_HOT_DONE_B] + rb);
      fold_one(&s->requested_bytes[i], d[GA_HOT_ALLOC_R], d[GA_HOT_DONE_R]);
      int64_t sn = d[GA_HOT_SWING_N], sb = d[GA_HOT_SWING_B]; /* down and back up */
      fold_one(&s->inactive_split[i], d[GA_HOT_SPLIT_UP_N] + sn, d[GA_HOT_SPLIT_DOWN_N] + sn);
      fold_one(&s->inactive_split_bytes[i], d[GA_HOT_SPLIT_UP_B] + sb, d[GA_HOT_SPLIT_DOWN_B] + sb);
    }
    memset(d, 0, sizeof h->d[p]);
  }
}

static void raise_peak(ga_stat_t *s) {
  if (s->current > s->peak) s->peak = s->current;
}
static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

void ga_stats_peaks(ga_stats_t *s, ga_hot *h) {
  fold(s, h);
  for (int i = 0; i < GA_POOL_COUNT; i++) {
    raise_peak(&s->allocation[i]);
    raise_peak(&s->allocated_bytes[i]);
    raise_peak(&s->active[i]);
    raise_peak(&s->active_bytes[i]);
    raise_peak(&s->requested_bytes[i]);
    raise_peak(&s->inactive_split[i]);
    raise_peak(&s->inactive_split_bytes[i]);
    int64_t *r = h->room[i];
    r[GA_ROOM_ACTIVE] = min64(s->allocation[i].peak, s->active[i].peak) - s->active[i].current;
    r[GA_ROOM_BYTES] =
        min64(min64(s->allocated_bytes[i].peak, s->active_bytes[i].peak) - s->active_bytes[i].current,
              s->requested_bytes[i].peak - s->requested_bytes[i].current);
    r[GA_ROOM_SPLIT] = s->inactive_split[i].peak - s->inactive_split[i].current;
    r[GA_ROOM_SPLIT_BYTES] = s->inactive_split_bytes[i].peak - s->inactive_split_bytes[i].current;
  }
}

__attribute__((noinline)) void ga_hot_split_swing_peak(ga_stats_t *s, ga_hot *h, int pool, int64_t n,
                                                       int64_t bytes) {
  ga_hot_split(s, h, pool, n, bytes);
  ga_hot_split(s, h, pool, -n, -bytes);
}
