/* cuda.c — the CUDA driver backend.
 *
 * libcuda.so.1 is opened with dlopen at run time, so the library loads and
 * works (on the simulated device) on a machine without a driver. Every entry
 * point is resolved once, process-wide. Each device uses its primary context,
 * made current on the calling thread before each call. Errors carry the
 * driver's name for the error and the call that failed.
 *
 * Built only when cuda.h was found (GA_HAVE_CUDA); otherwise ga_cuda_open
 * reports that this build has no CUDA backend.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../host.h"
#include "device.h"

#ifndef GA_HAVE_CUDA

int ga_cuda_open(int ordinal, ga_device **out, char *err, size_t errlen) {
  (void)ordinal;
  (void)out;
  snprintf(err, errlen, "backend:cuda: this build of gardenalloc has no CUDA backend (cuda.h was not found)");
  return GA_DEV_ENODEV;
}

#else

#include <cuda.h>
#include <dlfcn.h>
#include <pthread.h>

/* ---- The driver entry points, resolved once (the list: cuda_entries.h) ---- */
#include "cuda_entries.h"

static struct {
#define GA_X(f) __typeof__(&f) f;
  GA_CU_FUNCS(GA_X)
#undef GA_X
} cu;

static pthread_once_t cu_once = PTHREAD_ONCE_INIT;
static char cu_load_error[256];
static int cu_loaded;

static const char *cu_name(CUresult r) {
  const char *name = NULL;
  return cu.cuGetErrorName(r, &name) == CUDA_SUCCESS && name ? name : "an unknown CUDA error";
}

static void cu_load(void) {
  void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    snprintf(cu_load_error, sizeof cu_load_error, "cannot load libcuda.so.1 (%s)", dlerror());
    return;
  }
#define GA_X(f)                                                                               \
  {                                                                                           \
    void *sym_ = dlsym(lib, GA_CU_NAME(f));                                                   \
    memcpy(&cu.f, &sym_, sizeof sym_);                                                        \
  }                                                                                           \
  if (!cu.f) {                                                                                \
    snprintf(cu_load_error, sizeof cu_load_error, "libcuda.so.1 has no %s (driver too old?)", \
             GA_CU_NAME(f));                                                                  \
    return;                                                                                   \
  }
  GA_CU_FUNCS(GA_X)
#undef GA_X
  CUresult r = cu.cuInit(0);
  if (r != CUDA_SUCCESS) {
    snprintf(cu_load_error, sizeof cu_load_error, "cuInit failed: %s", cu_name(r));
    return;
  }
  cu_loaded = 1;
}

/* ---- Device state ---- */

typedef struct cuda_device {
  ga_device base;
  CUdevice dev;
  CUcontext ctx;
  CUmemAllocationProp prop;
} cuda_device;

static cuda_device *cd(ga_device *d) { return (cuda_device *)(void *)d; }

/* Turns a CUresult into our code and records "<call>: <NAME> (<code>: <the
 * driver's text>)". */
static int check(ga_device *d, CUresult r, const char *call) {
  if (r == CUDA_SUCCESS) return 0;
  if (r == CUDA_ERROR_NOT_READY) return GA_DEV_ENOTREADY;
  const char *text = NULL;
  if (cu.cuGetErrorString(r, &text) != CUDA_SUCCESS || !text) text = "no description";
  ga_dev_set_error(d, "%s: %s (%d: %s)", call, cu_name(r), (int)r, text);
  switch (r) {
    case CUDA_ERROR_OUT_OF_MEMORY: return GA_DEV_EOOM;
    case CUDA_ERROR_INVALID_VALUE:
    case CUDA_ERROR_INVALID_HANDLE:
    case CUDA_ERROR_INVALID_DEVICE: return GA_DEV_EINVAL;
    case CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED:
    case CUDA_ERROR_STREAM_CAPTURE_INVALIDATED:
    case CUDA_ERROR_STREAM_CAPTURE_MERGE:
    case CUDA_ERROR_STREAM_CAPTURE_UNMATCHED:
    case CUDA_ERROR_STREAM_CAPTURE_UNJOINED:
    case CUDA_ERROR_STREAM_CAPTURE_ISOLATION:
    case CUDA_ERROR_STREAM_CAPTURE_IMPLICIT:
    case CUDA_ERROR_CAPTURED_EVENT:
    case CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD: return GA_DEV_ECAPTURE;
    default: return GA_DEV_EDRIVER;
  }
}

