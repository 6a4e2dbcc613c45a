/* stats.h — updating PyTorch-style statistics ({current, peak, allocated,
 * freed}) and writing them as JSON. The update helpers are leaves (inline);
 * the field lists live in gardenalloc.h (GA_POOL_STATS, GA_SCALAR_STATS, ...).
 */
#ifndef GA_STATS_H
#define GA_STATS_H

#include <stdint.h>

#include "gardenalloc.h"
#include "text.h"

/* The two pools a request goes to: small (<= 1 MiB rounded) and large. */
enum { GA_P_SMALL = 0, GA_P_LARGE = 1 };

static inline void ga_stat_add(ga_stat_t *s, int64_t delta) {
  s->current += delta;
  if (delta > 0) {
    s->allocated += delta;
    if (s->current > s->peak) s->peak = s->current;
  } else {
    s->freed -= delta;
  }
}
/* Known-sign variants, for the hot path. */
static inline void ga_stat_inc(ga_stat_t *s, uint64_t d) {
  s->current += (int64_t)d;
  s->allocated += (int64_t)d;
  if (s->current > s->peak) s->peak = s->current;
}
static inline void ga_stat_dec(ga_stat_t *s, uint64_t d) {
  s->current -= (int64_t)d;
  s->freed += (int64_t)d;
}
_Static_assert(GA_POOL_SMALL + GA_P_SMALL == 1 && GA_POOL_SMALL + GA_P_LARGE == GA_POOL_LARGE,
               "pool indices");
static inline ga_stat_t *ga_pool_stat(ga_stat_t *st, int pool) { return &st[GA_POOL_SMALL + pool]; }
/* The [all] and [pool] entries of a per-pool stat array together. */
static inline void ga_pstat_inc(ga_stat_t *st, int pool, uint64_t d) {
  ga_stat_inc(&st[GA_POOL_ALL], d);
  ga_stat_inc(ga_pool_stat(st, pool), d);
}
static inline void ga_pstat_dec(ga_stat_t *st, int pool, uint64_t d) {
  ga_stat_dec(&st[GA_POOL_ALL], d);
  ga_stat_dec(ga_pool_stat(st, pool), d);
}
static inline void ga_pstat_add(ga_stat_t *st, int pool, int64_t delta) {
  ga_stat_add(&st[GA_POOL_ALL], delta);
  ga_stat_add(ga_pool_stat(st, pool), delta);
}

/* Writes *s as one flat JSON object with PyTorch's key names. */
void ga_stats_write_json(const ga_stats_t *s, ga_text *j);

#endif /* GA_STATS_H */
