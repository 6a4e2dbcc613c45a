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
 * Import: a reservation of the pieces' size, each piece imported (a handle)
 * and mapped in turn, access granted to this device; the records are kept
 * until ga_ipc_close (or ga_destroy) unmaps, releases and unreserves.
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
  int lease;     /* the lease memfd */
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

ga_status_t ga_ipc_export_locked(ga_allocator_t *a, void *ptr, ga_ipc_desc_t *desc) {
  GA_ASSERT_LOCKED(a);
  ga_block *b = ga_blockmap_get(&a->pol.map, (uintptr_t)ptr);
  if (!b) {
    ga_error_set(
        "ga_ipc_export: %p is not a live allocation of this allocator (pass the pointer ga_malloc "
        "returned)",
        ptr);
    return GA_ERR_BAD_POINTER;
  }
  if (!b->seg->expandable) {
    ga_error_set(
        "ga_ipc_export: %p lies in native memory (cudaMalloc), which gardenalloc does not export: "
        "use expandable_segments:True with shareable_handles:posix_fd (and no GA_ALLOC_CONTIGUOUS_HANDLE), "
        "or cudaIpcGetMemHandle on the base ga_mem_ranges gives",
        ptr);
    return GA_ERR_UNSUPPORTED;
  }
  if (!a->cfg.shareable_handles) {
    ga_error_set(
        "ga_ipc_export: the allocator's memory is not shareable: create it with "
        "shareable_handles:posix_fd");
    return GA_ERR_UNSUPPORTED;
  }
  if (b->asleep || b->tag) {
    ga_error_set("ga_ipc_export: %p is %s: an exported allocation must not sleep (untag it first)", ptr,
                 b->asleep ? "asleep" : "tagged");
    return GA_ERR_INVALID;
  }
  struct ga_ipc *x = ipc_of(a);
  if (!x) {
    return ga_fail(GA_DEV_ENOMEM, "ga_ipc_export", NULL, NULL);
  }
  memset(desc, 0, sizeof *desc);
  desc->version = GA_IPC_VERSION;
  desc->lease_fd = -1;
  for (int i = 0; i < GA_IPC_MAX_PIECES; i++) desc->pieces[i].fd = -1;
  size_t g = a->space.gran;
  const ga_segment *s = b->seg;
  uintptr_t lo = b->ptr / g * g, hi = (b->ptr + b->size + g - 1) / g * g;
  size_t n = 0;
  int rc = 0;
  for (uintptr_t p = lo; p < hi && !rc;) {
    size_t i = (p - s->base) / g, run = 1;
    const ga_granule *m = &s->granules[i];
    while (p + run * g < hi && s->granules[i + run].handle == m->handle &&
           s->granules[i + run].idx == m->idx + run)
      run++;
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
  ipc_export *e = export_find(a, b->ptr);
  if (!e) {
    int lease = memfd_create("gardenalloc-ipc-lease", MFD_CLOEXEC);
    if (lease < 0 || ftruncate(lease, 4096) != 0 || GA_VEC_ROOM(x->ex, x->capex, x->nex + 1)) {
      if (lease >= 0) close(lease);
      close_pieces(desc, (uint32_t)n);
      ga_error_set("ga_ipc_export: host: cannot make the lease (%s)", strerror(errno));
      return GA_ERR_HOST_MEMORY;
    }
    e = &x->ex[x->nex++];
    *e = (ipc_export){b->ptr, lease};
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
  m.h = ga_host_calloc(d->npieces, sizeof *m.h);
  if (!m.h) {
    close(m.lease);
    return ga_fail(GA_DEV_ENOMEM, "ga_ipc_import", NULL, NULL);
  }
  void *va = NULL;
  int rc = ga_dev_reserve(a->dev, total, 0, &va);
  const char *what = "reserving addresses";
  size_t mapped = 0;
  if (!rc) {
    m.va = (uintptr_t)va;
    for (uint32_t i = 0; i < d->npieces && !rc; i++) {
      what = "importing a piece";
      if ((rc = ga_dev_import(a->dev, d->pieces[i].fd, &m.h[m.nh]))) break;
      m.nh++;
      what = "mapping a piece";
      if ((rc = ga_dev_map(a->dev, (void *)(m.va + mapped), d->pieces[i].size, m.h[m.nh - 1],
                           d->pieces[i].offset)))
        break;
      mapped += d->pieces[i].size;
    }
    if (!rc) {
      what = "granting access";
      rc = ga_dev_set_access(a->dev, va, total, &a->dev->ordinal, 1);
    }
  }
  if (rc) {
    ga_error_set("ga_ipc_import: %s: %s", what, a->dev->error);
    unwind(a, &m, mapped);
    return rc == GA_DEV_ENOTSUP ? GA_ERR_UNSUPPORTED : rc == GA_DEV_EOOM ? GA_ERR_OOM : GA_ERR_DEVICE;
  }
  m.ptr = m.va + d->start;
  x->im[x->nim++] = m;
  *out = (void *)m.ptr;
  return GA_OK;
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
  for (size_t i = 0; i < x->nex; i++) close(x->ex[i].lease);
  free(x->ex);
  free(x->im);
  free(x);
  a->pol.ipc = NULL;
}
