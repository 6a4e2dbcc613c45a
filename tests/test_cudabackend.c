/* test_cudabackend.c — what only the CUDA backend (device/cuda.c) does, on
 * the driver double: contexts, capture modes, the driver's error codes and
 * texts, and opening a device when the driver fails. Runs with
 * GA_TEST_BACKEND=cuda only (ctest cuda_backend). */
#include <stdlib.h>

#include "fixture.h"

#ifdef GA_HAVE_CUDA

TestSuite(cudabackend, .fini = fx_close);

static void need_cuda(void) {
  if (!fx_on_cuda()) cr_skip_test("needs GA_TEST_BACKEND=cuda (the driver double)");
}

#define EXP2 "expandable_segments:True,expandable_page_size_mb:2"

/* An engine driving device 1 calls the allocator of device 0: the context it
 * had current is current again afterwards, and the memory is device 0's. */
Test(cudabackend, the_callers_current_context_is_left_as_it_was) {
  need_cuda();
  fx_open_on(2, EXP2, 256 * MiB);
  FX_CU_OK(fx_cu.cuCtxSetCurrent(fx_cu.ctx[1]));
  void *p = fx_alloc(5 * MiB), *q = NULL;
  CUcontext cur = NULL;
  FX_CU_OK(fx_cu.cuCtxGetCurrent(&cur));
  cr_assert_eq(cur, fx_cu.ctx[1], "ga_malloc left device %s's context current",
               cur == fx_cu.ctx[0] ? "0" : "?");
  cr_assert_eq(ga_malloc(fx_a, 30 * MiB, S1, &q), GA_OK, "%s", ga_last_error());
  fx_free(q);
  fx_free(p);
  cr_assert_eq(ga_empty_cache(fx_a), GA_OK, "%s", ga_last_error());
  FX_CU_OK(fx_cu.cuCtxGetCurrent(&cur));
  cr_assert_eq(cur, fx_cu.ctx[1], "ga_free / ga_empty_cache left another context current");
  cudadouble_usage c1;
  FX_CU_OK(fx_cu.cudadouble_usage_get(1, &c1));
  cr_assert_eq(c1.used, 0, "nothing was allocated on device 1");
  FX_CU_OK(fx_cu.cuCtxSetCurrent(fx_cu.ctx[0]));
}

/* A thread with no context gets the device's primary context, as the CUDA
 * runtime would make it current. */
static void *alloc_on_a_fresh_thread(void *arg) {
  (void)arg;
  void *p = NULL;
  if (ga_malloc(fx_a, MiB, S1, &p) != GA_OK || ga_free(fx_a, p) != GA_OK) return (void *)1;
  CUcontext cur = NULL;
  fx_cu.cuCtxGetCurrent(&cur);
  return cur == fx_cu.ctx[0] ? NULL : (void *)2;
}
Test(cudabackend, a_thread_without_a_context_works_on_the_device) {
  need_cuda();
  fx_open(NULL, 256 * MiB);
  (void)S1; /* made here, on the test's thread */
  pthread_t t;
  void *ret;
  pthread_create(&t, NULL, alloc_on_a_fresh_thread, NULL);
  pthread_join(t, &ret);
  cr_assert_null(ret, "failed at step %d", (int)(uintptr_t)ret);
}

static CUstreamCaptureMode thread_mode(void) {
  CUstreamCaptureMode m = CU_STREAM_CAPTURE_MODE_RELAXED;
  FX_CU_OK(fx_cu.cuThreadExchangeStreamCaptureMode(&m));
  CUstreamCaptureMode back = m;
  FX_CU_OK(fx_cu.cuThreadExchangeStreamCaptureMode(&back));
  return m;
}

/* PyTorch's torch.cuda.graph(capture_error_mode="thread_local") captures in
 * the thread-local mode: the allocator relaxes it around device calls and
 * puts that mode back, not the global one. */
