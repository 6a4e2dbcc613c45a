/* api.c — every public function of gardenalloc.h (the PyTorch entry points
 * in torch_abi.c are a client of these): check the arguments, take the
 * allocator's lock, dispatch to the policy, and turn internal codes into a
 * ga_status_t with the error text set. No policy lives here.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "device/sim.h"
#include "inspect.h"
#include "internal.h"
#include "policy/keep.h"

/* ---- fork() ----
 * A child made by fork() has one thread and a copy of the parent's memory:
 * an allocator's lock may have been copied held by a thread that does not
 * exist there, and its device memory is the parent's (on the simulated
 * device, a shared mapping the parent still uses). So an allocator
 * inherited from the parent is refused before its lock is touched; the
 * child handler tells inherited allocators from the child's own. */

atomic_uint ga_fork_generation;
static pthread_once_t fork_once = PTHREAD_ONCE_INIT;
static void fork_child(void) { atomic_fetch_add_explicit(&ga_fork_generation, 1, memory_order_relaxed); }
static void fork_register(void) { (void)pthread_atfork(NULL, NULL, fork_child); }

static ga_status_t inherited(ga_allocator_t *a, const char *fn) {
  ga_error_set(
      "%s: this allocator belongs to process %d, the parent of this one (fork): a forked child cannot "
      "use its parent's allocator or memory; create an allocator in the child",
      fn, a->pid);
  return GA_ERR_FORKED;
}

/* ---- The prologue every entry point shares ---- */

/* A NULL allocator is refused by name (GA_ERR_INVALID), one inherited through
 * fork() too (GA_ERR_FORKED); otherwise the lock is taken and GA_OK
 * returned. ENTER returns from the caller on refusal. */
static inline ga_status_t enter(ga_allocator_t *a, const char *fn) {
  if (!a) {
    ga_error_set("%s: the allocator is NULL", fn);
    return GA_ERR_INVALID;
  }
  if (ga_inherited(a)) return inherited(a, fn);
  ga_lock_acquire(&a->mu);
  return GA_OK;
}

/* As enter, and the free kept back for the next allocation (policy/block.c)
 * is completed: every entry point but ga_malloc and ga_free sees the blocks,
 * trees and statistics as if no free were kept back. */
static inline ga_status_t enter_all(ga_allocator_t *a, const char *fn) {
  ga_status_t st = enter(a, fn);
  if (!st) ga_block_keep_flush_locked(a);
  return st;
}
#define ENTER(fn)                               \
  do {                                          \
    ga_status_t enter_st_ = enter_all(a, (fn)); \
    if (enter_st_) return enter_st_;            \
  } while (0)
/* ga_malloc and ga_free (PyTorch's too): they look at the free kept back themselves. */
#define ENTER_HOT(fn)                       \
  do {                                      \
    ga_status_t enter_st_ = enter(a, (fn)); \
    if (enter_st_) return enter_st_;        \
  } while (0)

#ifdef GA_CHECK_EVERY_CALL
/* The expensive tier (CMake's GA_CHECK_EVERY_CALL, on in CI's sanitizer
 * build and the fuzzers): every invariant ga_check knows, after every Nth
 * call of an allocator that took the lock (N: the environment's
 * GA_CHECK_STRIDE, else CMake's GA_CHECK_STRIDE, 1 by default; a suite of
 * a million calls on 10^5 blocks sets a larger one). A broken one is
 * described on stderr and aborts. */
#ifndef GA_CHECK_STRIDE
#define GA_CHECK_STRIDE 1
#endif
static unsigned long check_stride(void) {
  static atomic_ulong stride;
  unsigned long n = atomic_load_explicit(&stride, memory_order_relaxed);
  if (n) return n;
  const char *e = getenv("GA_CHECK_STRIDE");
  char *end = NULL;
  n = e && *e ? strtoul(e, &end, 10) : 0;
  if (!n || (end && *end)) n = GA_CHECK_STRIDE;
  atomic_store_explicit(&stride, n, memory_order_relaxed);
  return n;
}
static void check_now(ga_allocator_t *a, const char *fn) {
  a->calls_unchecked = 0;
  int broken = ga_check_locked(a);
  if (broken) {
    fprintf(stderr, "gardenalloc: %s left %d broken invariant(s) (GA_CHECK_EVERY_CALL)\n", fn, broken);
    abort();
  }
}
static void check_every_call(ga_allocator_t *a, const char *fn) {
  if (++a->calls_unchecked >= check_stride()) check_now(a, fn);
}
#endif

