/* report.c — the OOM report, from the facts the policy gathered.
 *
 * It follows PyTorch's report field for field (tried to allocate: the
 * segment size attempted; total capacity; free; allowed, when a fraction is
 * set; allocated; reserved but unallocated) and adds the largest cached free
 * block. Without expandable segments, the hint to turn them on appears only
 * when the cached-but-unallocated memory could have held the request, i.e.
 * when fragmentation is the cause; with them, the report says how much free
 * memory is stuck in partly used granules (the only fragmentation left).
 * A leaf: formats, reads nothing.
 */
#include "report.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "text.h"

void ga_report_oom(const ga_oom_facts *f) {
  char tried[32], cap[32], fr[32], allowed[64] = "", alloc[32], unalloc[32], bigs[32];
  size_t unallocated = f->reserved - f->allocated;
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
  char extra[160] = "";
  if (f->expandable) {
    char part[32];
    ga_format_size(f->stranded, part, sizeof part);
    snprintf(extra, sizeof extra, " %s of free cached memory lies in partly used 2 MiB pages.", part);
  } else if (unallocated >= f->tried) {
    snprintf(extra, sizeof extra,
             " If reserved but unallocated memory is large try setting "
             "GARDENALLOC_CONF=expandable_segments:True to avoid fragmentation.");
  }
  ga_error_set(
      "CUDA out of memory. Tried to allocate %s. GPU %d has a total capacity of %s of which %s is "
      "free. %sOf the allocated memory %s is allocated by gardenalloc, and %s is reserved by "
      "gardenalloc but unallocated. The largest free block in the cache is %s.%s%s",
      tried, f->device, cap, fr, allowed, alloc, unalloc, bigs, extra,
      f->fraction_refused ? " (The request was refused by the memory fraction limit.)" : "");
}
