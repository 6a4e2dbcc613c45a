/* double.h — internals shared by the files of the CUDA driver double.
 *
 * One process-wide state under one lock, as the driver has. Every exported
 * entry point starts with cd_enter (lock, count, cuInit done?) and returns
 * through cd_leave (unlock). A call that breaks a documented rule returns the
 * documented code through cd_refuse, which records why; a call the double
 * does not model, or one whose behaviour the driver leaves undefined (a
 * handle that was never valid), ends the process through cd_die with a
 * message: nothing unmodelled succeeds.
 */
#ifndef GA_CUDADOUBLE_INTERNAL_H
#define GA_CUDADOUBLE_INTERNAL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "cudadouble.h"

#define CD_GRAN    ((size_t)2 << 20) /* allocation granularity, minimum and recommended */
#define CD_PAGE    ((size_t)4096)    /* host page size (cuMemAddressReserve's unit) */
#define CD_MAX_DEV 8
#define CD_EXPORT  __attribute__((visibility("default")))

/* The entry points, by documented name. */
#define CD_ENTRIES(X)                                           \
  X(INIT, "cuInit")                                             \
  X(DEVICE_GET_COUNT, "cuDeviceGetCount")                       \
  X(DEVICE_GET, "cuDeviceGet")                                  \
  X(DEVICE_GET_ATTRIBUTE, "cuDeviceGetAttribute")               \
  X(PRIMARY_RETAIN, "cuDevicePrimaryCtxRetain")                 \
  X(PRIMARY_RELEASE, "cuDevicePrimaryCtxRelease")               \
  X(CTX_GET_CURRENT, "cuCtxGetCurrent")                         \
  X(CTX_SET_CURRENT, "cuCtxSetCurrent")                         \
  X(CTX_SYNCHRONIZE, "cuCtxSynchronize")                        \
  X(MEM_GET_INFO, "cuMemGetInfo")                               \
  X(MEM_ALLOC, "cuMemAlloc")                                    \
  X(MEM_FREE, "cuMemFree")                                      \
  X(ADDRESS_RESERVE, "cuMemAddressReserve")                     \
  X(ADDRESS_FREE, "cuMemAddressFree")                           \
  X(MEM_CREATE, "cuMemCreate")                                  \
  X(MEM_RELEASE, "cuMemRelease")                                \
  X(MEM_MAP, "cuMemMap")                                        \
  X(MEM_UNMAP, "cuMemUnmap")                                    \
  X(MEM_SET_ACCESS, "cuMemSetAccess")                           \
  X(MEM_GET_ACCESS, "cuMemGetAccess")                           \
  X(GRANULARITY, "cuMemGetAllocationGranularity")               \
  X(MEM_EXPORT, "cuMemExportToShareableHandle")                 \
  X(MEM_IMPORT, "cuMemImportFromShareableHandle")               \
  X(MEMCPY_DTOH, "cuMemcpyDtoH")                                \
  X(MEMCPY_HTOD, "cuMemcpyHtoD")                                \
  X(MEM_HOST_ALLOC, "cuMemHostAlloc")                           \
  X(MEM_FREE_HOST, "cuMemFreeHost")                             \
  X(EVENT_CREATE, "cuEventCreate")                              \
  X(EVENT_RECORD, "cuEventRecord")                              \
  X(EVENT_QUERY, "cuEventQuery")                                \
  X(EVENT_SYNCHRONIZE, "cuEventSynchronize")                    \
  X(EVENT_DESTROY, "cuEventDestroy")                            \
  X(STREAM_CREATE, "cuStreamCreate")                            \
  X(STREAM_DESTROY, "cuStreamDestroy")                          \
  X(STREAM_SYNCHRONIZE, "cuStreamSynchronize")                  \
  X(STREAM_IS_CAPTURING, "cuStreamIsCapturing")                 \
  X(STREAM_BEGIN_CAPTURE, "cuStreamBeginCapture")               \
  X(STREAM_END_CAPTURE, "cuStreamEndCapture")                   \
  X(GRAPH_DESTROY, "cuGraphDestroy")                            \
  X(EXCHANGE_CAPTURE_MODE, "cuThreadExchangeStreamCaptureMode") \
  X(GET_ERROR_NAME, "cuGetErrorName")                           \
  X(GET_ERROR_STRING, "cuGetErrorString")

typedef enum cd_entry {
#define CD_X(id, name) CD_##id,
  CD_ENTRIES(CD_X)
#undef CD_X
      CD_NENTRIES
} cd_entry;

extern const char *const cd_entry_name[CD_NENTRIES];

/* ---- Objects ---- */

struct CUctx_st { /* a device's primary context */
  unsigned magic;
  int ordinal;
  int refs;        /* retains not yet released; 0 = inactive */
  int legacy_held; /* the legacy stream has work running */
};

/* Physical memory: a cuMemCreate handle, or the memory behind a cuMemAlloc. */
typedef struct cd_phys {
  uint64_t id; /* the handle value */
  int ordinal;
  size_t ngran;
  uint32_t *gran; /* granule indices in the device's memory file */
  size_t maps;    /* mappings that use it */
  int released;   /* cuMemRelease called: freed with its last mapping */
  int fd;         /* -1: its granules are in the device's memory file; else a file of its own (a
                     POSIX-fd shareable handle, or one imported: gran NULL, no device granules) */
  int imported;   /* cuMemImportFromShareableHandle: another process's memory */
  unsigned types; /* the requestedHandleTypes it was created with */
} cd_phys;

