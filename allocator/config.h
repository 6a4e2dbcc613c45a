/* config.h — the option table and the configuration parser.
 *
 * One X-macro list (GA_OPTIONS) gives each option its name, type, default,
 * origin and one line of doc; it generates the parser's dispatch, the
 * defaults and the table that ga_config_key() serves (and the README prints).
 * Parsing is a pure function over a string.
 */
#ifndef GA_CONFIG_H
#define GA_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#define GA_ROUNDUP_INTERVALS 16

/* The largest values the parser accepts, so that every size derived from a
 * setting fits in 64 bits with room to round: sizes in MiB up to 2^40 MiB
 * (1 EiB, the largest request), the simulated device up to 16 TiB (its
 * expandable reservations, 1.125 x capacity each, must fit in a 47-bit
 * address space), and roundup_power2_divisions up to 2^26 (a 512-byte step
 * at 32 GiB, the last interval; more divisions change nothing). The _VALUE
 * spellings are for messages. */
#define GA_CONFIG_MAX_MIB_VALUE       1099511627776
#define GA_CONFIG_MAX_MIB             ((uint64_t)GA_CONFIG_MAX_MIB_VALUE)
#define GA_CONFIG_MAX_SIM_MIB_VALUE   16777216
#define GA_CONFIG_MAX_SIM_MIB         ((uint64_t)GA_CONFIG_MAX_SIM_MIB_VALUE)
#define GA_CONFIG_MAX_DIVISIONS_VALUE 67108864
#define GA_CONFIG_MAX_DIVISIONS       ((uint64_t)GA_CONFIG_MAX_DIVISIONS_VALUE)
#define GA_CONFIG_MAX_HOLD_VALUE      1099511627776 /* expandable_move_hold, frees */
#define GA_CONFIG_MAX_HOLD            ((uint64_t)GA_CONFIG_MAX_HOLD_VALUE)

typedef struct ga_config {
  size_t max_split_size;         /* bytes; SIZE_MAX = unlimited */
  size_t max_non_split_rounding; /* bytes; 0 = large_segment_size */
  double gc_threshold;           /* 0 = off */
  size_t roundup_divisions[GA_ROUNDUP_INTERVALS];
  int any_roundup; /* some interval has divisions > 1 */
  int expandable_segments;
  int release_lock_on_cudamalloc;
  int graph_capture_record_stream_reuse;
  int pinned_use_host_register;
  int pinned_num_register_threads;
  int pinned_use_background_threads;
  size_t pinned_reserve_segment_size_mb;
  double memory_fraction;         /* 1.0 = unlimited */
  size_t large_segment_size;      /* bytes */
  size_t expandable_page_size;    /* bytes; 0 = large_segment_size */
  size_t expandable_cache_max;    /* bytes of unmapped granules kept cached for reuse */
  size_t expandable_move_hold;    /* frees during which memory moved into a segment stays there */
  int expandable_move_when_full;  /* expandable_move_pages:when_full (the default) */
  int expandable_move_always;     /* expandable_move_pages:always (no settling) */
  int expandable_pytorch;         /* expandable_policy:pytorch */
  char backend[8];                /* "auto", "cuda" or "sim" */
  size_t sim_capacity;            /* bytes */
  int sim_devices;                /* devices the simulated machine has */
  char sim_cost_table[16];        /* "blackwell" or "a100" */
  uint64_t sim_scatter_addresses; /* seed of the simulated device's scattered addresses; 0 = off */
  size_t max_reserved;            /* bytes the allocator may reserve; 0 = no limit */
  size_t headroom;                /* bytes of the device kept for others; 0 = none */
  int deterministic;              /* placement a function of the request sequence alone */
  int shareable_handles;          /* shareable_handles: 1 posix_fd, 2 fabric (GA_DEV_SHARE_*) */
} ga_config;

