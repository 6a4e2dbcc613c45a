/* fixture.h — an allocator on a device the test owns.
 *
 * The device is the simulated one, or, with GA_TEST_BACKEND=cuda, the CUDA
 * backend (device/cuda.c) over the driver double (tests/cudadouble: a
 * libcuda.so.1 that LD_LIBRARY_PATH must point at). The fx_* controls below
 * hold stream work, inject faults, read what is live and begin or end
 * captures on either, so a suite runs unchanged on both; on the double they
 * go through the driver API (streams, captures, access) and the double's own
 * controls (found with dlsym), and injected faults are the driver's results
 * (CUDA_ERROR_OUT_OF_MEMORY from cuMemCreate, ...).
 *
 * fx_open() builds both; the suite's .fini (fx_close) asserts ga_check() == 0,
 * that emptying the cache after the test's frees gives every byte back to the
 * device, and that nothing is left on the device after ga_destroy (on the
 * double: no handle, reservation, mapping, event, stream, graph or context
 * reference alive).
 */
#ifndef GA_TEST_FIXTURE_H
#define GA_TEST_FIXTURE_H

#include <criterion/criterion.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/sim.h"
#include "gardenalloc.h"
#include "internal.h"

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)
#define GiB ((size_t)1 << 30)

static ga_device *fx_dev;
static ga_allocator_t *fx_a;

/* Criterion does not fail a test for an assertion in its .fini (it prints
 * it and counts a pass). Teardown checks therefore go through FX_TEARDOWN:
 * a teardown that found a problem ends the test process with a failure
 * status, which the runner reports and ctest counts. */
static int fx_teardown_failed;
#define FX_TEARDOWN(cond, ...)   \
  do {                           \
    if (!(cond)) {               \
      fx_teardown_failed = 1;    \
      cr_log_error(__VA_ARGS__); \
    }                            \
  } while (0)
static inline void fx_teardown_verdict(void) {
  if (!fx_teardown_failed) return;
  fprintf(stderr, "fixture: the teardown found the problems above\n");
  fflush(NULL);
  exit(1);
}

/* ---- The backend under test ---- */

static inline int fx_on_cuda(void) {
  const char *b = getenv("GA_TEST_BACKEND");
  return b && strcmp(b, "cuda") == 0;
}

#ifdef GA_HAVE_CUDA
#include <cuda.h>
#include <dlfcn.h>

#include "cudadouble/cudadouble.h"

/* Driver entry points the fixture calls, under the names cuda.h maps them
 * to, with cuda.h's prototypes; then the double's controls. */
#define FX_CU_FUNCS(X)                 \
  X(cuInit)                            \
  X(cuDevicePrimaryCtxRetain)          \
  X(cuDevicePrimaryCtxRelease)         \
  X(cuCtxGetCurrent)                   \
  X(cuCtxSetCurrent)                   \
  X(cuStreamCreate)                    \
  X(cuStreamDestroy)                   \
  X(cuStreamBeginCapture)              \
  X(cuStreamEndCapture)                \
  X(cuGraphDestroy)                    \
  X(cuMemGetAccess)                    \
  X(cuThreadExchangeStreamCaptureMode) \
  X(cudadouble_configure)              \
  X(cudadouble_usage_get)              \
  X(cudadouble_hold_stream)            \
  X(cudadouble_inject)                 \
  X(cudadouble_clear_faults)           \
  X(cudadouble_calls)                  \
  X(cudadouble_leaks)                  \
  X(cudadouble_last_refusal)           \
  X(cudadouble_quiet)                  \
  X(cudadouble_set_vmm)                \
  X(cudadouble_set_fabric)
#define FX_STR_(x) #x
#define FX_STR(x)  FX_STR_(x)
static struct {
  int loaded;
#define FX_X(f) __typeof__(&f) f;
  FX_CU_FUNCS(FX_X)
#undef FX_X
  int ndev;
  uint64_t refusals_allowed; /* calls the test makes the double refuse on purpose */
  CUcontext ctx[8];          /* retained by the fixture for its streams */
  CUstream streams[16];
  pthread_mutex_t mu;
} fx_cu = {.mu = PTHREAD_MUTEX_INITIALIZER};

