/* device.h — everything the allocator needs from a GPU, as a written contract.
 *
 * A backend (sim.c, cuda.c) fills a ga_device_ops table. Backends are raw: no
 * policy, no statistics, no retries. The inline ga_dev_* wrappers below are the
 * only callers of the table; they count calls and failures per kind.
 *
 * Every call returns 0 or one of the GA_DEV_E* codes below and never aborts.
 * On failure it writes "<call>: <driver error name> (<detail>)" into
 * dev->error, so the caller can quote the call that failed. Unless stated,
 * a failed call changed nothing.
 *
 * The device is not thread-safe by itself: callers serialise calls on one
 * device (the allocator holds its lock). Sim test controls are the exception.
 */
#ifndef GA_DEVICE_H
#define GA_DEVICE_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "../errors.h"
#include "gardenalloc.h"

/* ---- Error codes: errors.h (0 or GA_DEV_*) ---- */

typedef struct ga_device ga_device;
typedef uint64_t ga_mem_handle; /* a physical allocation (CUmemGenericAllocationHandle) */
typedef void *ga_event;         /* an event (CUevent) */

/* What a device holds for its allocator (the optional usage query). */
typedef struct ga_device_usage {
  size_t live_mallocs;      /* malloc'd ranges not yet freed */
  size_t live_handles;      /* created handles not yet released (or still mapped) */
  size_t live_reservations; /* reserved ranges not yet unreserved */
  size_t live_mappings;     /* mapped granules */
  size_t live_events;       /* events not yet destroyed */
} ga_device_usage;

/* A piece of shareable memory (share, import): bytes [offset, offset+size)
 * of the memory the file descriptor fd names. */
typedef struct ga_dev_piece {
  int fd;
  uint64_t offset, size;
} ga_dev_piece;

/* A fabric handle (CUmemFabricHandle: 64 bytes that name a physical
 * allocation across the nodes of an NVLink/IMEX domain, no fd needed) and
 * the bytes [offset, offset+size) of the allocation it names. */
#define GA_DEV_FABRIC_BYTES 64
typedef struct ga_dev_fabric {
  unsigned char handle[GA_DEV_FABRIC_BYTES];
  uint64_t offset, size;
} ga_dev_fabric;

/* ga_device.shareable: what create() makes. */
#define GA_DEV_SHARE_NONE   0
#define GA_DEV_SHARE_FD     1 /* a POSIX file descriptor */
#define GA_DEV_SHARE_FABRIC 2 /* a POSIX file descriptor and a fabric handle */

