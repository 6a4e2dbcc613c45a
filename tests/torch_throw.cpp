// torch_throw.cpp — ga_torch_alloc raises the OOM report as a C++ exception
// (what PyTorch turns into a Python error) and the allocator stays usable.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include <functional>

#include "gardenalloc.h"

struct CUstream_st;
typedef CUstream_st *cudaStream_t;
struct ga_mempool_id {
  unsigned long long first, second;
};
extern "C" void ga_torch_begin_allocate_to_pool(int, ga_mempool_id, std::function<bool(cudaStream_t)>);
extern "C" void ga_torch_end_allocate_to_pool(int, ga_mempool_id);
extern "C" void ga_torch_release_pool(int, ga_mempool_id);

int main() {
  setenv("GARDENALLOC_CONF", "backend:sim,sim_capacity_mb:256", 1);
  int passed = 0, failed = 0;
  try {
    ga_torch_alloc((ssize_t)1 << 40, 0, nullptr);
    std::printf("no exception for 1 TiB\n");
    failed++;
  } catch (const std::runtime_error &e) {
    bool ok = std::strstr(e.what(), "CUDA out of memory. Tried to allocate") != nullptr;
    std::printf("oom raises: %s\n", ok ? "ok" : e.what());
    ok ? passed++ : failed++;
  }
  void *p = ga_torch_alloc(1 << 20, 0, nullptr); // still usable
  (p != nullptr ? passed : failed)++;
  ga_torch_free(p, 1 << 20, 0, nullptr);
  (ga_torch_alloc(0, 0, nullptr) == nullptr ? passed : failed)++;

  // Graph capture through PyTorch's hooks: the filter routes stream 0x77.
  cudaStream_t capture_stream = reinterpret_cast<cudaStream_t>(0x77);
  ga_mempool_id id{3, 0};
  ga_torch_begin_allocate_to_pool(0, id, [=](cudaStream_t stream) { return stream == capture_stream; });
  void *g = ga_torch_alloc(4 << 20, 0, capture_stream);
  ga_torch_free(g, 4 << 20, 0, capture_stream); // back to the private pool
  ga_torch_end_allocate_to_pool(0, id);
  void *h = ga_torch_alloc(4 << 20, 0, capture_stream);
  bool kept_apart = h != g;
  std::printf("capture pool kept apart: %s\n", kept_apart ? "ok" : "FAILED");
  (kept_apart ? passed : failed)++;
  ga_torch_free(h, 4 << 20, 0, capture_stream);
  ga_torch_release_pool(0, id);
  ga_torch_reset();
  ga_stats_t stats;
  ga_stats(ga_torch_allocator(0), &stats);
  bool returned = stats.reserved_bytes[GA_POOL_ALL].current == 0 && ga_check(ga_torch_allocator(0)) == 0;
  std::printf("released pool returned: %s\n", returned ? "ok" : "FAILED");
  (returned ? passed : failed)++;
  std::printf("%d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
