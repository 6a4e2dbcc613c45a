/* stats_json.c — statistics as one flat JSON object, in PyTorch's memory_stats()
 * names and meanings. The field lists live in gardenalloc.h (GA_POOL_STATS,
 * GA_SCALAR_STATS, ...) and generate the keys here.
 */
#include "inspect.h"

#include "device/device.h"

/* ---- JSON ---- */

static void jstat(ga_text *j, const char *name, const char *pool, const ga_stat_t *stat) {
  const char *dot = pool[0] ? "." : "";
  ga_text_put(j,
              "\"%s%s%s.current\":%lld,\"%s%s%s.peak\":%lld,\"%s%s%s.allocated\":%lld,\"%s%s%s.freed\":%lld,",
              name, dot, pool, (long long)stat->current, name, dot, pool, (long long)stat->peak, name, dot,
              pool, (long long)stat->allocated, name, dot, pool, (long long)stat->freed);
}

void ga_stats_write_json(const ga_stats_t *stats, ga_text *j) {
  static const char *const pools[GA_POOL_COUNT] = {"all", "small_pool", "large_pool"};
  ga_text_put(j, "{");
#define GA_X(name, doc) \
  for (int p = 0; p < GA_POOL_COUNT; p++) jstat(j, #name, pools[p], &stats->name[p]);
  GA_POOL_STATS(GA_X)
#undef GA_X
  jstat(j, "oversize_allocations", "", &stats->oversize_allocations);
  jstat(j, "oversize_segments", "", &stats->oversize_segments);
#define GA_X(name, doc) ga_text_put(j, "\"%s\":%lld,", #name, (long long)stats->name);
  GA_SCALAR_STATS(GA_X)
  GA_EXTRA_SCALARS(GA_X)
#undef GA_X
#define GA_X(name, doc) jstat(j, #name, "", &stats->name);
  GA_EXTRA_STATS(GA_X)
#undef GA_X
  for (int k = 0; k < GA_CALL_COUNT; k++)
    ga_text_put(j, "\"device_calls.%s\":%llu,", ga_dev_call_name((ga_device_call_t)k),
                (unsigned long long)stats->device_calls[k]);
  for (int k = 0; k < GA_CALL_COUNT; k++)
    ga_text_put(j, "\"device_us.%s\":%llu%s", ga_dev_call_name((ga_device_call_t)k),
                (unsigned long long)(stats->device_ns[k] / 1000), k + 1 < GA_CALL_COUNT ? "," : "");
  ga_text_put(j, "}");
}
