/* test_cudadouble.c — the CUDA driver double's own tests.
 *
 * driver_rules: the rules the double enforces, through the driver API only.
 * They are the driver's documented rules, so the same tests run against a
 * real driver (tests/gpu/run.sh runs them with the system's libcuda.so.1):
 * where a GPU disagrees, the double is wrong. double: what only the double
 * does (its controls, the faults it injects, the leaks it reports, and what
 * it refuses to model).
 */
#include <criterion/criterion.h>
#include <cuda.h>
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>

#include "../allocator/device/cuda_entries.h"
#include "cudadouble/cudadouble.h"

/* The backend's entry points, and those only these tests call. */
#define CU_FUNCS(X)       \
  GA_CU_FUNCS(X)          \
  X(cuMemGetAccess)       \
  X(cuStreamCreate)       \
  X(cuStreamDestroy)      \
  X(cuStreamBeginCapture) \
  X(cuStreamEndCapture)   \
  X(cuGraphDestroy)
#define CTL_FUNCS(X)         \
  X(cudadouble_configure)    \
  X(cudadouble_usage_get)    \
  X(cudadouble_hold_stream)  \
  X(cudadouble_inject)       \
  X(cudadouble_clear_faults) \
  X(cudadouble_calls)        \
  X(cudadouble_leaks)        \
  X(cudadouble_last_refusal) \
  X(cudadouble_quiet)
#define STR_(x) #x
#define STR(x)  STR_(x)

static struct {
  void *lib;
  int is_double; /* the library is the double (its controls are there) */
#define X(f) __typeof__(&f) f;
  CU_FUNCS(X)
  CTL_FUNCS(X)
#undef X
  int ndev;
  CUcontext ctx[2];
  size_t gran;
} cu;

