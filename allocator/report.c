/* report.c — the OOM report, from the facts the policy gathered.
 *
 * It follows PyTorch's report field for field (tried to allocate: the
 * segment size attempted; total capacity; free; allowed, when a fraction is
 * set; allocated; reserved but unallocated) and adds the largest cached free
 * block. Without expandable segments, the hint to turn them on appears
 * exactly when they would serve the request: the largest free block is
 * smaller than it (fragmentation, not a missing segment, is the cause) and
 * the free whole granules of the cache plus the device's free memory hold it
 * (what expandable segments map; free memory inside partly used granules
 * would stay stranded there too). With them on, the hint never appears; the
 * report says how much free memory is stuck in partly used granules.
 * A leaf: formats, reads nothing.
 */
#include "report.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "text.h"

/* Would expandable segments serve the request from this state? */
static int expandable_would_serve(const ga_oom_facts *f) {
  if (!f->gran || f->largest_free >= f->rounded) return 0;
  size_t room = f->have_free ? f->free : 0;
  if (f->allowed != SIZE_MAX) {
    size_t left = f->allowed > f->reserved ? f->allowed - f->reserved : 0;
    if (left < room) room = left;
  }
  size_t need = (f->rounded + f->gran - 1) / f->gran * f->gran;
  return f->movable + room / f->gran * f->gran >= need;
}

void ga_report_oom(const ga_oom_facts *f) {
  char tried[32], cap[32], fr[32], allowed[64] = "", alloc[32], unalloc[32], bigs[32];
  /* Allocations asleep (ga_sleep) count as allocated with no memory reserved
   * behind them: allocated may exceed reserved. */
  size_t unallocated = f->reserved > f->allocated ? f->reserved - f->allocated : 0;
  ga_format_size(f->tried, tried, sizeof tried);
  ga_format_size(f->total, cap, sizeof cap);
  if (f->have_free)
    ga_format_size(f->free, fr, sizeof fr);
  else
    snprintf(fr, sizeof fr, "an unknown amount");
  if (f->allowed != SIZE_MAX) {
    ga_format_size(f->allowed, allowed, sizeof allowed);
    strncat(allowed, " allowed; ", sizeof allowed - strlen(allowed) - 1);
  }
  ga_format_size(f->allocated, alloc, sizeof alloc);
  ga_format_size(unallocated, unalloc, sizeof unalloc);
  ga_format_size(f->largest_free, bigs, sizeof bigs);
  char extra[256] = "";
  if (f->expandable) {
    char part[32];
    ga_format_size(f->stranded, part, sizeof part);
    snprintf(extra, sizeof extra, " %s of free cached memory lies in partly used 2 MiB granules.", part);
  } else if (expandable_would_serve(f)) {
    char mov[32];
    ga_format_size(f->movable, mov, sizeof mov);
    snprintf(
        extra, sizeof extra,
        " Of the cached free memory, %s lies in whole 2 MiB granules that expandable segments map where a "
        "request needs them: try setting GARDENALLOC_CONF=expandable_segments:True to avoid fragmentation.",
        mov);
  }
  char tail[320], tot[32], sm[32], lg[32], out[32] = "an unknown amount";
  ga_format_size(f->cached_free, tot, sizeof tot);
  ga_format_size(f->largest_pool[0], sm, sizeof sm);
  ga_format_size(f->largest_pool[1], lg, sizeof lg);
  /* Memory outside the allocator: the device's used memory less what we reserve. */
  if (f->have_free) {
    size_t used = f->total > f->free ? f->total - f->free : 0;
    ga_format_size(used > f->reserved ? used - f->reserved : 0, out, sizeof out);
  }
  snprintf(tail, sizeof tail,
           " Free in the cache: %s (largest free block: %s in the small pool, %s in the large pool). Used "
           "on the device outside gardenalloc: %s.",
           tot, sm, lg, out);
  char why[200] = "";
  if (f->budget_refused) {
    char b[32];
    ga_format_size(f->budget, b, sizeof b);
    snprintf(why, sizeof why,
             " (The request is past the budget of %s that max_reserved_mb and headroom_mb allow, even with "
             "the whole cache given back: no device call was made.)",
             b);
  } else if (f->limit_refused) {
    snprintf(why, sizeof why,
             " (The request was refused by the memory limit: per_process_memory_fraction, max_reserved_mb "
             "or headroom_mb.)");
  }
  ga_error_set(
      "CUDA out of memory. Tried to allocate %s. GPU %d has a total capacity of %s of which %s is "
      "free. %sOf the allocated memory %s is allocated by gardenalloc, and %s is reserved by "
      "gardenalloc but unallocated. The largest free block in the cache is %s.%s%s%s",
      tried, f->device, cap, fr, allowed, alloc, unalloc, bigs, extra, why, tail);
}
