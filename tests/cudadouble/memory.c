/* memory.c — device memory of the CUDA driver double: cuMemAlloc/cuMemFree,
 * the virtual memory API (reserve, create, map, set access, unmap, release),
 * copies and cuMemGetInfo.
 *
 * Each device's memory is a sparse memfd cut into 2 MiB granules. A mapping
 * mmaps the handle's granules (MAP_SHARED) into a PROT_NONE reservation, so
 * bytes written through one mapping read back through any other. A mapping
 * starts with no access, as the driver's do: until cuMemSetAccess grants the
 * owning device read/write, touching it from the host faults, as a kernel
 * touching it would. Unmapping puts PROT_NONE back; the granules of a handle
 * go back to the device (holes punched in the memfd) when it is released and
 * its last mapping is gone.
 *
 * Invariant: a device's used granules == granules of its live handles and
 * mallocs.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "double.h"

/* ---- Device memory ---- */

int cd_memory_open(int ordinal, size_t capacity) {
  cd_device *d = &cd.dev[ordinal];
  *d = (cd_device){.fd = memfd_create("cuda-double", MFD_CLOEXEC), .ngran = capacity / CD_GRAN};
  if (d->fd < 0) return errno;
  d->taken = calloc(d->ngran, 1);
  if (!d->taken || ftruncate(d->fd, (off_t)capacity) != 0) {
    int e = d->taken ? errno : ENOMEM;
    free(d->taken);
    close(d->fd);
    return e;
  }
  return 0;
}

void cd_memory_close(int ordinal) {
  cd_device *d = &cd.dev[ordinal];
  free(d->taken);
  close(d->fd);
  *d = (cd_device){.fd = -1};
}

/* Takes n granules: the first contiguous run if there is one, else any n. */
static uint32_t *granules_take(cd_device *d, size_t n) {
  if (n > d->ngran - d->used) return NULL;
  uint32_t *g = malloc(n * sizeof *g);
  if (!g) return NULL;
  size_t run = 0, k = 0;
  for (size_t i = 0; i < d->ngran && run < n; i++) run = d->taken[i] ? 0 : run + 1, k = i;
  if (run == n)
    for (size_t i = 0; i < n; i++) g[i] = (uint32_t)(k + 1 - n + i);
  else
    for (size_t i = 0, j = 0; j < n; i++)
      if (!d->taken[i]) g[j++] = (uint32_t)i;
  for (size_t i = 0; i < n; i++) d->taken[g[i]] = 1;
  d->used += n;
  return g;
}

static void granules_give_back(cd_device *d, const uint32_t *g, size_t n) {
  for (size_t i = 0; i < n; i++) {
    d->taken[g[i]] = 0;
    (void)fallocate(d->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)g[i] * (off_t)CD_GRAN,
                    (off_t)CD_GRAN);
  }
  d->used -= n;
}

static cd_phys *phys_new(int ordinal, size_t size) {
  cd_phys *ph = calloc(1, sizeof *ph);
  if (!ph) return NULL;
  ph->ordinal = ordinal;
  ph->fd = -1;
  ph->ngran = size / CD_GRAN;
  ph->gran = granules_take(&cd.dev[ordinal], ph->ngran);
  if (!ph->gran) {
    free(ph);
    return NULL;
  }
  return ph;
}

static void phys_free(cd_phys *ph) {
  if (ph->fd >= 0) close(ph->fd);
  if (!ph->imported) granules_give_back(&cd.dev[ph->ordinal], ph->gran, ph->ngran);
  free(ph->gran);
  free(ph);
}

/* The cuMemCreate handle with this value, or NULL. */
static cd_phys *handle_find(CUmemGenericAllocationHandle h) {
  size_t lo = 0, hi = cd.handles.n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    cd_phys *x = cd.handles.v[mid];
    if (x->id == h) return x;
    if (x->id < h)
      lo = mid + 1;
    else
      hi = mid;
  }
  return NULL;
}

/* Frees a released handle once nothing maps it. */
static void handle_maybe_free(cd_phys *ph) {
  if (!ph->released || ph->maps) return;
  cd_ptrs_remove(&cd.handles, ph);
  phys_free(ph);
}

/* ---- Host mappings ---- */

