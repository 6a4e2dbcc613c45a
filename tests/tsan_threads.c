/* tsan_threads.c — the threaded workload of test_threads.c as a plain
 * program, for ThreadSanitizer (Criterion's runner does not start under it).
 * Prints "N passed, N failed" and exits non-zero on any failure. */
#include <stdio.h>

#include "internal.h"
#include "threads_work.h"

static int run(const char *conf, int with_controls) {
  char err[256];
  if (ga_sim_open(0, (size_t)8 << 30, &tw_dev, err, sizeof err) || ga_create_on_device(conf, tw_dev, &tw_a)) {
    fprintf(stderr, "setup failed: %s %s\n", err, ga_last_error());
    return 0;
  }
  pthread_t t[THREADS + 1];
  worker w[THREADS];
  int n = with_controls ? 2 : THREADS, errors = 0, broken = 0;
  for (int i = 0; i < n; i++) {
    w[i] = (worker){.id = i};
    pthread_create(&t[i], NULL, work, &w[i]);
  }
  if (with_controls) pthread_create(&t[n], NULL, tw_hold_and_release, &broken);
  for (int i = 0; i < n; i++) pthread_join(t[i], NULL), errors += w[i].errors;
  if (with_controls) pthread_join(t[n], NULL);
  ga_stats_t stats;
  ga_stats(tw_a, &stats);
  int ok = errors == 0 && broken == 0 && ga_check(tw_a) == 0 && stats.allocation[GA_POOL_ALL].current == 0;
  ga_destroy(tw_a);
  ga_dev_destroy(tw_dev);
  printf("%s [%s]: %s (%d errors)\n",
         with_controls ? "threads_with_stream_controls" : "threads_allocate_and_free", conf,
         ok ? "ok" : "FAILED", errors);
  return ok;
}

int main(void) {
  const char *confs[] = {"expandable_segments:False", "expandable_segments:True,expandable_page_size_mb:2"};
  int passed = 0;
  for (int c = 0; c < 2; c++) passed += run(confs[c], 0) + run(confs[c], 1);
  printf("%d passed, %d failed\n", passed, 4 - passed);
  return passed == 4 ? 0 : 1;
}