static const char *name_of(CUresult r) {
  const char *n = NULL;
  return cu.cuGetErrorName(r, &n) == CUDA_SUCCESS && n ? n : "?";
}
#define IS(want, call)                                                                                    \
  do {                                                                                                    \
    CUresult r_ = (call);                                                                                 \
    cr_assert_eq(r_, want, "%s returned %s, the driver documents %s", #call, name_of(r_), name_of(want)); \
  } while (0)
#define OK(call) IS(CUDA_SUCCESS, call)

static void load(void) {
  cu.lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  cr_assert(cu.lib != NULL, "cannot load libcuda.so.1: %s", dlerror());
#define X(f)                                                 \
  {                                                          \
    void *s_ = dlsym(cu.lib, STR(f));                        \
    cr_assert(s_ != NULL, "libcuda.so.1 has no %s", STR(f)); \
    memcpy(&cu.f, &s_, sizeof s_);                           \
  }
  CU_FUNCS(X)
#undef X
#define X(f)                          \
  {                                   \
    void *s_ = dlsym(cu.lib, STR(f)); \
    memcpy(&cu.f, &s_, sizeof s_);    \
  }
  CTL_FUNCS(X)
#undef X
  cu.is_double = cu.cudadouble_configure != NULL;
}

/* cuInit, device 0's primary context current (and device 1's retained when
 * there is one), the granularity. */
static void setup(void) {
  load();
  if (cu.is_double) cu.cudadouble_quiet(1); /* the refusals here are on purpose */
  OK(cu.cuInit(0));
  OK(cu.cuDeviceGetCount(&cu.ndev));
  cr_assert_gt(cu.ndev, 0);
  for (int i = 0; i < cu.ndev && i < 2; i++) OK(cu.cuDevicePrimaryCtxRetain(&cu.ctx[i], i));
  OK(cu.cuCtxSetCurrent(cu.ctx[0]));
  CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                              .location = {CU_MEM_LOCATION_TYPE_DEVICE, 0}};
  OK(cu.cuMemGetAllocationGranularity(&cu.gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
}

/* Releases the contexts; on the double, nothing may be alive. */
static void done(void) {
  OK(cu.cuCtxSetCurrent(NULL));
  for (int i = 0; i < cu.ndev && i < 2; i++) OK(cu.cuDevicePrimaryCtxRelease(i));
  if (!cu.is_double) return;
  char buf[2048];
  size_t n = cu.cudadouble_leaks(buf, sizeof buf);
  cr_assert_eq(n, 0, "%zu objects alive:\n%s", n, buf);
}

static CUmemAllocationProp device_prop(int ordinal) {
  return (CUmemAllocationProp){.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                               .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = ordinal}};
}

static void grant(CUdeviceptr va, size_t size) {
  CUmemAccessDesc a = {.location = {CU_MEM_LOCATION_TYPE_DEVICE, 0},
                       .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
  OK(cu.cuMemSetAccess(va, size, &a, 1));
}

/* ---- driver_rules ---- */

Test(driver_rules, a_posix_fd_handle_is_exported_and_imported) {
  setup();
  CUmemAllocationProp p = device_prop(0);
  p.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  CUmemGenericAllocationHandle h, g, plain;
  OK(cu.cuMemCreate(&h, 2 * cu.gran, &p, 0));
  int fd = -1, fd2 = -1;
  OK(cu.cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
  cr_assert_geq(fd, 0);
  OK(cu.cuMemImportFromShareableHandle(&g, (void *)(intptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
  CUdeviceptr va, vb;
  OK(cu.cuMemAddressReserve(&va, 2 * cu.gran, 0, 0, 0));
  OK(cu.cuMemAddressReserve(&vb, cu.gran, 0, 0, 0));
  OK(cu.cuMemMap(va, 2 * cu.gran, 0, h, 0));
  OK(cu.cuMemMap(vb, cu.gran, cu.gran, g, 0)); /* the import's second granule */
  grant(va, 2 * cu.gran);
  grant(vb, cu.gran);
  unsigned char in[256], out[256];
  for (int i = 0; i < 256; i++) in[i] = (unsigned char)(i * 13 + 1);
  OK(cu.cuMemcpyHtoD(va + cu.gran + 4096, in, sizeof in));
  OK(cu.cuMemcpyDtoH(out, vb + 4096, sizeof out));
  cr_assert_arr_eq(in, out, sizeof in, "the import reads the exporter's bytes");
  /* A handle made without the type cannot be exported. */
  p = device_prop(0);
  OK(cu.cuMemCreate(&plain, cu.gran, &p, 0));
  cr_assert_neq(cu.cuMemExportToShareableHandle(&fd2, plain, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
                CUDA_SUCCESS);
  OK(cu.cuMemUnmap(vb, cu.gran));
  OK(cu.cuMemUnmap(va, 2 * cu.gran));
  OK(cu.cuMemRelease(g));
  OK(cu.cuMemRelease(h));
  OK(cu.cuMemRelease(plain));
  OK(cu.cuMemAddressFree(va, 2 * cu.gran));
  OK(cu.cuMemAddressFree(vb, cu.gran));
  close(fd);
  done();
}

Test(driver_rules, allocation_properties_are_checked) {
  setup();
  CUmemGenericAllocationHandle h;
  CUmemAllocationProp p = device_prop(0);
  p.type = CU_MEM_ALLOCATION_TYPE_INVALID;
  IS(CUDA_ERROR_INVALID_VALUE, cu.cuMemCreate(&h, cu.gran, &p, 0));
  p = device_prop(0);
  p.location.type = CU_MEM_LOCATION_TYPE_INVALID;
  IS(CUDA_ERROR_INVALID_VALUE, cu.cuMemCreate(&h, cu.gran, &p, 0));
  p = device_prop(cu.ndev);
  IS(CUDA_ERROR_INVALID_DEVICE, cu.cuMemCreate(&h, cu.gran, &p, 0));
  p = device_prop(0);
  IS(CUDA_ERROR_INVALID_VALUE, cu.cuMemCreate(&h, cu.gran + 4096, &p, 0));
  IS(CUDA_ERROR_INVALID_VALUE, cu.cuMemCreate(&h, 0, &p, 0));
  IS(CUDA_ERROR_INVALID_VALUE, cu.cuMemCreate(&h, cu.gran, &p, 1));
  OK(cu.cuMemCreate(&h, cu.gran, &p, 0));
  OK(cu.cuMemRelease(h));
  done();
}

Test(driver_rules, a_map_needs_aligned_arguments_one_reservation_and_nothing_mapped) {
  setup();
  size_t g = cu.gran;
  CUdeviceptr va;
  OK(cu.cuMemAddressReserve(&va, 4 * g, 0, 0, 0));
  CUmemAllocationProp p = device_prop(0);
  CUmemGenericAllocationHandle h;
  OK(cu.cuMemCreate(&h, 2 * g, &p, 0));
  IS(CUDA_ERROR_INVALID_VALUE, cu.cuMemMap(va + 4096, g, 0, h, 0));
  IS(CUDA_ERROR_INVALID_VALUE, cu.cuMemMap(va, g + 4096, 0, h, 0));
  IS(CUDA_ERROR_INVALID_VALUE, cu.cuMemMap(va, 2 * g, g, h, 0));         /* past the handle's end */
  IS(CUDA_ERROR_INVALID_VALUE, cu.cuMemMap(va + 3 * g, 2 * g, 0, h, 0)); /* past the reservation */
  OK(cu.cuMemMap(va, g, 0, h, 0));
  IS(CUDA_ERROR_INVALID_VALUE, cu.cuMemMap(va, g, g, h, 0)); /* already mapped */
  OK(cu.cuMemMap(va + 2 * g, g, g, h, 0));                   /* the second granule of the handle */
  OK(cu.cuMemUnmap(va, g));
  OK(cu.cuMemUnmap(va + 2 * g, g));
  OK(cu.cuMemRelease(h));
  OK(cu.cuMemAddressFree(va, 4 * g));
  done();
}

/* pytorch/pytorch#188008: an unmap over a range not wholly mapped fails. */
Test(driver_rules, an_unmap_covers_whole_mappings_only) {
  setup();
  size_t g = cu.gran;
  CUdeviceptr va;
  OK(cu.cuMemAddressReserve(&va, 4 * g, 0, 0, 0));
  CUmemAllocationProp p = device_prop(0);
  CUmemGenericAllocationHandle h;
  OK(cu.cuMemCreate(&h, 3 * g, &p, 0));
  OK(cu.cuMemMap(va, 2 * g, 0, h, 0));
  OK(cu.cuMemMap(va + 2 * g, g, 2 * g, h, 0));
  IS(CUDA_ERROR_INVALID_VALUE, cu.cuMemUnmap(va, g));           /* part of a mapping */
  IS(CUDA_ERROR_INVALID_VALUE, cu.cuMemUnmap(va + g, 2 * g));   /* starts inside one */
  IS(CUDA_ERROR_INVALID_VALUE, cu.cuMemUnmap(va, 4 * g));       /* the last granule is not mapped */
  IS(CUDA_ERROR_INVALID_VALUE, cu.cuMemAddressFree(va, 2 * g)); /* not the reserved size */
  OK(cu.cuMemUnmap(va, 3 * g));                                 /* two whole, adjacent mappings */
  OK(cu.cuMemRelease(h));
  OK(cu.cuMemAddressFree(va, 4 * g));
  done();
}

/* cuMemRelease: the memory lives until its last mapping goes. */
Test(driver_rules, released_memory_lives_until_its_last_mapping_goes) {
  setup();
  size_t g = cu.gran, free0, free1, total;
  CUdeviceptr va;
  OK(cu.cuMemAddressReserve(&va, g, 0, 0, 0));
  OK(cu.cuMemGetInfo(&free0, &total));
  CUmemAllocationProp p = device_prop(0);
  CUmemGenericAllocationHandle h;
  OK(cu.cuMemCreate(&h, g, &p, 0));
  OK(cu.cuMemMap(va, g, 0, h, 0));
  grant(va, g);
  char in[4096], out[4096];
  for (size_t i = 0; i < sizeof in; i++) in[i] = (char)(i * 7);
  OK(cu.cuMemcpyHtoD(va + g - sizeof in, in, sizeof in));
  OK(cu.cuMemRelease(h));
  OK(cu.cuMemcpyDtoH(out, va + g - sizeof in, sizeof out));
  cr_assert(memcmp(in, out, sizeof in) == 0, "the bytes outlive the handle");
  OK(cu.cuMemGetInfo(&free1, &total));
  cr_assert_leq(free1, free0 - g, "still allocated while mapped");
  OK(cu.cuMemUnmap(va, g));
  OK(cu.cuMemGetInfo(&free1, &total));
  cr_assert_geq(free1 + g / 2, free0, "given back with the mapping (%zu before, %zu now)", free0, free1);
  OK(cu.cuMemAddressFree(va, g));
  done();
}

Test(driver_rules, access_needs_a_wholly_mapped_range_and_valid_descriptors) {
  setup();
  size_t g = cu.gran;
  CUdeviceptr va;
  OK(cu.cuMemAddressReserve(&va, 2 * g, 0, 0, 0));
  CUmemAllocationProp p = device_prop(0);
  CUmemGenericAllocationHandle h;
  OK(cu.cuMemCreate(&h, g, &p, 0));
  OK(cu.cuMemMap(va, g, 0, h, 0));
  CUmemAccessDesc a = {.location = {CU_MEM_LOCATION_TYPE_DEVICE, 0},
                       .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
  IS(CUDA_ERROR_INVALID_VALUE, cu.cuMemSetAccess(va, 2 * g, &a, 1)); /* half of it is not mapped */
  IS(CUDA_ERROR_INVALID_VALUE, cu.cuMemSetAccess(va, g, &a, 0));
  CUmemAccessDesc bad = a;
  bad.location.id = cu.ndev;
  IS(CUDA_ERROR_INVALID_DEVICE, cu.cuMemSetAccess(va, g, &bad, 1));
  unsigned long long flags = 99;
  OK(cu.cuMemGetAccess(&flags, &a.location, va));
  cr_assert_eq(flags, CU_MEM_ACCESS_FLAGS_PROT_NONE, "a new mapping has no access");
  OK(cu.cuMemSetAccess(va, g, &a, 1));
  OK(cu.cuMemGetAccess(&flags, &a.location, va));
  cr_assert_eq(flags, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
  OK(cu.cuMemUnmap(va, g));
  OK(cu.cuMemRelease(h));
  OK(cu.cuMemAddressFree(va, 2 * g));
  done();
}

Test(driver_rules, cuMemAlloc_needs_a_current_context_and_a_size) {
  setup();
  CUdeviceptr p;
  IS(CUDA_ERROR_INVALID_VALUE, cu.cuMemAlloc(&p, 0));
  OK(cu.cuCtxSetCurrent(NULL));
  IS(CUDA_ERROR_INVALID_CONTEXT, cu.cuMemAlloc(&p, 4096));
  OK(cu.cuCtxSetCurrent(cu.ctx[0]));
  OK(cu.cuMemAlloc(&p, 4096));
  OK(cu.cuMemFree(p));
  done();
}

Test(driver_rules, events_and_streams_of_one_context) {
  setup();
  CUevent e;
  OK(cu.cuEventCreate(&e, CU_EVENT_DISABLE_TIMING));
  OK(cu.cuEventQuery(e)); /* never recorded: complete */
  CUevent ipc;
  IS(CUDA_ERROR_INVALID_VALUE, cu.cuEventCreate(&ipc, CU_EVENT_INTERPROCESS)); /* needs DISABLE_TIMING too */
  if (cu.ndev > 1) {
    CUstream other;
    OK(cu.cuCtxSetCurrent(cu.ctx[1]));
    OK(cu.cuStreamCreate(&other, CU_STREAM_NON_BLOCKING));
    OK(cu.cuCtxSetCurrent(cu.ctx[0]));
    IS(CUDA_ERROR_INVALID_HANDLE, cu.cuEventRecord(e, other));
    OK(cu.cuStreamDestroy(other));
  }
  OK(cu.cuEventRecord(e, NULL));
  OK(cu.cuEventSynchronize(e));
  OK(cu.cuEventDestroy(e));
  done();
}

Test(driver_rules, a_capture_forbids_unsafe_calls_in_the_global_mode) {
  setup();
  CUstream stream;
  OK(cu.cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  OK(cu.cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CUstreamCaptureStatus st;
  OK(cu.cuStreamIsCapturing(stream, &st));
  cr_assert_eq(st, CU_STREAM_CAPTURE_STATUS_ACTIVE);
  CUstreamCaptureMode m = CU_STREAM_CAPTURE_MODE_RELAXED;
  OK(cu.cuThreadExchangeStreamCaptureMode(&m));
  cr_assert_eq(m, CU_STREAM_CAPTURE_MODE_GLOBAL, "the default mode");
  CUdeviceptr p;
  OK(cu.cuMemAlloc(&p, 4096)); /* relaxed: allowed */
  OK(cu.cuMemFree(p));
  OK(cu.cuThreadExchangeStreamCaptureMode(&m)); /* back to global */
  IS(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, cu.cuMemAlloc(&p, 4096));
  OK(cu.cuStreamIsCapturing(stream, &st));
  cr_assert_eq(st, CU_STREAM_CAPTURE_STATUS_INVALIDATED);
  CUgraph graph = (CUgraph)1;
  IS(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, cu.cuStreamEndCapture(stream, &graph));
  cr_assert_null(graph);
  OK(cu.cuStreamDestroy(stream));
  done();
}

Test(driver_rules, a_capturing_stream_is_not_synchronised_and_its_events_not_queried) {
  setup();
  CUstream stream;
  CUevent e;
  OK(cu.cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  OK(cu.cuEventCreate(&e, CU_EVENT_DISABLE_TIMING));
  OK(cu.cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_RELAXED));
  OK(cu.cuEventRecord(e, stream));
  IS(CUDA_ERROR_CAPTURED_EVENT, cu.cuEventQuery(e));
  CUgraph graph;
  OK(cu.cuStreamEndCapture(stream, &graph));
  IS(CUDA_ERROR_CAPTURED_EVENT, cu.cuEventQuery(e)); /* until recorded again outside a capture */
  OK(cu.cuEventRecord(e, stream));
  OK(cu.cuEventSynchronize(e));
  OK(cu.cuGraphDestroy(graph));
  OK(cu.cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_RELAXED));
  IS(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, cu.cuStreamSynchronize(stream));
  IS(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, cu.cuStreamEndCapture(stream, &graph));
  OK(cu.cuEventDestroy(e));
  OK(cu.cuStreamDestroy(stream));
  done();
}

Test(driver_rules, the_legacy_stream_and_a_blocking_capture) {
  setup();
  CUstream stream;
  OK(cu.cuStreamCreate(&stream, CU_STREAM_DEFAULT));
  IS(CUDA_ERROR_INVALID_VALUE, cu.cuStreamBeginCapture(CU_STREAM_LEGACY, CU_STREAM_CAPTURE_MODE_RELAXED));
  OK(cu.cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_RELAXED));
  CUstreamCaptureStatus st;
  IS(CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, cu.cuStreamIsCapturing(CU_STREAM_LEGACY, &st));
  CUgraph graph;
  OK(cu.cuStreamEndCapture(stream, &graph)); /* that query did not invalidate it */
  OK(cu.cuGraphDestroy(graph));
  OK(cu.cuStreamDestroy(stream));
  done();
}

typedef struct other_thread {
  CUstreamCaptureMode mode;
  CUresult alloc, end;
  CUstream stream;
} other_thread;

static void *from_another_thread(void *arg) {
  other_thread *t = arg;
  CUstreamCaptureMode m = t->mode;
  cu.cuCtxSetCurrent(cu.ctx[0]);
  cu.cuThreadExchangeStreamCaptureMode(&m);
  CUdeviceptr p = 0;
  t->alloc = cu.cuMemAlloc(&p, 4096);
  if (t->alloc == CUDA_SUCCESS) cu.cuMemFree(p);
  CUgraph g = NULL;
  t->end = cu.cuStreamEndCapture(t->stream, &g);
  return NULL;
}

/* Another thread's global capture forbids this thread's unsafe calls in the
 * global mode, not in the thread-local one; a global capture ends on its
 * own thread. */
Test(driver_rules, capture_modes_across_threads) {
  setup();
  other_thread t = {.mode = CU_STREAM_CAPTURE_MODE_THREAD_LOCAL};
  OK(cu.cuStreamCreate(&t.stream, CU_STREAM_NON_BLOCKING));
  OK(cu.cuStreamBeginCapture(t.stream, CU_STREAM_CAPTURE_MODE_GLOBAL));
  pthread_t th;
  pthread_create(&th, NULL, from_another_thread, &t);
  pthread_join(th, NULL);
  IS(CUDA_SUCCESS, t.alloc);
  IS(CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD, t.end);
  t.mode = CU_STREAM_CAPTURE_MODE_GLOBAL;
  pthread_create(&th, NULL, from_another_thread, &t);
  pthread_join(th, NULL);
  IS(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, t.alloc);
  CUgraph graph;
  IS(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, cu.cuStreamEndCapture(t.stream, &graph));
  OK(cu.cuStreamDestroy(t.stream));
  done();
}

Test(driver_rules, error_names_and_strings) {
  load();
  if (cu.is_double) cu.cudadouble_quiet(1);
  struct {
    CUresult r;
    const char *name, *text;
  } want[] = {
      {CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
      {CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
      {CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
      {CUDA_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
      {CUDA_ERROR_NOT_READY, "CUDA_ERROR_NOT_READY", "device not ready"},
      {CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED",
       "operation not permitted when stream is capturing"},
      {CUDA_ERROR_UNKNOWN, "CUDA_ERROR_UNKNOWN", "unknown error"},
  };
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
    const char *n = NULL, *t = NULL;
    OK(cu.cuGetErrorName(want[i].r, &n));
    OK(cu.cuGetErrorString(want[i].r, &t));
    cr_assert_str_eq(n, want[i].name);
    cr_assert_str_eq(t, want[i].text);
  }
  IS(CUDA_ERROR_INVALID_VALUE, cu.cuGetErrorName(CUDA_ERROR_UNKNOWN, NULL));
}

/* ---- double ---- */

static void need_double(void) {
  load();
  if (!cu.is_double) cr_skip_test("libcuda.so.1 is not the driver double");
}

Test(double, the_machine_is_configurable_only_while_empty) {
  need_double();
  OK(cu.cudadouble_configure(2, 64 << 20));
  setup();
  IS(CUDA_ERROR_ILLEGAL_STATE, cu.cudadouble_configure(1, 64 << 20));
  size_t f, t;
  OK(cu.cuMemGetInfo(&f, &t));
  cr_assert_eq(t, (size_t)64 << 20);
  CUmemAllocationProp p = device_prop(0);
  CUmemGenericAllocationHandle h;
  IS(CUDA_ERROR_OUT_OF_MEMORY, cu.cuMemCreate(&h, (size_t)66 << 20, &p, 0));
  done();
  IS(CUDA_ERROR_INVALID_VALUE, cu.cudadouble_configure(1, (64 << 20) + 4096));
  OK(cu.cudadouble_configure(1, 64 << 20));
}

Test(double, injected_results_count_calls_of_every_named_entry_point) {
  need_double();
  setup();
  IS(CUDA_ERROR_INVALID_VALUE, cu.cudadouble_inject("cuNoSuchCall", 1, CUDA_ERROR_UNKNOWN, 0));
  OK(cu.cudadouble_inject("cuMemAlloc,cuMemFree", 3, CUDA_ERROR_OUT_OF_MEMORY, 0));
  CUdeviceptr p, q;
  uint64_t before = cu.cudadouble_calls("cuMemAlloc,cuMemFree");
  OK(cu.cuMemAlloc(&p, 4096));
  OK(cu.cuMemFree(p));
  IS(CUDA_ERROR_OUT_OF_MEMORY, cu.cuMemAlloc(&q, 4096)); /* the third of either */
  OK(cu.cuMemAlloc(&q, 4096));                           /* once only */
  cr_assert_eq(cu.cudadouble_calls("cuMemAlloc,cuMemFree") - before, 4);
  OK(cu.cudadouble_inject("cuMemFree", 1, CUDA_ERROR_UNKNOWN, 1));
  IS(CUDA_ERROR_UNKNOWN, cu.cuMemFree(q));
  IS(CUDA_ERROR_UNKNOWN, cu.cuMemFree(q)); /* repeats */
  cu.cudadouble_clear_faults();
  OK(cu.cuMemFree(q));
  /* A bad argument is refused before any injected result. */
  OK(cu.cudadouble_inject("cuMemAlloc", 1, CUDA_ERROR_OUT_OF_MEMORY, 0));
  IS(CUDA_ERROR_INVALID_VALUE, cu.cuMemAlloc(&q, 0));
  cu.cudadouble_clear_faults();
  cudadouble_usage u;
  OK(cu.cudadouble_usage_get(0, &u));
  cr_assert_eq(u.faults_fired, 3);
  done();
}

Test(double, a_held_stream_keeps_its_events_pending) {
  need_double();
  setup();
  CUstream stream;
  CUevent e;
  OK(cu.cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  OK(cu.cuEventCreate(&e, CU_EVENT_DISABLE_TIMING));
  OK(cu.cudadouble_hold_stream(stream, 1));
  OK(cu.cuEventRecord(e, stream));
  IS(CUDA_ERROR_NOT_READY, cu.cuEventQuery(e));
  OK(cu.cuStreamSynchronize(stream));
  OK(cu.cuEventQuery(e));
  OK(cu.cuEventRecord(e, stream));
  OK(cu.cudadouble_hold_stream(stream, 0));
  OK(cu.cuEventQuery(e));
  cudadouble_usage u;
  OK(cu.cudadouble_usage_get(0, &u));
  cr_assert_eq(u.waits, 1);
  cr_assert_eq(u.live_events, 1);
  cr_assert_eq(u.live_streams, 1);
  OK(cu.cuEventDestroy(e));
  OK(cu.cuStreamDestroy(stream));
  done();
}

Test(double, leaks_are_listed) {
  need_double();
  setup();
  CUdeviceptr va;
  OK(cu.cuMemAddressReserve(&va, cu.gran, 0, 0, 0));
  char buf[512];
  size_t want = (size_t)(cu.ndev < 2 ? cu.ndev : 2) + 1;
  cr_assert_eq(cu.cudadouble_leaks(buf, sizeof buf), want, "the retained contexts, one reservation: %s", buf);
  cr_assert(strstr(buf, "reservation") != NULL, "%s", buf);
  OK(cu.cuMemAddressFree(va, cu.gran));
  done();
}

Test(double, refusals_say_why) {
  need_double();
  setup();
  CUdeviceptr va;
  OK(cu.cuMemAddressReserve(&va, 2 * cu.gran, 0, 0, 0));
  IS(CUDA_ERROR_INVALID_VALUE, cu.cuMemUnmap(va, cu.gran));
  cr_assert(strstr(cu.cudadouble_last_refusal(), "cuMemUnmap: CUDA_ERROR_INVALID_VALUE: ") != NULL, "%s",
            cu.cudadouble_last_refusal());
  cr_assert(strstr(cu.cudadouble_last_refusal(), "nothing is mapped") != NULL, "%s",
            cu.cudadouble_last_refusal());
  OK(cu.cuMemAddressFree(va, 2 * cu.gran));
  cudadouble_usage u;
  OK(cu.cudadouble_usage_get(0, &u));
  cr_assert_eq(u.refusals, 0, "quiet refusals are not counted");
  cu.cudadouble_quiet(0);
  IS(CUDA_ERROR_INVALID_VALUE, cu.cuMemAddressFree(va, 2 * cu.gran));
  OK(cu.cudadouble_usage_get(0, &u));
  cr_assert_eq(u.refusals, 1);
  done();
}

/* The host faults on a mapping no device may access, as a kernel would. */
Test(double, a_mapping_without_access_faults, .signal = SIGSEGV) {
  need_double();
  setup();
  CUdeviceptr va;
  OK(cu.cuMemAddressReserve(&va, cu.gran, 0, 0, 0));
  CUmemAllocationProp p = device_prop(0);
  CUmemGenericAllocationHandle h;
  OK(cu.cuMemCreate(&h, cu.gran, &p, 0));
  OK(cu.cuMemMap(va, cu.gran, 0, h, 0));
  *(volatile char *)(uintptr_t)va = 1;
}

Test(double, a_handle_that_was_released_ends_the_process, .signal = SIGABRT) {
  need_double();
  setup();
  CUmemAllocationProp p = device_prop(0);
  CUmemGenericAllocationHandle h;
  OK(cu.cuMemCreate(&h, cu.gran, &p, 0));
  OK(cu.cuMemRelease(h));
  cu.cuMemRelease(h); /* undefined in the driver */
}

Test(double, a_stream_that_is_not_one_ends_the_process, .signal = SIGABRT) {
  need_double();
  setup();
  cu.cuStreamSynchronize((CUstream)(uintptr_t)0x1001);
}

Test(double, the_old_entry_points_end_the_process, .signal = SIGABRT) {
  need_double();
  void (*old)(void);
  void *s = dlsym(cu.lib, "cuMemAlloc"); /* cuda.h maps cuMemAlloc to cuMemAlloc_v2 */
  cr_assert(s != NULL);
  memcpy(&old, &s, sizeof s);
  old();
}

Test(double, unmodelled_properties_end_the_process, .signal = SIGABRT) {
  need_double();
  setup();
  CUmemAllocationProp p = device_prop(0);
  p.requestedHandleTypes = CU_MEM_HANDLE_TYPE_WIN32_KMT; /* fabric and POSIX fd are modelled */
  CUmemGenericAllocationHandle h;
  cu.cuMemCreate(&h, cu.gran, &p, 0);
}