/* Releases the lock taken by ENTER and returns st; `leave` names the caller. */
static inline ga_status_t leave_from(ga_allocator_t *a, ga_status_t st, const char *fn) {
#ifdef GA_CHECK_EVERY_CALL
  check_every_call(a, fn);
#else
  (void)fn;
#endif
  ga_lock_release(&a->mu);
  return st;
}
#define leave(a, st) leave_from((a), (st), __func__)

static ga_status_t invalid(const char *fn, const char *what) {
  ga_error_set("%s: %s", fn, what);
  return GA_ERR_INVALID;
}

/* An internal code (errors.h) as a status, with the device's error text. */
static ga_status_t failed(ga_allocator_t *a, const char *fn, ga_err rc) {
  return ga_fail(rc, fn, a->dev->error, NULL);
}

/* ---- Lifetime ---- */

static ga_status_t create(const char *conf, const ga_config *cfg, ga_device *dev, int owns,
                          ga_allocator_t **out) {
  /* Aligned as its lock's line is (sizeof is a multiple of the alignment). */
  ga_allocator_t *a = ga_host_aligned_alloc(_Alignof(ga_allocator_t), sizeof *a);
  size_t free_b = 0, total = 0;
  if (!a) return ga_fail(GA_DEV_ENOMEM, "ga_create", NULL, NULL);
  if (cfg->expandable_segments && dev->vmm_unsupported) {
    ga_error_set(
        "ga_create: expandable_segments:True needs the CUDA virtual memory management API, which device %d "
        "does not support (CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED is 0); use "
        "expandable_segments:False",
        dev->ordinal);
    free(a);
    return GA_ERR_UNSUPPORTED;
  }
  memset(a, 0, sizeof *a);
  (void)pthread_once(&fork_once, fork_register);
  a->fork_gen = atomic_load_explicit(&ga_fork_generation, memory_order_relaxed);
  a->pid = (int)getpid();
  if (ga_dev_mem_info(dev, &free_b, &total)) {
    ga_error_set("ga_create: cannot query device memory: %s", dev->error);
    free(a);
    return GA_ERR_DEVICE;
  }
  ga_lock_init(&a->mu);
  a->cfg = *cfg;
  a->dev = dev;
  a->owns_dev = owns;
  snprintf(a->conf_text, sizeof a->conf_text, "%s", conf ? conf : "");
  ga_lock_acquire(&a->mu);       /* the *_locked functions state that their caller holds it */
  int rc = ga_check_register(a); /* listed before it holds anything on the device */
  if (!rc) rc = ga_policy_init_locked(a, total);
  if (rc) ga_check_unregister(a);
  ga_lock_release(&a->mu);
  if (rc == GA_DEV_EINVAL) {
    ga_error_set(
        "ga_create: the configuration is too large for a device of %zu bytes: the expandable page size "
        "(%zu bytes) rounded up to the granularity, or 1.125 x the device's memory rounded up to it, does "
        "not "
        "fit in 64 bits",
        total, cfg->expandable_page_size ? cfg->expandable_page_size : cfg->large_segment_size);
    free(a);
    return GA_ERR_CONFIG;
  }
  if (rc) {
    free(a);
    return ga_fail(rc, "ga_create", dev->error, NULL);
  }
  *out = a;
  return GA_OK;
}

/* Parses conf; a bad string is GA_ERR_CONFIG with the parser's message
 * (after "fn: " when fn is given). */
static ga_status_t parse(const char *fn, const char *conf, ga_config *cfg) {
  char err[GA_CONFIG_ERR_LEN];
  if (ga_config_parse(conf, cfg, err, sizeof err)) {
    if (fn)
      ga_error_set("%s: %s", fn, err);
    else
      ga_error_set("%s", err);
    return GA_ERR_CONFIG;
  }
  return GA_OK;
}

