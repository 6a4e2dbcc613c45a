/* gardenalloc — a caching GPU allocator.
 *
 * One allocator serves one device. It hands out device memory from a cache of
 * segments obtained from the device (cudaMalloc-style in native mode), with the
 * same rounding, pools, best fit, splitting, max_split_size and retry ladder as
 * PyTorch's CUDA caching allocator, so the numbers match PyTorch's exactly.
 *
 * Thread safety: every function may be called from any number of threads at
 * once, on the same allocator or on different ones.
 *
 * fork(): an allocator belongs to the process that created it. In a child
 * made by fork() (even while another thread of the parent was inside a call)
 * every call on an allocator inherited from the parent returns GA_ERR_FORKED
 * at once, without waiting for its lock or touching its memory, and
 * ga_destroy of it frees nothing (its memory is the parent's). The child may
 * create allocators of its own (on a GPU, only where the driver lets a forked
 * child use the device).
 *
 * Errors: functions return a ga_status_t; ga_last_error() gives the full text
 * of the calling thread's last failure (an OOM report, the config key that was
 * refused, the pointer that was not allocated here, the driver call that
 * failed). A failed call leaves the allocator consistent and usable.
 */
#ifndef GARDENALLOC_H
#define GARDENALLOC_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define GA_API __declspec(dllexport)
#else
#define GA_API __attribute__((visibility("default")))
#endif

/* ---- Types ---------------------------------------------------------------- */

/** An allocator for one device. Opaque. */
typedef struct ga_allocator ga_allocator_t;

/** A stream: a cudaStream_t / CUstream value. NULL is the legacy default stream. */
typedef void *ga_stream_t;

/** Status codes. ga_status_str() names each one. */
typedef enum ga_status {
  GA_OK = 0,
  GA_ERR_INVALID = 1,     /**< bad argument (NULL allocator, NULL out-pointer, bad fraction) */
  GA_ERR_OOM = 2,         /**< out of device memory; ga_last_error() has the report */
  GA_ERR_CONFIG = 3,      /**< bad configuration string; the message names key, value, allowed */
  GA_ERR_DEVICE = 4,      /**< a device (driver) call failed for a reason other than OOM */
  GA_ERR_BAD_POINTER = 5, /**< free/record_stream of a pointer that is not a live allocation */
  GA_ERR_NO_BACKEND = 6,  /**< the requested backend is not available on this machine */
  GA_ERR_UNSUPPORTED = 7, /**< a feature this build or backend does not provide */
  GA_ERR_HOST_MEMORY = 8, /**< the host ran out of memory for bookkeeping */
  GA_ERR_FORKED = 9,      /**< the allocator belongs to the parent of this process (fork) */
} ga_status_t;

/** Pool index of the per-pool statistics (PyTorch's stat types). */
enum { GA_POOL_ALL = 0, GA_POOL_SMALL = 1, GA_POOL_LARGE = 2, GA_POOL_COUNT = 3 };

/** Device call kinds, counted in ga_stats_t.device_calls. */
typedef enum ga_device_call {
  GA_CALL_MALLOC,
  GA_CALL_FREE,
  GA_CALL_RESERVE,
  GA_CALL_UNRESERVE,
  GA_CALL_CREATE,
  GA_CALL_RELEASE,
  GA_CALL_MAP,
  GA_CALL_UNMAP,
  GA_CALL_EVENT_CREATE,
  GA_CALL_EVENT_RECORD,
  GA_CALL_EVENT_QUERY,
  GA_CALL_EVENT_SYNCHRONIZE,
  GA_CALL_EVENT_DESTROY,
  GA_CALL_STREAM_SYNCHRONIZE,
  GA_CALL_SYNCHRONIZE,
  GA_CALL_MEM_INFO,
  GA_CALL_CAPTURE_QUERY,
  GA_CALL_SET_ACCESS,
  GA_CALL_COPY,
  GA_CALL_CAPTURE_MODE,
  GA_CALL_HOST_ALLOC, /**< pinned host memory (cuMemHostAlloc), for offloaded sleep */
  GA_CALL_HOST_FREE,  /**< its release (cuMemFreeHost) */
  GA_CALL_COUNT
} ga_device_call_t;

/** One statistic, with PyTorch's four metrics. */
typedef struct ga_stat {
  int64_t current;   /**< live value */
  int64_t peak;      /**< maximum since the last ga_reset_peak_stats */
  int64_t allocated; /**< sum of increases since the last accumulated reset */
  int64_t freed;     /**< sum of decreases since the last accumulated reset */
} ga_stat_t;

/* The per-pool statistic families, in PyTorch's memory_stats() names.
 * X(name, meaning) */
#define GA_POOL_STATS(X)                                                       \
  X(allocation, "live allocations handed to clients")                          \
  X(segment, "device segments (cudaMalloc calls that are still live)")         \
  X(active, "blocks allocated or waiting on stream events")                    \
  X(inactive_split, "free blocks inside a split segment (cannot be released)") \
  X(allocated_bytes, "bytes of allocated blocks (rounded sizes)")              \
  X(reserved_bytes, "bytes obtained from the device")                          \
  X(active_bytes, "bytes of active blocks")                                    \
  X(inactive_split_bytes, "bytes of inactive_split blocks")                    \
  X(requested_bytes, "bytes the clients asked for, of active blocks")

