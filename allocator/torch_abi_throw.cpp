// torch_abi_throw.cpp — the C++ side of the PyTorch entry points.
//
// PyTorch's pluggable allocator learns of an out-of-memory only through a C++
// exception thrown by its alloc function (a NULL is not checked), so
// ga_torch_alloc throws the OOM report; free never throws. PyTorch's
// graph-capture hooks pass a std::function that says which streams allocate
// into the pool being captured; only C++ can call it, so the hooks live here
// and route those streams to gardenalloc's private pools. Built when a C++
// compiler is found.
#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "gardenalloc.h"

struct CUstream_st;
typedef CUstream_st *cudaStream_t;

// MempoolId_t is std::pair<unsigned long long, unsigned long long>; by value
// under the Itanium ABI it travels as this struct does.
struct ga_mempool_id {
  unsigned long long first, second;
};

namespace {

struct capture {
  int device;
  uint64_t pool;
  std::function<bool(cudaStream_t)> filter;
  std::vector<void *> streams; // routed so far
};

std::mutex mu;
std::vector<capture> captures; // begun and not ended
std::atomic<int> ncaptures{0}; // captures.size(), read without the lock on every alloc

// api.c (internal.h): a capture is underway on the allocator from its begin
// hook, before its streams are routed at their first allocation.
extern "C" ga_status_t ga_capture_announce(ga_allocator_t *a, int begin);

uint64_t pool_of(ga_mempool_id id) { return (id.first << 32) ^ id.second ^ (id.first >> 32); }

// Routes `stream` to the pool whose filter accepts it (once per stream).
void route(int device, void *stream) {
  std::lock_guard<std::mutex> lock(mu);
  for (capture &c : captures) {
    if (c.device != device) continue;
    bool known = false;
    for (void *s : c.streams) known |= s == stream;
    if (known) return;
    if (c.filter && c.filter(static_cast<cudaStream_t>(stream))) {
      ga_allocator_t *a = ga_torch_allocator(device);
      if (a && ga_begin_allocate_to_pool(a, c.pool, stream) == GA_OK) c.streams.push_back(stream);
      return;
    }
  }
}

bool capturing() { return ncaptures.load(std::memory_order_acquire) != 0; }

} // namespace

extern "C" GA_API void *ga_torch_alloc(ssize_t size, int device, void *stream) {
  if (capturing()) route(device, stream);
  void *p = ga_torch_alloc_nothrow(size, device, stream);
  if (!p && size > 0) throw std::runtime_error(std::string(ga_last_error()));
  return p;
}

extern "C" GA_API void ga_torch_begin_allocate_to_pool(int device, ga_mempool_id id,
                                                       std::function<bool(cudaStream_t)> filter) {
  std::lock_guard<std::mutex> lock(mu);
  ga_allocator_t *a = ga_torch_allocator(device);
  // Underway from now: an allocation on another stream before the first on
  // a captured one must not make a call that would invalidate the capture.
  if (a) (void)ga_capture_announce(a, 1);
  captures.push_back(capture{device, pool_of(id), std::move(filter), {}});
  ncaptures.store(static_cast<int>(captures.size()), std::memory_order_release);
}

extern "C" GA_API void ga_torch_end_allocate_to_pool(int device, ga_mempool_id id) {
  std::lock_guard<std::mutex> lock(mu);
  uint64_t pool = pool_of(id);
  bool begun = false;
  for (size_t i = 0; i < captures.size(); i++)
    if (captures[i].device == device && captures[i].pool == pool) {
      captures.erase(captures.begin() + static_cast<long>(i));
      ncaptures.store(static_cast<int>(captures.size()), std::memory_order_release);
      begun = true;
      break;
    }
  ga_allocator_t *a = ga_torch_allocator(device);
  if (a) (void)ga_end_allocate_to_pool(a, pool); // a pool never used is fine
  if (a && begun) (void)ga_capture_announce(a, 0);
}

extern "C" GA_API void ga_torch_release_pool(int device, ga_mempool_id id) {
  ga_allocator_t *a = ga_torch_allocator(device);
  if (a) (void)ga_release_pool(a, pool_of(id));
}