static void *reserve_va(size_t size, size_t align) {
  size_t span = size + align;
  void *p = mmap(NULL, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return NULL;
  uintptr_t base = (uintptr_t)p, start = (base + align - 1) & ~(uintptr_t)(align - 1);
  if (start > base) munmap(p, start - base);
  if (base + span > start + size) munmap((void *)(start + size), base + span - start - size);
  return (void *)start;
}

static void protnone(uintptr_t va, size_t size) {
  (void)mmap((void *)va, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
}

/* Maps ph's granules from `offset` at va with protection `prot`. */
static int map_granules(uintptr_t va, size_t size, cd_phys *ph, size_t offset, int prot) {
  size_t first = offset / CD_GRAN, n = size / CD_GRAN;
  int fd = cd.dev[ph->ordinal].fd;
  if (ph->fd >= 0) { /* a file of its own: its bytes at offset */
    if (mmap((void *)va, size, prot, MAP_SHARED | MAP_FIXED, ph->fd, (off_t)offset) != MAP_FAILED) return 0;
    protnone(va, size);
    return -1;
  }
  for (size_t i = 0; i < n;) {
    size_t run = 1;
    while (i + run < n && ph->gran[first + i + run] == ph->gran[first + i] + run) run++;
    void *p = mmap((void *)(va + i * CD_GRAN), run * CD_GRAN, prot, MAP_SHARED | MAP_FIXED, fd,
                   (off_t)ph->gran[first + i] * (off_t)CD_GRAN);
    if (p == MAP_FAILED) {
      protnone(va, size);
      return -1;
    }
    i += run;
  }
  return 0;
}

/* The host's view of a mapping follows the access of the device that owns it. */
static int host_prot(const cd_range *m) {
  unsigned a = m->access[m->ph->ordinal];
  return a == CU_MEM_ACCESS_FLAGS_PROT_READWRITE ? PROT_READ | PROT_WRITE
         : a == CU_MEM_ACCESS_FLAGS_PROT_READ    ? PROT_READ
                                                 : PROT_NONE;
}

/* ---- Fabric handles ---- */

#define CD_FABRIC_MAGIC 0x43444642u /* "CDFB" */
typedef struct cd_fabric {
  uint32_t magic;
  int32_t pid, fd; /* the exporting process and its fd of the handle's file */
  uint32_t zero;
  uint64_t dev, ino; /* that file's identity: a stale or foreign handle is refused */
} cd_fabric;
_Static_assert(sizeof(cd_fabric) <= sizeof(CUmemFabricHandle), "fits a CUmemFabricHandle");

/* ---- Allocation properties ---- */

/* Checks prop as cuMemCreate and cuMemGetAllocationGranularity do. */
static CUresult prop_check(cd_entry e, const CUmemAllocationProp *prop) {
  if (!prop) return cd_refuse(e, CUDA_ERROR_INVALID_VALUE, "prop is NULL");
  if (prop->type == CU_MEM_ALLOCATION_TYPE_MANAGED)
    cd_die(e, "CU_MEM_ALLOCATION_TYPE_MANAGED allocations are not modelled");
  if (prop->type != CU_MEM_ALLOCATION_TYPE_PINNED)
    return cd_refuse(e, CUDA_ERROR_INVALID_VALUE, "prop->type %d (CU_MEM_ALLOCATION_TYPE_PINNED expected)",
                     (int)prop->type);
  if (prop->location.type == CU_MEM_LOCATION_TYPE_HOST ||
      prop->location.type == CU_MEM_LOCATION_TYPE_HOST_NUMA)
    cd_die(e, "host (NUMA) allocations are not modelled");
  if (prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
    return cd_refuse(e, CUDA_ERROR_INVALID_VALUE,
                     "prop->location.type %d (CU_MEM_LOCATION_TYPE_DEVICE expected)",
                     (int)prop->location.type);
  if (prop->location.id < 0 || prop->location.id >= cd.ndev)
    return cd_refuse(e, CUDA_ERROR_INVALID_DEVICE, "prop->location.id %d (%d devices)", prop->location.id,
                     cd.ndev);
  if (prop->requestedHandleTypes &
      ~(unsigned)(CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR | CU_MEM_HANDLE_TYPE_WIN32 |
                  CU_MEM_HANDLE_TYPE_WIN32_KMT | CU_MEM_HANDLE_TYPE_FABRIC))
    return cd_refuse(e, CUDA_ERROR_INVALID_VALUE, "prop->requestedHandleTypes 0x%x",
                     (unsigned)prop->requestedHandleTypes);
  if (prop->requestedHandleTypes &
      ~(unsigned)(CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR | CU_MEM_HANDLE_TYPE_FABRIC))
    cd_die(e, "shareable handle types other than a POSIX fd and fabric (0x%x) are not modelled",
           (unsigned)prop->requestedHandleTypes);
  if (prop->win32HandleMetaData)
    return cd_refuse(e, CUDA_ERROR_INVALID_VALUE, "prop->win32HandleMetaData must be NULL on Linux");
  if (prop->allocFlags.compressionType || prop->allocFlags.gpuDirectRDMACapable || prop->allocFlags.usage)
    cd_die(e, "allocation flags (compression %u, RDMA %u, usage 0x%x) are not modelled",
           (unsigned)prop->allocFlags.compressionType, (unsigned)prop->allocFlags.gpuDirectRDMACapable,
           (unsigned)prop->allocFlags.usage);
  for (size_t i = 0; i < sizeof prop->allocFlags.reserved; i++)
    if (prop->allocFlags.reserved[i])
      return cd_refuse(e, CUDA_ERROR_INVALID_VALUE, "prop->allocFlags.reserved must be zero");
  return CUDA_SUCCESS;
}

CD_EXPORT CUresult CUDAAPI cuMemGetAllocationGranularity(size_t *granularity, const CUmemAllocationProp *prop,
                                                         CUmemAllocationGranularity_flags option) {
  const cd_entry e = CD_GRANULARITY;
  CUresult r = cd_enter(e);
  if (r || (r = prop_check(e, prop))) return cd_leave(r);
  if (!granularity) return cd_leave(cd_refuse(e, CUDA_ERROR_INVALID_VALUE, "granularity is NULL"));
  if (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM && option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED)
    return cd_leave(cd_refuse(e, CUDA_ERROR_INVALID_VALUE, "option %d", (int)option));
  if ((r = cd_fault_hit(e))) return cd_leave(r);
  *granularity = CD_GRAN;
  return cd_leave(r);
}

/* ---- cuMemGetInfo, cuMemAlloc, cuMemFree ---- */

CD_EXPORT CUresult CUDAAPI cuMemGetInfo(size_t *free_bytes, size_t *total) {
  const cd_entry e = CD_MEM_GET_INFO;
  struct CUctx_st *ctx;
  CUresult r = cd_enter(e);
  if (r || (r = cd_need_context(e, &ctx))) return cd_leave(r);
  if (!free_bytes || !total) return cd_leave(cd_refuse(e, CUDA_ERROR_INVALID_VALUE, "a NULL output"));
  if ((r = cd_fault_hit(e))) return cd_leave(r);
  const cd_device *d = &cd.dev[ctx->ordinal];
  *free_bytes = (d->ngran - d->used) * CD_GRAN;
  *total = d->ngran * CD_GRAN;
  return cd_leave(r);
}

CD_EXPORT CUresult CUDAAPI cuMemAlloc(CUdeviceptr *dptr, size_t bytesize) {
  const cd_entry e = CD_MEM_ALLOC;
  struct CUctx_st *ctx;
  CUresult r = cd_enter(e);
  if (r || (r = cd_need_context(e, &ctx))) return cd_leave(r);
  if (!dptr) return cd_leave(cd_refuse(e, CUDA_ERROR_INVALID_VALUE, "dptr is NULL"));
  if (bytesize == 0) return cd_leave(cd_refuse(e, CUDA_ERROR_INVALID_VALUE, "bytesize is 0"));
  if ((r = cd_capture_unsafe(e)) || (r = cd_fault_hit(e))) return cd_leave(r);
  size_t size = (bytesize + CD_GRAN - 1) / CD_GRAN * CD_GRAN;
  cd_device *d = &cd.dev[ctx->ordinal];
  if (size < bytesize || size / CD_GRAN > d->ngran - d->used) return cd_leave(CUDA_ERROR_OUT_OF_MEMORY);
  cd_phys *ph = phys_new(ctx->ordinal, size);
  void *va = ph ? reserve_va(size, CD_GRAN) : NULL;
  cd_range m = {.va = (uintptr_t)va, .size = size, .ph = ph, .ctx = ctx};
  if (!va || map_granules(m.va, size, ph, 0, PROT_READ | PROT_WRITE) || cd_ranges_insert(&cd.mallocs, &m)) {
    if (va) munmap(va, size);
    if (ph) phys_free(ph);
    return cd_leave(CUDA_ERROR_OUT_OF_MEMORY);
  }
  *dptr = m.va;
  return cd_leave(r);
}

CD_EXPORT CUresult CUDAAPI cuMemFree(CUdeviceptr dptr) {
  const cd_entry e = CD_MEM_FREE;
  struct CUctx_st *ctx;
  CUresult r = cd_enter(e);
  if (r || (r = cd_need_context(e, &ctx))) return cd_leave(r);
  long i = cd_ranges_find(&cd.mallocs, dptr);
  if (i < 0 || cd.mallocs.v[i].va != dptr)
    return cd_leave(cd_refuse(e, CUDA_ERROR_INVALID_VALUE, "0x%llx is not an address cuMemAlloc returned",
                              (unsigned long long)dptr));
  if ((r = cd_capture_unsafe(e)) || (r = cd_fault_hit(e))) return cd_leave(r);
  cd_range m = cd.mallocs.v[i];
  cd_ranges_remove(&cd.mallocs, (size_t)i);
  munmap((void *)m.va, m.size);
  phys_free(m.ph);
  return cd_leave(r);
}

/* ---- Reservations ---- */

CD_EXPORT CUresult CUDAAPI cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment,
                                               CUdeviceptr addr, unsigned long long flags) {
  const cd_entry e = CD_ADDRESS_RESERVE;
  CUresult r = cd_enter(e);
  if (r) return cd_leave(r);
  if (!ptr) return cd_leave(cd_refuse(e, CUDA_ERROR_INVALID_VALUE, "ptr is NULL"));
  if (flags) return cd_leave(cd_refuse(e, CUDA_ERROR_INVALID_VALUE, "flags 0x%llx (must be 0)", flags));
  if (size == 0 || size % CD_PAGE || addr % CD_PAGE)
    return cd_leave(cd_refuse(e, CUDA_ERROR_INVALID_VALUE,
                              "size %zu and addr 0x%llx must be multiples of the host page size", size,
                              (unsigned long long)addr));
  if (alignment & (alignment - 1))
    return cd_leave(cd_refuse(e, CUDA_ERROR_INVALID_VALUE, "alignment %zu is not a power of two", alignment));
  if ((r = cd_capture_unsafe(e)) || (r = cd_fault_hit(e))) return cd_leave(r);
  /* addr is only a hint: the double places reservations where the host has room. */
  void *va = reserve_va(size, alignment > CD_GRAN ? alignment : CD_GRAN);
  cd_range x = {.va = (uintptr_t)va, .size = size};
  if (!va || cd_ranges_insert(&cd.resv, &x)) {
    if (va) munmap(va, size);
    return cd_leave(CUDA_ERROR_OUT_OF_MEMORY);
  }
  *ptr = x.va;
  return cd_leave(r);
}

CD_EXPORT CUresult CUDAAPI cuMemAddressFree(CUdeviceptr ptr, size_t size) {
  const cd_entry e = CD_ADDRESS_FREE;
  CUresult r = cd_enter(e);
  if (r) return cd_leave(r);
  long i = cd_ranges_find(&cd.resv, ptr);
  if (i < 0 || cd.resv.v[i].va != ptr || cd.resv.v[i].size != size)
    return cd_leave(
        cd_refuse(e, CUDA_ERROR_INVALID_VALUE,
                  "0x%llx+%zu is not a reservation (ptr and size must be what cuMemAddressReserve "
                  "gave and was given)",
                  (unsigned long long)ptr, size));
  if (cd_ranges_overlap(&cd.maps, ptr, size))
    return cd_leave(cd_refuse(e, CUDA_ERROR_INVALID_VALUE, "0x%llx+%zu still has mappings in it",
                              (unsigned long long)ptr, size));
  if ((r = cd_capture_unsafe(e)) || (r = cd_fault_hit(e))) return cd_leave(r);
  munmap((void *)ptr, size);
  cd_ranges_remove(&cd.resv, (size_t)i);
  return cd_leave(r);
}

/* ---- Physical allocations ---- */

CD_EXPORT CUresult CUDAAPI cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
                                       const CUmemAllocationProp *prop, unsigned long long flags) {
  const cd_entry e = CD_MEM_CREATE;
  CUresult r = cd_enter(e);
  if (r || (r = prop_check(e, prop))) return cd_leave(r);
  if (!handle) return cd_leave(cd_refuse(e, CUDA_ERROR_INVALID_VALUE, "handle is NULL"));
  if (flags) return cd_leave(cd_refuse(e, CUDA_ERROR_INVALID_VALUE, "flags 0x%llx (must be 0)", flags));
  if (size == 0 || size % CD_GRAN)
    return cd_leave(cd_refuse(e, CUDA_ERROR_INVALID_VALUE,
                              "size %zu is not a multiple of the %zu-byte granularity", size, CD_GRAN));
  if ((r = cd_capture_unsafe(e)) || (r = cd_fault_hit(e))) return cd_leave(r);
  const cd_device *d = &cd.dev[prop->location.id];
  if (d->no_vmm)
    return cd_leave(cd_refuse(e, CUDA_ERROR_NOT_SUPPORTED, "device %d has no virtual memory management",
                              prop->location.id));
  if ((prop->requestedHandleTypes & CU_MEM_HANDLE_TYPE_FABRIC) && d->fabric)
    return cd_leave(cd_refuse(
        e, d->fabric, "device %d: fabric handles are %s", prop->location.id,
        d->fabric == CUDA_ERROR_NOT_PERMITTED ? "not permitted (no IMEX channel)" : "not supported"));
  if (size / CD_GRAN > d->ngran - d->used) return cd_leave(CUDA_ERROR_OUT_OF_MEMORY);
  cd_phys *ph = phys_new(prop->location.id, size);
  if (!ph || cd_ptrs_add(&cd.handles, ph)) {
    if (ph) phys_free(ph);
    return cd_leave(CUDA_ERROR_OUT_OF_MEMORY);
  }
  ph->types = (unsigned)prop->requestedHandleTypes;
  if (ph->types) {
    /* Exportable: its memory is a file of its own, which the fd names. */
    ph->fd = memfd_create("cuda-double-shareable", MFD_CLOEXEC);
    if (ph->fd < 0 || ftruncate(ph->fd, (off_t)size) != 0) {
      cd_ptrs_remove(&cd.handles, ph);
      phys_free(ph);
      return cd_leave(CUDA_ERROR_OUT_OF_MEMORY);
    }
  }
  ph->id = cd.next_handle;
  cd.next_handle += 0x10;
  *handle = ph->id;
  return cd_leave(r);
}

CD_EXPORT CUresult CUDAAPI cuMemExportToShareableHandle(void *shareableHandle,
                                                        CUmemGenericAllocationHandle handle,
                                                        CUmemAllocationHandleType handleType,
                                                        unsigned long long flags) {
  const cd_entry e = CD_MEM_EXPORT;
  CUresult r = cd_enter(e);
  if (r) return cd_leave(r);
  if (!shareableHandle) return cd_leave(cd_refuse(e, CUDA_ERROR_INVALID_VALUE, "shareableHandle is NULL"));
  if (flags) return cd_leave(cd_refuse(e, CUDA_ERROR_INVALID_VALUE, "flags 0x%llx (must be 0)", flags));
  cd_phys *ph = handle_find(handle);
  if (!ph) cd_die(e, "handle 0x%llx was never created or is gone", (unsigned long long)handle);
  if (handleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR && handleType != CU_MEM_HANDLE_TYPE_FABRIC)
    return cd_leave(cd_refuse(e, CUDA_ERROR_NOT_SUPPORTED,
                              "handle type 0x%x is not modelled (POSIX fd and fabric only)",
                              (unsigned)handleType));
  if (ph->fd < 0 || ph->imported || !(ph->types & (unsigned)handleType))
    return cd_leave(cd_refuse(e, CUDA_ERROR_INVALID_VALUE,
                              "handle 0x%llx was not created with handle type 0x%x",
                              (unsigned long long)handle, (unsigned)handleType));
  if ((r = cd_fault_hit(e))) return cd_leave(r);
  if (handleType == CU_MEM_HANDLE_TYPE_FABRIC) {
    /* The 64 bytes name the handle's file by this process, its fd number
     * and the file's identity: another process of the machine opens it
     * through /proc, with no fd passed (as a node of an IMEX domain would). */
    struct stat st;
    if (fstat(ph->fd, &st) != 0) return cd_leave(CUDA_ERROR_OUT_OF_MEMORY);
    cd_fabric f = {.magic = CD_FABRIC_MAGIC,
                   .pid = (int32_t)getpid(),
                   .fd = ph->fd,
                   .dev = (uint64_t)st.st_dev,
                   .ino = (uint64_t)st.st_ino};
    CUmemFabricHandle out;
    memset(&out, 0, sizeof out);
    memcpy(out.data, &f, sizeof f);
    memcpy(shareableHandle, &out, sizeof out);
    return cd_leave(r);
  }
  int fd = dup(ph->fd);
  if (fd < 0) return cd_leave(CUDA_ERROR_OUT_OF_MEMORY);
  *(int *)shareableHandle = fd;
  return cd_leave(r);
}

CD_EXPORT CUresult CUDAAPI cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *handle,
                                                          void *osHandle,
                                                          CUmemAllocationHandleType shHandleType) {
  const cd_entry e = CD_MEM_IMPORT;
  CUresult r = cd_enter(e);
  struct CUctx_st *ctx = NULL;
  if (r || (r = cd_need_context(e, &ctx))) return cd_leave(r);
  if (!handle) return cd_leave(cd_refuse(e, CUDA_ERROR_INVALID_VALUE, "handle is NULL"));
  if (shHandleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR && shHandleType != CU_MEM_HANDLE_TYPE_FABRIC)
    return cd_leave(cd_refuse(e, CUDA_ERROR_NOT_SUPPORTED,
                              "handle type 0x%x is not modelled (POSIX fd and fabric only)",
                              (unsigned)shHandleType));
  int fd = (int)(intptr_t)osHandle, opened = -1;
  struct stat st;
  if (shHandleType == CU_MEM_HANDLE_TYPE_FABRIC) {
    if (!osHandle) return cd_leave(cd_refuse(e, CUDA_ERROR_INVALID_VALUE, "osHandle is NULL"));
    cd_fabric f;
    memcpy(&f, osHandle, sizeof f);
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/fd/%d", (int)f.pid, (int)f.fd);
    if (f.magic != CD_FABRIC_MAGIC || f.pid <= 0 || f.fd < 0 ||
        (opened = open(path, O_RDWR | O_CLOEXEC)) < 0 || fstat(opened, &st) != 0 ||
        (uint64_t)st.st_dev != f.dev || (uint64_t)st.st_ino != f.ino) {
      if (opened >= 0) close(opened);
      return cd_leave(
          cd_refuse(e, CUDA_ERROR_INVALID_VALUE, "the fabric handle names no exported allocation"));
    }
    fd = opened;
  }
  if (fstat(fd, &st) != 0 || st.st_size <= 0 || st.st_size % (off_t)CD_GRAN) {
    if (opened >= 0) close(opened);
    return cd_leave(cd_refuse(e, CUDA_ERROR_INVALID_VALUE, "fd %d names no exported allocation", fd));
  }
  if ((r = cd_fault_hit(e))) {
    if (opened >= 0) close(opened);
    return cd_leave(r);
  }
  cd_phys *ph = calloc(1, sizeof *ph);
  if (!ph) return cd_leave(CUDA_ERROR_OUT_OF_MEMORY);
  *ph = (cd_phys){.ordinal = ctx->ordinal,
                  .ngran = (size_t)st.st_size / CD_GRAN,
                  .imported = 1,
                  .fd = fcntl(fd, F_DUPFD_CLOEXEC, 0)};
  if (opened >= 0) close(opened);
  ph->id = cd.next_handle;
  if (ph->fd < 0 || cd_ptrs_add(&cd.handles, ph)) {
    if (ph->fd >= 0) close(ph->fd);
    free(ph);
    return cd_leave(CUDA_ERROR_OUT_OF_MEMORY);
  }
  cd.next_handle += 0x10;
  *handle = ph->id;
  return cd_leave(r);
}