/* Scalars, in PyTorch's names. X(name, meaning) */
#define GA_SCALAR_STATS(X)                                                         \
  X(num_alloc_retries, "allocations retried after flushing the whole cache")       \
  X(num_ooms, "out-of-memory errors returned")                                     \
  X(max_split_size, "max_split_size in bytes, -1 when unlimited")                  \
  X(num_sync_all_streams, "synchronisations of every pending stream event")        \
  X(num_device_alloc, "device allocations (cudaMalloc, or cuMemCreate of a page)") \
  X(num_device_free, "device frees (cudaFree, or cuMemRelease of a page)")

/* Ours: expandable segments, and memory a device error keeps out of use.
 * X(name, meaning) */
#define GA_EXTRA_STATS(X)                                                                      \
  X(mapped_bytes, "bytes of physical memory mapped into expandable segments")                  \
  X(page_cache_bytes, "bytes of physical memory held but not mapped (page cache)")             \
  X(quarantined_bytes,                                                                         \
    "bytes freed while a stream that used them could not be waited for (a device error): out " \
    "of use until one wait succeeds")

#define GA_EXTRA_SCALARS(X)                                                                         \
  X(mapped_granules, "2 MiB granules mapped into expandable segments")                              \
  X(cached_granules, "2 MiB granules in the page cache")                                            \
  X(num_unmap_syncs, "stream synchronisations before unmapping memory")                             \
  X(num_granules_moved, "granules unmapped from free memory to be mapped elsewhere")                \
  X(asleep_granules, "2 MiB granules of live allocations given back by ga_sleep")                   \
  X(driver_us, "time spent in device calls, waits excluded (the simulated device: its cost model)") \
  X(num_stalls, "synchronisations that waited for work queued on the GPU")                          \
  X(stall_us, "time those synchronisations waited")                                                 \
  X(num_capture_deferred_flushes,                                                                   \
    "ga_empty_cache/ga_sleep calls during a capture that left memory cached until the capture ended")

/** Statistics, as torch.cuda.memory_stats() reports them, plus device calls. */
typedef struct ga_stats {
#define GA_X_FIELD(name, doc) ga_stat_t name[GA_POOL_COUNT];
  GA_POOL_STATS(GA_X_FIELD)
#undef GA_X_FIELD
  ga_stat_t oversize_allocations; /**< allocations whose block is >= max_split_size */
  ga_stat_t oversize_segments;    /**< segments whose size is >= max_split_size */
#define GA_X_FIELD(name, doc) int64_t name;
  GA_SCALAR_STATS(GA_X_FIELD)
#undef GA_X_FIELD
#define GA_X_FIELD(name, doc) ga_stat_t name;
  GA_EXTRA_STATS(GA_X_FIELD)
#undef GA_X_FIELD
#define GA_X_FIELD(name, doc) int64_t name;
  GA_EXTRA_SCALARS(GA_X_FIELD)
#undef GA_X_FIELD
  uint64_t device_calls[GA_CALL_COUNT];    /**< device calls made, by kind */
  uint64_t device_failures[GA_CALL_COUNT]; /**< device calls that failed, by kind */
  uint64_t device_ns[GA_CALL_COUNT];       /**< time spent in device calls, by kind (waits included) */
} ga_stats_t;

/* ---- Lifetime ------------------------------------------------------------- */

/** Creates an allocator for device `device` (its ordinal on the backend).
 *  `conf` uses the grammar of PYTORCH_CUDA_ALLOC_CONF ("key:value,key:value");
 *  NULL means: read the environment variable GARDENALLOC_CONF (unset = defaults).
 *  Returns GA_ERR_CONFIG for a bad string, GA_ERR_NO_BACKEND when backend:cuda is
 *  asked for and no driver or device answers. With backend:auto (the default)
 *  a machine without a usable GPU gets the simulated device and one line on
 *  stderr saying so. */
GA_API ga_status_t ga_create(const char *conf, int device, ga_allocator_t **out);

/* The same placement on every rank: with deterministic:True in `conf`, the
 * segment (named by the order of first use) and offset of every allocation
 * are a function of the sequence of calls alone, whatever the GPU's timing:
 * a free waiting on other streams (ga_record_stream) becomes reusable at the
 * first cache miss after it, where its streams are waited for, never when
 * its events happen to complete; free expandable memory of a stream moves
 * only after the stream is known past the free, waiting for it if needed.
 * Ranks running one program thus get the same offsets (collectives and pool
 * reuse agree). The price is those waits (a stall only when the GPU is
 * behind) and a different peak (docs/engines.md has both). What is not
 * timing stays an input: the device's memory (cudaMemGetInfo, with the
 * memory fraction and headroom) and device failures. Ties between equal
 * free blocks of different segments go by the segments' creation numbers,
 * never by address (which differs from rank to rank). */

/* Memory that is not ours: max_reserved_mb:N in `conf` caps what the
 * allocator reserves at N MiB, and headroom_mb:N keeps N MiB of the device
 * for others (NCCL, the CUDA context, other processes: the cap is the
 * device's memory less N). The lowest of these and the memory fraction
 * wins. Cached memory is given back to make room under the cap; a request
 * that cannot fit under it even then fails with GA_ERR_OOM before any
 * device call (the report says so). */

/** Destroys the allocator and gives every segment back to the device, including
 *  those still holding live allocations (their pointers become invalid).
 *  NULL is a no-op, and so is an allocator inherited through fork(). */