/* A range of addresses: a reservation, a mapping or a cuMemAlloc. */
typedef struct cd_range {
  uintptr_t va;
  size_t size;
  cd_phys *ph;                      /* mappings and mallocs */
  size_t offset;                    /* mappings: offset in ph */
  unsigned char access[CD_MAX_DEV]; /* mappings: CU_MEM_ACCESS_FLAGS_PROT_* per device */
  struct CUctx_st *ctx;             /* mallocs: the context that allocated it */
} cd_range;

typedef struct cd_ranges {
  cd_range *v; /* sorted by va, disjoint */
  size_t n, cap;
} cd_ranges;

typedef struct cd_capture {
  int active;
  int invalidated;
  CUstreamCaptureMode mode;
  pthread_t thread; /* the thread that began it */
} cd_capture;

struct CUstream_st {
  unsigned magic;
  struct CUctx_st *ctx;
  unsigned flags; /* CU_STREAM_DEFAULT (blocking) or CU_STREAM_NON_BLOCKING */
  int held;       /* has work running (test control) */
  cd_capture cap;
};

struct CUevent_st {
  unsigned magic;
  struct CUctx_st *ctx;
  CUstream stream; /* where it was last recorded (NULL: the legacy stream) */
  int recorded;
  int pending;  /* the work it captured has not finished */
  int captured; /* last recorded inside a capture sequence */
};

struct CUgraph_st {
  unsigned magic;
};

typedef struct cd_ptrs {
  void **v;
  size_t n, cap;
} cd_ptrs;

typedef struct cd_device {
  int fd; /* the device memory: a sparse memfd */
  size_t ngran, used;
  unsigned char *taken; /* per granule */
  int no_vmm;           /* without virtual memory management (cudadouble_set_vmm) */
  CUresult fabric;      /* what cuMemCreate with CU_MEM_HANDLE_TYPE_FABRIC gives (cudadouble_set_fabric) */
  struct CUctx_st ctx;
} cd_device;

typedef struct cd_fault {
  uint64_t mask; /* entry points it counts (bit = cd_entry) */
  unsigned countdown;
  CUresult result;
  int repeat;
} cd_fault;

#define CD_MAX_FAULTS 16

typedef struct cd_state {
  pthread_mutex_t mu;
  int initialised; /* cuInit succeeded */
  int configured;  /* machine set (by cuInit's environment or cudadouble_configure) */
  int ndev;
  size_t capacity; /* per device */
  cd_device dev[CD_MAX_DEV];
  cd_ptrs handles; /* cd_phys of cuMemCreate, by id */
  uint64_t next_handle;
  cd_ranges resv, maps, mallocs;
  cd_ranges pinned; /* cuMemHostAlloc'd host memory (va, size; ctx: the context it was made in) */
  cd_ptrs streams, events, graphs;
  cd_fault faults[CD_MAX_FAULTS];
  int nfaults;
  uint64_t calls[CD_NENTRIES];
  uint64_t waits, faults_fired, captures_broken, refusals;
  int quiet;
} cd_state;

extern cd_state cd;
extern _Thread_local struct CUctx_st *cd_current; /* the thread's current context */
extern _Thread_local CUstreamCaptureMode cd_mode; /* the thread's capture interaction mode */

/* ---- Entry, refusal, death ---- */

/* Locks, counts the call; CUDA_ERROR_NOT_INITIALIZED before cuInit (unless
 * the entry point works without it). */
CUresult cd_enter(cd_entry e);
CUresult cd_leave(CUresult r);
/* Records and reports why call `e` is refused; returns `code`. */
CUresult cd_refuse(cd_entry e, CUresult code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Ends the process: the call is not modelled or its behaviour is undefined. */
_Noreturn void cd_die(cd_entry e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* An injected result for this call, or CUDA_SUCCESS. */
CUresult cd_fault_hit(cd_entry e);

/* The current context, or the code a call that needs one returns. */
CUresult cd_need_context(cd_entry e, struct CUctx_st **out);

/* Capture rules: CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED (and the captures
 * invalidated) when the calling thread may not make a potentially unsafe
 * call now. */
CUresult cd_capture_unsafe(cd_entry e);
/* Is m one of the three capture modes? */
int cd_mode_valid(CUstreamCaptureMode m);

/* ---- Registries ---- */

int cd_ptrs_add(cd_ptrs *p, void *x);
int cd_ptrs_has(const cd_ptrs *p, const void *x);
void cd_ptrs_remove(cd_ptrs *p, const void *x);

/* Sorted ranges. */
size_t cd_ranges_lower(const cd_ranges *r, uintptr_t va); /* first index with v[i].va >= va */
long cd_ranges_find(const cd_ranges *r, uintptr_t addr);  /* the range holding addr, or -1 */
int cd_ranges_insert(cd_ranges *r, const cd_range *x);
void cd_ranges_remove(cd_ranges *r, size_t i);
int cd_ranges_overlap(const cd_ranges *r, uintptr_t va, size_t size);

/* ---- Memory (memory.c) ---- */

int cd_memory_open(int ordinal, size_t capacity); /* 0 or errno */
void cd_memory_close(int ordinal);
size_t cd_memory_describe_leaks(char *buf, size_t len, size_t *at);

/* ---- Streams (streams.c) ---- */

/* A stream argument: NULL/CU_STREAM_LEGACY (legacy stream of the current
 * context, *stream = NULL) or a live stream. Dies on anything else. */
CUresult cd_stream_arg(cd_entry e, CUstream in, CUstream *stream, struct CUctx_st **ctx);
/* Is a blocking stream of ctx capturing (the legacy stream is unusable)? */
int cd_blocking_capture(const struct CUctx_st *ctx);
size_t cd_streams_describe_leaks(char *buf, size_t len, size_t *at);

/* Appends to a leak report. */
void cd_report(char *buf, size_t len, size_t *at, const char *fmt, ...) __attribute__((format(printf, 4, 5)));

#endif
