/* host.c — the host allocation wrappers and their fault hook (host.h). A leaf. */
#include "host.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* Under AddressSanitizer (and so LeakSanitizer) every table comes from the
 * heap: LeakSanitizer looks for pointers in heap blocks, not in pages mapped
 * by hand, and a slab of records holds the only pointer to each record's
 * `uses` array. */
#if defined(__SANITIZE_ADDRESS__)
#define TABLES_ON_HEAP 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(leak_sanitizer)
#define TABLES_ON_HEAP 1
#endif
#endif
#ifndef TABLES_ON_HEAP
#define TABLES_ON_HEAP 0
#endif

static atomic_uint_fast64_t made;    /* allocations asked of the wrappers */
static atomic_uint_fast64_t fail_at; /* the count at which one fails; 0: none armed */
static atomic_int fail_sticky;       /* every allocation from fail_at on fails */
static atomic_uint_fast64_t fired;   /* allocations made to fail since the arming */

/* Counts one allocation; 1 when the armed fault makes it fail. */
static int refused(void) {
  uint_fast64_t n = atomic_fetch_add_explicit(&made, 1, memory_order_relaxed) + 1;
  uint_fast64_t at = atomic_load_explicit(&fail_at, memory_order_relaxed);
  if (!at || n < at || (n > at && !atomic_load_explicit(&fail_sticky, memory_order_relaxed))) return 0;
  atomic_fetch_add_explicit(&fired, 1, memory_order_relaxed);
  return 1;
}

void *ga_host_malloc(size_t size) { return refused() ? NULL : malloc(size); }
void *ga_host_calloc(size_t n, size_t size) { return refused() ? NULL : calloc(n, size); }
void *ga_host_realloc(void *p, size_t size) { return refused() ? NULL : realloc(p, size); }
void *ga_host_aligned_alloc(size_t align, size_t size) {
  return refused() ? NULL : aligned_alloc(align, size);
}
char *ga_host_strdup(const char *str) { return refused() ? NULL : strdup(str); }
void *ga_host_zeroed(size_t size) {
  if (refused() || !size) return NULL;
  /* Not calloc: once the C library has freed a mapped chunk it serves the
   * next one of that size from its heap, and calloc then zeroes every byte. */
  void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  return p == MAP_FAILED ? NULL : p;
}
void ga_host_zeroed_free(void *p, size_t size) {
  if (p) (void)munmap(p, size);
}

/* Rounded up to whole huge pages, so that the trimmed mapping's end is
 * aligned too. */
static size_t huge_round(size_t size) { return (size + GA_HOST_HUGE - 1) & ~(GA_HOST_HUGE - 1); }

void *ga_host_table(size_t size) {
  if (!size || size > SIZE_MAX - 2 * GA_HOST_HUGE) return NULL;
  if (size < GA_HOST_HUGE || TABLES_ON_HEAP) {
    size_t n = (size + GA_HOST_TABLE_ALIGN - 1) & ~(size_t)(GA_HOST_TABLE_ALIGN - 1);
    void *p = ga_host_aligned_alloc(GA_HOST_TABLE_ALIGN, n);
    return p ? memset(p, 0, n) : NULL;
  }
  if (refused()) return NULL;
  /* One huge page more than needed, then the unaligned ends cut off. */
  size_t len = huge_round(size), over = len + GA_HOST_HUGE;
  char *m = mmap(NULL, over, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (m == MAP_FAILED) return NULL;
  uintptr_t at = ((uintptr_t)m + GA_HOST_HUGE - 1) & ~(uintptr_t)(GA_HOST_HUGE - 1);
  char *p = (char *)at;
  if (p > m) (void)munmap(m, (size_t)(p - m));
  if (m + over > p + len) (void)munmap(p + len, (size_t)(m + over - (p + len)));
  /* Advice only: where the kernel has huge pages off it is refused, and the
   * table is made of small pages as any other memory. */
  (void)madvise(p, len, MADV_HUGEPAGE);
  return p;
}

void ga_host_table_free(void *p, size_t size) {
  if (!p) return;
  if (size < GA_HOST_HUGE || TABLES_ON_HEAP)
    free(p);
  else
    (void)munmap(p, huge_round(size));
}

void ga_host_fault(uint64_t nth, int sticky) {
  atomic_store_explicit(&fail_at, 0, memory_order_relaxed);
  atomic_store_explicit(&fired, 0, memory_order_relaxed);
  atomic_store_explicit(&fail_sticky, sticky, memory_order_relaxed);
  if (nth)
    atomic_store_explicit(&fail_at, atomic_load_explicit(&made, memory_order_relaxed) + nth,
                          memory_order_relaxed);
}
uint64_t ga_host_faults_fired(void) { return atomic_load_explicit(&fired, memory_order_relaxed); }
uint64_t ga_host_allocations(void) { return atomic_load_explicit(&made, memory_order_relaxed); }