GA_API void ga_destroy(ga_allocator_t *a);

/* ---- Allocation ----------------------------------------------------------- */

/** Allocates `size` bytes for use on `stream`. The pointer is 512-byte aligned.
 *  Size 0 succeeds with *out = NULL and changes nothing (as cudaMalloc(0)).
 *  GA_ERR_OOM: the device cannot hold the request even after the cache was
 *  flushed; ga_last_error() has the PyTorch-style report. The block belongs to
 *  `stream`: after ga_free it is reused at once for `stream`, and for other
 *  streams only once it has been given back to the device. */
GA_API ga_status_t ga_malloc(ga_allocator_t *a, size_t size, ga_stream_t stream, void **out);

/** ga_malloc_flags flag: the allocation is one physical allocation, so that
 *  it registers as one region (ibv_reg_mr for RDMA, NCCL's user-buffer
 *  registration) and ga_mem_ranges lists one range for it. In expandable
 *  mode, whose allocations may span several handles (cuMemCreate), it comes
 *  from a native segment (cudaMalloc) instead; in native mode every
 *  allocation already lies in one cudaMalloc'd range. */
#define GA_ALLOC_CONTIGUOUS_HANDLE 1u

/** ga_malloc with flags (GA_ALLOC_*; 0 is ga_malloc). Unknown flags:
 *  GA_ERR_INVALID. */
GA_API ga_status_t ga_malloc_flags(ga_allocator_t *a, size_t size, ga_stream_t stream, unsigned flags,
                                   void **out);

/** One piece of the physical memory behind an allocation (ga_mem_ranges). */
typedef struct ga_mem_range {
  void *ptr;       /**< first byte of the piece */
  size_t size;     /**< its bytes */
  uint64_t handle; /**< the CUmemGenericAllocationHandle behind it; 0: cudaMalloc'd memory */
  size_t offset;   /**< ptr's offset in that handle, or in the cudaMalloc'd range at base */
  void *base;      /**< cudaMalloc'd memory: the start of its range (cuMemGetAddressRange); else NULL */
} ga_mem_range_t;

/** The physical pieces behind the live allocation holding `ptr` (which may
 *  point inside it), in address order, covering its whole block: one per
 *  handle run in expandable segments (consecutive bytes of one handle make
 *  one piece), one for cudaMalloc'd memory. Writes at most `cap` of them
 *  into out (which may be NULL when cap is 0) and their number into *n.
 *  GA_ERR_BAD_POINTER when no live allocation holds ptr; GA_ERR_INVALID
 *  while the allocation is asleep (no memory behind it). */
GA_API ga_status_t ga_mem_ranges(ga_allocator_t *a, void *ptr, ga_mem_range_t *out, size_t cap, size_t *n);

/* ---- Sharing an allocation with another process (IPC) ------------------- */
/* With expandable_segments:True and shareable_handles:posix_fd, every
 * physical allocation is made exportable (cuMemCreate with
 * CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR), and ga_ipc_export describes an
 * allocation as file descriptors another process maps with ga_ipc_import
 * (cuMemImportFromShareableHandle, cuMemMap): both see the same bytes.
 * Native memory (cudaMalloc'd: native mode, or GA_ALLOC_CONTIGUOUS_HANDLE)
 * is not exported (GA_ERR_UNSUPPORTED): cudaIpcGetMemHandle works on the
 * cudaMalloc'd range ga_mem_ranges names. With shareable_handles:fabric the
 * handles are also fabric handles (CU_MEM_HANDLE_TYPE_FABRIC), for another
 * node of an NVLink/IMEX domain: ga_ipc_export_fabric below. */

#define GA_IPC_VERSION    1
#define GA_IPC_MAX_PIECES 64

/** One piece of an exported allocation: bytes [offset, offset+size) of the
 *  memory that file descriptor fd names. */
typedef struct ga_ipc_piece {
  int fd;
  uint64_t offset;
  uint64_t size;
} ga_ipc_piece_t;

/** An exported allocation. Its file descriptors are the exporting
 *  process's: send the whole struct with ga_ipc_send (SCM_RIGHTS over a
 *  Unix socket), or give them by other means (inheritance, pidfd_getfd) and
 *  put their numbers there. */
typedef struct ga_ipc_desc {
  uint32_t version; /**< GA_IPC_VERSION */
  uint32_t npieces; /**< pieces used, in address order */
  uint64_t size;    /**< bytes of the allocation (its block) */
  uint64_t start;   /**< where it starts in the pieces laid end to end (they cover whole 2 MiB granules) */
  int lease_fd;     /**< the exporter's lease: held by every import, so that the exporter cannot free it */
  int pid;          /**< the exporting process */
  ga_ipc_piece_t pieces[GA_IPC_MAX_PIECES];
} ga_ipc_desc_t;

/** Describes the live allocation at `ptr` (the pointer ga_malloc returned)
 *  for another process. The granules it lies in are shared whole, so the
 *  importer can also reach the bytes of neighbouring allocations in them.
 *  While any process holds an import, ga_free(ptr) is refused
 *  (GA_ERR_INVALID, nothing changes) and the memory stays exactly where it
 *  is; an import ends with ga_ipc_close or with the importing process (exit
 *  or crash alike). After the free a descriptor of it is refused. An
 *  exported allocation cannot sleep: a tagged one is refused, and ga_tag
 *  refuses an exported one. desc's descriptors are new and the caller's:
 *  close them with ga_ipc_desc_close once sent. GA_ERR_UNSUPPORTED for
 *  native memory or without shareable_handles:posix_fd; GA_ERR_INVALID past
 *  GA_IPC_MAX_PIECES pieces (one per run of a physical allocation). */
