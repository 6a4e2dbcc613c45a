/* sim.c — a simulated GPU on host memory, with the driver's VMM rules.
 *
 * Physical device memory is a memfd of the simulated capacity: sparse, so an
 * 80 GiB device costs only the pages a test writes. It is handed out in
 * granules of 2 MiB. A handle (create) owns a list of granules, not
 * necessarily contiguous in the memfd (a GPU's physical memory is paged too);
 * map() mmaps each run of the handle's granules with MAP_SHARED|MAP_FIXED into
 * a PROT_NONE reservation, so bytes written through one mapping are read back
 * through any other mapping of the same granule. unmap() puts PROT_NONE back.
 * Releasing granules punches holes in the memfd, giving the memory back to the
 * host.
 *
 * malloc() is reserve + create + map under one call, as cudaMalloc is a
 * physical allocation with an address. Its memory is seen through one window
 * that maps the whole memfd at once (the mirror, made at the first malloc):
 * a malloc whose granules are contiguous lives at mirror + their offset and
 * costs the host no mapping of its own, so a hundred thousand native
 * segments do not run into the host's limit on mappings (vm.max_map_count,
 * 65530 by default). A malloc of scattered granules gets a reservation and
 * mappings of its own. Memory freed in the mirror stays mapped on the host
 * (it reads zeroes): a stray access after free does not fault here.
 *
 * Reservations, mappings and mallocs are kept in ordered trees (rtree.h), so
 * every call is O(log n) in what is live. VMM mappings of consecutive granules
 * at consecutive addresses merge into one host mapping; every host mapping
 * the sim holds backs a live reservation or mapping.
 *
 * When the host cannot back a call (mmap fails: no address space, too many
 * mappings; no memory for bookkeeping), the call fails with GA_DEV_ENOMEM
 * and a message that starts with "host:", never as device out of memory.
 *
 * Owns: granule bitmap, handle table, reservations, mappings, events, faults.
 * Invariant: used granules == sum of granules of live handles.
 * It must not: call the allocator, print, or abort.
 */

#include "sim.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../debug.h"
#include "../host.h"
#include "rtree.h"

#define SIM_GRAN  ((size_t)2 << 20)
#define SIM_MAGIC 0x5157u

/* ---- Types ---- */

typedef struct sim_handle {
  size_t ngran;     /* 0 = free slot */
  uint32_t *gran;   /* granule indices, ngran of them (UNBOUND: never mapped yet) */
  uint32_t *shown;  /* how many mappings show each granule */
  size_t maps;      /* mappings that use it */
  int released;     /* release() called; freed when maps reaches 0 */
  size_t next_free; /* free slots: the next free slot + 1, or 0 */
  int ext;          /* imported (import): the memory of ext_fd, not of this device; gran, shown NULL */
  int ext_fd;
} sim_handle;

typedef struct sim_range {
  ga_rnode node;   /* va, size and the tree's links (first: a node is its range) */
  ga_mem_handle h; /* mappings and mallocs: the handle */
  size_t offset;   /* mappings: offset in the handle */
  uint64_t access; /* mappings: devices that may read and write it (bit = ordinal) */
} sim_range;

typedef struct sim_event {
  unsigned magic;
  ga_stream_t stream;
  int pending;      /* recorded on a held stream: not complete until it is released */
  uint64_t done_ns; /* when the work before it completes, on the clock */
  uint64_t seq;     /* its position on the stream (sim_stream.seq) */
} sim_event;

typedef struct sim_stream {
  ga_stream_t s;
  int held;
  int capturing;
  uint64_t done_ns;   /* when the work queued on it so far completes */
  uint64_t seq;       /* positions taken on it: events recorded, marks (ga_sim_stream_mark) */
  uint64_t completed; /* positions up to this one are complete although it is held (a wait) */
} sim_stream;

typedef struct sim_fault {
  unsigned countdown;
  int err;
  int repeat;
  int armed;
} sim_fault;

typedef struct sim_device {
  ga_device base;
  pthread_mutex_t mu;
  int fd;
  size_t ngran, used;  /* granules in all, granules in use */
  uint64_t *bitmap;    /* 1 = granule in use */
  size_t hint;         /* first word that may have a free granule */
  sim_handle *handles; /* index = handle id - 1 */
  size_t nhandles, cap_handles, live_handles;
  size_t free_slots;            /* the first free handle slot + 1, or 0 */
  ga_rtree resv, maps, mallocs; /* of sim_range */
  ga_rtree pinned;              /* host_alloc's buffers (sim_range: va and size only) */
  uintptr_t mirror;             /* the memfd mapped whole, for mallocs; 0 = none */
  int mirror_tried;             /* made, or the host could not */
  sim_fault host_fault;         /* injected failure of the host's mmap (ga_sim_inject_host) */
  uint64_t host_failures;       /* calls that failed because the host could not back them */
  sim_event **events;
  size_t nevents, cap_events;
  sim_stream *streams;
  size_t nstreams;
  sim_fault faults[GA_CALL_COUNT];
  int sticky; /* a sticky fault fired: every call fails with this code (GA_SIM_STICKY) */
  uint64_t waits;
  uint64_t faults_fired;
  uint64_t now_ns;                   /* the CPU's clock */
  uint64_t lag_ns;                   /* queued work completes at least this long after it was queued */
  uint64_t cost_call[GA_CALL_COUNT]; /* ns a call of each kind takes */
  uint64_t cost_unit[GA_CALL_COUNT]; /* and ns per unit it touches (sim_cost_units) */
  const char *cost_table;            /* the named table they came from */
  uint64_t driver_ns;                /* time spent in calls, waits excluded */
  int ndevices;                      /* devices of the simulated machine */
  int capturing;                     /* streams capturing a graph now */
  uint64_t captures_broken;          /* calls that would have invalidated a capture */
  int fabric_refused;                /* GA_SIM_FABRIC_*: create() refuses fabric handles */
  uint64_t scatter;                  /* ga_sim_scatter_addresses: the state of its draws; 0 = off */
} sim_device;

static _Thread_local int thread_relaxed; /* this thread's capture mode */

static const ga_device_ops sim_ops;

static sim_device *sim_of(const ga_device *d) {
  return (d && d->ops == &sim_ops) ? (sim_device *)(uintptr_t)d : NULL;
}

/* ---- Time ----
 * The CPU has a virtual clock (now_ns). Every call takes the time of the cost
 * table: a fixed cost per call plus a cost per unit it touches (mappings for
 * map, unmap and set_access, granules for malloc, free, create, release and
 * copy). Work a test or benchmark queues on a stream (ga_sim_enqueue)
 * completes at least lag_ns after it was queued; an event recorded on a
 * stream completes with the work queued before it. An event query answers
 * from the clock and never waits; a synchronisation moves the clock to the
 * completion of what it waits for, and the difference is a stall. With no
 * queued work (the default) every stream is idle and nothing stalls. */

static void spend_units(sim_device *sim, ga_device_call_t k, size_t units) {
  uint64_t ns = (uint64_t)units * sim->cost_unit[k];
  sim->now_ns += ns;
  sim->driver_ns += ns;
}

/* The CPU waits until `t`: a stall when that is in the future. */
static void wait_until(sim_device *sim, uint64_t t) {
  if (t <= sim->now_ns) return;
  sim->base.stalls++;
  sim->base.stall_ns += t - sim->now_ns;
  sim->now_ns = t;
}

static size_t granules_of(size_t bytes) { return (bytes + SIM_GRAN - 1) / SIM_GRAN; }

/* The cost tables, in microseconds: {per call, per unit}. A cuMemCreate or
 * cuMemRelease makes or frees one handle, so both cost per call, whatever the
 * handle's size; cuMemUnmap and cuMemSetAccess cost per mapping they touch
 * (a mapping shows one handle or a piece of one); cuMemMap about 1 us.
 * "blackwell" (the default): the VMM probe on an RTX PRO 6000 Blackwell
 * (CUDA 13, driver 580): 10 GiB in 2 MiB handles in 76 ms, in 16 MiB in
 * 9 ms, in 64 MiB in 2.3 ms, about 13.8 us per handle; cuMemSetAccess 69 us
 * and cuMemUnmap 39 us per handle. "a100": the A100 benchmark of 4096 x 2 MiB
 * handles, cuMemSetAccess 21 us and cuMemUnmap 11 us per handle; its create
 * figure is not recorded apart from the probe's, so create keeps the
 * earlier table's price of one 2 MiB handle (30 us). cudaMalloc/cudaFree,
 * events and synchronisation are assumed orders of magnitude in both.
 * docs/benchmarks.md lists each figure's source. ga_sim_set_cost replaces
 * any figure (ga-bench --cost; on a GPU ga-bench drivercost measures them). */
/* Copies: the copy figure above (10 us + 200 us per 2 MiB granule, 10.5
 * GB/s) is for pageable host memory, which the driver stages through pinned
 * buffers of its own. From pinned memory (host_alloc) the DMA engine copies
 * directly: the sim charges a pinned copy the pageable figure times the
 * ratio of a published measurement (J. Habich, "PCI express pinned host
 * memory", 2009, GTX 280 on PCIe 2.0 x16: 5.9 GB/s pinned both ways, 4.5
 * GB/s pageable to the device and 2.3 GB/s from it), so the ratio, not that
 * bus's speed, carries over: 4.5/5.9 of the time to the device, 2.3/5.9
 * from it (GA_SIM_PINNED_TO_DEVICE / _TO_HOST). Pinning (host_alloc) and
 * unpinning are assumed orders of magnitude: 20 us a call plus 50 us (10 us
 * to unpin) per 2 MiB. */
typedef struct sim_cost_table {
  const char *name;
  double us[GA_CALL_COUNT][2];
} sim_cost_table;