#define FX_CU_OK(call)                                                                               \
  do {                                                                                               \
    CUresult r_ = (call);                                                                            \
    cr_assert_eq(r_, CUDA_SUCCESS, "%s = %d (%s)", #call, (int)r_, fx_cu.cudadouble_last_refusal()); \
  } while (0)

/* Loads the double (the library cuda.c will dlopen too) and its controls. */
static inline void fx_cu_load(void) {
  if (fx_cu.loaded) return;
  void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  cr_assert(lib != NULL,
            "GA_TEST_BACKEND=cuda: cannot load libcuda.so.1 (%s); LD_LIBRARY_PATH must name "
            "the driver double's directory (build/tests/cudadouble)",
            dlerror());
#define FX_X(f)                                                                              \
  {                                                                                          \
    void *s_ = dlsym(lib, FX_STR(f));                                                        \
    cr_assert(s_ != NULL, "libcuda.so.1 has no %s: it is not the driver double", FX_STR(f)); \
    memcpy(&fx_cu.f, &s_, sizeof s_);                                                        \
  }
  FX_CU_FUNCS(FX_X)
#undef FX_X
  fx_cu.loaded = 1;
}

/* A machine of ndev devices of `capacity` bytes each, initialised, with
 * device 0's primary context current on this thread. */
static inline void fx_cu_machine(int ndev, size_t capacity) {
  fx_cu_load();
  char leaks[1024];
  cr_assert_eq(fx_cu.cudadouble_leaks(leaks, sizeof leaks), 0, "the double is not empty:\n%s", leaks);
  FX_CU_OK(fx_cu.cudadouble_configure(ndev, capacity));
  FX_CU_OK(fx_cu.cuInit(0));
  fx_cu.ndev = ndev;
  for (int i = 0; i < ndev; i++) FX_CU_OK(fx_cu.cuDevicePrimaryCtxRetain(&fx_cu.ctx[i], i));
  FX_CU_OK(fx_cu.cuCtxSetCurrent(fx_cu.ctx[0]));
}

/* Gives back what the fixture made, then asserts the double holds nothing. */
static inline void fx_cu_teardown(void) {
  if (!fx_cu.ndev) return;
  CUcontext cur = NULL;
  fx_cu.cuCtxGetCurrent(&cur);
  if (!cur) fx_cu.cuCtxSetCurrent(fx_cu.ctx[0]);
  for (int k = 0; k < 16; k++)
    if (fx_cu.streams[k]) {
      FX_TEARDOWN(fx_cu.cuStreamDestroy(fx_cu.streams[k]) == CUDA_SUCCESS, "cuStreamDestroy failed");
      fx_cu.streams[k] = NULL;
    }
  for (int i = 0; i < fx_cu.ndev; i++)
    FX_TEARDOWN(fx_cu.cuDevicePrimaryCtxRelease(i) == CUDA_SUCCESS, "cuDevicePrimaryCtxRelease(%d) failed",
                i);
  cudadouble_usage u;
  fx_cu.cudadouble_usage_get(0, &u);
  FX_TEARDOWN(u.refusals == fx_cu.refusals_allowed,
              "the double refused %llu calls for breaking the driver's rules (%llu expected; see stderr)",
              (unsigned long long)u.refusals, (unsigned long long)fx_cu.refusals_allowed);
  fx_cu.ndev = 0;
  fx_cu.refusals_allowed = 0;
  char leaks[4096];
  size_t n = fx_cu.cudadouble_leaks(leaks, sizeof leaks);
  FX_TEARDOWN(n == 0, "%zu driver objects leaked:\n%s", n, leaks);
}
#endif

/* The test makes n calls that the driver refuses on purpose (an invalid peer
 * device, ...); fx_close fails on any other refusal. No-op on the sim. */
static inline void fx_refusals_expected(unsigned n) {
#ifdef GA_HAVE_CUDA
  fx_cu.refusals_allowed += n;
#else
  (void)n;
#endif
}

/* Stream k (1..15) of device 0: on the double a real (non-blocking) stream,
 * made on first use; on the sim a distinct value. */
static inline ga_stream_t fx_stream(int k) {
#ifdef GA_HAVE_CUDA
  if (fx_on_cuda()) {
    cr_assert(k > 0 && k < 16 && fx_cu.ndev, "fx_stream(%d) needs an open device", k);
    pthread_mutex_lock(&fx_cu.mu);
    if (!fx_cu.streams[k]) {
      CUcontext cur = NULL;
      fx_cu.cuCtxGetCurrent(&cur);
      if (cur != fx_cu.ctx[0]) fx_cu.cuCtxSetCurrent(fx_cu.ctx[0]);
      CUresult r = fx_cu.cuStreamCreate(&fx_cu.streams[k], CU_STREAM_NON_BLOCKING);
      if (cur != fx_cu.ctx[0]) fx_cu.cuCtxSetCurrent(cur);
      cr_assert_eq(r, CUDA_SUCCESS, "cuStreamCreate: %d", (int)r);
    }
    ga_stream_t stream = fx_cu.streams[k];
    pthread_mutex_unlock(&fx_cu.mu);
    return stream;
  }
#endif
  return (ga_stream_t)(uintptr_t)(0x1001u * (unsigned)k);
}
#define S1 fx_stream(1)
#define S2 fx_stream(2)
#define S3 fx_stream(3)

/* The conf for ga_create of a machine of ndev devices of `mb` MiB each. */
static inline const char *fx_machine_conf(int ndev, size_t mb) {
  static char conf[128];
#ifdef GA_HAVE_CUDA
  if (fx_on_cuda()) {
    if (fx_cu.ndev != ndev) fx_cu_machine(ndev, mb * MiB);
    return "backend:cuda";
  }
#endif
  snprintf(conf, sizeof conf, "backend:sim,sim_devices:%d,sim_capacity_mb:%zu", ndev, mb);
  return conf;
}

/* Device 0 of a machine of ndev devices of `capacity` bytes. */
static inline void fx_open_device(int ndev, size_t capacity, ga_device **out) {
  char err[256];
#ifdef GA_HAVE_CUDA
  if (fx_on_cuda()) {
    fx_cu_machine(ndev, capacity);
    cr_assert_eq(ga_cuda_open(0, out, err, sizeof err), 0, "%s", err);
    return;
  }
#endif
  cr_assert_eq(ga_sim_open_of(0, ndev, capacity, out, err, sizeof err), 0, "sim: %s", err);
}

static inline void fx_open_on(int ndev, const char *conf, size_t capacity) {
  fx_open_device(ndev, capacity, &fx_dev);
  ga_status_t st = ga_create_on_device(conf, fx_dev, &fx_a);
  cr_assert_eq(st, GA_OK, "ga_create_on_device(\"%s\"): %s: %s", conf ? conf : "", ga_status_str(st),
               ga_last_error());
}
static inline void fx_open(const char *conf, size_t capacity) { fx_open_on(1, conf, capacity); }

/* ---- Controls of the device, on either backend ---- */

/* What device d holds (the sim's fields; on the double, the same counts). */
static inline void fx_usage_of(ga_device *d, ga_sim_usage *u) {
#ifdef GA_HAVE_CUDA
  if (fx_on_cuda()) {
    cudadouble_usage c;
    FX_CU_OK(fx_cu.cudadouble_usage_get(d->ordinal, &c));
    *u = (ga_sim_usage){.capacity = c.capacity,
                        .used = c.used,
                        .live_mallocs = c.live_mallocs,
                        .live_handles = c.live_handles,
                        .live_reservations = c.live_reservations,
                        .live_mappings = c.live_mappings,
                        .live_events = c.live_events,
                        .pending_events = c.pending_events,
                        .waits = c.waits,
                        .faults_fired = c.faults_fired,
                        .captures_broken = c.captures_broken,
                        .live_pinned = c.live_pinned};
    return;
  }
#endif
  cr_assert_eq(ga_sim_usage_get(d, u), 0);
}
static inline void fx_usage(ga_sim_usage *u) { fx_usage_of(fx_dev, u); }

/* While hold is set, `stream` has work running (events on it stay pending). */
static inline void fx_hold_on(ga_device *d, ga_stream_t stream, int hold) {
#ifdef GA_HAVE_CUDA
  if (fx_on_cuda()) {
    (void)d;
    FX_CU_OK(fx_cu.cudadouble_hold_stream((CUstream)stream, hold));
    return;
  }
#endif
  cr_assert_eq(ga_sim_hold_stream(d, stream, hold), 0);
}
static inline void fx_hold(ga_stream_t stream, int hold) { fx_hold_on(fx_dev, stream, hold); }

/* The driver entry points behind each call kind of the device contract. */
static inline const char *fx_driver_calls(ga_device_call_t kind) {
  static const char *const names[GA_CALL_COUNT] = {
      [GA_CALL_MALLOC] = "cuMemAlloc",
      [GA_CALL_FREE] = "cuMemFree",
      [GA_CALL_RESERVE] = "cuMemAddressReserve",
      [GA_CALL_UNRESERVE] = "cuMemAddressFree",
      [GA_CALL_CREATE] = "cuMemCreate",
      [GA_CALL_RELEASE] = "cuMemRelease",
      [GA_CALL_MAP] = "cuMemMap",
      [GA_CALL_UNMAP] = "cuMemUnmap",
      [GA_CALL_EVENT_CREATE] = "cuEventCreate",
      [GA_CALL_EVENT_RECORD] = "cuEventRecord",
      [GA_CALL_EVENT_QUERY] = "cuEventQuery",
      [GA_CALL_EVENT_SYNCHRONIZE] = "cuEventSynchronize",
      [GA_CALL_EVENT_DESTROY] = "cuEventDestroy",
      [GA_CALL_STREAM_SYNCHRONIZE] = "cuStreamSynchronize",
      [GA_CALL_SYNCHRONIZE] = "cuCtxSynchronize",
      [GA_CALL_MEM_INFO] = "cuMemGetInfo",
      [GA_CALL_CAPTURE_QUERY] = "cuStreamIsCapturing",
      [GA_CALL_SET_ACCESS] = "cuMemSetAccess",
      [GA_CALL_COPY] = "cuMemcpyDtoH,cuMemcpyHtoD",
      [GA_CALL_CAPTURE_MODE] = "cuThreadExchangeStreamCaptureMode",
      [GA_CALL_HOST_ALLOC] = "cuMemHostAlloc",
      [GA_CALL_HOST_FREE] = "cuMemFreeHost",
  };
  return names[kind];
}

/* Does the last error name `kind`'s call failing with `result` ("<call>: <result>")? */
static inline int fx_error_names(ga_device_call_t kind, const char *result);

/* The name a failed call of `kind` has in the device error text: the sim's
 * call name, or the driver entry point cuda.c names. */
static inline const char *fx_call_name(ga_device_call_t kind) {
  static char name[64];
  if (!fx_on_cuda()) return ga_device_call_name(kind);
  snprintf(name, sizeof name, "%.*s", (int)strcspn(fx_driver_calls(kind), ","), fx_driver_calls(kind));
  return name;
}

static inline int fx_error_names(ga_device_call_t kind, const char *result) {
  char want[128];
  snprintf(want, sizeof want, "%s: %s", fx_call_name(kind), result);
  return strstr(ga_last_error(), want) != NULL;
}

/* Makes the nth next call of `kind` (1 = the very next) fail with err
 * (GA_DEV_EOOM or GA_DEV_EDRIVER); on the double, the driver entry point
 * behind it returns CUDA_ERROR_OUT_OF_MEMORY or CUDA_ERROR_UNKNOWN. On the
 * double a kind counts the driver's calls: cuMemSetAccess is also called by
 * every map. */
static inline void fx_inject_on(ga_device *d, ga_device_call_t kind, unsigned nth, int err, int repeat) {
#ifdef GA_HAVE_CUDA
  if (fx_on_cuda()) {
    (void)d;
    FX_CU_OK(fx_cu.cudadouble_inject(fx_driver_calls(kind), nth,
                                     err == GA_DEV_EOOM ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_ERROR_UNKNOWN,
                                     repeat));
    return;
  }
#endif
  cr_assert_eq(ga_sim_inject(d, kind, nth, err, repeat), 0);
}
static inline void fx_inject(ga_device_call_t kind, unsigned nth, int err, int repeat) {
  fx_inject_on(fx_dev, kind, nth, err, repeat);
}
static inline void fx_clear_faults_on(ga_device *d) {
#ifdef GA_HAVE_CUDA
  if (fx_on_cuda()) {
    (void)d;
    fx_cu.cudadouble_clear_faults();
    return;
  }
#endif
  ga_sim_clear_faults(d);
}
static inline void fx_clear_faults(void) { fx_clear_faults_on(fx_dev); }

/* Calls of `kind` made so far: the allocator's count on the sim, the driver's
 * on the double. */
static inline uint64_t fx_calls(ga_device_call_t kind) {
#ifdef GA_HAVE_CUDA
  if (fx_on_cuda()) return fx_cu.cudadouble_calls(fx_driver_calls(kind));
#endif
  ga_stats_t stats;
  cr_assert_eq(ga_stats(fx_a, &stats), GA_OK);
  return stats.device_calls[kind];
}

/* Makes fx_dev refuse fabric handles at create, as the driver does without
 * an IMEX channel (not_permitted) or fabric support; 0 puts them back. */
static inline void fx_refuse_fabric(int refused) {
#ifdef GA_HAVE_CUDA
  if (fx_on_cuda()) {
    FX_CU_OK(fx_cu.cudadouble_set_fabric(0, refused == GA_SIM_FABRIC_NOT_PERMITTED ? CUDA_ERROR_NOT_PERMITTED
                                            : refused == GA_SIM_FABRIC_NOT_SUPPORTED
                                                ? CUDA_ERROR_NOT_SUPPORTED
                                                : CUDA_SUCCESS));
    fx_cu.cudadouble_quiet(refused != 0);
    return;
  }
#endif
  cr_assert_eq(ga_sim_set_fabric(fx_dev, refused), 0);
}

/* The devices with read/write access to the mapping holding va (bit =
 * ordinal). Nonzero when va is not in a mapping (malloc'd memory included). */
static inline int fx_access_on(ga_device *d, void *va, uint64_t *mask) {
#ifdef GA_HAVE_CUDA
  if (fx_on_cuda()) {
    (void)d;
    *mask = 0;
    for (int i = 0; i < fx_cu.ndev; i++) {
      unsigned long long flags = 0;
      CUmemLocation loc = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = i};
      fx_cu.cudadouble_quiet(1);
      CUresult r = fx_cu.cuMemGetAccess(&flags, &loc, (CUdeviceptr)(uintptr_t)va);
      fx_cu.cudadouble_quiet(0);
      if (r != CUDA_SUCCESS) return 1;
      if (flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE) *mask |= (uint64_t)1 << i;
    }
    return 0;
  }
#endif
  return ga_sim_access(d, va, mask);
}
static inline int fx_access(void *va, uint64_t *mask) { return fx_access_on(fx_dev, va, mask); }