/* X(key, type, default, origin, doc). `origin` is "pytorch" or "gardenalloc". */
#define GA_OPTIONS(X)                                                                                        \
  X(backend, "auto|cuda|sim", "auto", "gardenalloc",                                                         \
    "device backend: the CUDA driver, the simulated device, or CUDA when a GPU answers and sim otherwise "   \
    "(PyTorch's `native` means auto)")                                                                       \
  X(sim_capacity_mb, "int MiB 2..16777216", "81920", "gardenalloc", "memory of the simulated device")        \
  X(sim_devices, "int 1..64", "1", "gardenalloc", "number of devices the simulated machine has")             \
  X(sim_cost_table, "blackwell|a100", "blackwell", "gardenalloc",                                            \
    "the simulated device's driver cost table: the VMM probe on an RTX PRO 6000 Blackwell, or the A100 "     \
    "figures (docs/benchmarks.md gives each figure's source)")                                               \
  X(sim_scatter_addresses, "int 0..2^32", "0 (off)", "gardenalloc",                                          \
    "with a seed, the simulated device puts each segment at an address drawn from it, scattered, as the "    \
    "GPUs of different ranks do (ga_sim_scatter_addresses)")                                                 \
  X(max_split_size_mb, "int MiB, large_segment_size_mb..2^40", "unlimited", "pytorch",                       \
    "blocks this large or larger are never split, and serve only requests within max_non_split_rounding_mb " \
    "of their size")                                                                                         \
  X(max_non_split_rounding_mb, "int MiB, large_segment_size_mb..2^40", "large_segment_size_mb", "pytorch",   \
    "an oversize request may take a cached oversize block at most this much larger")                         \
  X(large_segment_size_mb, "int MiB 11..2^40", "20", "pytorch",                                              \
    "segment size for large requests below 10 MiB")                                                          \
  X(roundup_power2_divisions, "N or [MiB:N,...,>:N], N a power of 2 <= 2^26", "0 (off)", "pytorch",          \
    "round sizes up to one of N steps between powers of two, per size interval")                             \
  X(garbage_collection_threshold, "float in (0,1)", "0 (off)", "pytorch",                                    \
    "with a memory fraction below 1: free the oldest cached segments once reserved memory passes this "      \
    "share of the limit")                                                                                    \
  X(per_process_memory_fraction, "float in [0,1]", "1.0", "pytorch",                                         \
    "reserve at most this share of the device's memory")                                                     \
  X(max_reserved_mb, "int MiB 0..2^40", "0 (no limit)", "gardenalloc",                                       \
    "reserve at most this much device memory; a request past it fails with GA_ERR_OOM before any device "    \
    "call")                                                                                                  \
  X(headroom_mb, "int MiB 0..2^40", "0", "gardenalloc",                                                      \
    "keep this much of the device's memory for what is not ours (NCCL, the CUDA context, other "             \
    "processes): reserve at most the device's memory less this; past it, GA_ERR_OOM before any device call") \
  X(shareable_handles, "none|posix_fd|fabric", "none", "gardenalloc",                                        \
    "expandable segments: create physical memory that another process can map (posix_fd: a POSIX file "      \
    "descriptor per handle, ga_ipc_export; fabric: also a fabric handle, plain bytes for another node of "   \
    "an "                                                                                                    \
    "NVLink/IMEX domain, ga_ipc_export_fabric; it needs an IMEX channel)")                                   \
  X(deterministic, "True|False", "False", "gardenalloc",                                                     \
    "the same placement on every rank: offsets depend on the request sequence alone, never on the GPU's "    \
    "timing (a free waiting on another stream is reused from the next cache miss on, waiting for it there; " \
    "free memory of other streams moves only after a wait; equal free blocks go by their segments' "         \
    "creation numbers, never by address)")                                                                   \
  X(expandable_segments, "True|False", "False", "pytorch",                                                   \
    "map pages into one growing reserved range per stream and pool instead of separate segments")            \
  X(expandable_page_size_mb, "int MiB, a multiple of 2, <= 2^40", "large_segment_size_mb", "gardenalloc",    \
    "expandable segments: size of the physical pages created for the large pool (the small pool uses 2 "     \
    "MiB; a page is at most the device's memory)")                                                           \
  X(expandable_cache_max_mb, "int MiB 0..2^40", "256", "gardenalloc",                                        \
    "expandable segments: unmapped physical memory (granules of handles) kept cached for reuse; beyond "     \
    "this, handles whose granules are all cached go back to the device")                                     \
  X(expandable_move_pages, "when_full|settle|always", "when_full", "gardenalloc",                            \
    "expandable segments: when to move free pages to where a range needs them instead of creating "          \
    "memory: when_full (PyTorch's placement and device calls until the device is full, then moves "          \
    "instead of failing), settle (before creating memory, except "                                           \
    "out of a range that grew back after giving memory away: less memory, no calls once a repeated "         \
    "workload has peaked) or always (least memory, calls in every repetition)")                              \
  X(expandable_move_hold, "int 0..2^40", "0", "gardenalloc",                                                 \
    "expandable segments: memory moved into a segment does not move out again for this many frees "          \
    "(0: it may at once; more: fewer moves back and forth in a repeated workload, more memory)")             \
  X(expandable_policy, "gardenalloc|pytorch", "gardenalloc", "gardenalloc",                                  \
    "expandable segments: gardenalloc's (free pages move to where a range needs them), or exactly "          \
    "PyTorch's (pages created and mapped one by one, nothing moves, free pages unmapped only by "            \
    "empty_cache and the OOM retry), to compare the two")                                                    \
  X(release_lock_on_cudamalloc, "True|False", "False", "pytorch",                                            \
    "accepted for compatibility; gardenalloc holds its lock over device calls")                              \
  X(release_lock_on_hipmalloc, "True|False", "False", "pytorch", "alias of release_lock_on_cudamalloc")      \
  X(graph_capture_record_stream_reuse, "True|False", "False", "pytorch",                                     \
    "accepted for compatibility; no effect yet")                                                             \
  X(pinned_use_cuda_host_register, "True|False", "False", "pytorch",                                         \
    "accepted for compatibility; host pinned memory is not managed by gardenalloc")                          \
  X(pinned_use_hip_host_register, "True|False", "False", "pytorch",                                          \
    "alias of pinned_use_cuda_host_register")                                                                \
  X(pinned_num_register_threads, "power of 2 <= 128", "1", "pytorch",                                        \
    "accepted for compatibility; host pinned memory is not managed by gardenalloc")                          \
  X(pinned_use_background_threads, "True|False", "False", "pytorch",                                         \
    "accepted for compatibility; host pinned memory is not managed by gardenalloc")                          \
  X(pinned_reserve_segment_size_mb, "int MiB 1..2^40", "0", "pytorch",                                       \
    "accepted for compatibility; host pinned memory is not managed by gardenalloc")

