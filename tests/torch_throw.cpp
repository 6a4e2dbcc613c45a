// torch_throw.cpp — ga_torch_alloc raises the OOM report as a C++ exception
// (what PyTorch turns into a Python error) and the allocator stays usable.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include "gardenalloc.h"

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
  std::printf("%d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
