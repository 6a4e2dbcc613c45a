/* consumer.c — a program built against an installed gardenalloc (CMake
 * package or pkg-config) or with add_subdirectory: it must compile with only
 * the public header and run on the simulated device. */
#include <stdio.h>

#include <gardenalloc.h>

int main(void) {
  ga_allocator_t *a;
  if (ga_create("backend:sim,sim_capacity_mb:1024", 0, &a) != GA_OK) {
    fprintf(stderr, "consumer: %s\n", ga_last_error());
    return 1;
  }
  void *p = NULL, *q = NULL;
  int ok = ga_malloc(a, 3 << 20, NULL, &p) == GA_OK && ga_malloc(a, 1000, NULL, &q) == GA_OK;
  ga_free(a, p);
  ga_free(a, q);
  ga_stats_t stats;
  ga_stats(a, &stats);
  ok = ok && stats.reserved_bytes[GA_POOL_ALL].current == 22 << 20 && ga_check(a) == 0;
  ga_destroy(a);
  printf("consumer: %s\n", ok ? "ok" : "FAILED");
  return ok ? 0 : 1;
}
