/* report.c — the calling thread's last error, and the OOM report.
 *
 * The OOM report follows PyTorch's field for field (tried to allocate: the
 * segment size attempted; total capacity; free; allowed, when a fraction is
 * set; allocated; reserved but unallocated) and adds the largest cached free
 * block. Without expandable segments, the hint to turn them on appears only
 * when the cached-but-unallocated memory could have held the request, i.e.
 * when fragmentation is the cause; with them, the report says how much free
 * memory is stuck in partly used pages (the only fragmentation left).
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "internal.h"

static _Thread_local char tls_error[2048];

void ga_error_set(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(tls_error, sizeof tls_error, fmt, ap);
  va_end(ap);
}

const char *ga_last_error(void) { return tls_error; }

void ga_text_put(ga_text *t, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  size_t room = t->len < t->cap ? t->cap - t->len : 0;
  int n = vsnprintf(room ? t->buf + t->len : NULL, room, fmt, ap);
  va_end(ap);
  if (n > 0) t->len += (size_t)n;
}

size_t ga_text_end(ga_text *t) {
  if (t->cap && t->len >= t->cap) t->buf[t->cap - 1] = 0;
  return t->len;
}

void ga_format_size(size_t bytes, char *buf, size_t len) {
  const double KiB = 1024.0, MiB = KiB * 1024.0, GiB = MiB * 1024.0;
  if (bytes <= 1024)
    snprintf(buf, len, "%zu bytes", bytes);
  else if (bytes <= (size_t)1 << 20)
    snprintf(buf, len, "%.2f KiB", (double)bytes / KiB);
  else if (bytes <= (size_t)1 << 30)
    snprintf(buf, len, "%.2f MiB", (double)bytes / MiB);
  else
    snprintf(buf, len, "%.2f GiB", (double)bytes / GiB);
}

static int largest(ga_block *b, void *arg) {
  size_t *max = arg;
  if (b->size > *max) *max = b->size;
  return 0;
}

void ga_report_oom_locked(ga_allocator_t *a, size_t alloc_size, int fraction_refused) {
  size_t free_b = 0, total = a->device_total, big = 0;
  char tried[32], cap[32], fr[32], allowed[64] = "", alloc[32], unalloc[32], bigs[32];
  int have_info = ga_dev_mem_info(a->dev, &free_b, &total) == 0;
  if (ga_history_on(a)) ga_history_add_locked(a, GA_H_OOM, free_b, alloc_size, NULL);
  for (int p = 0; p < 2; p++) ga_pool_walk(&a->pools[p], largest, &big);
  size_t allocated = (size_t)a->stats.allocated_bytes[GA_POOL_ALL].current;
  size_t unallocated = a->reserved - allocated;
  ga_format_size(alloc_size, tried, sizeof tried);
  ga_format_size(total, cap, sizeof cap);
  if (have_info)
    ga_format_size(free_b, fr, sizeof fr);
  else
    snprintf(fr, sizeof fr, "an unknown amount");
  if (a->allowed_max != SIZE_MAX) {
    ga_format_size(a->allowed_max, allowed, sizeof allowed);
    strncat(allowed, " allowed; ", sizeof allowed - strlen(allowed) - 1);
  }
  ga_format_size(allocated, alloc, sizeof alloc);
  ga_format_size(unallocated, unalloc, sizeof unalloc);
  ga_format_size(big, bigs, sizeof bigs);
  char extra[160] = "";
  if (a->cfg.expandable_segments) {
    char part[32];
    ga_format_size(ga_pages_partial_free_locked(a), part, sizeof part);
    snprintf(extra, sizeof extra, " %s of free cached memory lies in partly used 2 MiB pages.", part);
  } else if (unallocated >= alloc_size) {
    snprintf(extra, sizeof extra,
             " If reserved but unallocated memory is large try setting "
             "GARDENALLOC_CONF=expandable_segments:True to avoid fragmentation.");
  }
  ga_error_set(
      "CUDA out of memory. Tried to allocate %s. GPU %d has a total capacity of %s of which %s is "
      "free. %sOf the allocated memory %s is allocated by gardenalloc, and %s is reserved by "
      "gardenalloc but unallocated. The largest free block in the cache is %s.%s%s",
      tried, a->dev->ordinal, cap, fr, allowed, alloc, unalloc, bigs, extra,
      fraction_refused ? " (The request was refused by the memory fraction limit.)" : "");
}