ga_status_t ga_create(const char *conf, int device, ga_allocator_t **out) {
  if (!out) {
    ga_error_set("ga_create: out is NULL");
    return GA_ERR_INVALID;
  }
  *out = NULL;
  if (!conf) conf = getenv("GARDENALLOC_CONF");
  ga_config cfg;
  ga_status_t st = parse("ga_create", conf, &cfg);
  if (st) return st;
  ga_device *dev;
  char err[512];
  const char *notice = NULL;
  int rc =
      ga_device_open(cfg.backend, device, cfg.sim_capacity, cfg.sim_devices, &dev, err, sizeof err, &notice);
  if (rc == GA_DEV_ENODEV) {
    ga_error_set("ga_create: %s", err);
    return GA_ERR_NO_BACKEND;
  }
  if (rc) return ga_fail(rc, "ga_create", err, NULL);
  static atomic_int noticed;
  if (notice && atomic_exchange(&noticed, 1) == 0) fprintf(stderr, "%s\n", notice);
  if (ga_sim_is(dev)) {
    (void)ga_sim_set_cost_table(dev, cfg.sim_cost_table); /* a name the parser took */
    (void)ga_sim_scatter_addresses(dev, cfg.sim_scatter_addresses);
  }
  st = create(conf, &cfg, dev, 1, out);
  if (st) ga_dev_destroy(dev);
  return st;
}

ga_status_t ga_create_on_device(const char *conf, ga_device *dev, ga_allocator_t **out) {
  if (!out || !dev) {
    ga_error_set("ga_create_on_device: NULL argument");
    return GA_ERR_INVALID;
  }
  ga_config cfg;
  ga_status_t st = parse("ga_create_on_device", conf, &cfg);
  return st ? st : create(conf, &cfg, dev, 0, out);
}

ga_device *ga_allocator_device(ga_allocator_t *a) { return a ? a->dev : NULL; }

void ga_destroy(ga_allocator_t *a) {
  if (!a || ga_inherited(a)) return; /* the parent's memory is not the child's to give back */
  ga_lock_acquire(&a->mu);
  ga_block_keep_flush_locked(a);
#ifdef GA_CHECK_EVERY_CALL
  if (a->calls_unchecked) check_now(a, "the calls before ga_destroy"); /* with a stride, the last ones */
#endif
  ga_policy_teardown_locked(a);
  ga_history_free(&a->history);
  if (a->owns_dev) ga_dev_destroy(a->dev);
  ga_check_unregister(a); /* its lock still held: a check of another allocator skips the device */
  ga_lock_release(&a->mu);
  free(a);
}

/* ---- Allocation ---- */

ga_status_t ga_malloc(ga_allocator_t *a, size_t size, ga_stream_t stream, void **out) {
  if (out) *out = NULL; /* whatever refuses the call */
  ENTER_HOT("ga_malloc");
  if (!out) return leave(a, invalid("ga_malloc", "out is NULL"));
  if (size == 0) return leave(a, GA_OK);
  return leave(a, ga_alloc_locked(a, size, stream, out));
}

ga_status_t ga_malloc_flags(ga_allocator_t *a, size_t size, ga_stream_t stream, unsigned flags, void **out) {
  if (out) *out = NULL;
  ENTER("ga_malloc_flags");
  if (!out) return leave(a, invalid("ga_malloc_flags", "out is NULL"));
  if (flags & ~GA_ALLOC_CONTIGUOUS_HANDLE) {
    ga_error_set("ga_malloc_flags: unknown flags 0x%x (allowed: GA_ALLOC_CONTIGUOUS_HANDLE)",
                 flags & ~GA_ALLOC_CONTIGUOUS_HANDLE);
    return leave(a, GA_ERR_INVALID);
  }
  if (size == 0) return leave(a, GA_OK);
  ga_status_t st = ga_alloc_flags_locked(a, size, stream, flags, out);
  if (st) ga_error_rename("ga_malloc", "ga_malloc_flags");
  return leave(a, st);
}