/* ---- The device's context, for one call ----
 * Each call runs with the device's primary context current and leaves the
 * caller's context as it found it: an engine driving another device keeps
 * its context. A thread with none keeps ours afterwards, as the CUDA runtime
 * would make it current. Calls never nest, so one saved context per thread
 * is enough. */

static _Thread_local CUcontext ctx_saved; /* the caller's, to put back */
static _Thread_local int ctx_rc;          /* why ctx_enter failed */

static int ctx_enter(ga_device *d) {
  CUcontext cur = NULL;
  CUresult r = cu.cuCtxGetCurrent(&cur);
  ctx_saved = NULL;
  if (r != CUDA_SUCCESS) return (ctx_rc = check(d, r, "cuCtxGetCurrent")) != 0;
  if (cur == cd(d)->ctx) return 0;
  if ((ctx_rc = check(d, cu.cuCtxSetCurrent(cd(d)->ctx), "cuCtxSetCurrent"))) return 1;
  ctx_saved = cur;
  return 0;
}

static int ctx_leave(int rc) {
  if (ctx_saved) (void)cu.cuCtxSetCurrent(ctx_saved);
  ctx_saved = NULL;
  return rc;
}

#define CALL(d, expr, name) (ctx_enter(d) ? ctx_rc : ctx_leave(check((d), (expr), (name))))

/* ---- Ops ---- */