typedef struct ga_device_ops {
  const char *name; /* "cuda" or "sim" */

  /* Minimum granularity of create/map/reserve (2 MiB on current GPUs).
   * post: *gran is a power of two. */
  int (*granularity)(ga_device *d, size_t *gran);

  /* cudaMemGetInfo. post: *free <= *total. */
  int (*mem_info)(ga_device *d, size_t *free_bytes, size_t *total_bytes);

  /* cudaMalloc. pre: size > 0. post: *ptr is 512-byte aligned (2 MiB for
   * sizes that are multiples of 2 MiB). EOOM when the device is full. */
  int (*malloc)(ga_device *d, size_t size, void **ptr);

  /* cudaFree of a pointer returned by malloc. EINVAL for any other pointer. */
  int (*free)(ga_device *d, void *ptr);

  /* cuMemAddressReserve. pre: size and align are multiples of the granularity
   * (align 0 = granularity). post: [*va, *va+size) is reserved, not mapped. */
  int (*reserve)(ga_device *d, size_t size, size_t align, void **va);

  /* cuMemAddressFree. pre: (va, size) is exactly one reservation, nothing in it
   * is mapped (EINVAL otherwise). */
  int (*unreserve)(ga_device *d, void *va, size_t size);

  /* cuMemCreate: physical memory on the device. pre: size is a positive
   * multiple of the granularity (EINVAL). EOOM when the device is full.
   * With shareable GA_DEV_SHARE_FABRIC, ENOTSUP when the device cannot make
   * fabric handles or the process may not (no IMEX channel), the text
   * naming both and shareable_handles:posix_fd. */
  int (*create)(ga_device *d, size_t size, ga_mem_handle *h);

  /* cuMemRelease. The memory goes back to the device once no mapping uses it. */
  int (*release)(ga_device *d, ga_mem_handle h);

  /* cuMemMap. pre: va, size and offset are multiples of the granularity;
   * [va, va+size) lies inside one reservation and is not mapped;
   * offset+size <= handle size. post: the range is backed by the handle's
   * memory at `offset`, and no device may access it yet: set_access grants
   * that (as with the driver, whose mappings start without access). Apart,
   * so that a failed grant leaves a mapping the caller knows of. */
  int (*map)(ga_device *d, void *va, size_t size, ga_mem_handle h, size_t offset);

  /* cuMemUnmap. pre: [va, va+size) is exactly a union of whole mappings. */
  int (*unmap)(ga_device *d, void *va, size_t size);

  /* cuMemSetAccess: read/write access to the mapped range [va, va+size) for
   * the n devices listed (this device included). pre: the whole range is
   * mapped; every ordinal names a device. */
  int (*set_access)(ga_device *d, void *va, size_t size, const int *devices, int n);

  /* cuMemcpyDtoH / cuMemcpyHtoD (synchronous). to_host != 0 copies device
   * memory at `dev` into `host`, else the other way. pre: dev..dev+size mapped. */
  int (*copy)(ga_device *d, void *host, void *dev, size_t size, int to_host);

  /* cuMemHostAlloc / cuMemFreeHost: size bytes of page-locked (pinned)
   * host memory, which copy() moves at the bus's full rate (pageable
   * memory is staged through the driver's own pinned buffers). pre:
   * size > 0. EOOM (or ENOMEM) when the host cannot pin more; host_free
   * takes only a pointer host_alloc returned (EINVAL otherwise). */
  int (*host_alloc)(ga_device *d, size_t size, void **ptr);
  int (*host_free)(ga_device *d, void *ptr);

  /* Events (cudaEventCreateWithFlags(DisableTiming), Record, Query,
   * Synchronize, Destroy). event_query returns 0 when complete and
   * GA_DEV_ENOTREADY when not. */
  int (*event_create)(ga_device *d, ga_event *ev);
  int (*event_record)(ga_device *d, ga_event ev, ga_stream_t stream);
  int (*event_query)(ga_device *d, ga_event ev);
  int (*event_synchronize)(ga_device *d, ga_event ev);
  int (*event_destroy)(ga_device *d, ga_event ev);

  /* Wait for all work queued on one stream / on the whole device. */
  int (*stream_synchronize)(ga_device *d, ga_stream_t stream);
  int (*synchronize)(ga_device *d);

  /* Whether `stream` is capturing a CUDA graph (cudaStreamIsCapturing). */
  int (*stream_capturing)(ga_device *d, ga_stream_t stream, int *capturing);

  /* cuThreadExchangeStreamCaptureMode for the calling thread: relaxed == 1
   * allows allocation calls while a capture is underway (as PyTorch does
   * around cudaMalloc), 0 is the global mode; *previous gets the thread's
   * mode as a value that, passed back as `relaxed`, restores it exactly
   * (the CUDA backend gives 2 for the thread-local mode). */
  int (*capture_mode)(ga_device *d, int relaxed, int *previous);

  /* cuDeviceGetCount: the devices of the machine, so that a peer ordinal can
   * be checked when it is given rather than when the first grant fails.
   * post: *count >= 1. */
  int (*device_count)(ga_device *d, int *count);

  /* Optional (NULL: not supported): shareable memory, for another process.
   * share: the bytes [offset, offset+size) of handle h (created while
   * ga_device.shareable was set) as pieces, each with a new file descriptor
   * the caller owns (the CUDA driver: cuMemExportToShareableHandle, one piece
   * whose offset is `offset` in the handle's fd; the simulated device: its
   * memfd, one piece per run of consecutive granules). At most cap pieces
   * into out, their number into *n; EINVAL past cap (nothing is left open).
   * pre: offset and size are multiples of the granularity.
   * import: a handle for the memory that a piece's fd names (the fd stays
   * the caller's); map it with map() at the piece's offset, give it back
   * with release(). */
  int (*share)(ga_device *d, ga_mem_handle h, size_t offset, size_t size, ga_dev_piece *out, size_t cap,
               size_t *n);
  int (*import)(ga_device *d, int fd, ga_mem_handle *h);

  /* Optional (NULL: not supported): the same with fabric handles, plain
   * bytes that need no fd passing (cuMemExportToShareableHandle and
   * cuMemImportFromShareableHandle with CU_MEM_HANDLE_TYPE_FABRIC; the
   * simulated device: its memfd, named by the exporter's pid and fd number).
   * share_fabric: like share (handles created while shareable was
   * GA_DEV_SHARE_FABRIC), each piece a fabric handle with the offset of its
   * bytes in the allocation it names. import_fabric: a handle for the
   * allocation a fabric handle names; map it at the piece's offset, release
   * it. EINVAL for bytes that name no exported allocation. */
  int (*share_fabric)(ga_device *d, ga_mem_handle h, size_t offset, size_t size, ga_dev_fabric *out,
                      size_t cap, size_t *n);
  int (*import_fabric)(ga_device *d, const unsigned char handle[GA_DEV_FABRIC_BYTES], ga_mem_handle *h);

  /* Optional: the clock calls are timed with, in nanoseconds (the simulated
   * device's virtual clock). NULL: the host's monotonic clock. A backend with
   * a clock of its own counts its stalls itself (ga_device.stalls). */
  uint64_t (*clock_ns)(ga_device *d);

  /* Optional (NULL when the backend cannot tell, as the CUDA driver cannot):
   * the objects the device holds now, for ga_check's cross-check. */
  int (*usage)(ga_device *d, ga_device_usage *u);

  /* Frees the backend's own state. Live device objects are the caller's
   * responsibility (the allocator gives everything back first). */
  void (*destroy)(ga_device *d);
} ga_device_ops;

