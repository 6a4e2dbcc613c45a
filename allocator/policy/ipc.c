/* ipc.c — sharing allocations with other processes (ga_ipc_export,
 * ga_ipc_import, ga_ipc_close).
 *
 * Export: the whole granules behind an allocation of an expandable segment,
 * as pieces of shareable memory (device/: a file descriptor per piece), and
 * a lease: a one-page memfd that every import holds a shared flock(2) on,
 * through a file description of its own (opened again through /proc), so
 * the lock goes away with the importer's close, exit or crash. ga_free of an
 * exported allocation takes the lease exclusively without waiting: while an
 * import holds it the free is refused and nothing changes; once it is free
 * the lease is marked revoked (a later import refuses it) and the memory is
 * freed as any other. Exporting again reuses the lease.
 *
 * Fabric export (ga_ipc_export_fabric): the same granules as fabric handles,
 * plain bytes that cross nodes. An importer on another node can hold no
 * lease, so the exporter's ga_free is refused until ga_ipc_unexport says its
 * peers are done.
 *
 * Import: a reservation of the pieces' size, each piece imported (a handle,
 * from its fd or its fabric handle) and mapped in turn, access granted to
 * this device; the records are kept until ga_ipc_close (or ga_destroy)
 * unmaps, releases and unreserves.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <unistd.h>

#include "policy.h"

typedef struct ipc_export {
  uintptr_t ptr; /* the allocation */
  int lease;     /* the lease memfd (ga_ipc_export); -1: none yet */
  int fabric;    /* exported as fabric handles, not yet ga_ipc_unexport'ed */
} ipc_export;

typedef struct ipc_import {
  uintptr_t va; /* the reservation */
  size_t size;
  uintptr_t ptr; /* what ga_ipc_import returned */
  ga_mem_handle *h;
  size_t nh;
  int lease; /* our own file description of the exporter's lease, held shared */
} ipc_import;

struct ga_ipc {
  ipc_export *ex;
  size_t nex, capex;
  ipc_import *im;
  size_t nim, capim;
};

static struct ga_ipc *ipc_of(ga_allocator_t *a) {
  if (!a->pol.ipc) a->pol.ipc = ga_host_calloc(1, sizeof *a->pol.ipc);
  return a->pol.ipc;
}

static ipc_export *export_find(ga_allocator_t *a, uintptr_t p) {
  struct ga_ipc *x = a->pol.ipc;
  for (size_t i = 0; x && i < x->nex; i++)
    if (x->ex[i].ptr == p) return &x->ex[i];
  return NULL;
}

int ga_ipc_exported_locked(ga_allocator_t *a, uintptr_t p) {
  GA_ASSERT_LOCKED(a);
  return export_find(a, p) != NULL;
}

/* The lease's first byte: 1 once the exporter freed the allocation. */
#define LEASE_REVOKED 1

static void close_pieces(ga_ipc_desc_t *d, uint32_t n) {
  for (uint32_t i = 0; i < n; i++)
    if (d->pieces[i].fd >= 0) close(d->pieces[i].fd), d->pieces[i].fd = -1;
}

