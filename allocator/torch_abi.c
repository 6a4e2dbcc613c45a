/* torch_abi.c — the entry points PyTorch's CUDAPluggableAllocator calls, with
 * its exact signatures, and the optional hooks (init, reset, memory fraction,
 * record_stream, base allocation).
 *
 * One allocator per device, created on first use from the environment
 * (env.c: GARDENALLOC_CONF, else PyTorch's PYTORCH_CUDA_ALLOC_CONF; the
 * backend is CUDA on a GPU machine). PyTorch calls these from any thread
 * without a lock of its own. A free whose size, device or stream does not
 * match the allocation is reported on stderr and done as recorded; free never
 * fails loudly (it runs in a destructor): a free that went wrong is said on
 * stderr, and a tensor freed while its memory sleeps (ga_sleep) is freed by
 * the ga_wake that maps it again. ga_torch_alloc_nothrow returns NULL
 * on failure with the report in ga_last_error(); ga_torch_alloc throws it as a
 * C++ exception when the library was built with a C++ compiler (PyTorch turns
 * that into a Python RuntimeError), and is the non-throwing one otherwise.
 * In a child made by fork() the allocators are the parent's: alloc fails
 * (GA_ERR_FORKED's message), free is a silent no-op (a tensor the child
 * inherited is the parent's memory), and the hooks change nothing.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <sys/types.h>

#include "env.h"
#include "internal.h"

#define GA_TORCH_MAX_DEVICES 64

static _Atomic(ga_allocator_t *) devices[GA_TORCH_MAX_DEVICES];
static pthread_mutex_t create_mu = PTHREAD_MUTEX_INITIALIZER;
static atomic_int reports;

/* The history every allocator records (ga_torch_record_history), applied to
 * those made later too; under create_mu. */
static struct {
  int enabled, stacks;
  size_t max_entries;
} history;

/* fork(): the creation lock is held across it, so the child's copy is free. */
static pthread_once_t fork_once = PTHREAD_ONCE_INIT;
static void fork_prepare(void) { pthread_mutex_lock(&create_mu); }
static void fork_done(void) { pthread_mutex_unlock(&create_mu); }
static void fork_register(void) { (void)pthread_atfork(fork_prepare, fork_done, fork_done); }

GA_API ga_allocator_t *ga_torch_allocator(int device) {
  if (device < 0 || device >= GA_TORCH_MAX_DEVICES) {
    ga_error_set("gardenalloc: device %d is out of range (0..%d)", device, GA_TORCH_MAX_DEVICES - 1);
    return NULL;
  }
  ga_allocator_t *a = atomic_load_explicit(&devices[device], memory_order_acquire);
  if (a) return a;
  (void)pthread_once(&fork_once, fork_register);
  pthread_mutex_lock(&create_mu);
  a = atomic_load_explicit(&devices[device], memory_order_relaxed);
  const char *conf = a ? NULL : ga_env_conf(NULL);
  if (!a && !conf)
    ga_error_set("gardenalloc: %s", ga_env_error());
  else if (!a && ga_create(conf, device, &a) == GA_OK) {
    if (history.enabled && ga_record_history_stacks(a, 1, history.max_entries, history.stacks) != GA_OK)
      fprintf(stderr, "gardenalloc: device %d records no history: %s\n", device, ga_last_error());
    atomic_store_explicit(&devices[device], a, memory_order_release);
  }
  pthread_mutex_unlock(&create_mu);
  return a;
}

GA_API ga_allocator_t *ga_torch_allocator_try(int device) {
  return device >= 0 && device < GA_TORCH_MAX_DEVICES ? atomic_load(&devices[device]) : NULL;
}

GA_API ga_status_t ga_torch_record_history(int enabled, size_t max_entries, int stacks) {
  ga_status_t st = GA_OK;
  pthread_mutex_lock(&create_mu);
  history.enabled = enabled != 0;
  history.max_entries = max_entries;
  history.stacks = stacks;
  for (int d = 0; d < GA_TORCH_MAX_DEVICES; d++) {
    ga_allocator_t *a = atomic_load(&devices[d]);
    ga_status_t one = a ? ga_record_history_stacks(a, enabled, max_entries, stacks) : GA_OK;
    if (one != GA_OK && st == GA_OK) st = one;
  }
  if (st != GA_OK) history.enabled = 0;
  pthread_mutex_unlock(&create_mu);
  return st;
}

/* A mismatch PyTorch should never produce: said once per kind of trouble
 * for the first few, then counted silently. */
