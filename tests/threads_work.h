/* threads_work.h — the multi-threaded workload shared by the Criterion test
 * (test_threads.c) and the ThreadSanitizer driver (tsan_threads.c): each
 * worker allocates and frees on its own and shared streams, fills every block
 * with a pattern and verifies it before the free. Uses the globals tw_a and
 * tw_dev, and the streams of tw_stream_of when set (the fixture's). */
#ifndef GA_THREADS_WORK_H
#define GA_THREADS_WORK_H

#include <pthread.h>
#include <stdlib.h>

#include "device/sim.h"
#include "gardenalloc.h"

static ga_allocator_t *tw_a;
static ga_device *tw_dev;

static ga_stream_t (*tw_stream_of)(int k); /* stream k, 1..11 */
static inline ga_stream_t tw_stream(int k) {
  return tw_stream_of ? tw_stream_of(k) : (ga_stream_t)(uintptr_t)(0x1001u * (unsigned)k);
}
#define TW_S1 tw_stream(1)
#define TW_S2 tw_stream(2)

static inline void tw_pattern(unsigned char *c, size_t n, unsigned seed, int check, int *bad) {
  for (size_t i = 0; i < n; i++) {
    unsigned char v = (unsigned char)((i * 131u + seed * 7u) ^ (i >> 8));
    if (!check)
      c[i] = v;
    else if (c[i] != v) {
      (*bad)++;
      return;
    }
  }
}

#define THREADS 8
#define STEPS   20000
#define SLOTS   24

typedef struct worker {
  int id;
  int errors;
} worker;

static inline size_t pick_size(unsigned *seed) {
  unsigned r = (unsigned)rand_r(seed);
  switch (r % 4) {
    case 0: return 1 + r % 4096;
    case 1: return 1 + r % (1u << 20);
    case 2: return 1 + r % (12u << 20);
    default: return 512 * (1 + r % 64);
  }
}

/* The first 4 KiB and the last 64 bytes of each block carry a pattern. */
static inline void fill(char *p, size_t len, unsigned tag) {
  int bad = 0;
  tw_pattern((unsigned char *)p, len < 4096 ? len : 4096, tag, 0, &bad);
  if (len >= 8192) tw_pattern((unsigned char *)p + len - 64, 64, tag + 1, 0, &bad);
}
static inline int verify(char *p, size_t len, unsigned tag) {
  int bad = 0;
  tw_pattern((unsigned char *)p, len < 4096 ? len : 4096, tag, 1, &bad);
  if (len >= 8192) tw_pattern((unsigned char *)p + len - 64, 64, tag + 1, 1, &bad);
  return bad == 0;
}

static inline void *work(void *arg) {
  worker *w = arg;
  unsigned seed = 1234u + (unsigned)w->id;
  void *ptr[SLOTS] = {0};
  size_t len[SLOTS];
  unsigned tag[SLOTS];
  ga_stream_t mine = tw_stream(4 + w->id);
  for (int step = 0; step < STEPS; step++) {
    int i = rand_r(&seed) % SLOTS;
    if (ptr[i]) {
      if (!verify(ptr[i], len[i], tag[i])) w->errors++;
      if (rand_r(&seed) % 8 == 0) ga_record_stream(tw_a, ptr[i], TW_S2);
      if (ga_free(tw_a, ptr[i]) != GA_OK) w->errors++;
      ptr[i] = NULL;
    } else {
      len[i] = pick_size(&seed);
      tag[i] = (unsigned)rand_r(&seed);
      if (ga_malloc(tw_a, len[i], rand_r(&seed) % 2 ? mine : TW_S1, &ptr[i]) != GA_OK) {
        w->errors++;
        continue;
      }
      fill(ptr[i], len[i], tag[i]);
    }
    if (step % 1000 == 999 && w->id == 0) ga_empty_cache(tw_a);
    if (step % 500 == 0) {
      ga_stats_t stats;
      ga_stats(tw_a, &stats);
    }
  }
  for (int i = 0; i < SLOTS; i++)
    if (ptr[i] && ga_free(tw_a, ptr[i]) != GA_OK) w->errors++;
  return NULL;
}

/* Holds and releases TW_S2 while checking the allocator; arg: an int that
 * counts the broken invariants ga_check found. */
static inline void *tw_hold_and_release(void *arg) {
  int *broken = arg;
  for (int i = 0; i < 200; i++) {
    ga_sim_hold_stream(tw_dev, TW_S2, i % 2 == 0);
    *broken += ga_check(tw_a);
  }
  ga_sim_hold_stream(tw_dev, TW_S2, 0);
  return NULL;
}

#endif