#define SIM_COST_COMMON                                                                                   \
  [GA_CALL_MALLOC] = {20, 20}, [GA_CALL_FREE] = {20, 5}, [GA_CALL_RESERVE] = {5, 0},                      \
  [GA_CALL_UNRESERVE] = {5, 0}, [GA_CALL_MAP] = {1, 0}, [GA_CALL_COPY] = {10, 200},                       \
  [GA_CALL_EVENT_CREATE] = {2, 0}, [GA_CALL_EVENT_RECORD] = {2, 0}, [GA_CALL_EVENT_QUERY] = {0.5, 0},     \
  [GA_CALL_EVENT_SYNCHRONIZE] = {5, 0}, [GA_CALL_EVENT_DESTROY] = {2, 0},                                 \
  [GA_CALL_STREAM_SYNCHRONIZE] = {5, 0}, [GA_CALL_SYNCHRONIZE] = {10, 0}, [GA_CALL_MEM_INFO] = {5, 0},    \
  [GA_CALL_CAPTURE_QUERY] = {0.5, 0}, [GA_CALL_CAPTURE_MODE] = {0.5, 0}, [GA_CALL_HOST_ALLOC] = {20, 50}, \
  [GA_CALL_HOST_FREE] = {20, 10}

static const sim_cost_table cost_tables[] = {
    {"blackwell",
     {SIM_COST_COMMON, [GA_CALL_CREATE] = {13.8, 0}, [GA_CALL_RELEASE] = {5, 0}, [GA_CALL_UNMAP] = {0, 39},
      [GA_CALL_SET_ACCESS] = {0, 69}}},
    {"a100",
     {SIM_COST_COMMON, [GA_CALL_CREATE] = {30, 0}, [GA_CALL_RELEASE] = {5, 0}, [GA_CALL_UNMAP] = {0, 11},
      [GA_CALL_SET_ACCESS] = {0, 21}}},
};

/* ---- Capture ----
 * While a stream captures a graph, a thread in the global capture mode may not
 * allocate, free, map, grant access, copy, query or synchronise: the driver
 * would invalidate the capture. In the relaxed mode it may, except
 * synchronise the capturing stream or the whole device, which no mode
 * allows. The sim refuses such a call and counts it. */
static int capture_refused(sim_device *sim, const char *call, const char *why) {
  sim->captures_broken++;
  ga_dev_set_error(&sim->base, "%s: CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED (%s)", call, why);
  return GA_DEV_ECAPTURE;
}
static int capture_breaks(sim_device *sim, const char *call) {
  if (!sim->capturing || thread_relaxed) return 0;
  return capture_refused(sim, call, "a stream is capturing and this thread is in the global capture mode");
}

/* ---- Faults ---- */

/* Every call passes here first: it takes its fixed cost, then may fail. */
static int fault_hit(sim_device *sim, ga_device_call_t k, const char *call) {
  sim->now_ns += sim->cost_call[k];
  sim->driver_ns += sim->cost_call[k];
  sim_fault *f = &sim->faults[k];
  int err = sim->sticky;
  if (!err) {
    if (!f->armed) return 0;
    if (f->countdown > 1) {
      f->countdown--;
      return 0;
    }
    if (f->repeat == GA_SIM_STICKY) sim->sticky = f->err;
    if (!f->repeat) f->armed = 0;
    err = f->err;
  }
  sim->faults_fired++;
  ga_dev_set_error(&sim->base, "%s: %s (injected %sfault)", call,
                   err == GA_DEV_EOOM ? "CUDA_ERROR_OUT_OF_MEMORY" : "CUDA_ERROR_UNKNOWN",
                   sim->sticky ? "sticky " : "");
  return err;
}

enum { SIM_CAPTURE_SAFE, SIM_CAPTURE_UNSAFE };
/* The opening of every device call: takes the device's lock, charges the
 * call's fixed cost, fires an injected fault, and, for a call that no capture
 * allows (SIM_CAPTURE_UNSAFE), refuses it while a stream captures in this
 * thread's global capture mode. *rc: 0 or the error; the lock is held either
 * way. */
static sim_device *sim_enter(ga_device *d, ga_device_call_t k, const char *call, int capture_unsafe,
                             int *rc) {
  sim_device *sim = sim_of(d);
  pthread_mutex_lock(&sim->mu);
  *rc = fault_hit(sim, k, call);
  if (!*rc && capture_unsafe) *rc = capture_breaks(sim, call);
  return sim;
}

/* ---- Ranges (reservations, mappings, mallocs) ---- */

static sim_range *range_of(ga_rnode *n) { return (sim_range *)(void *)n; }

/* The range containing addr, or NULL. */
static sim_range *range_find(const ga_rtree *t, uintptr_t addr) { return range_of(ga_rtree_find(t, addr)); }

/* A new range in t, or NULL when the host has no memory for it. */
static sim_range *range_add(ga_rtree *t, sim_range x) {
  sim_range *r = ga_host_malloc(sizeof *r);
  if (!r) return NULL;
  *r = x;
  ga_rtree_insert(t, &r->node);
  return r;
}

static void range_delete(ga_rtree *t, sim_range *r) {
  ga_rtree_remove(t, &r->node);
  free(r);
}

/* ---- The host ----
 * Every mmap that backs simulated memory goes through host_mmap, where a
 * test can make it fail (ga_sim_inject_host). A host failure is the host's,
 * reported as such: GA_DEV_ENOMEM with "host:" in the message. */

static void *host_mmap(sim_device *sim, void *addr, size_t len, int prot, int flags, int fd, off_t off) {
  sim_fault *f = &sim->host_fault;
  if (f->armed && f->countdown > 1) {
    f->countdown--;
  } else if (f->armed) {
    if (!f->repeat) f->armed = 0;
    sim->faults_fired++;
    errno = f->err;
    return MAP_FAILED;
  }
  return mmap(addr, len, prot, flags, fd, off);
}

static int host_failed(sim_device *sim, const char *call, const char *what, size_t bytes, int err) {
  sim->host_failures++;
  ga_dev_set_error(&sim->base, "%s: host: %s of %zu bytes failed: %s (%s)", call, what, bytes, strerror(err),
                   err == ENOMEM ? "the host that runs the simulated device is out of address space or of "
                                   "mappings (vm.max_map_count); the device is not out of memory"
                                 : "a failure of the host that runs the simulated device");
  return GA_DEV_ENOMEM;
}

static int host_no_memory(sim_device *sim, const char *call) {
  sim->host_failures++;
  ga_dev_set_error(&sim->base, "%s: host: out of memory for the simulated device's bookkeeping", call);
  return GA_DEV_ENOMEM;
}

/* ---- Granules ----
 * A granule of the memfd is in use (its bit set) while a live handle holds
 * it. A handle of create() holds its granules from its first mapping on: the
 * memory is counted from create (s->used) but its place in the memfd is
 * chosen when it is first mapped, next to the memory mapped beside it, so
 * that the host merges the mappings (see bind_for_map). A malloc takes its
 * granules at once. Either way bits set <= s->used <= ngran. */

#define UNBOUND UINT32_MAX

static int gran_used(const sim_device *sim, size_t g) { return (sim->bitmap[g / 64] >> (g % 64)) & 1; }
static void gran_set(sim_device *sim, size_t g, int on) {
  if (on)
    sim->bitmap[g / 64] |= (uint64_t)1 << (g % 64);
  else
    sim->bitmap[g / 64] &= ~((uint64_t)1 << (g % 64));
}

/* Picks n free granules: the first contiguous run if there is one, else the
 * first n free ones. pre: n <= free granules. */
static void gran_pick(sim_device *sim, size_t n, uint32_t *out) {
  size_t run = 0, start = 0;
  for (size_t g = sim->hint * 64; g < sim->ngran; g++) {
    if (g % 64 == 0 && sim->bitmap[g / 64] == ~(uint64_t)0) {
      g += 63;
      run = 0;
      continue;
    }
    if (gran_used(sim, g)) {
      run = 0;
      continue;
    }
    if (run++ == 0) start = g;
    if (run == n) {
      for (size_t i = 0; i < n; i++) out[i] = (uint32_t)(start + i);
      return;
    }
  }
  size_t k = 0; /* every granule below the hint's word is in use */
  for (size_t g = sim->hint * 64; g < sim->ngran && k < n; g++) {
    if (g % 64 == 0 && sim->bitmap[g / 64] == ~(uint64_t)0) {
      g += 63;
      continue;
    }
    if (!gran_used(sim, g)) out[k++] = (uint32_t)g;
  }
}

/* The middle of the longest run of free granules: room to grow both ways
 * for memory mapped where nothing is mapped beside it. pre: one is free. */
static uint32_t gran_fresh(const sim_device *sim) {
  size_t best = 0, best_len = 0, start = 0, len = 0;
  for (size_t w = 0; w < (sim->ngran + 63) / 64; w++) {
    uint64_t bits = sim->bitmap[w];
    if (bits == 0) { /* 64 free */
      if (!len) start = w * 64;
      len += 64;
      continue;
    }
    for (size_t b = 0; b < 64; b++) {
      if ((bits >> b) & 1) {
        if (len > best_len) best = start, best_len = len;
        len = 0;
      } else if (len++ == 0)
        start = w * 64 + b;
    }
  }
  if (len > best_len) best = start, best_len = len;
  GA_ASSERT(best_len > 0);
  return (uint32_t)(best + best_len / 2);
}

static void gran_bind(sim_device *sim, uint32_t g) {
  gran_set(sim, g, 1);
  while (sim->hint < (sim->ngran + 63) / 64 && sim->bitmap[sim->hint] == ~(uint64_t)0) sim->hint++;
}

/* Gives back the bound granules of g[0..n) and their host memory. */
static void gran_unbind(sim_device *sim, const uint32_t *g, size_t n) {
  for (size_t i = 0, run; i < n; i += run) {
    run = 1;
    if (g[i] == UNBOUND) continue;
    while (i + run < n && g[i + run] == g[i] + run) run++;
    for (size_t k = 0; k < run; k++) gran_set(sim, g[i] + k, 0);
    if (g[i] / 64 < sim->hint) sim->hint = g[i] / 64;
    /* Return the host memory; the next owner reads zeroes. */
    (void)fallocate(sim->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)g[i] * (off_t)SIM_GRAN,
                    (off_t)(run * SIM_GRAN));
  }
}

