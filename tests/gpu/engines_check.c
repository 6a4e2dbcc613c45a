/* engines_check.c — what only a GPU confirms of docs/engines.md, on the
 * real driver (tests/gpu/run.sh builds and runs it): a contiguous-handle
 * allocation is one region to the driver (cuMemGetAddressRange), a request
 * past max_reserved_mb makes no driver call, ga_would_fit agrees with
 * ga_malloc, and sleep/wake restore modes hold real device bytes.
 * Exit status 0 when every check passes. */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gardenalloc.h"

#define MiB ((size_t)1 << 20)
typedef int (*range_fn)(uintptr_t *, size_t *, uintptr_t);
typedef int (*htod_fn)(uintptr_t, const void *, size_t);
typedef int (*dtoh_fn)(void *, uintptr_t, size_t);
static range_fn get_range;
static htod_fn htod;
static dtoh_fn dtoh;
static int failures;

#define CHECK(cond, ...) \
  do {                   \
    if (cond) {          \
      printf("ok   ");   \
    } else {             \
      printf("FAIL ");   \
      failures++;        \
    }                    \
    printf(__VA_ARGS__); \
    printf("\n");        \
  } while (0)

static uint64_t calls(ga_allocator_t *a) {
  ga_stats_t s;
  ga_stats(a, &s);
  uint64_t n = 0;
  for (int k = 0; k < GA_CALL_COUNT; k++) n += s.device_calls[k];
  return n;
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  void *cu = dlopen("libcuda.so.1", RTLD_NOW);
  if (!cu) {
    printf("no libcuda.so.1: %s\n", dlerror());
    return 2;
  }
  /* The primary context of device 0, current on this thread for the copies. */
  int (*init)(unsigned) = NULL, (*retain)(void **, int) = NULL, (*set_current)(void *) = NULL;
  *(void **)&init = dlsym(cu, "cuInit");
  *(void **)&retain = dlsym(cu, "cuDevicePrimaryCtxRetain");
  *(void **)&set_current = dlsym(cu, "cuCtxSetCurrent");
  void *ctx = NULL;
  if (!init || init(0) || retain(&ctx, 0) || set_current(ctx)) {
    printf("no CUDA context on device 0\n");
    return 2;
  }
  *(void **)&get_range = dlsym(cu, "cuMemGetAddressRange_v2");
  *(void **)&htod = dlsym(cu, "cuMemcpyHtoD_v2");
  *(void **)&dtoh = dlsym(cu, "cuMemcpyDtoH_v2");
  ga_allocator_t *a = NULL, *b = NULL;
  if (ga_create("backend:cuda,expandable_segments:True,expandable_page_size_mb:2", 0, &a) != GA_OK) {
    printf("ga_create: %s\n", ga_last_error());
    return 2;
  }
  /* 1. One region for RDMA / NCCL registration. */
  void *p = NULL, *q = NULL;
  ga_mem_range_t r[64];
  size_t n = 0;
  CHECK(ga_malloc_flags(a, 30 * MiB, NULL, GA_ALLOC_CONTIGUOUS_HANDLE, &p) == GA_OK, "contiguous 30 MiB: %s",
        ga_last_error());
  ga_mem_ranges(a, p, r, 64, &n);
  uintptr_t base = 0;
  size_t size = 0;
  int rc = get_range ? get_range(&base, &size, (uintptr_t)p) : -1; /* -1: this libcuda lacks it */
  CHECK(n == 1 && rc == 0 && base <= (uintptr_t)p && base + size >= (uintptr_t)p + 30 * MiB,
        "contiguous: %zu range(s); the driver's range %#lx + %zu covers it (rc %d)", n, (unsigned long)base,
        size, rc);
  CHECK(ga_malloc(a, 30 * MiB, NULL, &q) == GA_OK, "expandable 30 MiB");
  ga_mem_ranges(a, q, r, 64, &n);
  printf("     expandable 30 MiB on 2 MiB pages: %zu handle range(s)\n", n);
  /* 2. Sleep and wake restore modes on device bytes. */
  unsigned char *host = malloc(4 * MiB), *back = malloc(4 * MiB);
  for (size_t i = 0; i < 4 * MiB; i++) host[i] = (unsigned char)(i * 7 + 3);
  void *w = NULL, *z = NULL;
  ga_malloc(a, 4 * MiB, NULL, &w);
  ga_malloc(a, 4 * MiB, NULL, &z);
  CHECK(htod((uintptr_t)w, host, 4 * MiB) == 0 && htod((uintptr_t)z, host, 4 * MiB) == 0, "copies in");
  ga_tag(a, w, "w");
  ga_tag(a, z, "z");
  ga_sleep_mode(a, "w", GA_RESTORE_HOST);
  ga_sleep_mode(a, "z", GA_RESTORE_ZERO);
  CHECK(ga_sleep(a, "w,z", 0) == GA_OK, "sleep: %s", ga_last_error());
  CHECK(ga_wake(a) == GA_OK, "wake: %s", ga_last_error());
  dtoh(back, (uintptr_t)w, 4 * MiB);
  CHECK(memcmp(back, host, 4 * MiB) == 0, "host mode restored the bytes");
  dtoh(back, (uintptr_t)z, 4 * MiB);
  int zero = 1;
  for (size_t i = 0; i < 4 * MiB; i++) zero &= back[i] == 0;
  CHECK(zero, "zero mode restored zeros");
  ga_free(a, w);
  ga_free(a, z);
  ga_free(a, p);
  ga_free(a, q);
  ga_destroy(a);
  /* 3. The budget: no driver call past it. */
  if (ga_create("backend:cuda,max_reserved_mb:64", 0, &b) != GA_OK) return 2;
  ga_malloc(b, 40 * MiB, NULL, &p);
  uint64_t c0 = calls(b);
  CHECK(ga_malloc(b, 30 * MiB, NULL, &q) == GA_ERR_OOM && calls(b) == c0,
        "past max_reserved_mb: OOM, %llu calls", (unsigned long long)(calls(b) - c0));
  /* 4. The dry run agrees with the mallocs. */
  size_t free_b = 0, total = 0, sizes[3], fit = 0, got = 0;
  ga_mem_get_info(b, &free_b, &total);
  sizes[0] = 10 * MiB;
  sizes[1] = 12 * MiB;
  sizes[2] = 4 * MiB;
  ga_would_fit(b, sizes, 3, NULL, &fit);
  void *v[3];
  while (got < 3 && ga_malloc(b, sizes[got], NULL, &v[got]) == GA_OK) got++;
  CHECK(fit == got, "ga_would_fit %zu, ga_malloc %zu", fit, got);
  while (got) ga_free(b, v[--got]);
  ga_free(b, p);
  ga_destroy(b);
  int (*release)(int) = NULL;
  *(void **)&release = dlsym(cu, "cuDevicePrimaryCtxRelease_v2");
  if (release) release(0);
  printf("%d failure(s)\n", failures);
  return failures != 0;
}