ga_status_t ga_mem_ranges(ga_allocator_t *a, void *ptr, ga_mem_range_t *out, size_t cap, size_t *n) {
  if (n) *n = 0;
  ENTER("ga_mem_ranges");
  if (!n) return leave(a, invalid("ga_mem_ranges", "n is NULL"));
  if (cap && !out) return leave(a, invalid("ga_mem_ranges", "out is NULL with cap > 0"));
  return leave(a, ga_layout_ranges_locked(a, ptr, out, cap, n));
}

ga_status_t ga_ipc_export(ga_allocator_t *a, void *ptr, ga_ipc_desc_t *desc) {
  ENTER("ga_ipc_export");
  if (!desc) return leave(a, invalid("ga_ipc_export", "desc is NULL"));
  if (!ptr) return leave(a, invalid("ga_ipc_export", "ptr is NULL"));
  return leave(a, ga_ipc_export_locked(a, ptr, desc));
}

ga_status_t ga_ipc_import(ga_allocator_t *a, const ga_ipc_desc_t *desc, void **ptr) {
  if (ptr) *ptr = NULL;
  ENTER("ga_ipc_import");
  if (!desc || !ptr) return leave(a, invalid("ga_ipc_import", desc ? "ptr is NULL" : "desc is NULL"));
  return leave(a, ga_ipc_import_locked(a, desc, ptr));
}

ga_status_t ga_ipc_close(ga_allocator_t *a, void *ptr) {
  ENTER("ga_ipc_close");
  return leave(a, ga_ipc_close_locked(a, ptr));
}

ga_status_t ga_ipc_export_fabric(ga_allocator_t *a, void *ptr, ga_ipc_fabric_desc_t *desc) {
  ENTER("ga_ipc_export_fabric");
  if (!desc) return leave(a, invalid("ga_ipc_export_fabric", "desc is NULL"));
  if (!ptr) return leave(a, invalid("ga_ipc_export_fabric", "ptr is NULL"));
  return leave(a, ga_ipc_export_fabric_locked(a, ptr, desc));
}

ga_status_t ga_ipc_import_fabric(ga_allocator_t *a, const ga_ipc_fabric_desc_t *desc, void **ptr) {
  if (ptr) *ptr = NULL;
  ENTER("ga_ipc_import_fabric");
  if (!desc || !ptr) return leave(a, invalid("ga_ipc_import_fabric", desc ? "ptr is NULL" : "desc is NULL"));
  return leave(a, ga_ipc_import_fabric_locked(a, desc, ptr));
}

ga_status_t ga_ipc_unexport(ga_allocator_t *a, void *ptr) {
  ENTER("ga_ipc_unexport");
  if (!ptr) return leave(a, invalid("ga_ipc_unexport", "ptr is NULL"));
  return leave(a, ga_ipc_unexport_locked(a, ptr));
}

void ga_ipc_desc_close(ga_ipc_desc_t *desc) {
  if (!desc) return;
  for (uint32_t i = 0; i < desc->npieces && i < GA_IPC_MAX_PIECES; i++)
    if (desc->pieces[i].fd >= 0) close(desc->pieces[i].fd), desc->pieces[i].fd = -1;
  if (desc->lease_fd >= 0) close(desc->lease_fd);
  desc->lease_fd = -1;
}

/* The descriptor's bytes with its fds (pieces, then the lease) as SCM_RIGHTS. */
ga_status_t ga_ipc_send(int sock, const ga_ipc_desc_t *desc) {
  if (!desc || desc->npieces > GA_IPC_MAX_PIECES) {
    ga_error_set("ga_ipc_send: %s", desc ? "more pieces than GA_IPC_MAX_PIECES" : "desc is NULL");
    return GA_ERR_INVALID;
  }
  int fds[GA_IPC_MAX_PIECES + 1], n = 0;
  for (uint32_t i = 0; i < desc->npieces; i++) fds[n++] = desc->pieces[i].fd;
  fds[n++] = desc->lease_fd;
  union {
    char buf[CMSG_SPACE(sizeof fds)];
    struct cmsghdr align;
  } u;
  memset(&u, 0, sizeof u);
  struct iovec io = {(void *)desc, sizeof *desc};
  struct msghdr m = {
      .msg_iov = &io, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = CMSG_SPACE(n * sizeof(int))};
  struct cmsghdr *c = CMSG_FIRSTHDR(&m);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(n * sizeof(int));
  memcpy(CMSG_DATA(c), fds, n * sizeof(int));
  ssize_t k;
  do k = sendmsg(sock, &m, MSG_NOSIGNAL);
  while (k < 0 && errno == EINTR);
  if (k != (ssize_t)sizeof *desc) {
    ga_error_set("ga_ipc_send: sendmsg on fd %d: %s", sock, k < 0 ? strerror(errno) : "cut short");
    return GA_ERR_INVALID;
  }
  return GA_OK;
}