struct ga_device {
  const ga_device_ops *ops;
  int ordinal;                      /* device number on the backend */
  uint64_t calls[GA_CALL_COUNT];    /* calls made, by kind */
  uint64_t failures[GA_CALL_COUNT]; /* calls that failed (ENOTREADY excluded) */
  uint64_t ns[GA_CALL_COUNT];       /* time spent in calls, by kind, on the backend's clock */
  uint64_t stalls;                  /* synchronisations that waited for queued work */
  uint64_t stall_ns;                /* and how long they waited */
  char error[512];                  /* text of the last failure */
  int vmm_unsupported;              /* no reserve/create/map (the driver's VMM attribute is 0) */
  int shareable;                    /* GA_DEV_SHARE_*: handles create() makes, for share/share_fabric */
};

/* Opens a backend. `backend` is "auto", "cuda" or "sim". For "auto" a missing
 * driver or device falls back to sim and *notice describes why (static text
 * the caller may print). sim_capacity is the simulated device's memory in
 * bytes. Returns GA_DEV_ENODEV for backend "cuda" without a usable driver;
 * `err` then holds the reason. */
int ga_device_open(const char *backend, int ordinal, size_t sim_capacity, int sim_devices, ga_device **out,
                   char *err, size_t errlen, const char **notice);

/* Backends. */
int ga_cuda_open(int ordinal, ga_device **out, char *err, size_t errlen);
/* A simulated device `ordinal` of a machine with `ndevices` of them. */
int ga_sim_open(int ordinal, size_t capacity, ga_device **out, char *err, size_t errlen);
int ga_sim_open_of(int ordinal, int ndevices, size_t capacity, ga_device **out, char *err, size_t errlen);

/* The name of a call kind ("map", "stream_synchronize", ...). */
const char *ga_dev_call_name(ga_device_call_t kind);