/* Has nothing ever been written to granule g since it was last given back? */
static int gran_empty(const sim_device *sim, uint32_t g) {
  off_t at = (off_t)g * (off_t)SIM_GRAN, data = lseek(sim->fd, at, SEEK_DATA);
  if (data < 0) return errno == ENXIO;
  return data >= at + (off_t)SIM_GRAN;
}

/* ---- Handles ---- */

static sim_handle *handle_get(sim_device *sim, ga_mem_handle h) {
  if (h == 0 || h > sim->nhandles) return NULL;
  sim_handle *x = &sim->handles[h - 1];
  return (x->ngran && !x->released) ? x : NULL;
}

/* A handle of ngran granules, taken now (bind: a malloc) or at its first
 * mapping. Free slots are reused, last freed first. pre: ngran <= free. */
static int handle_new(sim_device *sim, size_t ngran, int bind, ga_mem_handle *out) {
  if (!sim->free_slots && sim->nhandles == sim->cap_handles) {
    size_t cap = sim->cap_handles ? sim->cap_handles * 2 : 64;
    sim_handle *v = ga_host_realloc(sim->handles, cap * sizeof *v);
    if (!v) return GA_DEV_ENOMEM;
    sim->handles = v;
    sim->cap_handles = cap;
  }
  uint32_t *g = ga_host_malloc(2 * ngran * sizeof *g);
  if (!g) return GA_DEV_ENOMEM;
  size_t slot;
  if (sim->free_slots) {
    slot = sim->free_slots - 1;
    sim->free_slots = sim->handles[slot].next_free;
  } else {
    slot = sim->nhandles++;
  }
  memset(g + ngran, 0, ngran * sizeof *g); /* mapped by nothing */
  if (bind) {
    gran_pick(sim, ngran, g);
    for (size_t i = 0; i < ngran; i++) gran_bind(sim, g[i]);
  } else {
    for (size_t i = 0; i < ngran; i++) g[i] = UNBOUND;
  }
  sim->used += ngran;
  sim->handles[slot] = (sim_handle){.ngran = ngran, .gran = g, .shown = g + ngran};
  sim->live_handles++;
  *out = slot + 1;
  return 0;
}

/* Frees the handle's granules once it is released and unmapped. */
static void handle_maybe_free(sim_device *sim, sim_handle *x) {
  if (!x->released || x->maps) return;
  if (x->ext)
    close(x->ext_fd);
  else {
    gran_unbind(sim, x->gran, x->ngran);
    sim->used -= x->ngran;
  }
  free(x->gran);
  *x = (sim_handle){.next_free = sim->free_slots};
  sim->free_slots = (size_t)(x - sim->handles) + 1;
  sim->live_handles--;
}

/* Are the handle's granules [first, first+n) one run of the memfd? */
static int gran_contiguous(const sim_handle *x, size_t first, size_t n) {
  for (size_t i = 1; i < n; i++)
    if (x->gran[first + i] != x->gran[first] + i) return 0;
  return 1;
}

/* The memfd granule that would continue the mapping that ends at va, or
 * precede by n the one that starts at va + n granules; UNBOUND if neither. */
static uint32_t neighbour_target(sim_device *sim, uintptr_t va, size_t n) {
  ga_rnode *below = va ? ga_rtree_floor(&sim->maps, va - 1) : NULL;
  if (below && below->va + below->size == va && !sim->handles[range_of(below)->h - 1].ext) {
    sim_range *m = range_of(below);
    uint32_t g = sim->handles[m->h - 1].gran[(m->offset + m->node.size) / SIM_GRAN - 1];
    if (g + 1 < sim->ngran) return g + 1;
  }
  ga_rnode *above = ga_rtree_lower(&sim->maps, va + n * SIM_GRAN);
  if (above && above->va == va + n * SIM_GRAN && !sim->handles[range_of(above)->h - 1].ext) {
    sim_range *m = range_of(above);
    uint32_t g = sim->handles[m->h - 1].gran[m->offset / SIM_GRAN];
    if (g >= n) return g - (uint32_t)n;
  }
  return UNBOUND;
}

/* Places the granules [first, first+n) of handle x, about to be mapped at
 * va, in the memfd: each one after the one before it, the first after (or
 * before) the mapping beside va, else in the middle of the longest free run.
 * A granule placed before stays where it is while a mapping shows it or
 * something was written to it; otherwise it moves to its better place when
 * that is free. Then the host sees one mapping where the device has a run
 * of mappings side by side. */
static void bind_for_map(sim_device *sim, sim_handle *x, size_t first, size_t n, uintptr_t va) {
  for (size_t i = 0; i < n; i++) {
    uint32_t *g = &x->gran[first + i], want;
    if (*g != UNBOUND && x->shown[first + i]) continue;
    if (i == 0)
      want = neighbour_target(sim, va, n);
    else
      want = g[-1] + 1 < sim->ngran ? g[-1] + 1 : UNBOUND;
    int free_there = want != UNBOUND && !gran_used(sim, want);
    if (*g == UNBOUND) {
      *g = free_there ? want : gran_fresh(sim);
      gran_bind(sim, *g);
    } else if (free_there && gran_empty(sim, *g)) {
      gran_set(sim, *g, 0);
      if (*g / 64 < sim->hint) sim->hint = *g / 64;
      *g = want;
      gran_bind(sim, *g);
    }
  }
}

/* ---- The mirror: the memfd mapped whole, for mallocs ---- */

static int in_mirror(const sim_device *sim, uintptr_t va) {
  return sim->mirror && va - sim->mirror < sim->ngran * SIM_GRAN;
}

/* Maps the whole memfd at a granule-aligned address, once. When the host
 * cannot (address space), mallocs map themselves one by one, as before. */