ga_status_t ga_ipc_recv(int sock, ga_ipc_desc_t *desc) {
  if (!desc) {
    ga_error_set("ga_ipc_recv: desc is NULL");
    return GA_ERR_INVALID;
  }
  union {
    char buf[CMSG_SPACE((GA_IPC_MAX_PIECES + 1) * sizeof(int))];
    struct cmsghdr align;
  } u;
  struct iovec io = {desc, sizeof *desc};
  struct msghdr m = {.msg_iov = &io, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof u.buf};
  ssize_t k;
  do k = recvmsg(sock, &m, MSG_CMSG_CLOEXEC | MSG_WAITALL);
  while (k < 0 && errno == EINTR);
  int fds[GA_IPC_MAX_PIECES + 1], n = 0;
  for (struct cmsghdr *c = k > 0 ? CMSG_FIRSTHDR(&m) : NULL; c; c = CMSG_NXTHDR(&m, c))
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
      int got = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
      for (int i = 0; i < got; i++) {
        int fd;
        memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
        if (n < GA_IPC_MAX_PIECES + 1)
          fds[n++] = fd;
        else
          close(fd);
      }
    }
  if (k != (ssize_t)sizeof *desc || (m.msg_flags & MSG_CTRUNC) || desc->npieces > GA_IPC_MAX_PIECES ||
      (int)desc->npieces + 1 != n) {
    for (int i = 0; i < n; i++) close(fds[i]);
    ga_error_set("ga_ipc_recv: recvmsg on fd %d: %s", sock,
                 k < 0 ? strerror(errno) : "not one descriptor with its file descriptors");
    return GA_ERR_INVALID;
  }
  for (uint32_t i = 0; i < desc->npieces; i++) desc->pieces[i].fd = fds[i];
  desc->lease_fd = fds[n - 1];
  return GA_OK;
}

ga_status_t ga_free(ga_allocator_t *a, void *ptr) {
  ENTER_HOT("ga_free");
  return leave(a, ptr ? ga_free_locked(a, ptr) : GA_OK);
}

ga_status_t ga_free_even_asleep(ga_allocator_t *a, void *ptr) {
  ENTER_HOT("ga_free");
  return leave(a, ptr ? ga_free_at_wake_locked(a, ptr) : GA_OK);
}

/* The live allocation at ptr, or NULL with the error text naming what ptr is. */
static ga_block *live(ga_allocator_t *a, const char *fn, void *ptr) {
  ga_block *b = ga_block_live_locked(a, (uintptr_t)ptr);
  if (!b) (void)ga_bad_pointer_locked(a, fn, ptr);
  return b;
}

ga_status_t ga_record_stream(ga_allocator_t *a, void *ptr, ga_stream_t stream) {
  ENTER("ga_record_stream");
  ga_block *b = live(a, "ga_record_stream", ptr);
  if (!b) return leave(a, GA_ERR_BAD_POINTER);
  ga_err rc = ga_stream_record_locked(a, b, stream);
  return leave(a, rc ? failed(a, "ga_record_stream", rc) : GA_OK);
}

ga_status_t ga_allocation_info(ga_allocator_t *a, void *ptr, size_t *requested, size_t *block,
                               ga_stream_t *stream) {
  ENTER("ga_allocation_info");
  ga_block *b = live(a, "ga_allocation_info", ptr);
  if (!b) return leave(a, GA_ERR_BAD_POINTER);
  if (requested) *requested = b->requested;
  if (block) *block = b->size;
  if (stream) *stream = b->stream;
  return leave(a, GA_OK);
}