GA_API ga_status_t ga_ipc_export(ga_allocator_t *a, void *ptr, ga_ipc_desc_t *desc);

/** Maps an allocation another process exported into this allocator's
 *  device: *ptr reads and writes the exporter's bytes. The descriptor's fds
 *  must be open in this process (ga_ipc_recv); they stay the caller's. The
 *  mapping is not an allocation of this allocator (ga_free refuses it;
 *  statistics do not count it): it lasts until ga_ipc_close or ga_destroy.
 *  GA_ERR_INVALID for a descriptor ga_ipc_export did not write or whose
 *  allocation was freed; a device failure leaves nothing mapped. */
GA_API ga_status_t ga_ipc_import(ga_allocator_t *a, const ga_ipc_desc_t *desc, void **ptr);

/** Unmaps an import (the pointer ga_ipc_import gave) and lets the exporter
 *  free it. GA_ERR_BAD_POINTER for anything else. */
GA_API ga_status_t ga_ipc_close(ga_allocator_t *a, void *ptr);

/** Closes the file descriptors of a descriptor (after ga_ipc_send, or when
 *  an import is done with them). NULL is a no-op. */
GA_API void ga_ipc_desc_close(ga_ipc_desc_t *desc);

/* ---- Across nodes: fabric handles -------------------------------------- */
/* With expandable_segments:True and shareable_handles:fabric, every
 * physical allocation is created with CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
 * | CU_MEM_HANDLE_TYPE_FABRIC (so ga_ipc_export keeps working), and
 * ga_ipc_export_fabric describes an allocation as fabric handles
 * (CUmemFabricHandle): plain bytes, no file descriptors, which a process on
 * any node of the same NVLink/IMEX domain (GB200 NVL72 and the like) maps
 * with ga_ipc_import_fabric. Send the struct by any transport (a socket, MPI,
 * NCCL, a file). The driver makes fabric handles only for a process that has
 * an IMEX channel (/dev/nvidia-caps-imex-channels/channelN) on a device with
 * fabric support: without, the first growth of the pool fails
 * (GA_ERR_UNSUPPORTED, the error naming fabric handles, the IMEX channel and
 * shareable_handles:posix_fd) and the allocator stays usable.
 *
 * An importer on another node holds nothing the exporter can see, so the
 * exporter keeps the memory alive by contract: ga_free of an allocation
 * exported this way is refused (GA_ERR_INVALID, nothing changes) until the
 * exporter calls ga_ipc_unexport, which it does once every peer has said
 * that its import is closed (as NCCL's buffer registration requires). A
 * descriptor used after ga_ipc_unexport may map memory that has been reused
 * since, or be refused if the memory has gone back to the device. */

#define GA_IPC_FABRIC_VERSION 0x46414201u
#define GA_IPC_FABRIC_BYTES   64

/** One piece of a fabric export: bytes [offset, offset+size) of the
 *  physical allocation the fabric handle names. */
typedef struct ga_ipc_fabric_piece {
  unsigned char handle[GA_IPC_FABRIC_BYTES]; /**< a CUmemFabricHandle's bytes */
  uint64_t offset;
  uint64_t size;
} ga_ipc_fabric_piece_t;

/** An allocation exported as fabric handles: plain bytes, valid in any
 *  process of the domain (copy it whole). */
typedef struct ga_ipc_fabric_desc {
  uint32_t version; /**< GA_IPC_FABRIC_VERSION */
  uint32_t npieces; /**< pieces used, in address order */
  uint64_t size;    /**< bytes of the allocation (its block) */
  uint64_t start;   /**< where it starts in the pieces laid end to end */
  ga_ipc_fabric_piece_t pieces[GA_IPC_MAX_PIECES];
} ga_ipc_fabric_desc_t;

/** Describes the live allocation at `ptr` as fabric handles (the whole
 *  granules it lies in, as ga_ipc_export) and marks it exported: from now
 *  on ga_free(ptr) is refused until ga_ipc_unexport(ptr), and it cannot sleep
 *  (ga_tag refuses it). Exporting again is allowed (one ga_ipc_unexport ends
 *  it). GA_ERR_UNSUPPORTED for native memory or without
 *  shareable_handles:fabric; GA_ERR_BAD_POINTER for anything but a live
 *  allocation; GA_ERR_INVALID past GA_IPC_MAX_PIECES pieces. */
GA_API ga_status_t ga_ipc_export_fabric(ga_allocator_t *a, void *ptr, ga_ipc_fabric_desc_t *desc);

/** Maps an allocation that a process of the domain (this one included)
 *  exported with ga_ipc_export_fabric: *ptr reads and writes its bytes, until
 *  ga_ipc_close or ga_destroy, as ga_ipc_import. GA_ERR_INVALID for bytes
 *  ga_ipc_export_fabric did not write or whose memory is gone (the driver
 *  refuses the handle); a device failure leaves nothing mapped. */