/* The live allocation at ptr, if `fn` may export it (else NULL, the error set). */
static ga_block *exportable(ga_allocator_t *a, void *ptr, const char *fn, int fabric, ga_status_t *st) {
  ga_block *b = ga_block_live_locked(a, (uintptr_t)ptr);
  *st = GA_OK;
  if (!b) {
    ga_error_set("%s: %p is not a live allocation of this allocator (pass the pointer ga_malloc returned)",
                 fn, ptr);
    *st = GA_ERR_BAD_POINTER;
    return NULL;
  }
  const char *need = fabric ? "shareable_handles:fabric" : "shareable_handles:posix_fd";
  if (!b->seg->expandable) {
    ga_error_set(
        "%s: %p lies in native memory (cudaMalloc), which gardenalloc does not export: "
        "use expandable_segments:True with %s (and no GA_ALLOC_CONTIGUOUS_HANDLE), "
        "or cudaIpcGetMemHandle on the base ga_mem_ranges gives",
        fn, ptr, need);
    *st = GA_ERR_UNSUPPORTED;
    return NULL;
  }
  if (a->cfg.shareable_handles < (fabric ? GA_DEV_SHARE_FABRIC : GA_DEV_SHARE_FD)) {
    ga_error_set("%s: the allocator's memory is not shareable%s: create it with %s", fn,
                 fabric && a->cfg.shareable_handles ? " as fabric handles" : "", need);
    *st = GA_ERR_UNSUPPORTED;
    return NULL;
  }
  if (b->asleep || b->tag) {
    ga_error_set("%s: %p is %s: an exported allocation must not sleep (untag it first)", fn, ptr,
                 b->asleep ? "asleep" : "tagged");
    *st = GA_ERR_INVALID;
    return NULL;
  }
  return b;
}

/* The export record of b, made if there is none (-1 lease, not fabric). */
static ipc_export *export_get(ga_allocator_t *a, uintptr_t p) {
  struct ga_ipc *x = ipc_of(a);
  if (!x) return NULL;
  ipc_export *e = export_find(a, p);
  if (e) return e;
  if (GA_VEC_ROOM(x->ex, x->capex, x->nex + 1)) return NULL;
  e = &x->ex[x->nex++];
  *e = (ipc_export){p, -1, 0};
  return e;
}

/* Drops b's record when nothing is left in it. */
static void export_remove_if_idle(ga_allocator_t *a, ipc_export *e) {
  if (e->lease >= 0 || e->fabric) return;
  struct ga_ipc *x = a->pol.ipc;
  *e = x->ex[--x->nex];
}

/* The granules from p (below hi) that lie at consecutive places of one
 * handle, which one piece describes: the first of them; *run their number. */
static const ga_granule *handle_run(const ga_segment *seg, size_t g, uintptr_t p, uintptr_t hi, size_t *run) {
  size_t i = (p - seg->base) / g, n = 1;
  const ga_granule *m = &seg->granules[i];
  while (p + n * g < hi && seg->granules[i + n].handle == m->handle && seg->granules[i + n].idx == m->idx + n)
    n++;
  *run = n;
  return m;
}

ga_status_t ga_ipc_export_locked(ga_allocator_t *a, void *ptr, ga_ipc_desc_t *desc) {
  GA_ASSERT_LOCKED(a);
  ga_status_t st;
  ga_block *b = exportable(a, ptr, "ga_ipc_export", 0, &st);
  if (!b) return st;
  struct ga_ipc *x = ipc_of(a);
  if (!x) {
    return ga_fail(GA_DEV_ENOMEM, "ga_ipc_export", NULL, NULL);
  }
  memset(desc, 0, sizeof *desc);
  desc->version = GA_IPC_VERSION;
  desc->lease_fd = -1;
  for (int i = 0; i < GA_IPC_MAX_PIECES; i++) desc->pieces[i].fd = -1;
  size_t g = a->space.gran;
  const ga_segment *seg = b->seg;
  uintptr_t lo = b->ptr / g * g, hi = (b->ptr + b->size + g - 1) / g * g;
  size_t n = 0;
  int rc = 0;
  for (uintptr_t p = lo; p < hi && !rc;) {
    size_t run;
    const ga_granule *m = handle_run(seg, g, p, hi, &run);
    ga_dev_piece pieces[GA_IPC_MAX_PIECES];
    size_t k = 0;
    rc = ga_dev_share(a->dev, m->handle->h, (size_t)m->idx * g, run * g, pieces, GA_IPC_MAX_PIECES - n, &k);
    for (size_t j = 0; !rc && j < k; j++)
      desc->pieces[n++] = (ga_ipc_piece_t){pieces[j].fd, pieces[j].offset, pieces[j].size};
    p += run * g;
  }
  if (rc) {
    close_pieces(desc, (uint32_t)n);
    ga_error_set("ga_ipc_export: %p: %s (at most %d pieces)", ptr, a->dev->error, GA_IPC_MAX_PIECES);
    return rc == GA_DEV_ENOTSUP ? GA_ERR_UNSUPPORTED : rc == GA_DEV_EINVAL ? GA_ERR_INVALID : GA_ERR_DEVICE;
  }
  ipc_export *e = export_get(a, b->ptr);
  if (e && e->lease < 0) {
    e->lease = memfd_create("gardenalloc-ipc-lease", MFD_CLOEXEC);
    if (e->lease >= 0 && ftruncate(e->lease, 4096) != 0) close(e->lease), e->lease = -1;
  }
  if (!e || e->lease < 0) {
    int err = errno;
    if (e) export_remove_if_idle(a, e);
    close_pieces(desc, (uint32_t)n);
    ga_error_set("ga_ipc_export: host: cannot make the lease (%s)", e ? strerror(err) : "out of host memory");
    return GA_ERR_HOST_MEMORY;
  }
  desc->lease_fd = fcntl(e->lease, F_DUPFD_CLOEXEC, 0);
  if (desc->lease_fd < 0) {
    close_pieces(desc, (uint32_t)n);
    ga_error_set("ga_ipc_export: host: cannot open the lease (%s)", strerror(errno));
    return GA_ERR_HOST_MEMORY;
  }
  desc->npieces = (uint32_t)n;
  desc->size = b->size;
  desc->start = b->ptr - lo;
  desc->pid = getpid();
  return GA_OK;
}