Test(cudabackend, the_threads_capture_mode_is_restored_exactly) {
  need_cuda();
  fx_open(NULL, 256 * MiB);
  ga_stream_t stream = S1;
  CUstreamCaptureMode m = CU_STREAM_CAPTURE_MODE_THREAD_LOCAL;
  FX_CU_OK(fx_cu.cuThreadExchangeStreamCaptureMode(&m));
  FX_CU_OK(fx_cu.cuStreamBeginCapture((CUstream)stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
  cr_assert_eq(ga_begin_allocate_to_pool(fx_a, 1, stream), GA_OK, "%s", ga_last_error());
  void *p = fx_alloc_on(4 * MiB, stream); /* a new segment: cuMemAlloc in the relaxed mode */
  cr_assert_eq(thread_mode(), CU_STREAM_CAPTURE_MODE_THREAD_LOCAL, "the mode after ga_malloc is %d",
               (int)thread_mode());
  CUgraph g;
  FX_CU_OK(fx_cu.cuStreamEndCapture((CUstream)stream, &g));
  FX_CU_OK(fx_cu.cuGraphDestroy(g));
  cr_assert_eq(ga_end_allocate_to_pool(fx_a, 1), GA_OK);
  fx_free(p);
  cr_assert_eq(ga_release_pool(fx_a, 1), GA_OK);
  m = CU_STREAM_CAPTURE_MODE_GLOBAL;
  FX_CU_OK(fx_cu.cuThreadExchangeStreamCaptureMode(&m));
  ga_sim_usage u;
  fx_usage(&u);
  cr_assert_eq(u.captures_broken, 0);
}

/* What users read when the driver fails is the driver's name and text for
 * the error, and the call that failed. */
Test(cudabackend, driver_errors_are_named_with_the_drivers_text) {
  need_cuda();
  fx_open(EXP2, 256 * MiB);
  FX_CU_OK(fx_cu.cudadouble_inject("cuMemSetAccess", 1, CUDA_ERROR_UNKNOWN, 0));
  void *p;
  cr_assert_eq(ga_malloc(fx_a, 3 * MiB, S1, &p), GA_ERR_DEVICE);
  cr_assert(strstr(ga_last_error(), "cuMemSetAccess: CUDA_ERROR_UNKNOWN (999: unknown error)") != NULL, "%s",
            ga_last_error());
  /* A device out of memory in cuMemCreate is an out-of-memory for the user
   * (60 MiB: more than the page cache holds). */
  FX_CU_OK(fx_cu.cudadouble_inject("cuMemCreate", 1, CUDA_ERROR_OUT_OF_MEMORY, 1));
  cr_assert_eq(ga_malloc(fx_a, 60 * MiB, S1, &p), GA_ERR_OOM, "%s", ga_last_error());
  cr_assert(strstr(ga_last_error(), "CUDA out of memory. Tried to allocate") != NULL, "%s", ga_last_error());
  fx_cu.cudadouble_clear_faults();
  fx_free(fx_alloc(3 * MiB));
}

/* Every capture error of the driver is a capture error of the contract. */
Test(cudabackend, capture_errors_are_capture_errors) {
  need_cuda();
  fx_open(NULL, 256 * MiB);
  CUstream blocking;
  FX_CU_OK(fx_cu.cuStreamCreate(&blocking, CU_STREAM_DEFAULT));
  FX_CU_OK(fx_cu.cuStreamBeginCapture(blocking, CU_STREAM_CAPTURE_MODE_RELAXED));
  int capturing = -1;
  fx_refusals_expected(1);
  cr_assert_eq(ga_dev_stream_capturing(fx_dev, NULL, &capturing), GA_DEV_ECAPTURE,
               "the legacy stream while a blocking stream captures: %s", fx_dev->error);
  cr_assert(strstr(fx_dev->error, "CUDA_ERROR_STREAM_CAPTURE_IMPLICIT") != NULL, "%s", fx_dev->error);
  ga_event ev;
  cr_assert_eq(ga_dev_event_create(fx_dev, &ev), 0);
  cr_assert_eq(ga_dev_event_record(fx_dev, ev, blocking), 0, "%s", fx_dev->error);
  fx_refusals_expected(1);
  cr_assert_eq(ga_dev_event_query(fx_dev, ev), GA_DEV_ECAPTURE, "an event recorded in a capture: %s",
               fx_dev->error);
  CUgraph g;
  FX_CU_OK(fx_cu.cuStreamEndCapture(blocking, &g));
  FX_CU_OK(fx_cu.cuGraphDestroy(g));
  cr_assert_eq(ga_dev_event_destroy(fx_dev, ev), 0);
  FX_CU_OK(fx_cu.cuStreamDestroy(blocking));
}

/* A device ordinal the driver does not know is a bad argument, as on the sim. */
Test(cudabackend, an_unknown_peer_is_a_bad_argument) {
  need_cuda();
  fx_open_on(2, EXP2, 256 * MiB);
  int devices[2] = {0, 7};
  void *va;
  size_t g;
  cr_assert_eq(ga_dev_granularity(fx_dev, &g), 0);
  cr_assert_eq(ga_dev_reserve(fx_dev, g, g, &va), 0);
  ga_mem_handle h;
  cr_assert_eq(ga_dev_create(fx_dev, g, &h), 0);
  cr_assert_eq(ga_dev_map(fx_dev, va, g, h, 0), 0);
  fx_refusals_expected(1);
  cr_assert_eq(ga_dev_set_access(fx_dev, va, g, devices, 2), GA_DEV_EINVAL, "%s", fx_dev->error);
  cr_assert(strstr(fx_dev->error, "cuMemSetAccess: CUDA_ERROR_INVALID_DEVICE") != NULL, "%s", fx_dev->error);
  cr_assert_eq(ga_dev_unmap(fx_dev, va, g), 0);
  cr_assert_eq(ga_dev_release(fx_dev, h), 0);
  cr_assert_eq(ga_dev_unreserve(fx_dev, va, g), 0);
}

/* The driver fails at cuInit: backend:cuda says why, backend:auto falls back
 * to the simulated device, and nothing is left behind. */
Test(cudabackend, a_driver_that_fails_to_initialise_is_named) {
  need_cuda();
  fx_cu_machine(1, 256 * MiB); /* the fixture's cuInit is the first; cuda.c's the second */
  FX_CU_OK(fx_cu.cudadouble_inject("cuInit", 1, CUDA_ERROR_NO_DEVICE, 1));
  ga_allocator_t *a = NULL;
  cr_assert_eq(ga_create("backend:cuda", 0, &a), GA_ERR_NO_BACKEND);
  cr_assert(strstr(ga_last_error(), "cuInit failed: CUDA_ERROR_NO_DEVICE") != NULL, "%s", ga_last_error());
  cr_assert_eq(ga_create("backend:auto,sim_capacity_mb:64", 0, &a), GA_OK, "%s", ga_last_error());
  ga_destroy(a);
  fx_cu.cudadouble_clear_faults();
}

/* The primary context cannot be retained: the device does not open and
 * nothing is retained. */
Test(cudabackend, a_context_that_cannot_be_retained_is_named) {
  need_cuda();
  fx_cu_machine(1, 256 * MiB);
  FX_CU_OK(fx_cu.cudadouble_inject("cuDevicePrimaryCtxRetain", 1, CUDA_ERROR_OUT_OF_MEMORY, 0));
  ga_device *d = NULL;
  char err[256];
  cr_assert_eq(ga_cuda_open(0, &d, err, sizeof err), GA_DEV_ENODEV);
  cr_assert(strstr(err, "cuDevicePrimaryCtxRetain(device 0) failed: CUDA_ERROR_OUT_OF_MEMORY") != NULL, "%s",
            err);
  cudadouble_usage u;
  FX_CU_OK(fx_cu.cudadouble_usage_get(0, &u));
  cr_assert_eq(u.context_refs, 1, "only the fixture's retain");
}

/* A device without virtual memory management: expandable segments are
 * refused at ga_create, before any memory call, in words that say why and
 * what to do; native mode works. */
Test(cudabackend, expandable_segments_need_virtual_memory_management) {
  need_cuda();
  fx_cu_machine(1, 256 * MiB);
  FX_CU_OK(fx_cu.cudadouble_set_vmm(0, 0));
  const char *mem = "cuMemCreate,cuMemAddressReserve,cuMemAlloc,cuMemMap";
  uint64_t calls = fx_cu.cudadouble_calls(mem);
  ga_allocator_t *a = NULL;
  cr_assert_eq(ga_create("backend:cuda," EXP2, 0, &a), GA_ERR_UNSUPPORTED, "%s", ga_last_error());
  cr_assert_null(a);
  cr_assert(strstr(ga_last_error(),
                   "expandable_segments:True needs the CUDA virtual memory management API, "
                   "which device 0 does not support") &&
                strstr(ga_last_error(), "use expandable_segments:False"),
            "%s", ga_last_error());
  cr_assert_eq(fx_cu.cudadouble_calls(mem), calls, "no memory call was made");
  cr_assert_eq(ga_create("backend:cuda", 0, &a), GA_OK, "%s", ga_last_error());
  void *p = NULL;
  cr_assert_eq(ga_malloc(a, 5 * MiB, NULL, &p), GA_OK, "%s", ga_last_error());
  cr_assert_eq(ga_free(a, p), GA_OK);
  ga_destroy(a);
  FX_CU_OK(fx_cu.cudadouble_set_vmm(0, 1));
  cr_assert_eq(ga_create("backend:cuda," EXP2, 0, &a), GA_OK, "%s", ga_last_error());
  ga_destroy(a);
}

/* PyTorch's pluggable-allocator entry points, as PyTorch calls them, on the
 * CUDA backend: streams are real streams, device 1 allocates on its legacy
 * stream, a memory fraction caps device 0, and the caller's context stays. */
Test(cudabackend, the_pytorch_entry_points_on_the_cuda_backend) {
  need_cuda();
  setenv("GARDENALLOC_CONF", "backend:cuda,expandable_segments:True", 1); /* read once, at first use */
  fx_cu_machine(2, 256 * MiB);
  ga_stream_t s1 = S1, s2 = S2;
  char *p = ga_torch_alloc_nothrow(5 * MiB, 0, s1);
  cr_assert(p != NULL, "%s", ga_last_error());
  memset(p, 1, 5 * MiB);
  fx_hold(s2, 1);
  ga_torch_record_stream(p, s2);
  ga_torch_free(p, 5 * MiB, 0, s1);
  char *q = ga_torch_alloc_nothrow(5 * MiB, 0, s1);
  cr_assert(q != NULL && q != p, "not handed out again while s2 may still read it");
  fx_hold(s2, 0);
  size_t size = 0;
  cr_assert_eq(ga_torch_base_alloc(q + 100, &size), q);
  cr_assert_geq(size, 5 * MiB);
  ga_torch_free(q, 5 * MiB, 0, s1);
  char *r = ga_torch_alloc_nothrow(3 * MiB, 1, NULL);
  cr_assert(r != NULL, "%s", ga_last_error());
  memset(r, 2, 3 * MiB);
  cudadouble_usage u1;
  FX_CU_OK(fx_cu.cudadouble_usage_get(1, &u1));
  cr_assert_geq(u1.used, 4 * MiB, "device 1's memory");
  ga_torch_free(r, 3 * MiB, 1, NULL);
  CUcontext cur = NULL;
  FX_CU_OK(fx_cu.cuCtxGetCurrent(&cur));
  cr_assert_eq(cur, fx_cu.ctx[0], "the caller's context stays current");
  ga_torch_memory_fraction(0.25, 0);
  cr_assert_null(ga_torch_alloc_nothrow(100 * MiB, 0, s1));
  cr_assert(strstr(ga_last_error(), "CUDA out of memory") != NULL, "%s", ga_last_error());
  ga_torch_reset();
  /* PyTorch keeps them for the process; the test gives everything back. */
  ga_destroy(ga_torch_allocator(0));
  ga_destroy(ga_torch_allocator(1));
}

#endif
