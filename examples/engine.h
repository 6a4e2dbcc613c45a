/* engine.h — the serving loop of the examples, in the style of an inference
 * engine: requests arrive, each gets a KV-cache buffer and per-step
 * activations; prefill runs on one stream, decode on another, so buffers made
 * on the prefill stream and used by decode are marked with ga_record_stream
 * before they are freed. `touch` writes into a buffer on a stream (a memset
 * on the simulated device, a kernel on a GPU). */
#ifndef GA_EXAMPLE_ENGINE_H
#define GA_EXAMPLE_ENGINE_H

#include <stdio.h>
#include <stdlib.h>

#include "gardenalloc.h"

typedef void (*engine_touch)(void *ptr, size_t bytes, ga_stream_t stream);

static int next_random(unsigned long long *s) { /* a small LCG: the same requests on every run */
  *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
  return (int)(*s >> 33);
}

static int engine_run(ga_allocator_t *a, ga_stream_t prefill, ga_stream_t decode, engine_touch touch,
                      int requests) {
  enum { SLOTS = 8 };
  void *kv[SLOTS] = {0};
  int left[SLOTS] = {0};
  unsigned long long seed = 42;
  const size_t kv_per_token = 192 << 10; /* 24 layers x 2 x 2048 x fp16 */
  for (int step = 0, started = 0; started < requests || left[0] || left[1] || left[2] || left[3] || left[4] ||
                                  left[5] || left[6] || left[7];
       step++) {
    for (int i = 0; i < SLOTS && started < requests; i++) {
      if (kv[i]) continue;
      size_t prompt = 64 + (size_t)(next_random(&seed) % 2048);
      void *act = NULL; /* prefill activations, freed on the prefill stream */
      if (ga_malloc(a, prompt * 3 * 2048 * 2, prefill, &act) != GA_OK ||
          ga_malloc(a, (prompt + 512) * kv_per_token, prefill, &kv[i]) != GA_OK) {
        fprintf(stderr, "engine: %s\n", ga_last_error());
        return 1;
      }
      touch(act, 4096, prefill);
      touch(kv[i], 4096, prefill);
      ga_free(a, act);
      ga_record_stream(a, kv[i], decode); /* decode reads the KV cache made by prefill */
      left[i] = 16 + next_random(&seed) % 256;
      started++;
    }
    void *logits = NULL; /* one decode step for the whole batch */
    if (ga_malloc(a, SLOTS * 32000 * 4, decode, &logits) != GA_OK) {
      fprintf(stderr, "engine: %s\n", ga_last_error());
      return 1;
    }
    touch(logits, 4096, decode);
    ga_free(a, logits);
    for (int i = 0; i < SLOTS; i++)
      if (kv[i] && --left[i] <= 0) {
        ga_free(a, kv[i]); /* reused only once decode's work on it is done */
        kv[i] = NULL;
        left[i] = 0;
      }
  }
  ga_stats_t s;
  ga_stats(a, &s);
  printf(
      "backend %s: %d requests served; peak allocated %.1f MiB, peak reserved %.1f MiB, "
      "%lld device allocations, %lld cross-stream frees synchronised by events; ga_check %d\n",
      ga_backend_name(a), requests, s.allocated_bytes[GA_POOL_ALL].peak / 1048576.0,
      s.reserved_bytes[GA_POOL_ALL].peak / 1048576.0, (long long)s.num_device_alloc,
      (long long)s.device_calls[GA_CALL_EVENT_RECORD], ga_check(a));
  return ga_check(a) != 0;
}

#endif