/* `stream` begins (on) or ends (off) capturing a CUDA graph; on the double a
 * real capture in the global mode. Ending one that a refused call
 * invalidated is no error here (fx_usage counts captures_broken). */
static inline void fx_capture(ga_stream_t stream, int on) {
#ifdef GA_HAVE_CUDA
  if (fx_on_cuda()) {
    if (on) {
      FX_CU_OK(fx_cu.cuStreamBeginCapture((CUstream)stream, CU_STREAM_CAPTURE_MODE_GLOBAL));
    } else {
      CUgraph g = NULL;
      CUresult r = fx_cu.cuStreamEndCapture((CUstream)stream, &g);
      cr_assert(r == CUDA_SUCCESS || r == CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, "cuStreamEndCapture: %d",
                (int)r);
      if (g) FX_CU_OK(fx_cu.cuGraphDestroy(g));
    }
    return;
  }
#endif
  cr_assert_eq(ga_sim_set_capturing(fx_dev, stream, on), 0);
}

static inline ga_stats_t fx_stats(void) {
  ga_stats_t stats;
  cr_assert_eq(ga_stats(fx_a, &stats), GA_OK);
  return stats;
}

static inline void fx_close(void) {
  if (fx_a) {
    FX_TEARDOWN(ga_check(fx_a) == 0, "ga_check found broken invariants (see stderr)");
    ga_stats_t stats = fx_stats();
    if (stats.allocation[GA_POOL_ALL].current == 0) {
      FX_TEARDOWN(ga_empty_cache(fx_a) == GA_OK, "%s", ga_last_error());
      ga_sim_usage u;
      fx_usage(&u);
      stats = fx_stats();
      FX_TEARDOWN(stats.reserved_bytes[GA_POOL_ALL].current == 0, "reserved after empty_cache: %lld",
                  (long long)stats.reserved_bytes[GA_POOL_ALL].current);
      FX_TEARDOWN(u.used == 0, "device memory still used after empty_cache: %zu", u.used);
    }
    ga_destroy(fx_a);
    fx_a = NULL;
    ga_sim_usage u;
    fx_usage(&u);
    FX_TEARDOWN(u.used == 0 && u.live_mallocs == 0 && u.live_handles == 0 && u.live_reservations == 0 &&
                    u.live_mappings == 0 && u.live_events == 0,
                "device leak after ga_destroy: used %zu, mallocs %zu, handles %zu, reservations %zu, "
                "mappings %zu, events %zu",
                u.used, u.live_mallocs, u.live_handles, u.live_reservations, u.live_mappings, u.live_events);
  }
  ga_dev_destroy(fx_dev);
  fx_dev = NULL;
#ifdef GA_HAVE_CUDA
  if (fx_on_cuda()) fx_cu_teardown();
#endif
  fx_teardown_verdict();
}