GA_API ga_status_t ga_ipc_import_fabric(ga_allocator_t *a, const ga_ipc_fabric_desc_t *desc, void **ptr);

/** Ends the fabric export of `ptr`: ga_free may then free it. Call it once
 *  every importer has closed (ga_ipc_close) or ended. An import over
 *  ga_ipc_export (a file descriptor) still holds the memory as before.
 *  GA_ERR_INVALID for a live allocation not exported as fabric handles,
 *  GA_ERR_BAD_POINTER for anything else. */
GA_API ga_status_t ga_ipc_unexport(ga_allocator_t *a, void *ptr);

/** Sends a descriptor over a connected Unix socket, its file descriptors
 *  as SCM_RIGHTS; ga_ipc_recv receives it with this process's numbers (close
 *  them with ga_ipc_desc_close). GA_ERR_INVALID when the socket fails or
 *  what arrives is not one descriptor with its file descriptors. */
GA_API ga_status_t ga_ipc_send(int sock, const ga_ipc_desc_t *desc);
GA_API ga_status_t ga_ipc_recv(int sock, ga_ipc_desc_t *desc);

/** Frees a pointer returned by ga_malloc. NULL is a no-op. If the block was
 *  used on other streams (ga_record_stream), it becomes reusable only once
 *  events recorded on those streams now have completed. A pointer that is not
 *  a live allocation of this allocator (foreign, already freed, or inside an
 *  allocation) returns GA_ERR_BAD_POINTER, names the case, and changes nothing.
 *  GA_ERR_DEVICE when such a stream could be neither given an event nor
 *  waited for (a sticky driver error): as with close(2), the pointer is freed
 *  all the same, and its memory stays out of use (quarantined_bytes) until a
 *  later event or wait on that stream succeeds. GA_ERR_INVALID, changing
 *  nothing, while another process holds an import of it (ga_ipc_export) or
 *  while it is exported as fabric handles (until ga_ipc_unexport). */
GA_API ga_status_t ga_free(ga_allocator_t *a, void *ptr);

/** Marks the allocation at `ptr` as used on `stream` (torch's record_stream):
 *  its memory is not reused until work queued on `stream` before the free has
 *  completed. The allocation stream itself is ignored. */
GA_API ga_status_t ga_record_stream(ga_allocator_t *a, void *ptr, ga_stream_t stream);

/** Returns the size the client asked for and the block size of a live
 *  allocation, or GA_ERR_BAD_POINTER. Either out-pointer may be NULL. */
GA_API ga_status_t ga_allocation_size(ga_allocator_t *a, void *ptr, size_t *requested, size_t *block);

/** Like ga_allocation_size, plus the stream the allocation belongs to. */
GA_API ga_status_t ga_allocation_info(ga_allocator_t *a, void *ptr, size_t *requested, size_t *block,
                                      ga_stream_t *stream);

/** The live allocation containing `ptr` (which may point inside it): its
 *  start and block size. GA_ERR_BAD_POINTER when no live allocation holds it. */
GA_API ga_status_t ga_allocation_base(ga_allocator_t *a, void *ptr, void **base, size_t *size);

/* ---- Cache ---------------------------------------------------------------- */

/** torch.cuda.empty_cache(): waits for pending stream events, then gives every
 *  cached segment that holds no allocation back to the device. During a
 *  capture (a stream routed to a private pool) it makes no call that would
 *  invalidate it: it gives back what needs no wait (native segments, and
 *  expandable memory of streams that are not capturing, in the relaxed
 *  capture mode) and leaves pending events and the memory of capturing
 *  streams for the end of the capture, when the last ga_end_allocate_to_pool
 *  finishes the flush; num_capture_deferred_flushes counts such calls. */
GA_API ga_status_t ga_empty_cache(ga_allocator_t *a);

/** torch.cuda.set_per_process_memory_fraction(): the allocator will not reserve
 *  more than fraction × total device memory. 1.0 removes the limit. Values
 *  outside [0, 1] return GA_ERR_INVALID. */
GA_API ga_status_t ga_set_memory_fraction(ga_allocator_t *a, double fraction);

/** The current fraction (1.0 when unlimited). */
GA_API double ga_get_memory_fraction(ga_allocator_t *a);

/** "Would these fit?": a dry run of ga_malloc of sizes[0], sizes[1], ...
 *  in that order on `stream`, none freed, from the allocator's state now.
 *  *fit gets how many of them, from the first, would be handed out (n when
 *  all would). Nothing changes: no memory moves, no statistic or history
 *  entry, and the only device call is one cudaMemGetInfo (counted in
 *  device_calls.mem_info), none when every request is served from the
 *  cache. Native segments: the answer is what those mallocs
 *  do when nothing else happens in between (best fit, splits, and the retry
 *  ladder: garbage collection, new segments within the device's free memory
 *  and the memory fraction, oversize blocks and then the whole cache given
 *  back). Frees still waiting on stream events count as in use, so the
 *  answer may be smaller than what mallocs achieve after those events
 *  complete. Expandable segments: a request that no free block serves grows
 *  the stream's mapped range by granules from the page cache, the device and
 *  moves of whole mappings inside free blocks (not during a capture), in the
 *  policy's order; where a hand-out has cut a mapping, and the order of
 *  moves, are estimated: the answer is an estimate. With
 *  expandable_policy:pytorch it is PyTorch's ladder instead (the memory
 *  fraction tested on alloc_size, whole pages that extend the free block at
 *  the end of the stream's mapped range, then every whole free page given
 *  back and one more try). In both, a growth whose run crosses an unmapped
 *  hole and the free memory after it into more unmapped space is not
 *  modelled. Cost (n up to 64): O(n log free blocks) while each request is
 *  served from free blocks or by the ladder's first step (a new segment,
 *  a growth of the stream's mapped range within the device's free memory),
 *  read from the free trees and the unmapped ranges; a dry run that would
 *  give cached memory back (garbage collection, oversize blocks, a flush),
 *  move pages, or more than 64 requests copy every free block into a model
 *  and scan it per request, O(free blocks x n) (ga-bench scale's would_fit
 *  figures). */