/* The live, unreleased handle h; dies on any other value (undefined in the driver). */
static cd_phys *handle_arg(cd_entry e, CUmemGenericAllocationHandle h) {
  cd_phys *ph = handle_find(h);
  if (!ph) cd_die(e, "handle 0x%llx was never created or is gone", (unsigned long long)h);
  if (ph->released)
    cd_die(e, "handle 0x%llx was released (its memory lives only until its mappings go)",
           (unsigned long long)h);
  return ph;
}

CD_EXPORT CUresult CUDAAPI cuMemRelease(CUmemGenericAllocationHandle handle) {
  const cd_entry e = CD_MEM_RELEASE;
  CUresult r = cd_enter(e);
  if (r) return cd_leave(r);
  cd_phys *ph = handle_arg(e, handle);
  if ((r = cd_capture_unsafe(e)) || (r = cd_fault_hit(e))) return cd_leave(r);
  ph->released = 1;
  handle_maybe_free(ph);
  return cd_leave(r);
}

/* ---- Mapping ---- */

CD_EXPORT CUresult CUDAAPI cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                                    CUmemGenericAllocationHandle handle, unsigned long long flags) {
  const cd_entry e = CD_MEM_MAP;
  CUresult r = cd_enter(e);
  if (r) return cd_leave(r);
  cd_phys *ph = handle_arg(e, handle);
  if (flags) return cd_leave(cd_refuse(e, CUDA_ERROR_INVALID_VALUE, "flags 0x%llx (must be 0)", flags));
  if (size == 0 || ptr % CD_GRAN || size % CD_GRAN || offset % CD_GRAN)
    return cd_leave(cd_refuse(e, CUDA_ERROR_INVALID_VALUE,
                              "ptr 0x%llx, size %zu and offset %zu must be multiples of the granularity",
                              (unsigned long long)ptr, size, offset));
  if (offset > ph->ngran * CD_GRAN || size > ph->ngran * CD_GRAN - offset)
    return cd_leave(cd_refuse(e, CUDA_ERROR_INVALID_VALUE,
                              "offset %zu + size %zu exceeds the %zu-byte allocation", offset, size,
                              ph->ngran * CD_GRAN));
  long ri = cd_ranges_find(&cd.resv, ptr);
  if (ri < 0 || ptr + size > cd.resv.v[ri].va + cd.resv.v[ri].size)
    return cd_leave(cd_refuse(e, CUDA_ERROR_INVALID_VALUE, "0x%llx+%zu is not inside one reservation",
                              (unsigned long long)ptr, size));
  if (cd_ranges_overlap(&cd.maps, ptr, size))
    return cd_leave(cd_refuse(e, CUDA_ERROR_INVALID_VALUE, "part of 0x%llx+%zu is already mapped",
                              (unsigned long long)ptr, size));
  if ((r = cd_capture_unsafe(e)) || (r = cd_fault_hit(e))) return cd_leave(r);
  cd_range m = {.va = ptr, .size = size, .ph = ph, .offset = offset};
  if (map_granules(ptr, size, ph, offset, PROT_NONE)) return cd_leave(CUDA_ERROR_OUT_OF_MEMORY);
  if (cd_ranges_insert(&cd.maps, &m)) {
    protnone(ptr, size);
    return cd_leave(CUDA_ERROR_OUT_OF_MEMORY);
  }
  ph->maps++;
  return cd_leave(r);
}

