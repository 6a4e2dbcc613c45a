/* test_threads.c — many threads allocating and freeing at once, every block
 * filled with a pattern and verified before it is freed. */
#include <pthread.h>
#include <stdlib.h>

#include "fixture.h"

TestSuite(threads, .fini = fx_close);

#define THREADS 8
#define STEPS 20000
#define SLOTS 24

typedef struct worker {
  int id;
  int errors;
} worker;

static size_t pick_size(unsigned *seed) {
  unsigned r = (unsigned)rand_r(seed);
  switch (r % 4) {
    case 0: return 1 + r % 4096;
    case 1: return 1 + r % (1u << 20);
    case 2: return 1 + r % (12u << 20);
    default: return 512 * (1 + r % 64);
  }
}

/* The first 4 KiB and the last 64 bytes of each block carry a pattern. */
static void fill(char *p, size_t len, unsigned tag) {
  fx_fill(p, len < 4096 ? len : 4096, tag);
  if (len >= 8192) fx_fill(p + len - 64, 64, tag + 1);
}
static int verify(const char *p, size_t len, unsigned tag) {
  return fx_verify(p, len < 4096 ? len : 4096, tag) && (len < 8192 || fx_verify(p + len - 64, 64, tag + 1));
}

static void *work(void *arg) {
  worker *w = arg;
  unsigned seed = 1234u + (unsigned)w->id;
  void *ptr[SLOTS] = {0};
  size_t len[SLOTS];
  unsigned tag[SLOTS];
  ga_stream_t mine = (ga_stream_t)(uintptr_t)(0x100 + w->id);
  for (int step = 0; step < STEPS; step++) {
    int i = rand_r(&seed) % SLOTS;
    if (ptr[i]) {
      if (!verify(ptr[i], len[i], tag[i])) w->errors++;
      if (rand_r(&seed) % 8 == 0) ga_record_stream(fx_a, ptr[i], S2);
      if (ga_free(fx_a, ptr[i]) != GA_OK) w->errors++;
      ptr[i] = NULL;
    } else {
      len[i] = pick_size(&seed);
      tag[i] = (unsigned)rand_r(&seed);
      if (ga_malloc(fx_a, len[i], rand_r(&seed) % 2 ? mine : S1, &ptr[i]) != GA_OK) {
        w->errors++;
        continue;
      }
      fill(ptr[i], len[i], tag[i]);
    }
    if (step % 1000 == 999 && w->id == 0) ga_empty_cache(fx_a);
    if (step % 500 == 0) {
      ga_stats_t s;
      ga_stats(fx_a, &s);
    }
  }
  for (int i = 0; i < SLOTS; i++)
    if (ptr[i] && ga_free(fx_a, ptr[i]) != GA_OK) w->errors++;
  return NULL;
}

Test(threads, many_threads_allocate_and_free_with_content_checks) {
  fx_open(NULL, 8 * GiB);
  pthread_t t[THREADS];
  worker w[THREADS];
  for (int i = 0; i < THREADS; i++) {
    w[i] = (worker){.id = i};
    cr_assert_eq(pthread_create(&t[i], NULL, work, &w[i]), 0);
  }
  for (int i = 0; i < THREADS; i++) {
    pthread_join(t[i], NULL);
    cr_assert_eq(w[i].errors, 0, "thread %d saw %d errors (last: %s)", i, w[i].errors, ga_last_error());
  }
  assert_stat(allocation, GA_POOL_ALL, 0);
  assert_stat(active, GA_POOL_ALL, 0);
}

static void *hold_and_release(void *arg) {
  (void)arg;
  for (int i = 0; i < 200; i++) {
    ga_sim_hold_stream(fx_dev, S2, i % 2 == 0);
    ga_check(fx_a);
  }
  ga_sim_hold_stream(fx_dev, S2, 0);
  return NULL;
}

Test(threads, checks_and_stream_controls_race_with_allocation) {
  fx_open(NULL, 8 * GiB);
  pthread_t t[3];
  worker w[2] = {{.id = 0}, {.id = 1}};
  pthread_create(&t[0], NULL, work, &w[0]);
  pthread_create(&t[1], NULL, work, &w[1]);
  pthread_create(&t[2], NULL, hold_and_release, NULL);
  for (int i = 0; i < 3; i++) pthread_join(t[i], NULL);
  cr_assert_eq(w[0].errors + w[1].errors, 0);
}