GA_API ga_status_t ga_would_fit(ga_allocator_t *a, const size_t *sizes, size_t n, ga_stream_t stream,
                                size_t *fit);

/** The largest request on `stream` that best fit serves from a free block
 *  of the cache, without a device call (*cached: its rounding,
 *  roundup_power2_divisions included, fits in the block, and PyTorch's
 *  get_free_block takes it: the oversize rules of max_split_size_mb and
 *  max_non_split_rounding_mb, the walk by expandable size; in expandable
 *  segments a request best fit refuses may still be served with no device
 *  call by the free block at the end of a mapped range that already holds
 *  it, which *cached leaves out, and the default policy's choice among best
 *  fits with pages of one granule weighs each size apart: *cached is never
 *  too high, and can be low there), and the largest one ga_malloc could
 *  serve at all, flushing the cache or asking the device for memory
 *  (*with_device: from the device's free memory, within the memory
 *  fraction). Either pointer may be NULL; with with_device NULL no device
 *  call is made, else one cudaMemGetInfo. Nothing changes. Cost: *cached
 *  alone O(log free blocks) per request size best fit refuses (one test
 *  when nothing is past max_split_size); *with_device copies every free
 *  block into the model ga_would_fit falls back to. */
GA_API ga_status_t ga_largest_free(ga_allocator_t *a, ga_stream_t stream, size_t *cached,
                                   size_t *with_device);

/* ---- Statistics ----------------------------------------------------------- */

/** Copies the statistics. */
GA_API ga_status_t ga_stats(ga_allocator_t *a, ga_stats_t *out);

/** Sets every peak to the current value. */
GA_API ga_status_t ga_reset_peak_stats(ga_allocator_t *a);

/** Zeroes the allocated/freed metrics and the counters, as
 *  torch.cuda.reset_accumulated_memory_stats(). */
GA_API ga_status_t ga_reset_accumulated_stats(ga_allocator_t *a);

/** Writes the statistics as one flat JSON object with PyTorch's key names
 *  ("allocated_bytes.all.current", ...) plus ours (GA_EXTRA_STATS,
 *  GA_EXTRA_SCALARS) and "device_calls.<kind>".
 *  Returns the length of the full text; writes at most cap bytes including the
 *  terminating NUL (call with cap 0 to size the buffer). */
GA_API size_t ga_stats_json(ga_allocator_t *a, char *buf, size_t cap);

/** The name of a device call kind ("malloc", "map", ...). */
GA_API const char *ga_device_call_name(ga_device_call_t kind);

/* ---- Private pools (CUDA-graph capture) ---------------------------------- */

/** From now on, allocations on `stream` come from private pool `pool` (made
 *  on first use): its own segments, kept out of general reuse until the pool
 *  is released; blocks freed go back to the pool. While any stream is routed
 *  to a pool the allocator makes no call that would invalidate a CUDA-graph
 *  capture: device calls run in the relaxed capture mode, events are neither
 *  queried nor synchronised, no capturing stream and never the whole device
 *  is synchronised, pages are not moved, ga_empty_cache gives back only what
 *  needs no wait (the rest at the end of the capture), and frees of blocks
 *  used on other streams wait for the end. */
GA_API ga_status_t ga_begin_allocate_to_pool(ga_allocator_t *a, uint64_t pool, ga_stream_t stream);

/** Stops routing the pool's streams to it (the capture ended). When it is the
 *  last routed pool, a flush that ga_empty_cache or ga_sleep left for the end
 *  of the capture runs now; GA_ERR_DEVICE if that fails (the routing has
 *  stopped either way). */
GA_API ga_status_t ga_end_allocate_to_pool(ga_allocator_t *a, uint64_t pool);

/** Releases the pool (the graph is gone): its free segments go back to the
 *  device now, the others once freed (at the next ga_empty_cache). */
GA_API ga_status_t ga_release_pool(ga_allocator_t *a, uint64_t pool);

/** The generation of private pool `pool`: it changes whenever memory under
 *  an address the pool has handed out (live, or freed back to the pool: a
 *  graph's own memory) could have changed, so a CUDA graph captured into the
 *  pool must be captured again: a segment or granule of the pool given back
 *  (only once the pool is released), or a sleeping allocation of the pool
 *  whose contents ga_sleep discarded (without GA_SLEEP_OFFLOAD). Nothing else
 *  touches a pool's memory: ga_empty_cache, the OOM retry ladder, moves of
 *  expandable memory and sleep with GA_SLEEP_OFFLOAD then ga_wake keep every
 *  address mapped with its bytes (while an allocation sleeps its addresses
 *  have no memory: do not replay a graph between ga_sleep and ga_wake).
 *  GA_ERR_INVALID for a pool that was never used or is released and gone. */