static inline void *fx_alloc_on(size_t size, ga_stream_t stream) {
  void *p = NULL;
  ga_status_t st = ga_malloc(fx_a, size, stream, &p);
  cr_assert_eq(st, GA_OK, "ga_malloc(%zu): %s: %s", size, ga_status_str(st), ga_last_error());
  cr_assert(p != NULL);
  return p;
}
static inline void *fx_alloc(size_t size) { return fx_alloc_on(size, S1); }

static inline void fx_free(void *p) {
  ga_status_t st = ga_free(fx_a, p);
  cr_assert_eq(st, GA_OK, "ga_free(%p): %s: %s", p, ga_status_str(st), ga_last_error());
}

static inline size_t fx_block_size(void *p) {
  size_t b = 0;
  cr_assert_eq(ga_allocation_size(fx_a, p, NULL, &b), GA_OK, "%s", ga_last_error());
  return b;
}

#define assert_stat(field, pool, want)                                                                    \
  do {                                                                                                    \
    ga_stats_t s_ = fx_stats();                                                                           \
    long long got_ = (long long)s_.field[pool].current, want_ = (long long)(want);                        \
    cr_assert_eq(got_, want_, "%s[%d].current = %lld (%.2f MiB), expected %lld (%.2f MiB)", #field, pool, \
                 got_, got_ / 1048576.0, want_, want_ / 1048576.0);                                       \
  } while (0)