ga_status_t ga_allocation_size(ga_allocator_t *a, void *ptr, size_t *requested, size_t *block) {
  return ga_allocation_info(a, ptr, requested, block, NULL);
}

ga_status_t ga_allocation_base(ga_allocator_t *a, void *ptr, void **base, size_t *size) {
  ENTER("ga_allocation_base");
  const ga_block *b = ga_alloc_containing_locked(a, (uintptr_t)ptr);
  if (!b) {
    ga_error_set("ga_allocation_base: %p is not inside a live allocation", ptr);
    return leave(a, GA_ERR_BAD_POINTER);
  }
  if (base) *base = (void *)b->ptr;
  if (size) *size = b->size;
  return leave(a, GA_OK);
}

/* ---- Cache and limits ---- */

ga_status_t ga_empty_cache(ga_allocator_t *a) {
  ENTER("ga_empty_cache");
  int rc = ga_reclaim_all_locked(a);
  return leave(a, rc ? failed(a, "ga_empty_cache", rc) : GA_OK);
}

ga_status_t ga_set_memory_fraction(ga_allocator_t *a, double fraction) {
  ENTER("ga_set_memory_fraction");
  if (!(fraction >= 0.0 && fraction <= 1.0)) {
    ga_error_set("ga_set_memory_fraction: invalid fraction %g; allowed: a number in [0, 1]", fraction);
    return leave(a, GA_ERR_INVALID);
  }
  ga_policy_set_fraction_locked(a, fraction);
  return leave(a, GA_OK);
}

double ga_get_memory_fraction(ga_allocator_t *a) {
  if (enter_all(a, "ga_get_memory_fraction")) return 1.0;
  double f = a->pol.fraction;
  (void)leave(a, GA_OK);
  return f;
}

ga_status_t ga_mem_get_info(ga_allocator_t *a, size_t *free_bytes, size_t *total_bytes) {
  ENTER("ga_mem_get_info");
  size_t f = 0, t = 0;
  int rc = ga_dev_mem_info(a->dev, &f, &t);
  if (rc) return leave(a, failed(a, "ga_mem_get_info", rc));
  if (free_bytes) *free_bytes = f;
  if (total_bytes) *total_bytes = t;
  return leave(a, GA_OK);
}

ga_status_t ga_would_fit(ga_allocator_t *a, const size_t *sizes, size_t n, ga_stream_t stream, size_t *fit) {
  if (fit) *fit = 0;
  ENTER("ga_would_fit");
  if (!fit) return leave(a, invalid("ga_would_fit", "fit is NULL"));
  if (n && !sizes) return leave(a, invalid("ga_would_fit", "sizes is NULL"));
  return leave(a, ga_fit_would_fit_locked(a, sizes, n, stream, fit));
}

ga_status_t ga_largest_free(ga_allocator_t *a, ga_stream_t stream, size_t *cached, size_t *with_device) {
  if (cached) *cached = 0;
  if (with_device) *with_device = 0;
  ENTER("ga_largest_free");
  return leave(a, ga_fit_largest_locked(a, stream, cached, with_device));
}

/* ---- Statistics ---- */

ga_status_t ga_stats(ga_allocator_t *a, ga_stats_t *out) {
  ENTER("ga_stats");
  if (!out) return leave(a, invalid("ga_stats", "out is NULL"));
  ga_stats_sync(&a->stats, &a->hot);
  *out = a->stats;
  out->mapped_granules = a->stats.mapped_bytes.current / (int64_t)a->space.gran;
  out->cached_granules = a->stats.page_cache_bytes.current / (int64_t)a->space.gran;
  out->asleep_granules = (int64_t)a->pol.sleep.nsleepers;
  memcpy(out->device_calls, a->dev->calls, sizeof out->device_calls);
  memcpy(out->device_failures, a->dev->failures, sizeof out->device_failures);
  memcpy(out->device_ns, a->dev->ns, sizeof out->device_ns);
  uint64_t ns = 0;
  for (int k = 0; k < GA_CALL_COUNT; k++) ns += a->dev->ns[k];
  out->driver_us = (int64_t)((ns - a->dev->stall_ns) / 1000);
  out->num_stalls = (int64_t)a->dev->stalls;
  out->stall_us = (int64_t)(a->dev->stall_ns / 1000);
  return leave(a, GA_OK);
}

