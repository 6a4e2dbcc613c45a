/* tsan_threads.c — the threaded workload of test_threads.c as a plain
 * program, for ThreadSanitizer (Criterion's runner does not start under it).
 * Prints "N passed, N failed" and exits non-zero on any failure. */
#include <stdio.h>

#include "internal.h"
#include "threads_work.h"

static int run(int with_controls) {
  char err[256];
  if (ga_sim_open(0, (size_t)8 << 30, &tw_dev, err, sizeof err) || ga_create_on_device(NULL, tw_dev, &tw_a)) {
    fprintf(stderr, "setup failed: %s %s\n", err, ga_last_error());
    return 0;
  }
  pthread_t t[THREADS + 1];
  worker w[THREADS];
  int n = with_controls ? 2 : THREADS, errors = 0;
  for (int i = 0; i < n; i++) {
    w[i] = (worker){.id = i};
    pthread_create(&t[i], NULL, work, &w[i]);
  }
  if (with_controls) pthread_create(&t[n], NULL, tw_hold_and_release, NULL);
  for (int i = 0; i < n; i++) pthread_join(t[i], NULL), errors += w[i].errors;
  if (with_controls) pthread_join(t[n], NULL);
  ga_stats_t s;
  ga_stats(tw_a, &s);
  int ok = errors == 0 && ga_check(tw_a) == 0 && s.allocation[GA_POOL_ALL].current == 0;
  ga_destroy(tw_a);
  ga_dev_destroy(tw_dev);
  printf("%s: %s (%d errors)\n", with_controls ? "threads_with_stream_controls" : "threads_allocate_and_free",
         ok ? "ok" : "FAILED", errors);
  return ok;
}

int main(void) {
  int passed = run(0) + run(1);
  printf("%d passed, %d failed\n", passed, 2 - passed);
  return passed == 2 ? 0 : 1;
}