#define assert_reserved(want) assert_stat(reserved_bytes, GA_POOL_ALL, want)
#define assert_scalar(field, want)                                                           \
  do {                                                                                       \
    ga_stats_t s_ = fx_stats();                                                              \
    cr_assert_eq((long long)s_.field, (long long)(want), "%s = %lld, expected %lld", #field, \
                 (long long)s_.field, (long long)(want));                                    \
  } while (0)
#define assert_calls(kind, want)                                                                    \
  do {                                                                                              \
    ga_stats_t s_ = fx_stats();                                                                     \
    cr_assert_eq(s_.device_calls[kind], (uint64_t)(want), "device_calls[%s] = %llu, expected %llu", \
                 ga_device_call_name(kind), (unsigned long long)s_.device_calls[kind],              \
                 (unsigned long long)(want));                                                       \
  } while (0)

/* Runs `scenario` once to count the calls of `kind` it makes, then once per
 * position with that call failing (err), asserting that the fault fired and
 * that a clean run afterwards succeeds with no failure. The fixture checks
 * consistency and leaks after each run. On a machine of ndev devices;
 * returns the number of positions (0: the scenario makes no such call). */
static inline unsigned fx_fault_sweep_on(int ndev, const char *conf, size_t capacity, ga_device_call_t kind,
                                         int err, int (*scenario)(void)) {
  fx_open_on(ndev, conf, capacity);
  uint64_t at_create = fx_calls(kind);
  cr_assert_eq(scenario(), 0, "the scenario fails without a fault: %s", ga_last_error());
  unsigned calls = (unsigned)(fx_calls(kind) - at_create);
  fx_close();
  for (unsigned nth = 1; nth <= calls; nth++) {
    fx_open_on(ndev, conf, capacity);
    fx_inject(kind, nth, err, 0);
    scenario();
    fx_clear_faults();
    ga_sim_usage u;
    fx_usage(&u);
    cr_assert_eq(u.faults_fired, 1, "the fault at %s call %u did not fire", ga_device_call_name(kind), nth);
    cr_assert_eq(scenario(), 0, "%s fault at call %u left the allocator unusable: %s",
                 ga_device_call_name(kind), nth, ga_last_error());
    fx_close();
  }
  return calls;
}
static inline void fx_fault_sweep(const char *conf, size_t capacity, ga_device_call_t kind, int err,
                                  int (*scenario)(void)) {
  cr_assert_gt(fx_fault_sweep_on(1, conf, capacity, kind, err, scenario), 0, "the scenario makes no %s call",
               ga_device_call_name(kind));
}