size_t ga_stats_json(ga_allocator_t *a, char *buf, size_t cap) {
  ga_stats_t stats;
  ga_text j = {buf, cap, 0};
  if (ga_stats(a, &stats) != GA_OK) {
    if (cap) buf[0] = 0;
    return 0;
  }
  ga_stats_write_json(&stats, &j);
  return ga_text_end(&j);
}

static void each_stat(ga_stats_t *stats, void (*fn)(ga_stat_t *)) {
#define GA_X(name, doc) \
  for (int p = 0; p < GA_POOL_COUNT; p++) fn(&stats->name[p]);
  GA_POOL_STATS(GA_X)
#undef GA_X
  fn(&stats->oversize_allocations);
  fn(&stats->oversize_segments);
#define GA_X(name, doc) fn(&stats->name);
  GA_EXTRA_STATS(GA_X)
#undef GA_X
}

static void peak_to_current(ga_stat_t *stat) { stat->peak = stat->current; }
static void zero_accumulated(ga_stat_t *stat) { stat->allocated = stat->freed = 0; }

ga_status_t ga_reset_peak_stats(ga_allocator_t *a) {
  ENTER("ga_reset_peak_stats");
  ga_stats_sync(&a->stats, &a->hot);
  each_stat(&a->stats, peak_to_current);
  ga_stats_sync(&a->stats, &a->hot); /* the room before a peak moves is measured from the peaks */
  return leave(a, GA_OK);
}

ga_status_t ga_reset_accumulated_stats(ga_allocator_t *a) {
  ENTER("ga_reset_accumulated_stats");
  ga_stats_sync(&a->stats, &a->hot);
  each_stat(&a->stats, zero_accumulated);
  ga_stats_t *stats = &a->stats;
  stats->num_alloc_retries = stats->num_ooms = stats->num_sync_all_streams = 0;
  stats->num_device_alloc = stats->num_device_free = 0;
  stats->num_unmap_syncs = stats->num_granules_moved = stats->num_capture_deferred_flushes = 0;
  return leave(a, GA_OK);
}

const char *ga_device_call_name(ga_device_call_t kind) { return ga_dev_call_name(kind); }

/* ---- Private pools (CUDA-graph capture) ---- */

ga_status_t ga_begin_allocate_to_pool(ga_allocator_t *a, uint64_t pool, ga_stream_t stream) {
  ENTER("ga_begin_allocate_to_pool");
  return leave(a, ga_capture_begin_locked(a, pool, stream));
}

ga_status_t ga_end_allocate_to_pool(ga_allocator_t *a, uint64_t pool) {
  ENTER("ga_end_allocate_to_pool");
  return leave(a, ga_capture_end_locked(a, pool));
}

ga_status_t ga_capture_announce(ga_allocator_t *a, int begin) {
  ENTER(begin ? "ga_torch_begin_allocate_to_pool" : "ga_torch_end_allocate_to_pool");
  return leave(a, ga_capture_announce_locked(a, begin));
}

ga_status_t ga_release_pool(ga_allocator_t *a, uint64_t pool) {
  ENTER("ga_release_pool");
  return leave(a, ga_capture_release_locked(a, pool));
}

ga_status_t ga_pool_generation(ga_allocator_t *a, uint64_t pool, uint64_t *generation) {
  if (generation) *generation = 0;
  ENTER("ga_pool_generation");
  if (!generation) return leave(a, invalid("ga_pool_generation", "generation is NULL"));
  return leave(a, ga_private_generation_locked(a, pool, generation));
}

/* ---- Tags, sleep and wake ---- */

ga_status_t ga_tag(ga_allocator_t *a, void *ptr, const char *tag) {
  ENTER("ga_tag");
  return leave(a, ga_tag_locked(a, ptr, tag));
}

ga_status_t ga_sleep(ga_allocator_t *a, const char *tags, unsigned flags) {
  ENTER("ga_sleep");
  return leave(a, ga_sleep_locked(a, tags, flags));
}

ga_status_t ga_sleep_mode(ga_allocator_t *a, const char *tag, int mode) {
  ENTER("ga_sleep_mode");
  return leave(a, ga_sleep_mode_locked(a, tag, mode));
}