/* [ptr, ptr+size) as a run of whole, adjacent mappings: maps.v[*first..*end).
 * NULL, or why it is not (into why[]). */
static const char *whole_mappings(uintptr_t ptr, size_t size, size_t *first, size_t *end, char *why,
                                  size_t len) {
  long k = cd_ranges_find(&cd.maps, ptr);
  if (k < 0) return "nothing is mapped at its start";
  if (cd.maps.v[k].va != ptr) return "it starts inside a mapping";
  size_t j = (size_t)k;
  uintptr_t at = ptr;
  while (j < cd.maps.n && cd.maps.v[j].va == at && at - ptr < size) at += cd.maps.v[j++].size;
  if (at - ptr > size) return "it ends inside a mapping";
  if (at - ptr < size) {
    snprintf(why, len, "it is not wholly mapped: nothing is mapped at 0x%llx", (unsigned long long)at);
    return why;
  }
  *first = (size_t)k;
  *end = j;
  return NULL;
}

CD_EXPORT CUresult CUDAAPI cuMemUnmap(CUdeviceptr ptr, size_t size) {
  const cd_entry e = CD_MEM_UNMAP;
  CUresult r = cd_enter(e);
  if (r) return cd_leave(r);
  size_t i, j;
  char buf[96];
  const char *why = size ? whole_mappings(ptr, size, &i, &j, buf, sizeof buf) : "size is 0";
  if (why)
    return cd_leave(
        cd_refuse(e, CUDA_ERROR_INVALID_VALUE, "0x%llx+%zu: %s", (unsigned long long)ptr, size, why));
  if ((r = cd_capture_unsafe(e)) || (r = cd_fault_hit(e))) return cd_leave(r);
  while (j-- > i) {
    cd_range m = cd.maps.v[j];
    protnone(m.va, m.size);
    cd_ranges_remove(&cd.maps, j);
    m.ph->maps--;
    handle_maybe_free(m.ph);
  }
  return cd_leave(r);
}