/* A byte pattern that depends on the address and a seed. */
static inline void fx_fill(void *p, size_t n, unsigned seed) {
  unsigned char *c = p;
  for (size_t i = 0; i < n; i++) c[i] = (unsigned char)((i * 131u + seed * 7u) ^ (i >> 8));
}
static inline int fx_verify(const void *p, size_t n, unsigned seed) {
  const unsigned char *c = p;
  for (size_t i = 0; i < n; i++)
    if (c[i] != (unsigned char)((i * 131u + seed * 7u) ^ (i >> 8))) return 0;
  return 1;
}

/* The two halves of a fault-sweep scenario. fx_sweep_alloc: the i-th request
 * (streams alternate), which may fail only with a NULL pointer and an error
 * text; on success its first 4 KiB are filled; the allocator is consistent either
 * way. 1 when it failed. */
static inline int fx_sweep_alloc(void **p, size_t size, int i) {
  int failed = ga_malloc(fx_a, size, i % 2 ? S1 : S2, p) != GA_OK;
  if (failed) {
    cr_assert_null(*p);
    cr_assert(ga_last_error()[0] != 0);
  } else
    fx_fill(*p, size < 4096 ? size : 4096, (unsigned)i);
  cr_assert_eq(ga_check(fx_a), 0, "after malloc %d", i);
  return failed;
}
/* fx_sweep_release: every block that was handed out still holds what was
 * written (record_stream on S1 first for every `record_every`-th, 0: none),
 * is freed, and empty_cache leaves a consistent allocator. The number of
 * calls that failed. */