ga_status_t ga_wake(ga_allocator_t *a) {
  ENTER("ga_wake");
  return leave(a, ga_wake_locked(a));
}

/* ---- History and snapshots ---- */

ga_status_t ga_record_history(ga_allocator_t *a, int enabled, size_t max_entries) {
  return ga_record_history_stacks(a, enabled, max_entries, 0);
}

ga_status_t ga_record_history_stacks(ga_allocator_t *a, int enabled, size_t max_entries, int stacks) {
  if (!a || ga_inherited(a)) return enter(a, "ga_record_history"); /* refuses it by name */
  if (stacks & ~(GA_STACKS_C | GA_STACKS_PYTHON)) {
    ga_error_set(
        "ga_record_history_stacks: stacks %d is not a combination of GA_STACKS_C and GA_STACKS_PYTHON",
        stacks);
    return GA_ERR_INVALID;
  }
  ga_history h, old;
  int rc = ga_history_init(&h, enabled, max_entries,
                           ((stacks & GA_STACKS_C) ? GA_HISTORY_STACKS_C : 0) |
                               ((stacks & GA_STACKS_PYTHON) ? GA_HISTORY_STACKS_PYTHON : 0));
  if (rc == GA_DEV_ENOTSUP) {
    ga_error_set(
        "ga_record_history_stacks: Python stacks asked for, but this process runs no Python "
        "interpreter (PyEval_GetFrame and friends are not in it)");
    return GA_ERR_INVALID;
  }
  if (rc) {
    return ga_fail(GA_DEV_ENOMEM, "ga_record_history", NULL, "for %zu entries", max_entries);
  }
  ENTER("ga_record_history");
  old = a->history;
  a->history = h;
  (void)leave(a, GA_OK);
  ga_history_free(&old);
  return GA_OK;
}

size_t ga_snapshot_json(ga_allocator_t *a, char *buf, size_t cap) {
  ga_text o = {buf, cap, 0};
  if (enter_all(a, "ga_snapshot_json")) {
    if (cap) buf[0] = 0;
    return 0;
  }
  ga_snapshot_write_locked(a, &o);
  (void)leave(a, GA_OK);
  return ga_text_end(&o);
}

/* ---- Devices ---- */

const char *ga_backend_name(ga_allocator_t *a) { return a ? a->dev->ops->name : "none"; }

ga_status_t ga_enable_peer_access(ga_allocator_t *a, int peer) {
  ENTER("ga_enable_peer_access");
  return leave(a, ga_peers_enable_locked(a, peer));
}

/* ---- Checking, errors, configuration ---- */

int ga_check(ga_allocator_t *a) {
  if (enter_all(a, "ga_check")) return 1;
  int broken = ga_check_locked(a);
  (void)leave(a, GA_OK);
  return broken;
}

const char *ga_status_str(ga_status_t status) {
  switch (status) {
    case GA_OK: return "GA_OK";
    case GA_ERR_INVALID: return "GA_ERR_INVALID";
    case GA_ERR_OOM: return "GA_ERR_OOM";
    case GA_ERR_CONFIG: return "GA_ERR_CONFIG";
    case GA_ERR_DEVICE: return "GA_ERR_DEVICE";
    case GA_ERR_BAD_POINTER: return "GA_ERR_BAD_POINTER";
    case GA_ERR_NO_BACKEND: return "GA_ERR_NO_BACKEND";
    case GA_ERR_UNSUPPORTED: return "GA_ERR_UNSUPPORTED";
    case GA_ERR_HOST_MEMORY: return "GA_ERR_HOST_MEMORY";
    case GA_ERR_FORKED: return "GA_ERR_FORKED";
  }
  return "GA_ERR_UNKNOWN";
}

const char *ga_last_error(void) { return ga_error_text(); }

ga_status_t ga_config_validate(const char *conf) {
  ga_config c;
  return parse(NULL, conf, &c);
}

int ga_config_key(int i, const char **name, const char **type, const char **dflt, const char **origin,
                  const char **doc) {
  return ga_config_option(i, name, type, dflt, origin, doc);
}