/* Records a failure message in d->error. */
void ga_dev_set_error(ga_device *d, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* ---- Counting wrappers: the only callers of the ops table ----
 * Each call is counted and timed by kind. On a backend without a clock of its
 * own (a GPU), a synchronisation that took longer than GA_DEV_STALL_NS waited
 * for queued work: it counts as a stall. */

#define GA_DEV_STALL_NS 20000 /* 20 us: longer than any synchronisation with nothing to wait for */

static inline uint64_t ga_dev_clock(ga_device *d) {
  if (d->ops->clock_ns) return d->ops->clock_ns(d);
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}
static inline int ga_dev_count(ga_device *d, ga_device_call_t k, uint64_t t0, int rc) {
  uint64_t dt = ga_dev_clock(d) - t0;
  d->calls[k]++;
  d->ns[k] += dt;
  if (rc != GA_DEV_OK && rc != GA_DEV_ENOTREADY) d->failures[k]++;
  if (!d->ops->clock_ns && dt > GA_DEV_STALL_NS &&
      (k == GA_CALL_STREAM_SYNCHRONIZE || k == GA_CALL_EVENT_SYNCHRONIZE || k == GA_CALL_SYNCHRONIZE))
    d->stalls++, d->stall_ns += dt;
  return rc;
}
/* Times and counts one call of kind k. */
#define GA_DEV_CALL(d, k, call)             \
  do {                                      \
    uint64_t t0_ = ga_dev_clock(d);         \
    return ga_dev_count(d, k, t0_, (call)); \
  } while (0)
static inline int ga_dev_granularity(ga_device *d, size_t *g) { return d->ops->granularity(d, g); }
/* Not counted (a property of the machine, like the granularity). */
static inline int ga_dev_device_count(ga_device *d, int *n) {
  if (d->ops->device_count) return d->ops->device_count(d, n);
  ga_dev_set_error(d, "device_count: not provided by the %s backend", d->ops->name);
  return GA_DEV_ENOTSUP;
}
static inline int ga_dev_mem_info(ga_device *d, size_t *f, size_t *t) {
  GA_DEV_CALL(d, GA_CALL_MEM_INFO, d->ops->mem_info(d, f, t));
}
static inline int ga_dev_malloc(ga_device *d, size_t size, void **p) {
  GA_DEV_CALL(d, GA_CALL_MALLOC, d->ops->malloc(d, size, p));
}
static inline int ga_dev_free(ga_device *d, void *p) { GA_DEV_CALL(d, GA_CALL_FREE, d->ops->free(d, p)); }
static inline int ga_dev_reserve(ga_device *d, size_t size, size_t al, void **va) {
  GA_DEV_CALL(d, GA_CALL_RESERVE, d->ops->reserve(d, size, al, va));
}
static inline int ga_dev_unreserve(ga_device *d, void *va, size_t size) {
  GA_DEV_CALL(d, GA_CALL_UNRESERVE, d->ops->unreserve(d, va, size));
}
static inline int ga_dev_create(ga_device *d, size_t size, ga_mem_handle *h) {
  GA_DEV_CALL(d, GA_CALL_CREATE, d->ops->create(d, size, h));
}
static inline int ga_dev_release(ga_device *d, ga_mem_handle h) {
  GA_DEV_CALL(d, GA_CALL_RELEASE, d->ops->release(d, h));
}
static inline int ga_dev_map(ga_device *d, void *va, size_t size, ga_mem_handle h, size_t off) {
  GA_DEV_CALL(d, GA_CALL_MAP, d->ops->map(d, va, size, h, off));
}
static inline int ga_dev_unmap(ga_device *d, void *va, size_t size) {
  GA_DEV_CALL(d, GA_CALL_UNMAP, d->ops->unmap(d, va, size));
}
static inline int ga_dev_set_access(ga_device *d, void *va, size_t size, const int *devs, int n) {
  GA_DEV_CALL(d, GA_CALL_SET_ACCESS, d->ops->set_access(d, va, size, devs, n));
}
static inline int ga_dev_copy(ga_device *d, void *host, void *dev, size_t size, int to_host) {
  GA_DEV_CALL(d, GA_CALL_COPY, d->ops->copy(d, host, dev, size, to_host));
}
static inline int ga_dev_host_alloc(ga_device *d, size_t size, void **p) {
  GA_DEV_CALL(d, GA_CALL_HOST_ALLOC, d->ops->host_alloc(d, size, p));
}
static inline int ga_dev_host_free(ga_device *d, void *p) {
  GA_DEV_CALL(d, GA_CALL_HOST_FREE, d->ops->host_free(d, p));
}
static inline int ga_dev_event_create(ga_device *d, ga_event *e) {
  GA_DEV_CALL(d, GA_CALL_EVENT_CREATE, d->ops->event_create(d, e));
}
static inline int ga_dev_event_record(ga_device *d, ga_event e, ga_stream_t stream) {
  GA_DEV_CALL(d, GA_CALL_EVENT_RECORD, d->ops->event_record(d, e, stream));
}
static inline int ga_dev_event_query(ga_device *d, ga_event e) {
  GA_DEV_CALL(d, GA_CALL_EVENT_QUERY, d->ops->event_query(d, e));
}
static inline int ga_dev_event_synchronize(ga_device *d, ga_event e) {
  GA_DEV_CALL(d, GA_CALL_EVENT_SYNCHRONIZE, d->ops->event_synchronize(d, e));
}
static inline int ga_dev_event_destroy(ga_device *d, ga_event e) {
  GA_DEV_CALL(d, GA_CALL_EVENT_DESTROY, d->ops->event_destroy(d, e));
}
static inline int ga_dev_stream_synchronize(ga_device *d, ga_stream_t stream) {
  GA_DEV_CALL(d, GA_CALL_STREAM_SYNCHRONIZE, d->ops->stream_synchronize(d, stream));
}
static inline int ga_dev_synchronize(ga_device *d) {
  GA_DEV_CALL(d, GA_CALL_SYNCHRONIZE, d->ops->synchronize(d));
}
static inline int ga_dev_stream_capturing(ga_device *d, ga_stream_t stream, int *c) {
  GA_DEV_CALL(d, GA_CALL_CAPTURE_QUERY, d->ops->stream_capturing(d, stream, c));
}
static inline int ga_dev_capture_mode(ga_device *d, int relaxed, int *previous) {
  GA_DEV_CALL(d, GA_CALL_CAPTURE_MODE, d->ops->capture_mode(d, relaxed, previous));
}
/* Not counted (introspection). GA_DEV_ENOTSUP when the backend has no answer. */
static inline int ga_dev_usage(ga_device *d, ga_device_usage *u) {
  return d->ops->usage ? d->ops->usage(d, u) : GA_DEV_ENOTSUP;
}
/* Not counted (rare; not in the cost table). GA_DEV_ENOTSUP without. */
static inline int ga_dev_share(ga_device *d, ga_mem_handle h, size_t off, size_t size, ga_dev_piece *out,
                               size_t cap, size_t *n) {
  if (d->ops->share) return d->ops->share(d, h, off, size, out, cap, n);
  ga_dev_set_error(d, "share: the %s backend cannot share memory with another process", d->ops->name);
  return GA_DEV_ENOTSUP;
}
static inline int ga_dev_import(ga_device *d, int fd, ga_mem_handle *h) {
  if (d->ops->import) return d->ops->import(d, fd, h);
  ga_dev_set_error(d, "import: the %s backend cannot import memory of another process", d->ops->name);
  return GA_DEV_ENOTSUP;
}
/* For create(): fabric handles refused (the driver's NOT_PERMITTED or
 * NOT_SUPPORTED), named with what to do. Returns GA_DEV_ENOTSUP. */
int ga_dev_fabric_refused(ga_device *d, const char *call, int not_permitted);
static inline int ga_dev_share_fabric(ga_device *d, ga_mem_handle h, size_t off, size_t size,
                                      ga_dev_fabric *out, size_t cap, size_t *n) {
  if (d->ops->share_fabric) return d->ops->share_fabric(d, h, off, size, out, cap, n);
  ga_dev_set_error(d, "share: the %s backend has no fabric handles", d->ops->name);
  return GA_DEV_ENOTSUP;
}
static inline int ga_dev_import_fabric(ga_device *d, const unsigned char *handle, ga_mem_handle *h) {
  if (d->ops->import_fabric) return d->ops->import_fabric(d, handle, h);
  ga_dev_set_error(d, "import: the %s backend has no fabric handles", d->ops->name);
  return GA_DEV_ENOTSUP;
}
static inline void ga_dev_destroy(ga_device *d) {
  if (d) d->ops->destroy(d);
}

#endif /* GA_DEVICE_H */