static int cuda_granularity(ga_device *d, size_t *g) {
  return CALL(d, cu.cuMemGetAllocationGranularity(g, &cd(d)->prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
              "cuMemGetAllocationGranularity");
}
static int cuda_mem_info(ga_device *d, size_t *f, size_t *t) {
  return CALL(d, cu.cuMemGetInfo(f, t), "cuMemGetInfo");
}
static int cuda_malloc(ga_device *d, size_t size, void **ptr) {
  CUdeviceptr p = 0;
  int rc = CALL(d, cu.cuMemAlloc(&p, size), "cuMemAlloc");
  if (!rc) *ptr = (void *)(uintptr_t)p;
  return rc;
}
static int cuda_free(ga_device *d, void *ptr) {
  return CALL(d, cu.cuMemFree((CUdeviceptr)(uintptr_t)ptr), "cuMemFree");
}
static int cuda_reserve(ga_device *d, size_t size, size_t align, void **va) {
  CUdeviceptr p = 0;
  int rc = CALL(d, cu.cuMemAddressReserve(&p, size, align, 0, 0), "cuMemAddressReserve");
  if (!rc) *va = (void *)(uintptr_t)p;
  return rc;
}
static int cuda_unreserve(ga_device *d, void *va, size_t size) {
  return CALL(d, cu.cuMemAddressFree((CUdeviceptr)(uintptr_t)va, size), "cuMemAddressFree");
}
static int cuda_create(ga_device *d, size_t size, ga_mem_handle *h) {
  CUmemGenericAllocationHandle x = 0;
  CUmemAllocationProp prop = cd(d)->prop;
  if (d->shareable) prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  if (d->shareable == GA_DEV_SHARE_FABRIC)
    prop.requestedHandleTypes =
        (CUmemAllocationHandleType)(CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR | CU_MEM_HANDLE_TYPE_FABRIC);
  if (ctx_enter(d)) return ctx_rc;
  CUresult r = cu.cuMemCreate(&x, size, &prop, 0);
  if (d->shareable == GA_DEV_SHARE_FABRIC &&
      (r == CUDA_ERROR_NOT_PERMITTED || r == CUDA_ERROR_NOT_SUPPORTED)) {
    return ctx_leave(ga_dev_fabric_refused(d, "cuMemCreate", r == CUDA_ERROR_NOT_PERMITTED));
  }
  int rc = ctx_leave(check(d, r, "cuMemCreate"));
  if (!rc) *h = (ga_mem_handle)x;
  return rc;
}
static int cuda_release(ga_device *d, ga_mem_handle h) {
  return CALL(d, cu.cuMemRelease((CUmemGenericAllocationHandle)h), "cuMemRelease");
}
static int cuda_map(ga_device *d, void *va, size_t size, ga_mem_handle h, size_t offset) {
  return CALL(d, cu.cuMemMap((CUdeviceptr)(uintptr_t)va, size, offset, (CUmemGenericAllocationHandle)h, 0),
              "cuMemMap");
}
static int cuda_set_access(ga_device *d, void *va, size_t size, const int *devices, int n) {
  CUmemAccessDesc acc[64];
  if (n < 1 || n > 64) {
    ga_dev_set_error(d, "cuMemSetAccess: %d devices (1 to 64 allowed)", n);
    return GA_DEV_EINVAL;
  }
  for (int i = 0; i < n; i++)
    acc[i] = (CUmemAccessDesc){.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = devices[i]},
                               .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
  return CALL(d, cu.cuMemSetAccess((CUdeviceptr)(uintptr_t)va, size, acc, (size_t)n), "cuMemSetAccess");
}
static int cuda_copy(ga_device *d, void *host, void *dev, size_t size, int to_host) {
  CUdeviceptr p = (CUdeviceptr)(uintptr_t)dev;
  return to_host ? CALL(d, cu.cuMemcpyDtoH(host, p, size), "cuMemcpyDtoH")
                 : CALL(d, cu.cuMemcpyHtoD(p, host, size), "cuMemcpyHtoD");
}
/* Portable: pinned for every context, so the device's primary context
 * need not stay current for copies from another thread's context. */
static int cuda_host_alloc(ga_device *d, size_t size, void **ptr) {
  void *p = NULL;
  int rc = CALL(d, cu.cuMemHostAlloc(&p, size, CU_MEMHOSTALLOC_PORTABLE), "cuMemHostAlloc");
  if (!rc) *ptr = p;
  return rc;
}
static int cuda_host_free(ga_device *d, void *ptr) { return CALL(d, cu.cuMemFreeHost(ptr), "cuMemFreeHost"); }
/* One piece: the handle's own file descriptor, at `offset` in it. */
static int cuda_share(ga_device *d, ga_mem_handle h, size_t offset, size_t size, ga_dev_piece *out,
                      size_t cap, size_t *n) {
  *n = 0;
  if (cap < 1) {
    ga_dev_set_error(d, "cuMemExportToShareableHandle: more than %zu pieces", cap);
    return GA_DEV_EINVAL;
  }
  int fd = -1;
  int rc = CALL(d,
                cu.cuMemExportToShareableHandle(&fd, (CUmemGenericAllocationHandle)h,
                                                CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
                "cuMemExportToShareableHandle");
  if (rc) return rc;
  out[0] = (ga_dev_piece){fd, offset, size};
  *n = 1;
  return 0;
}
static int cuda_import(ga_device *d, int fd, ga_mem_handle *h) {
  CUmemGenericAllocationHandle x = 0;
  int rc = CALL(
      d,
      cu.cuMemImportFromShareableHandle(&x, (void *)(intptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
      "cuMemImportFromShareableHandle");
  if (!rc) *h = (ga_mem_handle)x;
  return rc;
}
/* One piece: the handle's fabric handle, at `offset` in it. */
static int cuda_share_fabric(ga_device *d, ga_mem_handle h, size_t offset, size_t size, ga_dev_fabric *out,
                             size_t cap, size_t *n) {
  *n = 0;
  if (cap < 1) {
    ga_dev_set_error(d, "cuMemExportToShareableHandle: more than %zu pieces", cap);
    return GA_DEV_EINVAL;
  }
  CUmemFabricHandle fh;
  memset(&fh, 0, sizeof fh);
  _Static_assert(sizeof fh.data == GA_DEV_FABRIC_BYTES, "CUmemFabricHandle is 64 bytes");
  int rc = CALL(
      d, cu.cuMemExportToShareableHandle(&fh, (CUmemGenericAllocationHandle)h, CU_MEM_HANDLE_TYPE_FABRIC, 0),
      "cuMemExportToShareableHandle");
  if (rc) return rc;
  memcpy(out[0].handle, fh.data, GA_DEV_FABRIC_BYTES);
  out[0].offset = offset;
  out[0].size = size;
  *n = 1;
  return 0;
}
static int cuda_import_fabric(ga_device *d, const unsigned char *handle, ga_mem_handle *h) {
  CUmemGenericAllocationHandle x = 0;
  CUmemFabricHandle fh;
  memcpy(fh.data, handle, GA_DEV_FABRIC_BYTES);
  int rc = CALL(d, cu.cuMemImportFromShareableHandle(&x, &fh, CU_MEM_HANDLE_TYPE_FABRIC),
                "cuMemImportFromShareableHandle");
  if (!rc) *h = (ga_mem_handle)x;
  return rc;
}
static int cuda_unmap(ga_device *d, void *va, size_t size) {
  return CALL(d, cu.cuMemUnmap((CUdeviceptr)(uintptr_t)va, size), "cuMemUnmap");
}
static int cuda_event_create(ga_device *d, ga_event *e) {
  CUevent ev = NULL;
  int rc = CALL(d, cu.cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING), "cuEventCreate");
  if (!rc) *e = ev;
  return rc;
}
static int cuda_event_record(ga_device *d, ga_event e, ga_stream_t stream) {
  return CALL(d, cu.cuEventRecord((CUevent)e, (CUstream)stream), "cuEventRecord");
}
static int cuda_event_query(ga_device *d, ga_event e) {
  return CALL(d, cu.cuEventQuery((CUevent)e), "cuEventQuery");
}
static int cuda_event_synchronize(ga_device *d, ga_event e) {
  return CALL(d, cu.cuEventSynchronize((CUevent)e), "cuEventSynchronize");
}
static int cuda_event_destroy(ga_device *d, ga_event e) {
  return CALL(d, cu.cuEventDestroy((CUevent)e), "cuEventDestroy");
}
static int cuda_stream_synchronize(ga_device *d, ga_stream_t stream) {
  return CALL(d, cu.cuStreamSynchronize((CUstream)stream), "cuStreamSynchronize");
}
static int cuda_synchronize(ga_device *d) { return CALL(d, cu.cuCtxSynchronize(), "cuCtxSynchronize"); }
static int cuda_stream_capturing(ga_device *d, ga_stream_t stream, int *capturing) {
  CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
  int rc = CALL(d, cu.cuStreamIsCapturing((CUstream)stream, &st), "cuStreamIsCapturing");
  if (!rc) *capturing = st != CU_STREAM_CAPTURE_STATUS_NONE;
  return rc;
}
/* The mode as the contract passes it: 0 global, 1 relaxed, 2 thread-local
 * (what *previous gives back, so that the thread-local mode survives). */
static int cuda_capture_mode(ga_device *d, int relaxed, int *previous) {
  CUstreamCaptureMode m = relaxed == 0   ? CU_STREAM_CAPTURE_MODE_GLOBAL
                          : relaxed == 2 ? CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
                                         : CU_STREAM_CAPTURE_MODE_RELAXED;
  int rc = CALL(d, cu.cuThreadExchangeStreamCaptureMode(&m), "cuThreadExchangeStreamCaptureMode");
  if (!rc && previous)
    *previous = m == CU_STREAM_CAPTURE_MODE_RELAXED ? 1 : m == CU_STREAM_CAPTURE_MODE_THREAD_LOCAL ? 2 : 0;
  return rc;
}
static int cuda_device_count(ga_device *d, int *count) {
  return CALL(d, cu.cuDeviceGetCount(count), "cuDeviceGetCount");
}
static void cuda_destroy(ga_device *d) {
  if (!d) return;
  (void)cu.cuDevicePrimaryCtxRelease(cd(d)->dev);
  free(d);
}

static const ga_device_ops cuda_ops = {
    .name = "cuda",
    .granularity = cuda_granularity,
    .mem_info = cuda_mem_info,
    .malloc = cuda_malloc,
    .free = cuda_free,
    .reserve = cuda_reserve,
    .unreserve = cuda_unreserve,
    .create = cuda_create,
    .release = cuda_release,
    .map = cuda_map,
    .unmap = cuda_unmap,
    .set_access = cuda_set_access,
    .copy = cuda_copy,
    .host_alloc = cuda_host_alloc,
    .host_free = cuda_host_free,
    .event_create = cuda_event_create,
    .event_record = cuda_event_record,
    .event_query = cuda_event_query,
    .event_synchronize = cuda_event_synchronize,
    .event_destroy = cuda_event_destroy,
    .stream_synchronize = cuda_stream_synchronize,
    .synchronize = cuda_synchronize,
    .stream_capturing = cuda_stream_capturing,
    .capture_mode = cuda_capture_mode,
    .device_count = cuda_device_count,
    .share = cuda_share,
    .import = cuda_import,
    .share_fabric = cuda_share_fabric,
    .import_fabric = cuda_import_fabric,
    .destroy = cuda_destroy,
};

int ga_cuda_open(int ordinal, ga_device **out, char *err, size_t errlen) {
  pthread_once(&cu_once, cu_load);
  if (!cu_loaded) {
    snprintf(err, errlen, "backend:cuda: %s", cu_load_error);
    return GA_DEV_ENODEV;
  }
  int count = 0;
  CUresult r = cu.cuDeviceGetCount(&count);
  if (r != CUDA_SUCCESS) {
    snprintf(err, errlen, "backend:cuda: cuDeviceGetCount failed: %s", cu_name(r));
    return GA_DEV_ENODEV;
  }
  if (ordinal < 0 || ordinal >= count) {
    snprintf(err, errlen, "backend:cuda: device %d does not exist (%d CUDA devices)", ordinal, count);
    return GA_DEV_ENODEV;
  }
  cuda_device *c = ga_host_calloc(1, sizeof *c);
  if (!c) {
    snprintf(err, errlen, "backend:cuda: out of host memory");
    return GA_DEV_ENOMEM;
  }
  c->base.ops = &cuda_ops;
  c->base.ordinal = ordinal;
  r = cu.cuDeviceGet(&c->dev, ordinal);
  if (r == CUDA_SUCCESS) r = cu.cuDevicePrimaryCtxRetain(&c->ctx, c->dev);
  if (r != CUDA_SUCCESS) {
    snprintf(err, errlen, "backend:cuda: cuDevicePrimaryCtxRetain(device %d) failed: %s", ordinal,
             cu_name(r));
    free(c);
    return GA_DEV_ENODEV;
  }
  /* Expandable segments need the virtual memory management API (cuMemCreate,
   * cuMemMap): a device without it is refused for them at ga_create. */
  int vmm = 0;
  r = cu.cuDeviceGetAttribute(&vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, c->dev);
  c->base.vmm_unsupported = r == CUDA_SUCCESS && !vmm;
  c->prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  c->prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  c->prop.location.id = ordinal;
  *out = &c->base;
  return 0;
}

#endif /* GA_HAVE_CUDA */