/* ga_free of ptr: GA_OK when it may go on (not exported, or no import
 * holds it: the export is then dropped), else the refusal. */
ga_status_t ga_ipc_free_check_locked(ga_allocator_t *a, void *ptr) {
  GA_ASSERT_LOCKED(a);
  ipc_export *e = export_find(a, (uintptr_t)ptr);
  if (!e) return GA_OK;
  if (e->fabric) {
    ga_error_set(
        "ga_free: %p is exported as fabric handles (ga_ipc_export_fabric): an importer on another node "
        "holds no lease, so it stays allocated until ga_ipc_unexport(a, ptr), called once every peer has "
        "closed its import",
        ptr);
    return GA_ERR_INVALID;
  }
  if (flock(e->lease, LOCK_EX | LOCK_NB) != 0) {
    ga_error_set(
        "ga_free: %p is exported (ga_ipc_export) and still imported by another process: it stays "
        "allocated until every import is closed (ga_ipc_close, or the importer's exit)",
        ptr);
    return GA_ERR_INVALID;
  }
  char revoked = LEASE_REVOKED;
  (void)!pwrite(e->lease, &revoked, 1, 0);
  (void)flock(e->lease, LOCK_UN); /* descriptors sent out share this file description */
  close(e->lease);
  struct ga_ipc *x = a->pol.ipc;
  *e = x->ex[--x->nex];
  return GA_OK;
}

static ga_status_t map_pieces(ga_allocator_t *a, struct ga_ipc *x, ipc_import *m, uint32_t n,
                              const ga_ipc_piece_t *fds, const ga_ipc_fabric_piece_t *fab, uint64_t start,
                              void **out);

/* Undoes an import: unmaps its first `nmapped` bytes, releases its handles,
 * unreserves, lets the lease go. */
static void unwind(ga_allocator_t *a, ipc_import *m, size_t nmapped) {
  if (nmapped) (void)ga_dev_unmap(a->dev, (void *)m->va, nmapped);
  for (size_t i = 0; i < m->nh; i++) (void)ga_dev_release(a->dev, m->h[i]);
  if (m->va) (void)ga_dev_unreserve(a->dev, (void *)m->va, m->size);
  if (m->lease >= 0) close(m->lease);
  free(m->h);
}

