// torch_abi_throw.cpp — the one C++ file: PyTorch's pluggable allocator can
// only learn of an out-of-memory through a C++ exception thrown by its alloc
// function (a NULL is not checked), so ga_torch_alloc throws the OOM report.
// Free never throws. Built when a C++ compiler is found.
#include <stdexcept>
#include <string>

#include "gardenalloc.h"

extern "C" GA_API void *ga_torch_alloc(ssize_t size, int device, void *stream) {
  void *p = ga_torch_alloc_nothrow(size, device, stream);
  if (!p && size > 0) throw std::runtime_error(std::string(ga_last_error()));
  return p;
}
