/* engine.c — the example engine on the simulated device (any machine).
 * On the simulated device streams are plain ids and memory is host memory;
 * see engine_cuda.cu for the same loop with CUDA streams and a kernel. */
#include <string.h>

#include "engine.h"

static void touch(void *ptr, size_t bytes, ga_stream_t stream) {
  (void)stream;
  memset(ptr, 0x5a, bytes);
}

int main(int argc, char **argv) {
  const char *conf = argc > 1 ? argv[1] : "backend:sim,sim_capacity_mb:16384,expandable_segments:True";
  ga_allocator_t *a;
  if (ga_create(conf, 0, &a) != GA_OK) {
    fprintf(stderr, "engine: %s\n", ga_last_error());
    return 1;
  }
  int rc = engine_run(a, (ga_stream_t)(uintptr_t)1, (ga_stream_t)(uintptr_t)2, touch, 200);
  ga_destroy(a);
  return rc;
}