CD_EXPORT CUresult CUDAAPI cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc,
                                          size_t count) {
  const cd_entry e = CD_MEM_SET_ACCESS;
  CUresult r = cd_enter(e);
  if (r) return cd_leave(r);
  if (!desc || count == 0) return cd_leave(cd_refuse(e, CUDA_ERROR_INVALID_VALUE, "no access descriptors"));
  for (size_t k = 0; k < count; k++) {
    const CUmemAccessDesc *a = &desc[k];
    if (a->location.type == CU_MEM_LOCATION_TYPE_HOST || a->location.type == CU_MEM_LOCATION_TYPE_HOST_NUMA)
      cd_die(e, "host access to device memory is not modelled");
    if (a->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
      return cd_leave(
          cd_refuse(e, CUDA_ERROR_INVALID_VALUE, "desc[%zu].location.type %d", k, (int)a->location.type));
    if (a->location.id < 0 || a->location.id >= cd.ndev)
      return cd_leave(cd_refuse(e, CUDA_ERROR_INVALID_DEVICE, "desc[%zu].location.id %d (%d devices)", k,
                                a->location.id, cd.ndev));
    if (a->flags != CU_MEM_ACCESS_FLAGS_PROT_NONE && a->flags != CU_MEM_ACCESS_FLAGS_PROT_READ &&
        a->flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
      return cd_leave(cd_refuse(e, CUDA_ERROR_INVALID_VALUE, "desc[%zu].flags 0x%x", k, (unsigned)a->flags));
  }
  size_t i, j;
  char buf[96];
  const char *why = size ? whole_mappings(ptr, size, &i, &j, buf, sizeof buf) : "size is 0";
  if (why)
    return cd_leave(cd_refuse(e, CUDA_ERROR_INVALID_VALUE, "0x%llx+%zu must be wholly mapped: %s",
                              (unsigned long long)ptr, size, why));
  if ((r = cd_capture_unsafe(e)) || (r = cd_fault_hit(e))) return cd_leave(r);
  for (size_t k = i; k < j; k++) {
    cd_range *m = &cd.maps.v[k];
    for (size_t x = 0; x < count; x++) m->access[desc[x].location.id] = (unsigned char)desc[x].flags;
    if (mprotect((void *)m->va, m->size, host_prot(m)) != 0)
      cd_die(e, "mprotect failed: %s", strerror(errno));
  }
  return cd_leave(r);
}

CD_EXPORT CUresult CUDAAPI cuMemGetAccess(unsigned long long *flags, const CUmemLocation *location,
                                          CUdeviceptr ptr) {
  const cd_entry e = CD_MEM_GET_ACCESS;
  CUresult r = cd_enter(e);
  if (r) return cd_leave(r);
  if (!flags || !location) return cd_leave(cd_refuse(e, CUDA_ERROR_INVALID_VALUE, "a NULL argument"));
  if (location->type != CU_MEM_LOCATION_TYPE_DEVICE || location->id < 0 || location->id >= cd.ndev)
    return cd_leave(
        cd_refuse(e, CUDA_ERROR_INVALID_VALUE, "location %d/%d", (int)location->type, location->id));
  long i = cd_ranges_find(&cd.maps, ptr);
  if (i < 0)
    return cd_leave(cd_refuse(e, CUDA_ERROR_INVALID_VALUE, "0x%llx is not mapped", (unsigned long long)ptr));
  *flags = cd.maps.v[i].access[location->id];
  return cd_leave(r);
}

/* ---- Copies ---- */

/* Can the device `ordinal` read (or write) every byte of [p, p+n)? Else the reason. */
static const char *device_range_ok(uintptr_t p, size_t n, int ordinal, int write) {
  long i = cd_ranges_find(&cd.mallocs, p);
  if (i >= 0)
    return p + n <= cd.mallocs.v[i].va + cd.mallocs.v[i].size ? NULL : "it runs past the cuMemAlloc'd range";
  uintptr_t at = p;
  while (at < p + n) {
    long k = cd_ranges_find(&cd.maps, at);
    if (k < 0) return "part of it is not mapped";
    unsigned a = cd.maps.v[k].access[ordinal];
    if (!(a & CU_MEM_ACCESS_FLAGS_PROT_READ) || (write && a != CU_MEM_ACCESS_FLAGS_PROT_READWRITE))
      return "the current device has no access to part of it (cuMemSetAccess)";
    at = cd.maps.v[k].va + cd.maps.v[k].size;
  }
  return NULL;
}

static CUresult copy(cd_entry e, void *host, CUdeviceptr dev, size_t n, int to_host) {
  struct CUctx_st *ctx;
  CUresult r = cd_enter(e);
  if (r || (r = cd_need_context(e, &ctx))) return cd_leave(r);
  if (n == 0) return cd_leave(r);
  if (!host) return cd_leave(cd_refuse(e, CUDA_ERROR_INVALID_VALUE, "the host pointer is NULL"));
  const char *why = device_range_ok(dev, n, ctx->ordinal, !to_host);
  if (why)
    return cd_leave(cd_refuse(e, CUDA_ERROR_INVALID_VALUE, "device range 0x%llx+%zu: %s",
                              (unsigned long long)dev, n, why));
  /* A synchronous copy on the legacy stream waits for it and for the blocking streams. */
  if (cd_blocking_capture(ctx))
    return cd_leave(
        cd_refuse(e, CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, "a blocking stream of the context is capturing"));
  if ((r = cd_capture_unsafe(e)) || (r = cd_fault_hit(e))) return cd_leave(r);
  pthread_mutex_unlock(&cd.mu);
  memcpy(to_host ? host : (void *)dev, to_host ? (void *)dev : host, n);
  return r;
}

CD_EXPORT CUresult CUDAAPI cuMemcpyDtoH(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount) {
  return copy(CD_MEMCPY_DTOH, dstHost, srcDevice, ByteCount, 1);
}
CD_EXPORT CUresult CUDAAPI cuMemcpyHtoD(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount) {
  return copy(CD_MEMCPY_HTOD, (void *)(uintptr_t)srcHost, dstDevice, ByteCount, 0);
}

/* ---- Pinned host memory: cuMemHostAlloc, cuMemFreeHost ----
 * Page-locked host memory: plain host memory here, remembered so that
 * cuMemFreeHost takes only what cuMemHostAlloc gave and a leak is named. */

CD_EXPORT CUresult CUDAAPI cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags) {
  const cd_entry e = CD_MEM_HOST_ALLOC;
  struct CUctx_st *ctx;
  CUresult r = cd_enter(e);
  if (r || (r = cd_need_context(e, &ctx))) return cd_leave(r);
  if (!pp) return cd_leave(cd_refuse(e, CUDA_ERROR_INVALID_VALUE, "pp is NULL"));
  if (bytesize == 0) return cd_leave(cd_refuse(e, CUDA_ERROR_INVALID_VALUE, "bytesize is 0"));
  if (Flags &
      ~(unsigned)(CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_WRITECOMBINED))
    return cd_leave(cd_refuse(e, CUDA_ERROR_INVALID_VALUE, "unknown flags 0x%x", Flags));
  if ((r = cd_capture_unsafe(e)) || (r = cd_fault_hit(e))) return cd_leave(r);
  void *p = malloc(bytesize);
  cd_range m = {.va = (uintptr_t)p, .size = bytesize, .ctx = ctx};
  if (!p || cd_ranges_insert(&cd.pinned, &m)) {
    free(p);
    return cd_leave(CUDA_ERROR_OUT_OF_MEMORY);
  }
  *pp = p;
  return cd_leave(r);
}

CD_EXPORT CUresult CUDAAPI cuMemFreeHost(void *p) {
  const cd_entry e = CD_MEM_FREE_HOST;
  struct CUctx_st *ctx;
  CUresult r = cd_enter(e);
  if (r || (r = cd_need_context(e, &ctx))) return cd_leave(r);
  long i = cd_ranges_find(&cd.pinned, (uintptr_t)p);
  if (i < 0 || cd.pinned.v[i].va != (uintptr_t)p)
    return cd_leave(cd_refuse(e, CUDA_ERROR_INVALID_VALUE, "%p was not returned by cuMemHostAlloc", p));
  if ((r = cd_fault_hit(e))) return cd_leave(r);
  cd_ranges_remove(&cd.pinned, (size_t)i);
  free(p);
  return cd_leave(r);
}

/* ---- Leaks ---- */

size_t cd_memory_describe_leaks(char *buf, size_t len, size_t *at) {
  size_t n = 0;
  for (size_t i = 0; i < cd.mallocs.n; i++, n++)
    cd_report(buf, len, at, "cuMemAlloc'd 0x%llx (%zu bytes) not freed\n",
              (unsigned long long)cd.mallocs.v[i].va, cd.mallocs.v[i].size);
  for (size_t i = 0; i < cd.handles.n; i++, n++) {
    const cd_phys *ph = cd.handles.v[i];
    cd_report(buf, len, at, "handle 0x%llx (%zu bytes on device %d) %s\n", (unsigned long long)ph->id,
              ph->ngran * CD_GRAN, ph->ordinal, ph->released ? "released but still mapped" : "not released");
  }
  for (size_t i = 0; i < cd.maps.n; i++, n++)
    cd_report(buf, len, at, "mapping 0x%llx+%zu not unmapped\n", (unsigned long long)cd.maps.v[i].va,
              cd.maps.v[i].size);
  for (size_t i = 0; i < cd.pinned.n; i++, n++)
    cd_report(buf, len, at, "cuMemHostAlloc'd %p (%zu bytes) not freed\n", (void *)cd.pinned.v[i].va,
              cd.pinned.v[i].size);
  for (size_t i = 0; i < cd.resv.n; i++, n++)
    cd_report(buf, len, at, "reservation 0x%llx+%zu not freed\n", (unsigned long long)cd.resv.v[i].va,
              cd.resv.v[i].size);
  return n;
}