static void mirror_open(sim_device *sim) {
  sim->mirror_tried = 1;
  size_t len = sim->ngran * SIM_GRAN;
  void *p =
      host_mmap(sim, NULL, len + SIM_GRAN, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return;
  uintptr_t base = (uintptr_t)p, start = (base + SIM_GRAN - 1) & ~(uintptr_t)(SIM_GRAN - 1);
  if (host_mmap(sim, (void *)start, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, sim->fd, 0) ==
      MAP_FAILED) {
    munmap(p, len + SIM_GRAN);
    return;
  }
  if (start > base) munmap(p, start - base);
  if (base + SIM_GRAN > start) munmap((void *)(start + len), base + SIM_GRAN - start);
  sim->mirror = start;
}

/* ---- Core VMM operations (no fault checks; shared by malloc) ---- */

static void protnone(uintptr_t va, size_t size) {
  (void)mmap((void *)va, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
}

/* ga_sim_scatter_addresses: where to ask the host for the next range, a
 * granule drawn from [32 TiB, 96 TiB) of the address space (above what
 * sanitizers keep for themselves, below the host's own mappings). A hint
 * only: the host puts the range elsewhere when that place is taken. */
static void *scatter_hint(sim_device *sim) {
  if (!sim->scatter) return NULL;
  uint64_t z = (sim->scatter += 0x9e3779b97f4a7c15ULL); /* splitmix64 */
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  z ^= z >> 31;
  const uint64_t lo = (uint64_t)32 << 40, slots = ((uint64_t)64 << 40) / SIM_GRAN;
  return (void *)(uintptr_t)(lo + (z % slots) * SIM_GRAN);
}

/* Reserves size bytes aligned to align (0 = the granularity) of host address
 * space; `at` != 0: the range at `at` in the mirror, which the host already backs. */
static int do_reserve(sim_device *sim, const char *call, size_t size, size_t align, uintptr_t at, void **va) {
  if (align == 0) align = SIM_GRAN;
  uintptr_t start = at;
  void *p = NULL;
  size_t span = size + align;
  if (!at) {
    p = span < size ? MAP_FAILED
                    : host_mmap(sim, scatter_hint(sim), span, PROT_NONE,
                                MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED)
      return host_failed(sim, call, "reserving address space", size, span < size ? ENOMEM : errno);
    uintptr_t base = (uintptr_t)p;
    start = (base + align - 1) & ~(uintptr_t)(align - 1);
    if (start > base) munmap(p, start - base);
    if (base + span > start + size) munmap((void *)(start + size), base + span - start - size);
  }
  if (!range_add(&sim->resv, (sim_range){.node = {.va = start, .size = size}})) {
    if (!at) munmap((void *)start, size);
    return host_no_memory(sim, call);
  }
  *va = (void *)start;
  return 0;
}

static void do_unreserve(sim_device *sim, sim_range *r) {
  if (!in_mirror(sim, r->node.va)) munmap((void *)r->node.va, r->node.size);
  range_delete(&sim->resv, r);
}

static int do_create(sim_device *sim, const char *call, size_t size, int bind, ga_mem_handle *h) {
  size_t n = size / SIM_GRAN;
  if (n > sim->ngran - sim->used) {
    ga_dev_set_error(&sim->base, "%s: CUDA_ERROR_OUT_OF_MEMORY (%zu bytes asked, %zu free)", call, size,
                     (sim->ngran - sim->used) * SIM_GRAN);
    return GA_DEV_EOOM;
  }
  return handle_new(sim, n, bind, h) ? host_no_memory(sim, call) : 0;
}

static void do_release(sim_device *sim, sim_handle *x) {
  x->released = 1;
  handle_maybe_free(sim, x);
}

/* Maps the handle at va; `access` = the devices that may use it at once. In
 * the mirror the host already shows the handle's granules at va. */
static int do_map(sim_device *sim, const char *call, uintptr_t va, size_t size, ga_mem_handle h,
                  size_t offset, uint64_t access) {
  sim_handle *x = &sim->handles[h - 1];
  size_t first = offset / SIM_GRAN, n = size / SIM_GRAN;
  int mirrored = in_mirror(sim, va);
  if (x->ext) { /* another process's memory: its fd at offset */
    void *p = host_mmap(sim, (void *)va, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, x->ext_fd,
                        (off_t)offset);
    if (p == MAP_FAILED) {
      int err = errno;
      protnone(va, size);
      return host_failed(sim, call, "mapping imported memory", size, err);
    }
    mirrored = 1; /* nothing more to map */
  } else if (!mirrored)
    bind_for_map(sim, x, first, n, va);
  for (size_t i = 0; i < n && !mirrored;) {
    size_t run = 1;
    while (i + run < n && x->gran[first + i + run] == x->gran[first + i] + run) run++;
    void *p = host_mmap(sim, (void *)(va + i * SIM_GRAN), run * SIM_GRAN, PROT_READ | PROT_WRITE,
                        MAP_SHARED | MAP_FIXED, sim->fd, (off_t)x->gran[first + i] * (off_t)SIM_GRAN);
    if (p == MAP_FAILED) {
      int err = errno;
      protnone(va, size);
      return host_failed(sim, call, "mapping device memory", run * SIM_GRAN, err);
    }
    i += run;
  }
  if (!range_add(&sim->maps,
                 (sim_range){.node = {.va = va, .size = size}, .h = h, .offset = offset, .access = access})) {
    if (!mirrored || x->ext) protnone(va, size);
    return host_no_memory(sim, call);
  }
  x->maps++;
  for (size_t i = 0; i < n && !x->ext; i++) x->shown[first + i]++;
  return 0;
}

static void do_unmap_one(sim_device *sim, sim_range *m) {
  if (!in_mirror(sim, m->node.va)) protnone(m->node.va, m->node.size);
  sim_handle *x = &sim->handles[m->h - 1];
  for (size_t i = 0; i < m->node.size / SIM_GRAN && !x->ext; i++) x->shown[m->offset / SIM_GRAN + i]--;
  range_delete(&sim->maps, m);
  x->maps--;
  handle_maybe_free(sim, x);
}

/* Walks the mappings from the one containing (or, with exact, starting at)
 * va over [va, va+size) while they follow each other without a gap. Returns
 * the first and the number walked; *end = where the walk stopped. */
static sim_range *maps_walk(sim_device *sim, uintptr_t va, size_t size, int exact, size_t *count,
                            uintptr_t *end) {
  ga_rnode *first = exact ? ga_rtree_lower(&sim->maps, va) : ga_rtree_find(&sim->maps, va), *n = first;
  uintptr_t at = va;
  size_t k = 0;
  while (n && (exact ? n->va == at : n->va <= at) && at - va < size) at = n->va + n->size, n = n->next, k++;
  *count = k;
  *end = at;
  return range_of(first);
}

/* ---- Ops ---- */

static int sim_granularity(ga_device *d, size_t *g) {
  (void)d;
  *g = SIM_GRAN;
  return 0;
}

static int sim_mem_info(ga_device *d, size_t *free_bytes, size_t *total) {
  int rc;
  sim_device *sim = sim_enter(d, GA_CALL_MEM_INFO, "mem_info", SIM_CAPTURE_SAFE, &rc);
  if (!rc) {
    *free_bytes = (sim->ngran - sim->used) * SIM_GRAN;
    *total = sim->ngran * SIM_GRAN;
  }
  pthread_mutex_unlock(&sim->mu);
  return rc;
}

static int sim_malloc(ga_device *d, size_t size, void **ptr) {
  int rc;
  sim_device *sim = sim_enter(d, GA_CALL_MALLOC, "malloc", SIM_CAPTURE_UNSAFE, &rc);
  size_t rsize = (size + SIM_GRAN - 1) & ~(SIM_GRAN - 1);
  void *va = NULL;
  ga_mem_handle h = 0;
  if (rc) goto out;
  if (size == 0) {
    *ptr = NULL;
    goto out;
  }
  if (rsize < size || rsize / SIM_GRAN > sim->ngran - sim->used) {
    ga_dev_set_error(d, "malloc: CUDA_ERROR_OUT_OF_MEMORY (%zu bytes asked, %zu free)", size,
                     (sim->ngran - sim->used) * SIM_GRAN);
    rc = GA_DEV_EOOM;
    goto out;
  }
  spend_units(sim, GA_CALL_MALLOC, granules_of(rsize));
  if ((rc = do_create(sim, "malloc", rsize, 1, &h))) goto out;
  sim_handle *x = &sim->handles[h - 1];
  if (!sim->mirror_tried) mirror_open(sim);
  /* Scattered addresses: a range of its own, where the draw puts it. */
  uintptr_t at = sim->mirror && !sim->scatter && gran_contiguous(x, 0, x->ngran)
                     ? sim->mirror + x->gran[0] * SIM_GRAN
                     : 0;
  if ((rc = do_reserve(sim, "malloc", rsize, SIM_GRAN, at, &va))) goto release;
  if ((rc = do_map(sim, "malloc", (uintptr_t)va, rsize, h, 0, (uint64_t)1 << d->ordinal))) goto unreserve;
  if (!range_add(&sim->mallocs, (sim_range){.node = {.va = (uintptr_t)va, .size = rsize}, .h = h})) {
    rc = host_no_memory(sim, "malloc");
    goto unmap;
  }
  *ptr = va;
  goto out;
unmap:
  do_unmap_one(sim, range_find(&sim->maps, (uintptr_t)va));
unreserve:
  do_unreserve(sim, range_find(&sim->resv, (uintptr_t)va));
release:
  do_release(sim, &sim->handles[h - 1]);
out:
  pthread_mutex_unlock(&sim->mu);
  return rc;
}

static int sim_free(ga_device *d, void *ptr) {
  int rc;
  sim_device *sim = sim_enter(d, GA_CALL_FREE, "free", SIM_CAPTURE_UNSAFE, &rc);
  if (rc || !ptr) goto out;
  sim_range *r = range_find(&sim->mallocs, (uintptr_t)ptr);
  if (!r || r->node.va != (uintptr_t)ptr) {
    ga_dev_set_error(d, "free: CUDA_ERROR_INVALID_VALUE (%p was not returned by malloc)", ptr);
    rc = GA_DEV_EINVAL;
    goto out;
  }
  sim_range m = *r;
  spend_units(sim, GA_CALL_FREE, granules_of(m.node.size));
  range_delete(&sim->mallocs, r);
  do_unmap_one(sim, range_find(&sim->maps, m.node.va));
  do_release(sim, &sim->handles[m.h - 1]);
  do_unreserve(sim, range_find(&sim->resv, m.node.va));
out:
  pthread_mutex_unlock(&sim->mu);
  return rc;
}

static int sim_reserve(ga_device *d, size_t size, size_t align, void **va) {
  int rc;
  sim_device *sim = sim_enter(d, GA_CALL_RESERVE, "reserve", SIM_CAPTURE_UNSAFE, &rc);
  if (rc) goto out;
  if (size == 0 || size % SIM_GRAN || (align && (align % SIM_GRAN || (align & (align - 1))))) {
    ga_dev_set_error(d,
                     "reserve: CUDA_ERROR_INVALID_VALUE (size %zu and alignment %zu must be multiples of the "
                     "%zu-byte granularity)",
                     size, align, SIM_GRAN);
    rc = GA_DEV_EINVAL;
    goto out;
  }
  rc = do_reserve(sim, "reserve", size, align, 0, va);
out:
  pthread_mutex_unlock(&sim->mu);
  return rc;
}

static int sim_unreserve(ga_device *d, void *va, size_t size) {
  int rc;
  sim_device *sim = sim_enter(d, GA_CALL_UNRESERVE, "unreserve", SIM_CAPTURE_UNSAFE, &rc);
  if (rc) goto out;
  sim_range *r = range_find(&sim->resv, (uintptr_t)va);
  if (!r || r->node.va != (uintptr_t)va || r->node.size != size) {
    ga_dev_set_error(d, "unreserve: CUDA_ERROR_INVALID_VALUE (%p+%zu is not a reservation)", va, size);
    rc = GA_DEV_EINVAL;
  } else if (ga_rtree_overlaps(&sim->maps, (uintptr_t)va, size)) {
    ga_dev_set_error(d, "unreserve: CUDA_ERROR_INVALID_VALUE (%p+%zu still has mappings)", va, size);
    rc = GA_DEV_EINVAL;
  } else {
    do_unreserve(sim, r);
  }
out:
  pthread_mutex_unlock(&sim->mu);
  return rc;
}

static int sim_create(ga_device *d, size_t size, ga_mem_handle *h) {
  int rc;
  sim_device *sim = sim_enter(d, GA_CALL_CREATE, "create", SIM_CAPTURE_UNSAFE, &rc);
  if (rc) goto out;
  if (size == 0 || size % SIM_GRAN) {
    ga_dev_set_error(
        d, "create: CUDA_ERROR_INVALID_VALUE (size %zu is not a multiple of the %zu-byte granularity)", size,
        SIM_GRAN);
    rc = GA_DEV_EINVAL;
    goto out;
  }
  if (d->shareable == GA_DEV_SHARE_FABRIC && sim->fabric_refused) {
    rc = ga_dev_fabric_refused(d, "create", sim->fabric_refused == GA_SIM_FABRIC_NOT_PERMITTED);
    goto out;
  }
  spend_units(sim, GA_CALL_CREATE, granules_of(size));
  rc = do_create(sim, "create", size, 0, h);
out:
  pthread_mutex_unlock(&sim->mu);
  return rc;
}

static int sim_release(ga_device *d, ga_mem_handle h) {
  int rc;
  sim_device *sim = sim_enter(d, GA_CALL_RELEASE, "release", SIM_CAPTURE_UNSAFE, &rc);
  if (rc) goto out;
  sim_handle *x = handle_get(sim, h);
  if (!x) {
    ga_dev_set_error(d, "release: CUDA_ERROR_INVALID_VALUE (handle %llu is not live)", (unsigned long long)h);
    rc = GA_DEV_EINVAL;
    goto out;
  }
  spend_units(sim, GA_CALL_RELEASE, x->ngran);
  do_release(sim, x);
out:
  pthread_mutex_unlock(&sim->mu);
  return rc;
}

static int sim_map(ga_device *d, void *va, size_t size, ga_mem_handle h, size_t offset) {
  sim_device *sim = sim_of(d);
  uintptr_t v = (uintptr_t)va;
  pthread_mutex_lock(&sim->mu);
  int rc = fault_hit(sim, GA_CALL_MAP, "map");
  if (!rc) rc = capture_breaks(sim, "map");
  if (rc) goto out;
  sim_handle *x = handle_get(sim, h);
  sim_range *r = range_find(&sim->resv, v);
  const char *why = NULL;
  if (!x)
    why = "the handle is not live";
  else if (size == 0 || v % SIM_GRAN || size % SIM_GRAN || offset % SIM_GRAN)
    why = "address, size and offset must be multiples of the granularity";
  else if (offset > x->ngran * SIM_GRAN || size > x->ngran * SIM_GRAN - offset)
    why = "offset + size exceeds the handle";
  else if (!r || size > r->node.size - (v - r->node.va))
    why = "the range is not inside one reservation";
  else if (ga_rtree_overlaps(&sim->maps, v, size))
    why = "part of the range is already mapped";
  if (why) {
    ga_dev_set_error(d, "map: CUDA_ERROR_INVALID_VALUE (%p+%zu: %s)", va, size, why);
    rc = GA_DEV_EINVAL;
    goto out;
  }
  spend_units(sim, GA_CALL_MAP, 1);
  rc = do_map(sim, "map", v, size, h, offset, 0); /* no device has access until set_access */
out:
  pthread_mutex_unlock(&sim->mu);
  return rc;
}

static int sim_unmap(ga_device *d, void *va, size_t size) {
  sim_device *sim = sim_of(d);
  uintptr_t v = (uintptr_t)va;
  pthread_mutex_lock(&sim->mu);
  int rc = fault_hit(sim, GA_CALL_UNMAP, "unmap");
  if (!rc) rc = capture_breaks(sim, "unmap");
  if (rc) goto out;
  /* The range must be exactly a union of whole, adjacent mappings. */
  size_t k;
  uintptr_t at;
  sim_range *m = maps_walk(sim, v, size, 1, &k, &at);
  if (size == 0 || at != v + size || range_find(&sim->mallocs, v)) {
    ga_dev_set_error(d, "unmap: CUDA_ERROR_INVALID_VALUE (%p+%zu is not a union of whole mappings)", va,
                     size);
    rc = GA_DEV_EINVAL;
    goto out;
  }
  spend_units(sim, GA_CALL_UNMAP, k);
  for (ga_rnode *n = &m->node, *next; k-- > 0; n = next) {
    next = n->next;
    do_unmap_one(sim, range_of(n));
  }
out:
  pthread_mutex_unlock(&sim->mu);
  return rc;
}

static int sim_set_access(ga_device *d, void *va, size_t size, const int *devices, int n) {
  sim_device *sim = sim_of(d);
  uintptr_t v = (uintptr_t)va;
  pthread_mutex_lock(&sim->mu);
  int rc = fault_hit(sim, GA_CALL_SET_ACCESS, "set_access");
  if (!rc) rc = capture_breaks(sim, "set_access");
  uint64_t mask = 0;
  for (int i = 0; !rc && i < n; i++) {
    if (devices[i] < 0 || devices[i] >= sim->ndevices) {
      ga_dev_set_error(d, "set_access: CUDA_ERROR_INVALID_DEVICE (device %d; the machine has %d)", devices[i],
                       sim->ndevices);
      rc = GA_DEV_EINVAL;
    } else
      mask |= (uint64_t)1 << devices[i];
  }
  /* The range must be mapped from end to end. */
  size_t k = 0;
  uintptr_t at = v;
  sim_range *m = rc ? NULL : maps_walk(sim, v, size, 0, &k, &at);
  if (!rc && (size == 0 || !m || at - v < size)) {
    ga_dev_set_error(d, "set_access: CUDA_ERROR_INVALID_VALUE (%p+%zu is not mapped from end to end)", va,
                     size);
    rc = GA_DEV_EINVAL;
  }
  if (!rc) spend_units(sim, GA_CALL_SET_ACCESS, k);
  for (ga_rnode *n = rc ? NULL : &m->node; n && k-- > 0; n = n->next) range_of(n)->access = mask;
  pthread_mutex_unlock(&sim->mu);
  return rc;
}

static int sim_copy(ga_device *d, void *host, void *dev, size_t size, int to_host) {
  sim_device *sim = sim_of(d);
  pthread_mutex_lock(&sim->mu);
  int rc = fault_hit(sim, GA_CALL_COPY, to_host ? "copy (device to host)" : "copy (host to device)");
  if (!rc) rc = capture_breaks(sim, "copy");
  uintptr_t v = (uintptr_t)dev, at = v;
  size_t k = 0;
  sim_range *m = rc ? NULL : maps_walk(sim, v, size, 0, &k, &at);
  if (!rc && (!m || at - v < size)) {
    ga_dev_set_error(d, "copy: CUDA_ERROR_INVALID_VALUE (%p+%zu is not mapped)", dev, size);
    rc = GA_DEV_EINVAL;
  }
  if (!rc) {
    /* From or into pinned memory, at the pinned rate (the cost tables). */
    ga_rnode *pin = ga_rtree_find(&sim->pinned, (uintptr_t)host);
    uint64_t ns = (uint64_t)granules_of(size) * sim->cost_unit[GA_CALL_COPY];
    if (pin && (uintptr_t)host + size <= pin->va + pin->size)
      ns = (uint64_t)((double)ns * (to_host ? GA_SIM_PINNED_TO_HOST : GA_SIM_PINNED_TO_DEVICE));
    sim->now_ns += ns;
    sim->driver_ns += ns;
  }
  pthread_mutex_unlock(&sim->mu);
  if (!rc) memcpy(to_host ? host : dev, to_host ? dev : host, size);
  return rc;
}

/* Pinned host memory: plain host memory the sim remembers, so that copies
 * from it are charged at the pinned rate. */
static int sim_host_alloc(ga_device *d, size_t size, void **ptr) {
  int rc = 0;
  sim_device *sim = sim_enter(d, GA_CALL_HOST_ALLOC, "host_alloc", SIM_CAPTURE_SAFE, &rc);
  void *p = NULL;
  if (!rc && size == 0) {
    ga_dev_set_error(d, "host_alloc: CUDA_ERROR_INVALID_VALUE (size 0)");
    rc = GA_DEV_EINVAL;
  }
  if (!rc && !(p = ga_host_malloc(size))) {
    ga_dev_set_error(d, "host_alloc: host: out of memory pinning %zu bytes", size);
    sim->host_failures++;
    rc = GA_DEV_ENOMEM;
  }
  if (!rc && !range_add(&sim->pinned, (sim_range){.node = {.va = (uintptr_t)p, .size = size}})) {
    free(p);
    ga_dev_set_error(d, "host_alloc: host: out of memory");
    sim->host_failures++;
    rc = GA_DEV_ENOMEM;
  }
  if (!rc) {
    spend_units(sim, GA_CALL_HOST_ALLOC, granules_of(size));
    *ptr = p;
  }
  pthread_mutex_unlock(&sim->mu);
  return rc;
}

static int sim_host_free(ga_device *d, void *ptr) {
  int rc = 0;
  sim_device *sim = sim_enter(d, GA_CALL_HOST_FREE, "host_free", SIM_CAPTURE_SAFE, &rc);
  sim_range *r = rc ? NULL : range_find(&sim->pinned, (uintptr_t)ptr);
  if (!rc && (!r || r->node.va != (uintptr_t)ptr)) {
    ga_dev_set_error(d, "host_free: CUDA_ERROR_INVALID_VALUE (%p is not pinned host memory of host_alloc)",
                     ptr);
    rc = GA_DEV_EINVAL;
  }
  if (!rc) {
    spend_units(sim, GA_CALL_HOST_FREE, granules_of(r->node.size));
    range_delete(&sim->pinned, r);
    free(ptr);
  }
  pthread_mutex_unlock(&sim->mu);
  return rc;
}

/* ---- Streams and events ---- */

static sim_stream *stream_get(sim_device *sim, ga_stream_t st, int create) {
  for (size_t i = 0; i < sim->nstreams; i++)
    if (sim->streams[i].s == st) return &sim->streams[i];
  if (!create) return NULL;
  sim_stream *v = ga_host_realloc(sim->streams, (sim->nstreams + 1) * sizeof *v);
  if (!v) return NULL;
  sim->streams = v;
  v[sim->nstreams] = (sim_stream){.s = st};
  return &v[sim->nstreams++];
}

static sim_event *event_get(ga_event e) {
  sim_event *ev = e;
  return (ev && ev->magic == SIM_MAGIC) ? ev : NULL;
}
/* The event behind `e`; when it is not one (and *rc is still 0), NULL and
 * the driver's invalid-handle error for `call`. */
static sim_event *event_check(sim_device *sim, ga_event e, const char *call, int *rc) {
  sim_event *ev = event_get(e);
  if (!*rc && !ev) {
    ga_dev_set_error(&sim->base, "%s: CUDA_ERROR_INVALID_HANDLE", call);
    *rc = GA_DEV_EINVAL;
  }
  return ev;
}

static void stream_complete(sim_device *sim, ga_stream_t st, int count_wait) {
  int waited = 0;
  sim_stream *ss = stream_get(sim, st, 0);
  if (ss) ss->completed = ss->seq;
  for (size_t i = 0; i < sim->nevents; i++)
    if (sim->events[i]->pending && sim->events[i]->stream == st) sim->events[i]->pending = 0, waited = 1;
  if (waited && count_wait) sim->waits++;
}

static int sim_event_create(ga_device *d, ga_event *e) {
  int rc;
  sim_device *sim = sim_enter(d, GA_CALL_EVENT_CREATE, "event_create", SIM_CAPTURE_SAFE, &rc);
  if (rc) goto out;
  if (sim->nevents == sim->cap_events) {
    size_t cap = sim->cap_events ? sim->cap_events * 2 : 16;
    sim_event **v = ga_host_realloc(sim->events, cap * sizeof *v);
    if (!v) goto oom;
    sim->events = v;
    sim->cap_events = cap;
  }
  sim_event *ev = ga_host_calloc(1, sizeof *ev);
  if (!ev) goto oom;
  ev->magic = SIM_MAGIC;
  sim->events[sim->nevents++] = ev;
  *e = ev;
  goto out;
oom:
  ga_dev_set_error(d, "event_create: out of host memory");
  rc = GA_DEV_ENOMEM;
out:
  pthread_mutex_unlock(&sim->mu);
  return rc;
}

static int sim_event_record(ga_device *d, ga_event e, ga_stream_t st) {
  int rc;
  sim_device *sim = sim_enter(d, GA_CALL_EVENT_RECORD, "event_record", SIM_CAPTURE_SAFE, &rc);
  sim_event *ev = event_check(sim, e, "event_record", &rc);
  if (!rc) {
    sim_stream *ss = stream_get(sim, st, 0);
    ev->stream = st;
    ev->pending = ss && ss->held;
    ev->done_ns = ss ? ss->done_ns : 0;
    ev->seq = ss ? ++ss->seq : 0;
  }
  pthread_mutex_unlock(&sim->mu);
  return rc;
}

static int sim_event_query(ga_device *d, ga_event e) {
  int rc;
  sim_device *sim = sim_enter(d, GA_CALL_EVENT_QUERY, "event_query", SIM_CAPTURE_UNSAFE, &rc);
  sim_event *ev = event_check(sim, e, "event_query", &rc);
  if (!rc && (ev->pending || ev->done_ns > sim->now_ns)) rc = GA_DEV_ENOTREADY;
  pthread_mutex_unlock(&sim->mu);
  return rc;
}

static int sim_event_synchronize(ga_device *d, ga_event e) {
  int rc;
  sim_device *sim = sim_enter(d, GA_CALL_EVENT_SYNCHRONIZE, "event_synchronize", SIM_CAPTURE_UNSAFE, &rc);
  sim_event *ev = event_check(sim, e, "event_synchronize", &rc);
  /* Waiting on an event means the stream's work up to it finishes. */
  if (!rc && ev->pending) ev->pending = 0, sim->waits++;
  sim_stream *ss = rc ? NULL : stream_get(sim, ev->stream, 0);
  if (ss && ss->completed < ev->seq) ss->completed = ev->seq;
  if (!rc) wait_until(sim, ev->done_ns);
  pthread_mutex_unlock(&sim->mu);
  return rc;
}

static int sim_event_destroy(ga_device *d, ga_event e) {
  int rc;
  sim_device *sim = sim_enter(d, GA_CALL_EVENT_DESTROY, "event_destroy", SIM_CAPTURE_SAFE, &rc);
  sim_event *ev = event_check(sim, e, "event_destroy", &rc);
  if (!rc) {
    for (size_t i = 0; i < sim->nevents; i++)
      if (sim->events[i] == ev) {
        sim->events[i] = sim->events[--sim->nevents];
        break;
      }
    ev->magic = 0;
    free(ev);
  }
  pthread_mutex_unlock(&sim->mu);
  return rc;
}

static int sim_stream_synchronize(ga_device *d, ga_stream_t st) {
  int rc;
  sim_device *sim = sim_enter(d, GA_CALL_STREAM_SYNCHRONIZE, "stream_synchronize", SIM_CAPTURE_SAFE, &rc);
  sim_stream *ss = stream_get(sim, st, 0);
  if (!rc && ss && ss->capturing)
    rc = capture_refused(sim, "stream_synchronize", "the stream is capturing");
  else if (!rc)
    rc = capture_breaks(sim, "stream_synchronize");
  if (!rc && ss && ss->held) { /* a held stream has work running: this waits for it */
    stream_complete(sim, st, 0);
    sim->waits++;
  } else if (!rc) {
    stream_complete(sim, st, 1);
  }
  if (!rc && ss) wait_until(sim, ss->done_ns);
  pthread_mutex_unlock(&sim->mu);
  return rc;
}

static int sim_synchronize(ga_device *d) {
  int rc;
  sim_device *sim = sim_enter(d, GA_CALL_SYNCHRONIZE, "synchronize", SIM_CAPTURE_SAFE, &rc);
  if (!rc && sim->capturing) rc = capture_refused(sim, "synchronize", "a stream is capturing");
  int waited = 0;
  for (size_t i = 0; !rc && i < sim->nevents; i++)
    if (sim->events[i]->pending) sim->events[i]->pending = 0, waited = 1;
  for (size_t i = 0; !rc && i < sim->nstreams; i++) sim->streams[i].completed = sim->streams[i].seq;
  sim->waits += (uint64_t)waited;
  uint64_t done = 0;
  for (size_t i = 0; !rc && i < sim->nstreams; i++)
    if (sim->streams[i].done_ns > done) done = sim->streams[i].done_ns;
  if (!rc) wait_until(sim, done);
  pthread_mutex_unlock(&sim->mu);
  return rc;
}

static int sim_stream_capturing(ga_device *d, ga_stream_t st, int *capturing) {
  int rc;
  sim_device *sim = sim_enter(d, GA_CALL_CAPTURE_QUERY, "stream_capturing", SIM_CAPTURE_SAFE, &rc);
  sim_stream *ss = stream_get(sim, st, 0);
  if (!rc) *capturing = ss ? ss->capturing : 0;
  pthread_mutex_unlock(&sim->mu);
  return rc;
}

static int sim_capture_mode(ga_device *d, int relaxed, int *previous) {
  int rc;
  sim_device *sim = sim_enter(d, GA_CALL_CAPTURE_MODE, "capture_mode", SIM_CAPTURE_SAFE, &rc);
  pthread_mutex_unlock(&sim->mu);
  if (rc) return rc;
  if (previous) *previous = thread_relaxed;
  thread_relaxed = relaxed;
  return 0;
}

static int sim_device_count(ga_device *d, int *count) {
  *count = sim_of(d)->ndevices; /* fixed at open */
  return 0;
}

static void sim_destroy(ga_device *d) {
  sim_device *sim = sim_of(d);
  if (!sim) return;
  while (sim->pinned.first) { /* not given back: the host memory goes with the device */
    sim_range *r = range_of(sim->pinned.first);
    free((void *)r->node.va);
    range_delete(&sim->pinned, r);
  }
  ga_rtree *trees[3] = {&sim->maps, &sim->mallocs, &sim->resv};
  for (int t = 0; t < 3; t++)
    while (trees[t]->first) {
      sim_range *r = range_of(trees[t]->first);
      if (t == 2 && !in_mirror(sim, r->node.va)) munmap((void *)r->node.va, r->node.size);
      range_delete(trees[t], r);
    }
  if (sim->mirror) munmap((void *)sim->mirror, sim->ngran * SIM_GRAN);
  for (size_t i = 0; i < sim->nhandles; i++) {
    free(sim->handles[i].gran);
    if (sim->handles[i].ngran && sim->handles[i].ext) close(sim->handles[i].ext_fd);
  }
  for (size_t i = 0; i < sim->nevents; i++) free(sim->events[i]);
  free(sim->handles);
  free(sim->events);
  free(sim->streams);
  free(sim->bitmap);
  close(sim->fd);
  pthread_mutex_destroy(&sim->mu);
  free(sim);
}

/* ---- Sharing memory with another process ----
 * share() hands out the device's memfd (a new descriptor of it per piece)
 * at the granules behind the range; import() makes a handle of another
 * device's memfd, mapped from the file at the offset map() is given. */

static int sim_share(ga_device *d, ga_mem_handle h, size_t offset, size_t size, ga_dev_piece *out, size_t cap,
                     size_t *n) {
  sim_device *sim = sim_of(d);
  pthread_mutex_lock(&sim->mu);
  sim_handle *x = handle_get(sim, h);
  int rc = 0;
  size_t k = 0, first = offset / SIM_GRAN, ng = size / SIM_GRAN;
  if (!x || x->ext || !d->shareable || size == 0 || offset % SIM_GRAN || size % SIM_GRAN ||
      offset > x->ngran * SIM_GRAN || size > x->ngran * SIM_GRAN - offset) {
    ga_dev_set_error(d, "share: CUDA_ERROR_INVALID_VALUE (handle %llu, %zu+%zu: %s)", (unsigned long long)h,
                     offset, size,
                     !x              ? "not a live handle"
                     : x->ext        ? "an imported handle"
                     : !d->shareable ? "created without a shareable handle type"
                                     : "not granule-aligned inside the handle");
    rc = GA_DEV_EINVAL;
  }
  for (size_t i = 0; !rc && i < ng && x->gran[first + i] == UNBOUND; i++) {
    ga_dev_set_error(d, "share: CUDA_ERROR_INVALID_VALUE (granule %zu of handle %llu was never mapped)",
                     first + i, (unsigned long long)h);
    rc = GA_DEV_EINVAL;
  }
  for (size_t i = 0; !rc && i < ng;) {
    size_t run = 1;
    while (i + run < ng && x->gran[first + i + run] == x->gran[first + i] + run) run++;
    int fd = k < cap ? fcntl(sim->fd, F_DUPFD_CLOEXEC, 0) : -1;
    if (fd < 0) {
      if (k < cap)
        ga_dev_set_error(d, "share: host: cannot open the memory (%s)", strerror(errno));
      else
        ga_dev_set_error(d, "share: more than %zu pieces", cap);
      rc = k < cap ? GA_DEV_ENOMEM : GA_DEV_EINVAL;
      break;
    }
    out[k++] = (ga_dev_piece){fd, (uint64_t)x->gran[first + i] * SIM_GRAN, run * SIM_GRAN};
    i += run;
  }
  if (rc)
    while (k) close(out[--k].fd);
  *n = k;
  pthread_mutex_unlock(&sim->mu);
  return rc;
}

static int sim_import(ga_device *d, int fd, ga_mem_handle *h) {
  sim_device *sim = sim_of(d);
  struct stat st;
  off_t end = fstat(fd, &st) == 0 ? st.st_size : 0;
  if (end <= 0 || end % (off_t)SIM_GRAN) {
    ga_dev_set_error(d, "import: CUDA_ERROR_INVALID_VALUE (fd %d names no device memory)", fd);
    return GA_DEV_EINVAL;
  }
  int own = fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (own < 0) {
    ga_dev_set_error(d, "import: host: cannot open fd %d (%s)", fd, strerror(errno));
    return GA_DEV_ENOMEM;
  }
  pthread_mutex_lock(&sim->mu);
  int rc = 0;
  if (!sim->free_slots && sim->nhandles == sim->cap_handles) {
    size_t cap = sim->cap_handles ? sim->cap_handles * 2 : 64;
    sim_handle *v = ga_host_realloc(sim->handles, cap * sizeof *v);
    if (!v)
      rc = host_no_memory(sim, "import");
    else
      sim->handles = v, sim->cap_handles = cap;
  }
  if (!rc) {
    size_t slot;
    if (sim->free_slots) {
      slot = sim->free_slots - 1;
      sim->free_slots = sim->handles[slot].next_free;
    } else {
      slot = sim->nhandles++;
    }
    sim->handles[slot] = (sim_handle){.ngran = (size_t)end / SIM_GRAN, .ext = 1, .ext_fd = own};
    sim->live_handles++;
    *h = slot + 1;
  } else
    close(own);
  pthread_mutex_unlock(&sim->mu);
  return rc;
}

/* Fabric handles: 64 bytes that name the exporter's memfd by its process,
 * its fd number there and the file's identity, so that another process of
 * the machine opens it (/proc/PID/fd/N) with no fd passed, as a node of an
 * IMEX domain imports with no fd. Each piece is a run of the memfd, at its
 * offset in the file. */
#define SIM_FABRIC_MAGIC 0x47414642u /* "GAFB" */
typedef struct sim_fabric {
  uint32_t magic;
  int32_t pid, fd;
  uint32_t zero;
  uint64_t dev, ino; /* the memfd's st_dev and st_ino: a stale or foreign name is refused */
  unsigned char pad[GA_DEV_FABRIC_BYTES - 32];
} sim_fabric;
_Static_assert(sizeof(sim_fabric) == GA_DEV_FABRIC_BYTES, "a fabric handle is 64 bytes");

static int sim_share_fabric(ga_device *d, ga_mem_handle h, size_t offset, size_t size, ga_dev_fabric *out,
                            size_t cap, size_t *n) {
  sim_device *sim = sim_of(d);
  *n = 0;
  if (d->shareable != GA_DEV_SHARE_FABRIC) {
    ga_dev_set_error(d,
                     "share: CUDA_ERROR_INVALID_VALUE (handle %llu was created without a fabric handle type)",
                     (unsigned long long)h);
    return GA_DEV_EINVAL;
  }
  struct stat st;
  if (fstat(sim->fd, &st) != 0) {
    ga_dev_set_error(d, "share: host: cannot stat the memory (%s)", strerror(errno));
    return GA_DEV_ENOMEM;
  }
  ga_dev_piece tmp[64];
  size_t k = 0;
  int rc = sim_share(d, h, offset, size, tmp, cap < 64 ? cap : 64, &k);
  if (rc) return rc;
  sim_fabric f = {.magic = SIM_FABRIC_MAGIC,
                  .pid = (int32_t)getpid(),
                  .fd = sim->fd,
                  .dev = (uint64_t)st.st_dev,
                  .ino = (uint64_t)st.st_ino};
  for (size_t i = 0; i < k; i++) {
    close(tmp[i].fd);
    memcpy(out[i].handle, &f, sizeof f);
    out[i].offset = tmp[i].offset;
    out[i].size = tmp[i].size;
  }
  *n = k;
  return 0;
}

static int sim_import_fabric(ga_device *d, const unsigned char *handle, ga_mem_handle *h) {
  sim_fabric f;
  memcpy(&f, handle, sizeof f);
  if (f.magic != SIM_FABRIC_MAGIC || f.pid <= 0 || f.fd < 0 || f.zero) {
    ga_dev_set_error(d, "import: CUDA_ERROR_INVALID_VALUE (not a fabric handle of the simulated device)");
    return GA_DEV_EINVAL;
  }
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/fd/%d", (int)f.pid, (int)f.fd);
  int fd = open(path, O_RDWR | O_CLOEXEC);
  struct stat st;
  if (fd < 0 || fstat(fd, &st) != 0 || (uint64_t)st.st_dev != f.dev || (uint64_t)st.st_ino != f.ino) {
    ga_dev_set_error(
        d,
        "import: CUDA_ERROR_INVALID_VALUE (the fabric handle names memory that is gone: process %d's "
        "fd %d %s)",
        (int)f.pid, (int)f.fd, fd < 0 ? strerror(errno) : "is another file now");
    if (fd >= 0) close(fd);
    return GA_DEV_EINVAL;
  }
  int rc = sim_import(d, fd, h);
  close(fd);
  return rc;
}

/* The CPU's virtual clock; locked, as test controls may move it from another thread. */
static uint64_t sim_clock_ns(ga_device *d) {
  sim_device *sim = sim_of(d);
  pthread_mutex_lock(&sim->mu);
  uint64_t t = sim->now_ns;
  pthread_mutex_unlock(&sim->mu);
  return t;
}

static int sim_usage(ga_device *d, ga_device_usage *u) {
  ga_sim_usage x;
  int rc = ga_sim_usage_get(d, &x);
  if (rc) return rc;
  *u = (ga_device_usage){.live_mallocs = x.live_mallocs,
                         .live_handles = x.live_handles,
                         .live_reservations = x.live_reservations,
                         .live_mappings = x.live_mappings,
                         .live_events = x.live_events};
  return 0;
}

static const ga_device_ops sim_ops = {
    .name = "sim",
    .granularity = sim_granularity,
    .mem_info = sim_mem_info,
    .malloc = sim_malloc,
    .free = sim_free,
    .reserve = sim_reserve,
    .unreserve = sim_unreserve,
    .create = sim_create,
    .release = sim_release,
    .map = sim_map,
    .unmap = sim_unmap,
    .set_access = sim_set_access,
    .copy = sim_copy,
    .host_alloc = sim_host_alloc,
    .host_free = sim_host_free,
    .event_create = sim_event_create,
    .event_record = sim_event_record,
    .event_query = sim_event_query,
    .event_synchronize = sim_event_synchronize,
    .usage = sim_usage,
    .share = sim_share,
    .import = sim_import,
    .share_fabric = sim_share_fabric,
    .import_fabric = sim_import_fabric,
    .clock_ns = sim_clock_ns,
    .event_destroy = sim_event_destroy,
    .stream_synchronize = sim_stream_synchronize,
    .synchronize = sim_synchronize,
    .stream_capturing = sim_stream_capturing,
    .capture_mode = sim_capture_mode,
    .device_count = sim_device_count,
    .destroy = sim_destroy,
};

/* ---- Opening ---- */

int ga_sim_open(int ordinal, size_t capacity, ga_device **out, char *err, size_t errlen) {
  return ga_sim_open_of(ordinal, ordinal + 1, capacity, out, err, errlen);
}

int ga_sim_open_of(int ordinal, int ndevices, size_t capacity, ga_device **out, char *err, size_t errlen) {
  if (ordinal < 0 || ordinal >= ndevices || ndevices > 64) {
    snprintf(err, errlen, "sim: device %d does not exist (the simulated machine has %d; set sim_devices)",
             ordinal, ndevices);
    return GA_DEV_ENODEV;
  }
  size_t ngran = capacity / SIM_GRAN;
  if (ngran == 0 || ngran > UINT32_MAX) {
    snprintf(err, errlen, "sim: capacity %zu bytes must be at least one 2 MiB granule", capacity);
    return GA_DEV_EINVAL;
  }
  sim_device *sim = ga_host_calloc(1, sizeof *sim);
  if (!sim) goto oom;
  sim->bitmap = ga_host_calloc((ngran + 63) / 64, sizeof *sim->bitmap);
  if (!sim->bitmap) goto oom;
  /* Granules past the end of the last word are marked used so scans stop. */
  for (size_t g = ngran; g < ((ngran + 63) / 64) * 64; g++) sim->bitmap[g / 64] |= (uint64_t)1 << (g % 64);
  sim->fd = memfd_create("gardenalloc-sim", MFD_CLOEXEC);
  if (sim->fd < 0 || ftruncate(sim->fd, (off_t)(ngran * SIM_GRAN)) != 0) {
    snprintf(err, errlen, "sim: cannot create %zu bytes of simulated device memory: %s", ngran * SIM_GRAN,
             strerror(errno));
    if (sim->fd >= 0) close(sim->fd);
    free(sim->bitmap);
    free(sim);
    return GA_DEV_EDRIVER;
  }
  pthread_mutex_init(&sim->mu, NULL);
  sim->ngran = ngran;
  sim->ndevices = ndevices;
  for (int k = 0; k < GA_CALL_COUNT; k++) {
    sim->cost_call[k] = (uint64_t)(cost_tables[0].us[k][0] * 1000.0);
    sim->cost_unit[k] = (uint64_t)(cost_tables[0].us[k][1] * 1000.0);
  }
  sim->cost_table = cost_tables[0].name;
  sim->base.ops = &sim_ops;
  sim->base.ordinal = ordinal;
  *out = &sim->base;
  return 0;
oom:
  if (sim) free(sim->bitmap);
  free(sim);
  snprintf(err, errlen, "sim: out of host memory");
  return GA_DEV_ENOMEM;
}

/* ---- Test controls ---- */

int ga_sim_is(const ga_device *d) { return sim_of(d) != NULL; }

int ga_sim_usage_get(ga_device *d, ga_sim_usage *u) {
  sim_device *sim = sim_of(d);
  if (!sim) return GA_DEV_EINVAL;
  pthread_mutex_lock(&sim->mu);
  size_t pending = 0;
  for (size_t i = 0; i < sim->nevents; i++) pending += (size_t)sim->events[i]->pending;
  *u = (ga_sim_usage){
      .capacity = sim->ngran * SIM_GRAN,
      .used = sim->used * SIM_GRAN,
      .live_mallocs = sim->mallocs.n,
      .live_handles = sim->live_handles - sim->mallocs.n,
      .live_reservations = sim->resv.n - sim->mallocs.n,
      .live_mappings = sim->maps.n - sim->mallocs.n,
      .live_events = sim->nevents,
      .live_pinned = sim->pinned.n,
      .pending_events = pending,
      .waits = sim->waits,
      .faults_fired = sim->faults_fired,
      .captures_broken = sim->captures_broken,
      .now_ns = sim->now_ns,
      .driver_ns = sim->driver_ns,
      .stalls = sim->base.stalls,
      .stall_ns = sim->base.stall_ns,
      .lag_ns = sim->lag_ns,
      .host_failures = sim->host_failures,
  };
  pthread_mutex_unlock(&sim->mu);
  return 0;
}

int ga_sim_hold_stream(ga_device *d, ga_stream_t stream, int hold) {
  sim_device *sim = sim_of(d);
  if (!sim) return GA_DEV_EINVAL;
  pthread_mutex_lock(&sim->mu);
  sim_stream *ss = stream_get(sim, stream, 1);
  int rc = ss ? 0 : GA_DEV_EDRIVER;
  if (ss) {
    ss->held = hold;
    if (!hold) stream_complete(sim, stream, 0);
  }
  pthread_mutex_unlock(&sim->mu);
  return rc;
}

int ga_sim_inject(ga_device *d, ga_device_call_t kind, unsigned nth, int err, int repeat) {
  sim_device *sim = sim_of(d);
  if (!sim || (unsigned)kind >= GA_CALL_COUNT || nth == 0) return GA_DEV_EINVAL;
  pthread_mutex_lock(&sim->mu);
  sim->faults[kind] = (sim_fault){.countdown = nth, .err = err, .repeat = repeat, .armed = 1};
  pthread_mutex_unlock(&sim->mu);
  return 0;
}

int ga_sim_inject_host(ga_device *d, unsigned nth, int err, int repeat) {
  sim_device *sim = sim_of(d);
  if (!sim || nth == 0 || err <= 0) return GA_DEV_EINVAL;
  pthread_mutex_lock(&sim->mu);
  sim->host_fault = (sim_fault){.countdown = nth, .err = err, .repeat = repeat, .armed = 1};
  pthread_mutex_unlock(&sim->mu);
  return 0;
}

int ga_sim_clear_faults(ga_device *d) {
  sim_device *sim = sim_of(d);
  if (!sim) return GA_DEV_EINVAL;
  pthread_mutex_lock(&sim->mu);
  memset(sim->faults, 0, sizeof sim->faults);
  sim->sticky = 0;
  sim->host_fault = (sim_fault){0};
  pthread_mutex_unlock(&sim->mu);
  return 0;
}

int ga_sim_access(ga_device *d, void *va, uint64_t *mask) {
  sim_device *sim = sim_of(d);
  if (!sim) return GA_DEV_EINVAL;
  pthread_mutex_lock(&sim->mu);
  sim_range *m = range_find(&sim->maps, (uintptr_t)va);
  if (m) *mask = m->access;
  pthread_mutex_unlock(&sim->mu);
  return m ? 0 : GA_DEV_EINVAL;
}

int ga_sim_set_capturing(ga_device *d, ga_stream_t stream, int capturing) {
  sim_device *sim = sim_of(d);
  if (!sim) return GA_DEV_EINVAL;
  pthread_mutex_lock(&sim->mu);
  sim_stream *ss = stream_get(sim, stream, 1);
  if (ss && ss->capturing != (capturing != 0)) sim->capturing += capturing ? 1 : -1;
  if (ss) ss->capturing = capturing != 0;
  pthread_mutex_unlock(&sim->mu);
  return ss ? 0 : GA_DEV_EDRIVER;
}

int ga_sim_set_fabric(ga_device *d, int refused) {
  sim_device *sim = sim_of(d);
  if (!sim || refused < 0 || refused > GA_SIM_FABRIC_NOT_SUPPORTED) return GA_DEV_EINVAL;
  pthread_mutex_lock(&sim->mu);
  sim->fabric_refused = refused;
  pthread_mutex_unlock(&sim->mu);
  return 0;
}

int ga_sim_scatter_addresses(ga_device *d, uint64_t seed) {
  sim_device *sim = sim_of(d);
  if (!sim) return GA_DEV_EINVAL;
  pthread_mutex_lock(&sim->mu);
  sim->scatter = seed ? seed * 0x100000001b3ULL ^ 0x5ca77e4ULL : 0;
  if (seed && !sim->scatter) sim->scatter = 1; /* on stays on */
  pthread_mutex_unlock(&sim->mu);
  return 0;
}

/* ---- Time controls ---- */

int ga_sim_set_lag(ga_device *d, uint64_t lag_ns) {
  sim_device *sim = sim_of(d);
  if (!sim) return GA_DEV_EINVAL;
  pthread_mutex_lock(&sim->mu);
  sim->lag_ns = lag_ns;
  pthread_mutex_unlock(&sim->mu);
  return 0;
}

int ga_sim_advance(ga_device *d, uint64_t ns) {
  sim_device *sim = sim_of(d);
  if (!sim) return GA_DEV_EINVAL;
  pthread_mutex_lock(&sim->mu);
  sim->now_ns += ns;
  pthread_mutex_unlock(&sim->mu);
  return 0;
}

int ga_sim_stream_mark(ga_device *d, ga_stream_t stream, ga_sim_mark *m) {
  sim_device *sim = sim_of(d);
  if (!sim) return GA_DEV_EINVAL;
  pthread_mutex_lock(&sim->mu);
  sim_stream *ss = stream_get(sim, stream, 1);
  if (ss) *m = (ga_sim_mark){.stream = stream, .seq = ++ss->seq, .done_ns = ss->done_ns, .held = ss->held};
  pthread_mutex_unlock(&sim->mu);
  return ss ? 0 : GA_DEV_EDRIVER;
}

int ga_sim_stream_passed(ga_device *d, const ga_sim_mark *m) {
  sim_device *sim = sim_of(d);
  if (!sim) return GA_DEV_EINVAL;
  pthread_mutex_lock(&sim->mu);
  sim_stream *ss = stream_get(sim, m->stream, 0);
  int passed = (!m->held || (ss && ss->completed >= m->seq)) && sim->now_ns >= m->done_ns;
  pthread_mutex_unlock(&sim->mu);
  return passed;
}

int ga_sim_enqueue(ga_device *d, ga_stream_t stream, uint64_t work_ns) {
  sim_device *sim = sim_of(d);
  if (!sim) return GA_DEV_EINVAL;
  pthread_mutex_lock(&sim->mu);
  sim_stream *ss = stream_get(sim, stream, 1);
  if (ss) {
    uint64_t start = sim->now_ns + sim->lag_ns;
    ss->done_ns = (ss->done_ns > start ? ss->done_ns : start) + work_ns;
  }
  pthread_mutex_unlock(&sim->mu);
  return ss ? 0 : GA_DEV_EDRIVER;
}

int ga_sim_set_cost(ga_device *d, ga_device_call_t kind, double call_us, double unit_us) {
  sim_device *sim = sim_of(d);
  if (!sim || (unsigned)kind >= GA_CALL_COUNT || !(call_us >= 0) || !(unit_us >= 0)) return GA_DEV_EINVAL;
  pthread_mutex_lock(&sim->mu);
  sim->cost_call[kind] = (uint64_t)(call_us * 1000.0);
  sim->cost_unit[kind] = (uint64_t)(unit_us * 1000.0);
  pthread_mutex_unlock(&sim->mu);
  return 0;
}

int ga_sim_get_cost(ga_device *d, ga_device_call_t kind, double *call_us, double *unit_us) {
  sim_device *sim = sim_of(d);
  if (!sim || (unsigned)kind >= GA_CALL_COUNT) return GA_DEV_EINVAL;
  pthread_mutex_lock(&sim->mu);
  *call_us = (double)sim->cost_call[kind] / 1000.0;
  *unit_us = (double)sim->cost_unit[kind] / 1000.0;
  pthread_mutex_unlock(&sim->mu);
  return 0;
}

int ga_sim_set_cost_table(ga_device *d, const char *name) {
  sim_device *sim = sim_of(d);
  if (!sim || !name) return GA_DEV_EINVAL;
  for (size_t t = 0; t < sizeof cost_tables / sizeof cost_tables[0]; t++) {
    if (strcmp(cost_tables[t].name, name)) continue;
    pthread_mutex_lock(&sim->mu);
    for (int k = 0; k < GA_CALL_COUNT; k++) {
      sim->cost_call[k] = (uint64_t)(cost_tables[t].us[k][0] * 1000.0);
      sim->cost_unit[k] = (uint64_t)(cost_tables[t].us[k][1] * 1000.0);
    }
    sim->cost_table = cost_tables[t].name;
    pthread_mutex_unlock(&sim->mu);
    return 0;
  }
  return GA_DEV_EINVAL;
}

const char *ga_sim_cost_table(ga_device *d) {
  sim_device *sim = sim_of(d);
  return sim ? sim->cost_table : NULL;
}

const char *ga_sim_cost_unit(ga_device_call_t kind) {
  switch (kind) {
    case GA_CALL_MAP:
    case GA_CALL_UNMAP:
    case GA_CALL_SET_ACCESS: return "mapping";
    case GA_CALL_MALLOC:
    case GA_CALL_FREE:
    case GA_CALL_CREATE:
    case GA_CALL_RELEASE:
    case GA_CALL_COPY:
    case GA_CALL_HOST_ALLOC:
    case GA_CALL_HOST_FREE: return "granule";
    default: return NULL;
  }
}