GA_API ga_status_t ga_pool_generation(ga_allocator_t *a, uint64_t pool, uint64_t *generation);

/* ---- Sleep and wake ------------------------------------------------------- */

/** Tags the live allocation at ptr ("weights", "kv_cache", ...; at most 31
 *  characters, 32 distinct tags). NULL or "" removes the tag. */
GA_API ga_status_t ga_tag(ga_allocator_t *a, void *ptr, const char *tag);

/** ga_sleep flag: copy the contents of the allocations that sleep to host
 *  memory, so that ga_wake restores them. Without it they are discarded. */
#define GA_SLEEP_OFFLOAD 1u

/** Gives memory back to the device while keeping every virtual address:
 *  releases the cache (as ga_empty_cache), and, for the live allocations
 *  tagged with one of `tags` (comma-separated; NULL or "" = none: then the
 *  pinned host buffers kept from earlier offloading sleeps go back too), releases
 *  the mappings they alone occupy (a mapping is a run of 2 MiB granules
 *  mapped with one call; a fresh 20 MiB page is mapped whole, so an
 *  allocation sharing it with awake memory stays awake), keeping their
 *  contents as each tag's restore mode says (ga_sleep_mode; a tag without
 *  one: GA_RESTORE_HOST with GA_SLEEP_OFFLOAD, else GA_RESTORE_NONE; a
 *  mapping shared by several tags gets the most any of them asks). Before
 *  unmapping it waits for the streams that used those allocations (their
 *  own, and those of ga_record_stream), never for the whole device: no
 *  kernel still running on them loses its memory. Needs
 *  expandable_segments:True when tags are given (GA_ERR_UNSUPPORTED
 *  otherwise). A page is given back to the device once none of it is mapped
 *  (expandable_page_size_mb:2 makes every page a 2 MiB one). Sleeping
 *  allocations cannot be freed before ga_wake; everything else keeps working.
 *  During a capture streams cannot be waited for without invalidating it:
 *  with tags, GA_ERR_INVALID and nothing sleeps; without, it releases the
 *  cache as ga_empty_cache does during a capture. A device failure midway
 *  leaves what slept asleep and the rest mapped (GA_ERR_DEVICE); a page
 *  the device refuses to take back stays cached (GA_ERR_DEVICE, with
 *  everything asleep; ga_empty_cache tries again). */
GA_API ga_status_t ga_sleep(ga_allocator_t *a, const char *tags, unsigned flags);

/** Restore modes of sleeping memory (ga_sleep_mode). */
enum {
  GA_RESTORE_NONE = 0, /**< the contents are dropped; wake maps memory again, contents undefined */
  GA_RESTORE_ZERO = 1, /**< wake maps memory again filled with zeros */
  GA_RESTORE_HOST = 2, /**< the contents are copied to host memory and back at wake: pinned
                        *   memory, a buffer per granule, kept pinned after the wake for the
                        *   next sleep until ga_sleep(a, NULL, 0) or ga_destroy; plain memory
                        *   when the device refuses to pin (slower, nothing lost) */
};

/** Sets the restore mode of allocations tagged `tag` (made if new), for
 *  every later ga_sleep. GA_ERR_INVALID for another mode or a refused tag. */
GA_API ga_status_t ga_sleep_mode(ga_allocator_t *a, const char *tag, int mode);

/** Maps memory again behind every sleeping allocation, at the same addresses,
 *  restoring the contents as their modes say. All or nothing: when the
 *  device cannot hold them (GA_ERR_OOM, with the report) or a device call
 *  fails midway (GA_ERR_DEVICE), what this call mapped is unmapped again and
 *  given back, everything stays asleep with its contents kept, and ga_wake
 *  can be called again. A page the device then refuses to take back stays
 *  cached (ga_empty_cache tries again) and the call returns GA_ERR_DEVICE
 *  naming both failures, whatever failed the wake. During a capture it runs in the relaxed capture mode
 *  and moves no memory (as ga_malloc). */
GA_API ga_status_t ga_wake(ga_allocator_t *a);

/* ---- History and snapshots ----------------------------------------------- */

/** Turns recording of the allocation history on (enabled != 0, keeping the
 *  last max_entries events; 0 = 100000) or off (discarding it), as
 *  torch.cuda.memory._record_memory_history. */
GA_API ga_status_t ga_record_history(ga_allocator_t *a, int enabled, size_t max_entries);

/** Stacks recorded with each history entry (ga_record_history_stacks). */
enum { GA_STACKS_C = 1, GA_STACKS_PYTHON = 2 };

/** ga_record_history, with a stack in PyTorch's frame format
 *  ({"filename", "line", "name"}) on every entry: GA_STACKS_C, the caller's
 *  return addresses (backtrace; symbolised with dladdr when a snapshot is
 *  written, so names come from exported symbols), and GA_STACKS_PYTHON, the
 *  Python frames of a calling thread that holds the GIL (found through the
 *  interpreter's API in this process; GA_ERR_INVALID without one). The
 *  snapshot gives each live block the frames of its allocation. */
GA_API ga_status_t ga_record_history_stacks(ga_allocator_t *a, int enabled, size_t max_entries, int stacks);