static inline int fx_sweep_release(void **p, const size_t *sizes, int n, int record_every) {
  for (int i = 0; i < n; i++) {
    if (!p[i]) continue;
    cr_assert(fx_verify(p[i], sizes[i] < 4096 ? sizes[i] : 4096, (unsigned)i), "contents of block %d", i);
    if (record_every && i % record_every == 0) ga_record_stream(fx_a, p[i], S1);
    fx_free(p[i]);
    p[i] = NULL;
  }
  int failures = ga_empty_cache(fx_a) != GA_OK;
  cr_assert_eq(ga_check(fx_a), 0);
  return failures;
}

/* A fault-sweep scenario (fx_sweep_run runs it): the requests sizes[0..n-1]
 * in turn (fx_sweep_alloc), block `hole` freed after request `hole_after`
 * (with record_stream on S1 first when hole_waits: it waits on an event);
 * then last(p, sizes), a request down a ladder to its end, which may keep its
 * block in p[n..nblocks-1] and answers how many of its calls failed;
 * ga_check; and fx_sweep_release of the nblocks blocks (8 at most),
 * record_every as there. */
typedef struct fx_sweep_plan {
  size_t sizes[8];
  int n, nblocks, record_every;
  int hole_after, hole, hole_waits;
  int (*last)(void **p, const size_t *sizes);
} fx_sweep_plan;
/* The number of calls that failed: 0 with no fault injected, which
 * fx_fault_sweep asserts. */
static inline int fx_sweep_run(const fx_sweep_plan *plan) {
  void *p[8] = {0};
  int failures = 0;
  for (int i = 0; i < plan->n; i++) {
    failures += fx_sweep_alloc(&p[i], plan->sizes[i], i);
    if (i == plan->hole_after && p[plan->hole]) {
      if (plan->hole_waits) ga_record_stream(fx_a, p[plan->hole], S1);
      fx_free(p[plan->hole]);
      p[plan->hole] = NULL;
    }
  }
  failures += plan->last(p, plan->sizes);
  cr_assert_eq(ga_check(fx_a), 0);
  return failures + fx_sweep_release(p, plan->sizes, plan->nblocks, plan->record_every);
}

#endif