/* Fills *c with the defaults. */
void ga_config_defaults(ga_config *c);

/* Parses `str` (NULL or "" = defaults) into *out. Returns 0, or GA_DEV_EINVAL
 * with a message naming the key, the value and what is allowed in err (and
 * *out untouched). */
int ga_config_parse(const char *str, ga_config *out, char *err, size_t errlen);

/* The message for an unrecognized key (n bytes at `key`, found in the
 * setting `where`, e.g. "GARDENALLOC_CONF"), never cut short in a buffer of
 * GA_CONFIG_ERR_LEN bytes: "KEY=VALUE" of a known key is told that the
 * separator is ':', a key close to one of the table is told its name, and
 * anything else gets the list of every key. */
void ga_config_unknown_key(const char *key, size_t n, const char *where, char *err, size_t errlen);

/* The key of the table closest to the n bytes at `key` (a typo: a few
 * letters off), or NULL when none is close. */
const char *ga_config_closest_key(const char *key, size_t n);

/* Error buffers for parser messages: large enough for the longest one (the
 * list of every key). */
#define GA_CONFIG_ERR_LEN 1536

/* Option i of the table (0 <= i): fills what is asked for and returns 1, or
 * returns 0 past the last option. */
int ga_config_option(int i, const char **name, const char **type, const char **dflt, const char **origin,
                     const char **doc);

/* The large-pool segment size for requests below 10 MiB. */
static inline size_t ga_config_large_buffer(const ga_config *c) { return c->large_segment_size; }

#endif /* GA_CONFIG_H */
