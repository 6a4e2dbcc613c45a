/* test_threads.c — many threads allocating and freeing at once, every block
 * filled with a pattern and verified before it is freed. The workload lives
 * in threads_work.h so that tsan_threads.c runs it under ThreadSanitizer. */
#include "fixture.h"
#include "threads_work.h"

TestSuite(threads, .fini = fx_close);

static void open_both(void) {
  fx_open(NULL, 8 * GiB);
  tw_a = fx_a;
  tw_dev = fx_dev;
}

Test(threads, many_threads_allocate_and_free_with_content_checks) {
  open_both();
  pthread_t t[THREADS];
  worker w[THREADS];
  for (int i = 0; i < THREADS; i++) {
    w[i] = (worker){.id = i};
    cr_assert_eq(pthread_create(&t[i], NULL, work, &w[i]), 0);
  }
  for (int i = 0; i < THREADS; i++) {
    pthread_join(t[i], NULL);
    cr_assert_eq(w[i].errors, 0, "thread %d saw %d errors", i, w[i].errors);
  }
  assert_stat(allocation, GA_POOL_ALL, 0);
  assert_stat(active, GA_POOL_ALL, 0);
}

Test(threads, checks_and_stream_controls_race_with_allocation) {
  open_both();
  pthread_t t[3];
  worker w[2] = {{.id = 0}, {.id = 1}};
  pthread_create(&t[0], NULL, work, &w[0]);
  pthread_create(&t[1], NULL, work, &w[1]);
  int broken = 0;
  pthread_create(&t[2], NULL, tw_hold_and_release, &broken);
  for (int i = 0; i < 3; i++) pthread_join(t[i], NULL);
  cr_assert_eq(w[0].errors + w[1].errors, 0);
  cr_assert_eq(broken, 0, "ga_check found broken invariants while the workers ran (see stderr)");
}