ga_status_t ga_ipc_import_locked(ga_allocator_t *a, const ga_ipc_desc_t *d, void **out) {
  GA_ASSERT_LOCKED(a);
  size_t g = a->space.gran, total = 0;
  if (d->version != GA_IPC_VERSION || d->npieces == 0 || d->npieces > GA_IPC_MAX_PIECES || d->lease_fd < 0) {
    ga_error_set("ga_ipc_import: not a descriptor ga_ipc_export wrote (version %u, %u pieces, lease fd %d)",
                 d->version, d->npieces, d->lease_fd);
    return GA_ERR_INVALID;
  }
  for (uint32_t i = 0; i < d->npieces; i++) {
    if (d->pieces[i].size == 0 || d->pieces[i].size % g || d->pieces[i].offset % g || d->pieces[i].fd < 0) {
      ga_error_set("ga_ipc_import: piece %u (fd %d, %llu+%llu) is not whole granules of an open fd", i,
                   d->pieces[i].fd, (unsigned long long)d->pieces[i].offset,
                   (unsigned long long)d->pieces[i].size);
      return GA_ERR_INVALID;
    }
    total += d->pieces[i].size;
  }
  if (d->start >= total || d->size > total - d->start) {
    ga_error_set("ga_ipc_import: the allocation (%llu bytes at %llu) is not inside its pieces (%zu bytes)",
                 (unsigned long long)d->size, (unsigned long long)d->start, total);
    return GA_ERR_INVALID;
  }
  struct ga_ipc *x = ipc_of(a);
  if (!x || GA_VEC_ROOM(x->im, x->capim, x->nim + 1)) {
    return ga_fail(GA_DEV_ENOMEM, "ga_ipc_import", NULL, NULL);
  }
  ipc_import m = {.size = total, .lease = -1};
  /* The lease, through a file description of our own, held shared: the
   * exporter cannot free the memory while we hold it. */
  char path[64];
  snprintf(path, sizeof path, "/proc/self/fd/%d", d->lease_fd);
  m.lease = open(path, O_RDONLY | O_CLOEXEC);
  char revoked = 0;
  if (m.lease < 0 || flock(m.lease, LOCK_SH) != 0 || pread(m.lease, &revoked, 1, 0) < 0) {
    ga_error_set("ga_ipc_import: cannot hold the exporter's lease (fd %d): %s", d->lease_fd, strerror(errno));
    if (m.lease >= 0) close(m.lease);
    return GA_ERR_INVALID;
  }
  if (revoked == LEASE_REVOKED) {
    close(m.lease);
    ga_error_set("ga_ipc_import: the exporter has freed this allocation");
    return GA_ERR_INVALID;
  }
  return map_pieces(a, x, &m, d->npieces, d->pieces, NULL, d->start, out);
}

/* Maps n pieces (each from its fd, or from its fabric handle when fab is
 * set) into a reservation, grants access, records the import m (its size
 * and lease set) and gives its start + `start`; on failure undoes all. */
static ga_status_t map_pieces(ga_allocator_t *a, struct ga_ipc *x, ipc_import *m, uint32_t n,
                              const ga_ipc_piece_t *fds, const ga_ipc_fabric_piece_t *fab, uint64_t start,
                              void **out) {
  const char *fn = fab ? "ga_ipc_import_fabric" : "ga_ipc_import";
  m->h = ga_host_calloc(n, sizeof *m->h);
  if (!m->h) {
    if (m->lease >= 0) close(m->lease);
    return ga_fail(GA_DEV_ENOMEM, fn, NULL, NULL);
  }
  void *va = NULL;
  int rc = ga_dev_reserve(a->dev, m->size, 0, &va);
  const char *what = "reserving addresses";
  size_t mapped = 0;
  if (!rc) {
    m->va = (uintptr_t)va;
    for (uint32_t i = 0; i < n && !rc; i++) {
      what = "importing a piece";
      rc = fab ? ga_dev_import_fabric(a->dev, fab[i].handle, &m->h[m->nh])
               : ga_dev_import(a->dev, fds[i].fd, &m->h[m->nh]);
      if (rc) break;
      m->nh++;
      what = "mapping a piece";
      uint64_t size = fab ? fab[i].size : fds[i].size, off = fab ? fab[i].offset : fds[i].offset;
      if ((rc = ga_dev_map(a->dev, (void *)(m->va + mapped), size, m->h[m->nh - 1], off))) break;
      mapped += size;
    }
    if (!rc) {
      what = "granting access";
      rc = ga_dev_set_access(a->dev, va, m->size, &a->dev->ordinal, 1);
    }
  }
  if (rc) {
    ga_error_set("%s: %s: %s", fn, what, a->dev->error);
    unwind(a, m, mapped);
    return rc == GA_DEV_ENOTSUP         ? GA_ERR_UNSUPPORTED
           : rc == GA_DEV_EOOM          ? GA_ERR_OOM
           : rc == GA_DEV_EINVAL && fab ? GA_ERR_INVALID
                                        : GA_ERR_DEVICE;
  }
  m->ptr = m->va + start;
  x->im[x->nim++] = *m;
  *out = (void *)m->ptr;
  return GA_OK;
}