static void report(const char *fmt, void *ptr, long long got, long long want) {
  if (atomic_fetch_add(&reports, 1) < 20) {
    fprintf(stderr, "gardenalloc: ga_torch_free(%p): ", ptr);
    fprintf(stderr, fmt, got, want);
    fprintf(stderr, "; freeing the allocation as recorded\n");
  }
}

GA_API const char *ga_torch_config(const char **source) {
  const char *conf = ga_env_conf(source);
  if (!conf) ga_error_set("gardenalloc: %s", ga_env_error());
  return conf;
}

GA_API void *ga_torch_alloc_nothrow(ssize_t size, int device, void *stream) {
  if (size <= 0) {
    if (size < 0) ga_error_set("ga_torch_alloc: negative size %lld", (long long)size);
    return NULL;
  }
  ga_allocator_t *a = ga_torch_allocator(device);
  void *p = NULL;
  if (a) (void)ga_malloc(a, (size_t)size, stream, &p);
  return p;
}

#ifndef GA_TORCH_THROWS
GA_API void *ga_torch_alloc(ssize_t size, int device, void *stream) {
  return ga_torch_alloc_nothrow(size, device, stream);
}
#endif

GA_API void ga_torch_free(void *ptr, ssize_t size, int device, void *stream) {
  if (!ptr) return;
  ga_allocator_t *a = device >= 0 && device < GA_TORCH_MAX_DEVICES ? atomic_load(&devices[device]) : NULL;
  if (a && ga_inherited(a)) return; /* a forked child: the memory is the parent's */
  size_t requested = 0;
  ga_stream_t owner = NULL;
  if (!a || ga_allocation_info(a, ptr, &requested, NULL, &owner) != GA_OK) {
    a = NULL; /* not on that device: look on the others */
    int parents = 0;
    for (int d = 0; d < GA_TORCH_MAX_DEVICES && !a; d++) {
      ga_allocator_t *x = atomic_load(&devices[d]);
      if (x && ga_inherited(x)) {
        parents = 1;
      } else if (x && ga_allocation_info(x, ptr, &requested, NULL, &owner) == GA_OK) {
        a = x;
        report("PyTorch said device %lld, the allocation is on device %lld", ptr, device, d);
      }
    }
    if (!a && parents) return; /* it may be the parent's: not the child's to free */
    if (!a) {
      ga_error_set("ga_torch_free: %p was not allocated by gardenalloc", ptr);
      if (atomic_fetch_add(&reports, 1) < 20) fprintf(stderr, "gardenalloc: %s\n", ga_last_error());
      return;
    }
  }
  if ((size_t)size != requested)
    report("PyTorch said %lld bytes, the allocation asked for %lld", ptr, (long long)size,
           (long long)requested);
  if (stream != owner)
    report("PyTorch said stream 0x%llx, the allocation is on stream 0x%llx", ptr,
           (long long)(uintptr_t)stream, (long long)(uintptr_t)owner);
  /* An allocation asleep (ga_sleep) is freed by the wake that maps it again;
   * anything else that goes wrong is said, as free cannot fail. */
  if (ga_free_even_asleep(a, ptr) != GA_OK && atomic_fetch_add(&reports, 1) < 20)
    fprintf(stderr, "gardenalloc: %s\n", ga_last_error());
}

GA_API void ga_torch_init(int device_count) { (void)device_count; /* allocators are made on first use */ }

GA_API void ga_torch_reset(void) {
  for (int d = 0; d < GA_TORCH_MAX_DEVICES; d++) {
    ga_allocator_t *a = atomic_load(&devices[d]);
    if (a) (void)ga_empty_cache(a);
  }
}

GA_API void ga_torch_memory_fraction(double fraction, int device) {
  ga_allocator_t *a = ga_torch_allocator(device);
  if (a && ga_set_memory_fraction(a, fraction) != GA_OK)
    fprintf(stderr, "gardenalloc: %s\n", ga_last_error());
}

GA_API void ga_torch_record_stream(void *ptr, void *stream) {
  for (int d = 0; d < GA_TORCH_MAX_DEVICES; d++) {
    ga_allocator_t *a = atomic_load(&devices[d]);
    if (a && ga_record_stream(a, ptr, stream) == GA_OK) return;
  }
}

GA_API void *ga_torch_base_alloc(void *ptr, size_t *size) {
  for (int d = 0; d < GA_TORCH_MAX_DEVICES; d++) {
    ga_allocator_t *a = atomic_load(&devices[d]);
    void *base;
    if (a && ga_allocation_base(a, ptr, &base, size) == GA_OK) return base;
  }
  return ptr;
}
