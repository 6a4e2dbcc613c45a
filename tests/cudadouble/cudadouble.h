/* cudadouble.h — the test controls of the CUDA driver double.
 *
 * The double (libcuda.so.1 in the build tree, never installed) exports the
 * driver entry points gardenalloc's CUDA backend resolves, on host memory, and
 * checks every argument as the driver documents it. Besides the driver API it
 * exports these functions, which tests find with dlsym on the same library
 * (dlopen("libcuda.so.1")): they hold stream work open, make driver calls fail,
 * and say what is alive. All of them are safe to call from any thread.
 *
 * Configuration without these calls (for programs that are not tests):
 * GA_CUDA_DOUBLE_DEVICES (default 1) and GA_CUDA_DOUBLE_MEMORY_MB (default
 * 1024 per device), read at cuInit.
 */
#ifndef GA_CUDADOUBLE_H
#define GA_CUDADOUBLE_H

#include <cuda.h>
#include <stddef.h>
#include <stdint.h>

/* What one device of the double holds right now. */
typedef struct cudadouble_usage {
  size_t capacity;          /* bytes of device memory */
  size_t used;              /* bytes of physical memory in use (cuMemAlloc + cuMemCreate) */
  size_t live_mallocs;      /* cuMemAlloc'd ranges not yet freed */
  size_t live_handles;      /* cuMemCreate'd allocations alive (unreleased, or released but mapped) */
  size_t live_reservations; /* cuMemAddressReserve'd ranges not yet freed (all devices) */
  size_t live_mappings;     /* cuMemMap'd ranges not yet unmapped */
  size_t live_events;       /* events of this device's primary context */
  size_t live_streams;      /* streams of this device's primary context */
  size_t pending_events;    /* recorded on a held stream, not yet complete */
  int context_refs;         /* retains of the primary context not yet released */
  uint64_t waits;           /* synchronisations that had to wait for held work */
  uint64_t faults_fired;    /* injected results returned */
  uint64_t captures_broken; /* calls refused because they would invalidate a capture */
  uint64_t refusals;        /* other calls refused for breaking a documented rule (all devices) */
  size_t live_pinned;       /* cuMemHostAlloc'd buffers not yet freed (all devices) */
} cudadouble_usage;

/* Sets the machine: `devices` devices of `bytes` each (a multiple of 2 MiB).
 * CUDA_ERROR_ILLEGAL_STATE while anything is alive (memory, handles,
 * reservations, streams, events, graphs, retained contexts). */
CUresult cudadouble_configure(int devices, size_t bytes);

/* Whether device `ordinal` has virtual memory management (the default: yes):
 * without it, cuDeviceGetAttribute(VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED) says
 * 0 and cuMemCreate is CUDA_ERROR_NOT_SUPPORTED, as on a GPU or driver
 * without it. Reset by cudadouble_configure. */
CUresult cudadouble_set_vmm(int ordinal, int supported);

/* What cuMemCreate on device `ordinal` gives when requestedHandleTypes
 * has CU_MEM_HANDLE_TYPE_FABRIC: CUDA_SUCCESS (the default) makes it, with
 * fabric handles that another process of this machine imports with no fd
 * passed; CUDA_ERROR_NOT_PERMITTED is a process without an IMEX channel,
 * CUDA_ERROR_NOT_SUPPORTED a device without fabric support. Reset by
 * cudadouble_configure. */
CUresult cudadouble_set_fabric(int ordinal, CUresult result);

/* Fills *u for device `ordinal`. */
CUresult cudadouble_usage_get(int ordinal, cudadouble_usage *u);

/* While `hold` is set, `stream` has work running: events recorded on it stay
 * pending until it is released or synchronised (stream, event or context).
 * NULL or CU_STREAM_LEGACY is the legacy stream of the calling thread's
 * current context. */
CUresult cudadouble_hold_stream(CUstream stream, int hold);

/* Makes the `nth` next call (1 = the very next) of any of the entry points in
 * `calls` (documented names, comma-separated: "cuMemcpyDtoH,cuMemcpyHtoD";
 * they share one count) return `result` after its arguments were checked.
 * With `repeat`, every such call from the nth on fails, until
 * cudadouble_clear_faults. CUDA_ERROR_INVALID_VALUE for an unknown name. */
CUresult cudadouble_inject(const char *calls, unsigned nth, CUresult result, int repeat);
void cudadouble_clear_faults(void);

/* How many calls the entry points in `calls` have received. */
uint64_t cudadouble_calls(const char *calls);

/* Everything alive, one line per object, into buf (truncated to len);
 * returns the number of live objects. 0 means nothing would leak at exit. */
size_t cudadouble_leaks(char *buf, size_t len);

/* The reason the calling thread's last refused call was refused ("" if none). */
const char *cudadouble_last_refusal(void);

/* Refused calls are reported on stderr and counted (usage.refusals) unless
 * quiet: tests that make them on purpose turn it on. */
void cudadouble_quiet(int quiet);

#endif