ga_status_t ga_ipc_export_fabric_locked(ga_allocator_t *a, void *ptr, ga_ipc_fabric_desc_t *desc) {
  GA_ASSERT_LOCKED(a);
  ga_status_t st;
  ga_block *b = exportable(a, ptr, "ga_ipc_export_fabric", 1, &st);
  if (!b) return st;
  memset(desc, 0, sizeof *desc);
  size_t g = a->space.gran;
  const ga_segment *seg = b->seg;
  uintptr_t lo = b->ptr / g * g, hi = (b->ptr + b->size + g - 1) / g * g;
  size_t n = 0;
  int rc = 0;
  for (uintptr_t p = lo; p < hi && !rc;) {
    size_t run;
    const ga_granule *m = handle_run(seg, g, p, hi, &run);
    ga_dev_fabric pieces[GA_IPC_MAX_PIECES];
    size_t k = 0;
    rc = ga_dev_share_fabric(a->dev, m->handle->h, (size_t)m->idx * g, run * g, pieces, GA_IPC_MAX_PIECES - n,
                             &k);
    for (size_t j = 0; !rc && j < k; j++, n++) {
      memcpy(desc->pieces[n].handle, pieces[j].handle, GA_IPC_FABRIC_BYTES);
      desc->pieces[n].offset = pieces[j].offset;
      desc->pieces[n].size = pieces[j].size;
    }
    p += run * g;
  }
  if (rc) {
    memset(desc, 0, sizeof *desc);
    ga_error_set("ga_ipc_export_fabric: %p: %s (at most %d pieces)", ptr, a->dev->error, GA_IPC_MAX_PIECES);
    return rc == GA_DEV_ENOTSUP ? GA_ERR_UNSUPPORTED : rc == GA_DEV_EINVAL ? GA_ERR_INVALID : GA_ERR_DEVICE;
  }
  ipc_export *e = export_get(a, b->ptr);
  if (!e) {
    memset(desc, 0, sizeof *desc);
    return ga_fail(GA_DEV_ENOMEM, "ga_ipc_export_fabric", NULL, NULL);
  }
  e->fabric = 1;
  desc->version = GA_IPC_FABRIC_VERSION;
  desc->npieces = (uint32_t)n;
  desc->size = b->size;
  desc->start = b->ptr - lo;
  return GA_OK;
}

ga_status_t ga_ipc_unexport_locked(ga_allocator_t *a, void *ptr) {
  GA_ASSERT_LOCKED(a);
  ipc_export *e = export_find(a, (uintptr_t)ptr);
  if (!e || !e->fabric) {
    int live = ga_block_live_locked(a, (uintptr_t)ptr) != NULL;
    ga_error_set("ga_ipc_unexport: %p is %s", ptr,
                 live ? "not exported as fabric handles (ga_ipc_export_fabric)"
                      : "not a live allocation of this allocator (pass the pointer ga_malloc returned)");
    return live ? GA_ERR_INVALID : GA_ERR_BAD_POINTER;
  }
  e->fabric = 0;
  export_remove_if_idle(a, e);
  return GA_OK;
}