/** Writes a memory snapshot as JSON in the schema of
 *  torch.cuda.memory._snapshot(): "segments" (each with its "blocks"),
 *  "device_traces" (the recorded history, indexed by device),
 *  "allocator_settings" and "external_annotations". Returns the length of the
 *  full text; writes at most cap bytes including the NUL (cap 0 sizes it). */
GA_API size_t ga_snapshot_json(ga_allocator_t *a, char *buf, size_t cap);

/* ---- Checking and errors -------------------------------------------------- */

/** Walks every segment, block, index and statistic and returns the number of
 *  broken invariants (0 when consistent). Each broken one is described on
 *  stderr. */
GA_API int ga_check(ga_allocator_t *a);

/** The name of a status code. */
GA_API const char *ga_status_str(ga_status_t status);

/** The full text of the calling thread's last failure ("" if none). */
GA_API const char *ga_last_error(void);

/** The backend in use: "cuda" or "sim". */
GA_API const char *ga_backend_name(ga_allocator_t *a);

/** Lets device `peer` read and write this allocator's expandable-segment
 *  memory, now and for every page mapped later (cuMemSetAccess for the peer,
 *  as NCCL peer-to-peer needs; native segments come from cudaMalloc and follow
 *  cudaDeviceEnablePeerAccess instead). GA_ERR_INVALID for this device itself
 *  or an ordinal the machine does not have (its devices are counted at the
 *  call), GA_ERR_DEVICE when the driver refuses the grant (the peer is then
 *  not added). With nothing mapped yet the driver first sees the peer at the
 *  next allocation's grant: if it refuses it as a bad argument there, that
 *  allocation fails saying so and the peer is turned off, so later ones work. */
GA_API ga_status_t ga_enable_peer_access(ga_allocator_t *a, int peer);

/** The device's free and total memory (cudaMemGetInfo). Either pointer may be NULL. */
GA_API ga_status_t ga_mem_get_info(ga_allocator_t *a, size_t *free_bytes, size_t *total_bytes);

/** Checks a configuration string without creating anything. */
GA_API ga_status_t ga_config_validate(const char *conf);

/** Describes configuration key number `i` (0-based). Returns 0 past the last.
 *  Any out-pointer may be NULL. `origin` is "pytorch" or "gardenalloc". */
GA_API int ga_config_key(int i, const char **name, const char **type, const char **dflt, const char **origin,
                         const char **doc);

/* ---- PyTorch's CUDAPluggableAllocator entry points ----------------------- */
/* One allocator per device, made on first use from the environment (see
 * ga_torch_config). The signatures are PyTorch's (cudaStream_t is a pointer). */

/** alloc: NULL for size 0. On failure it throws the OOM report as a C++
 *  exception when the library was built with C++ (as PyTorch needs), and
 *  returns NULL otherwise. Do not call it through a C FFI: use the _nothrow one. */
GA_API void *ga_torch_alloc(ssize_t size, int device, void *stream);
/** alloc that never throws: NULL on failure, the report in ga_last_error(). */
GA_API void *ga_torch_alloc_nothrow(ssize_t size, int device, void *stream);
/** free: size, device and stream are checked against the allocation; a
 *  mismatch is reported on stderr and the allocation is freed as recorded. */
GA_API void ga_torch_free(void *ptr, ssize_t size, int device, void *stream);
/** Hooks: init(device_count), reset (= empty_cache on every device), memory
 *  fraction, record_stream, and base allocation (start and size of the
 *  allocation holding ptr; ptr itself if none). */
GA_API void ga_torch_init(int device_count);
GA_API void ga_torch_reset(void);
GA_API void ga_torch_memory_fraction(double fraction, int device);
GA_API void ga_torch_record_stream(void *ptr, void *stream);
GA_API void *ga_torch_base_alloc(void *ptr, size_t *size);
/** The allocator behind device `device` (made on first use), for stats and
 *  snapshots; NULL (with ga_last_error) when it cannot be made. */
GA_API ga_allocator_t *ga_torch_allocator(int device);
/** The allocator behind device `device` when it has been made, else NULL
 *  (nothing is made, no error is set). */
GA_API ga_allocator_t *ga_torch_allocator_try(int device);
/** ga_record_history_stacks on the allocator of every device, those made
 *  later included, as torch.cuda.memory._record_memory_history records for
 *  every device. The first failure's status (the history is then off). */
GA_API ga_status_t ga_torch_record_history(int enabled, size_t max_entries, int stacks);
/** The configuration the PyTorch entry points use, read once per process:
 *  GARDENALLOC_CONF when it is set (strict: a bad string makes every allocator
 *  creation fail with the parser's message); otherwise PYTORCH_CUDA_ALLOC_CONF,
 *  else PYTORCH_ALLOC_CONF, read as PyTorch reads it: an unrecognized key, a
 *  key of gardenalloc's own or a bad value refuses the whole string (NULL is
 *  returned, ga_last_error() says why, and every allocator creation fails
 *  with that message), keys of PyTorch without effect in gardenalloc are
 *  named on stderr once (compatibility keys are kept), and the keys named in
 *  GARDENALLOC_IGNORE_KEYS (comma-separated) are let through without effect.
 *  "" when none is set. `source` (may be NULL) gets the variable's name, or
 *  "defaults". */
GA_API const char *ga_torch_config(const char **source);

#ifdef __cplusplus
}
#endif

#endif /* GARDENALLOC_H */