ga_status_t ga_ipc_import_fabric_locked(ga_allocator_t *a, const ga_ipc_fabric_desc_t *d, void **out) {
  GA_ASSERT_LOCKED(a);
  size_t g = a->space.gran, total = 0;
  if (d->version != GA_IPC_FABRIC_VERSION || d->npieces == 0 || d->npieces > GA_IPC_MAX_PIECES) {
    ga_error_set(
        "ga_ipc_import_fabric: not a descriptor ga_ipc_export_fabric wrote (version 0x%x, %u pieces)",
        d->version, d->npieces);
    return GA_ERR_INVALID;
  }
  for (uint32_t i = 0; i < d->npieces; i++) {
    if (d->pieces[i].size == 0 || d->pieces[i].size % g || d->pieces[i].offset % g ||
        d->pieces[i].size > SIZE_MAX - total) {
      ga_error_set("ga_ipc_import_fabric: piece %u (%llu+%llu) is not whole granules", i,
                   (unsigned long long)d->pieces[i].offset, (unsigned long long)d->pieces[i].size);
      return GA_ERR_INVALID;
    }
    total += d->pieces[i].size;
  }
  if (d->start >= total || d->size == 0 || d->size > total - d->start) {
    ga_error_set(
        "ga_ipc_import_fabric: the allocation (%llu bytes at %llu) is not inside its pieces (%zu bytes)",
        (unsigned long long)d->size, (unsigned long long)d->start, total);
    return GA_ERR_INVALID;
  }
  struct ga_ipc *x = ipc_of(a);
  if (!x || GA_VEC_ROOM(x->im, x->capim, x->nim + 1)) {
    return ga_fail(GA_DEV_ENOMEM, "ga_ipc_import_fabric", NULL, NULL);
  }
  ipc_import m = {.size = total, .lease = -1};
  return map_pieces(a, x, &m, d->npieces, NULL, d->pieces, d->start, out);
}

ga_status_t ga_ipc_close_locked(ga_allocator_t *a, void *ptr) {
  GA_ASSERT_LOCKED(a);
  struct ga_ipc *x = a->pol.ipc;
  for (size_t i = 0; x && i < x->nim; i++) {
    if (x->im[i].ptr != (uintptr_t)ptr) continue;
    ipc_import m = x->im[i];
    int rc = ga_dev_unmap(a->dev, (void *)m.va, m.size);
    if (rc) {
      ga_error_set("ga_ipc_close: %p: %s (still imported)", ptr, a->dev->error);
      return GA_ERR_DEVICE;
    }
    x->im[i] = x->im[--x->nim];
    unwind(a, &m, 0);
    return GA_OK;
  }
  ga_error_set("ga_ipc_close: %p is not an import of this allocator (ga_ipc_import returns them)", ptr);
  return GA_ERR_BAD_POINTER;
}

void ga_ipc_usage_locked(ga_allocator_t *a, size_t *handles, size_t *mappings, size_t *reservations) {
  GA_ASSERT_LOCKED(a);
  struct ga_ipc *x = a->pol.ipc;
  *handles = *mappings = *reservations = 0;
  for (size_t i = 0; x && i < x->nim; i++) {
    *handles += x->im[i].nh;
    *mappings += x->im[i].nh;
    *reservations += 1;
  }
}

void ga_ipc_teardown_locked(ga_allocator_t *a) {
  GA_ASSERT_LOCKED(a);
  struct ga_ipc *x = a->pol.ipc;
  if (!x) return;
  while (x->nim) {
    ipc_import m = x->im[--x->nim];
    unwind(a, &m, m.size);
  }
  for (size_t i = 0; i < x->nex; i++)
    if (x->ex[i].lease >= 0) close(x->ex[i].lease);
  free(x->ex);
  free(x->im);
  free(x);
  a->pol.ipc = NULL;
}
