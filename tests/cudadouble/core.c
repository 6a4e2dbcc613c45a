/* core.c — the CUDA driver double: initialisation, devices, primary
 * contexts, error names, the capture rules shared by every call, injected
 * faults and the test controls.
 *
 * Owns: the process-wide state and its lock, the per-thread current context
 * and capture mode. At exit, anything still alive is reported as a leak and
 * the process aborts.
 */
#include <errno.h>
#include <execinfo.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "double.h"

cd_state cd = {.mu = PTHREAD_MUTEX_INITIALIZER, .next_handle = (uint64_t)1 << 40};
_Thread_local struct CUctx_st *cd_current;
_Thread_local CUstreamCaptureMode cd_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;
static _Thread_local char last_refusal[512];

#define CTX_MAGIC 0xC7C7u

const char *const cd_entry_name[CD_NENTRIES] = {
#define CD_X(id, name) name,
    CD_ENTRIES(CD_X)
#undef CD_X
};

/* ---- Entry, refusal, death ---- */

CUresult cd_enter(cd_entry e) {
  pthread_mutex_lock(&cd.mu);
  cd.calls[e]++;
  last_refusal[0] = 0;
  if (cd.initialised || e == CD_INIT || e == CD_GET_ERROR_NAME || e == CD_GET_ERROR_STRING)
    return CUDA_SUCCESS;
  return cd_refuse(e, CUDA_ERROR_NOT_INITIALIZED, "cuInit has not been called");
}

CUresult cd_leave(CUresult r) {
  pthread_mutex_unlock(&cd.mu);
  return r;
}

static const char *result_name(CUresult r);

CUresult cd_refuse(cd_entry e, CUresult code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = snprintf(last_refusal, sizeof last_refusal, "%s: %s: ", cd_entry_name[e], result_name(code));
  vsnprintf(last_refusal + n, sizeof last_refusal - (size_t)n, fmt, ap);
  va_end(ap);
  if (cd.quiet) return code; /* made on purpose: not reported, not counted */
  if (code != CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED) cd.refusals++; /* those count as captures_broken */
  fprintf(stderr, "cuda double: refused %s\n", last_refusal);
  if (getenv("GA_CUDA_DOUBLE_BACKTRACE")) { /* who made the call */
    void *frames[32];
    backtrace_symbols_fd(frames, backtrace(frames, 32), 2);
  }
  return code;
}

_Noreturn void cd_die(cd_entry e, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "cuda double: %s: ", cd_entry_name[e]);
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
  abort();
}

CUresult cd_fault_hit(cd_entry e) {
  for (int i = 0; i < cd.nfaults; i++) {
    cd_fault *f = &cd.faults[i];
    if (!(f->mask >> e & 1)) continue;
    if (f->countdown > 1) {
      f->countdown--;
      continue;
    }
    CUresult r = f->result;
    if (!f->repeat) cd.faults[i--] = cd.faults[--cd.nfaults];
    cd.faults_fired++;
    return r;
  }
  return CUDA_SUCCESS;
}

void cd_report(char *buf, size_t len, size_t *at, const char *fmt, ...) {
  if (*at >= len) return;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(buf + *at, len - *at, fmt, ap);
  va_end(ap);
  if (n > 0) *at = *at + (size_t)n < len ? *at + (size_t)n : len;
}

/* ---- Registries ---- */

int cd_ptrs_add(cd_ptrs *p, void *x) {
  if (p->n == p->cap) {
    size_t cap = p->cap ? 2 * p->cap : 16;
    void **v = realloc(p->v, cap * sizeof *v);
    if (!v) return -1;
    p->v = v;
    p->cap = cap;
  }
  p->v[p->n++] = x;
  return 0;
}
int cd_ptrs_has(const cd_ptrs *p, const void *x) {
  for (size_t i = 0; i < p->n; i++)
    if (p->v[i] == x) return 1;
  return 0;
}
void cd_ptrs_remove(cd_ptrs *p, const void *x) {
  for (size_t i = 0; i < p->n; i++)
    if (p->v[i] == x) {
      memmove(&p->v[i], &p->v[i + 1], (p->n - i - 1) * sizeof *p->v);
      p->n--;
      return;
    }
}

size_t cd_ranges_lower(const cd_ranges *r, uintptr_t va) {
  size_t lo = 0, hi = r->n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (r->v[mid].va < va)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}
long cd_ranges_find(const cd_ranges *r, uintptr_t addr) {
  size_t i = cd_ranges_lower(r, addr + 1);
  if (i == 0) return -1;
  const cd_range *x = &r->v[i - 1];
  return addr - x->va < x->size ? (long)(i - 1) : -1;
}
int cd_ranges_insert(cd_ranges *r, const cd_range *x) {
  if (r->n == r->cap) {
    size_t cap = r->cap ? 2 * r->cap : 16;
    cd_range *v = realloc(r->v, cap * sizeof *v);
    if (!v) return -1;
    r->v = v;
    r->cap = cap;
  }
  size_t i = cd_ranges_lower(r, x->va);
  memmove(&r->v[i + 1], &r->v[i], (r->n - i) * sizeof *r->v);
  r->v[i] = *x;
  r->n++;
  return 0;
}
void cd_ranges_remove(cd_ranges *r, size_t i) {
  memmove(&r->v[i], &r->v[i + 1], (r->n - i - 1) * sizeof *r->v);
  r->n--;
}
int cd_ranges_overlap(const cd_ranges *r, uintptr_t va, size_t size) {
  size_t i = cd_ranges_lower(r, va);
  if (i < r->n && r->v[i].va < va + size) return 1;
  return i > 0 && r->v[i - 1].va + r->v[i - 1].size > va;
}

/* ---- Errors ---- */

/* The codes the double returns, with the driver's names and strings. */
#define CD_RESULTS(X)                                                                                     \
  X(CUDA_SUCCESS, "no error")                                                                             \
  X(CUDA_ERROR_INVALID_VALUE, "invalid argument")                                                         \
  X(CUDA_ERROR_OUT_OF_MEMORY, "out of memory")                                                            \
  X(CUDA_ERROR_NOT_INITIALIZED, "initialization error")                                                   \
  X(CUDA_ERROR_DEINITIALIZED, "driver shutting down")                                                     \
  X(CUDA_ERROR_NO_DEVICE, "no CUDA-capable device is detected")                                           \
  X(CUDA_ERROR_INVALID_DEVICE, "invalid device ordinal")                                                  \
  X(CUDA_ERROR_INVALID_CONTEXT, "invalid device context")                                                 \
  X(CUDA_ERROR_CONTEXT_IS_DESTROYED, "context is destroyed")                                              \
  X(CUDA_ERROR_INVALID_HANDLE, "invalid resource handle")                                                 \
  X(CUDA_ERROR_ILLEGAL_STATE, "the operation cannot be performed in the present state")                   \
  X(CUDA_ERROR_NOT_READY, "device not ready")                                                             \
  X(CUDA_ERROR_NOT_PERMITTED, "operation not permitted")                                                  \
  X(CUDA_ERROR_NOT_SUPPORTED, "operation not supported")                                                  \
  X(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "operation not permitted when stream is capturing")            \
  X(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, "operation failed due to a previous error during capture")     \
  X(CUDA_ERROR_STREAM_CAPTURE_MERGE, "operation would result in a merge of separate capture sequences")   \
  X(CUDA_ERROR_STREAM_CAPTURE_UNMATCHED, "capture was not ended in the same stream as it began")          \
  X(CUDA_ERROR_STREAM_CAPTURE_UNJOINED, "capturing stream has unjoined work")                             \
  X(CUDA_ERROR_STREAM_CAPTURE_ISOLATION, "dependency created on uncaptured work in another stream")       \
  X(CUDA_ERROR_STREAM_CAPTURE_IMPLICIT,                                                                   \
    "operation would make the legacy stream depend on a capturing blocking stream")                       \
  X(CUDA_ERROR_CAPTURED_EVENT, "operation not permitted on an event last recorded in a capturing stream") \
  X(CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD,                                                               \
    "attempt to terminate a thread-local capture sequence from another thread")                           \
  X(CUDA_ERROR_UNKNOWN, "unknown error")

static int result_lookup(CUresult r, const char **name, const char **text) {
  switch (r) {
#define CD_X(code, str) \
  case code: *name = #code, *text = str; return 1;
    CD_RESULTS(CD_X)
#undef CD_X
    default: return 0;
  }
}

static const char *result_name(CUresult r) {
  const char *name, *text;
  return result_lookup(r, &name, &text) ? name : "(a code the double does not know)";
}

CD_EXPORT CUresult CUDAAPI cuGetErrorName(CUresult error, const char **pStr) {
  CUresult r = cd_enter(CD_GET_ERROR_NAME);
  const char *name, *text;
  if (!pStr) return cd_leave(cd_refuse(CD_GET_ERROR_NAME, CUDA_ERROR_INVALID_VALUE, "pStr is NULL"));
  if (!result_lookup(error, &name, &text))
    cd_die(CD_GET_ERROR_NAME, "code %d is not one the double returns; it does not know its name", (int)error);
  *pStr = name;
  return cd_leave(r);
}

CD_EXPORT CUresult CUDAAPI cuGetErrorString(CUresult error, const char **pStr) {
  CUresult r = cd_enter(CD_GET_ERROR_STRING);
  const char *name, *text;
  if (!pStr) return cd_leave(cd_refuse(CD_GET_ERROR_STRING, CUDA_ERROR_INVALID_VALUE, "pStr is NULL"));
  if (!result_lookup(error, &name, &text))
    cd_die(CD_GET_ERROR_STRING, "code %d is not one the double returns; it does not know its text",
           (int)error);
  *pStr = text;
  return cd_leave(r);
}

/* ---- Initialisation and devices ---- */

static int live_objects(void) {
  int refs = 0;
  for (int i = 0; i < cd.ndev; i++) refs += cd.dev[i].ctx.refs;
  return refs || cd.handles.n || cd.resv.n || cd.maps.n || cd.mallocs.n || cd.pinned.n || cd.streams.n ||
         cd.events.n || cd.graphs.n;
}

/* Replaces the machine. pre: nothing alive. */
static CUresult machine_set(int ndev, size_t capacity) {
  if (ndev < 1 || ndev > CD_MAX_DEV || capacity < CD_GRAN || capacity % CD_GRAN)
    return CUDA_ERROR_INVALID_VALUE;
  for (int i = 0; i < cd.ndev; i++) cd_memory_close(i);
  cd.ndev = 0;
  for (int i = 0; i < ndev; i++) {
    if (cd_memory_open(i, capacity) != 0) {
      for (int j = 0; j < i; j++) cd_memory_close(j);
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
    cd.dev[i].ctx = (struct CUctx_st){.magic = CTX_MAGIC, .ordinal = i};
  }
  cd.ndev = ndev;
  cd.capacity = capacity;
  cd.configured = 1;
  cd.waits = cd.faults_fired = cd.captures_broken = cd.refusals = 0; /* a new machine */
  cd.nfaults = 0;
  return CUDA_SUCCESS;
}

static long env_long(const char *name, long dflt) {
  const char *v = getenv(name);
  if (!v || !*v) return dflt;
  char *end;
  long x = strtol(v, &end, 10);
  if (*end || x <= 0) {
    fprintf(stderr, "cuda double: %s=%s is not a positive number\n", name, v);
    abort();
  }
  return x;
}

CD_EXPORT CUresult CUDAAPI cuInit(unsigned int Flags) {
  CUresult r = cd_enter(CD_INIT);
  if (Flags != 0)
    return cd_leave(cd_refuse(CD_INIT, CUDA_ERROR_INVALID_VALUE, "Flags %u (must be 0)", Flags));
  if ((r = cd_fault_hit(CD_INIT))) return cd_leave(r);
  if (!cd.configured) {
    long n = env_long("GA_CUDA_DOUBLE_DEVICES", 1), mb = env_long("GA_CUDA_DOUBLE_MEMORY_MB", 1024);
    r = machine_set((int)n, (size_t)mb << 20);
    if (r) cd_die(CD_INIT, "cannot make %ld devices of %ld MiB", n, mb);
  }
  cd.initialised = 1;
  return cd_leave(r);
}

CD_EXPORT CUresult CUDAAPI cuDeviceGetCount(int *count) {
  CUresult r = cd_enter(CD_DEVICE_GET_COUNT);
  if (r) return cd_leave(r);
  if (!count) return cd_leave(cd_refuse(CD_DEVICE_GET_COUNT, CUDA_ERROR_INVALID_VALUE, "count is NULL"));
  if ((r = cd_fault_hit(CD_DEVICE_GET_COUNT))) return cd_leave(r);
  *count = cd.ndev;
  return cd_leave(r);
}

CD_EXPORT CUresult CUDAAPI cuDeviceGet(CUdevice *device, int ordinal) {
  CUresult r = cd_enter(CD_DEVICE_GET);
  if (r) return cd_leave(r);
  if (!device) return cd_leave(cd_refuse(CD_DEVICE_GET, CUDA_ERROR_INVALID_VALUE, "device is NULL"));
  if (ordinal < 0 || ordinal >= cd.ndev)
    return cd_leave(
        cd_refuse(CD_DEVICE_GET, CUDA_ERROR_INVALID_DEVICE, "ordinal %d (%d devices)", ordinal, cd.ndev));
  if ((r = cd_fault_hit(CD_DEVICE_GET))) return cd_leave(r);
  *device = ordinal;
  return cd_leave(r);
}

/* Only the attribute gardenalloc asks for is modelled. */
CD_EXPORT CUresult CUDAAPI cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev) {
  CUresult r = cd_enter(CD_DEVICE_GET_ATTRIBUTE);
  if (r) return cd_leave(r);
  if (!pi) return cd_leave(cd_refuse(CD_DEVICE_GET_ATTRIBUTE, CUDA_ERROR_INVALID_VALUE, "pi is NULL"));
  if (dev < 0 || dev >= cd.ndev)
    return cd_leave(cd_refuse(CD_DEVICE_GET_ATTRIBUTE, CUDA_ERROR_INVALID_DEVICE, "device %d (%d devices)",
                              dev, cd.ndev));
  if (attrib != CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED)
    cd_die(CD_DEVICE_GET_ATTRIBUTE, "attribute %d is not modelled", (int)attrib);
  if ((r = cd_fault_hit(CD_DEVICE_GET_ATTRIBUTE))) return cd_leave(r);
  *pi = !cd.dev[dev].no_vmm;
  return cd_leave(r);
}

/* ---- Primary contexts ---- */

CD_EXPORT CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev) {
  CUresult r = cd_enter(CD_PRIMARY_RETAIN);
  if (r) return cd_leave(r);
  if (!pctx) return cd_leave(cd_refuse(CD_PRIMARY_RETAIN, CUDA_ERROR_INVALID_VALUE, "pctx is NULL"));
  if (dev < 0 || dev >= cd.ndev)
    return cd_leave(
        cd_refuse(CD_PRIMARY_RETAIN, CUDA_ERROR_INVALID_DEVICE, "device %d (%d devices)", dev, cd.ndev));
  if ((r = cd_fault_hit(CD_PRIMARY_RETAIN))) return cd_leave(r);
  cd.dev[dev].ctx.refs++;
  *pctx = &cd.dev[dev].ctx;
  return cd_leave(r);
}

CD_EXPORT CUresult CUDAAPI cuDevicePrimaryCtxRelease(CUdevice dev) {
  CUresult r = cd_enter(CD_PRIMARY_RELEASE);
  if (r) return cd_leave(r);
  if (dev < 0 || dev >= cd.ndev)
    return cd_leave(
        cd_refuse(CD_PRIMARY_RELEASE, CUDA_ERROR_INVALID_DEVICE, "device %d (%d devices)", dev, cd.ndev));
  if (cd.dev[dev].ctx.refs == 0)
    return cd_leave(
        cd_refuse(CD_PRIMARY_RELEASE, CUDA_ERROR_INVALID_CONTEXT,
                  "device %d's primary context is not retained (released more often than retained)", dev));
  if ((r = cd_fault_hit(CD_PRIMARY_RELEASE))) return cd_leave(r);
  cd.dev[dev].ctx.refs--;
  return cd_leave(r);
}

static int ctx_valid(const struct CUctx_st *c) {
  for (int i = 0; i < cd.ndev; i++)
    if (c == &cd.dev[i].ctx) return 1;
  return 0;
}

CD_EXPORT CUresult CUDAAPI cuCtxGetCurrent(CUcontext *pctx) {
  CUresult r = cd_enter(CD_CTX_GET_CURRENT);
  if (r) return cd_leave(r);
  if (!pctx) return cd_leave(cd_refuse(CD_CTX_GET_CURRENT, CUDA_ERROR_INVALID_VALUE, "pctx is NULL"));
  if ((r = cd_fault_hit(CD_CTX_GET_CURRENT))) return cd_leave(r);
  *pctx = cd_current;
  return cd_leave(r);
}

CD_EXPORT CUresult CUDAAPI cuCtxSetCurrent(CUcontext ctx) {
  CUresult r = cd_enter(CD_CTX_SET_CURRENT);
  if (r) return cd_leave(r);
  if (ctx && !ctx_valid(ctx))
    cd_die(CD_CTX_SET_CURRENT, "%p is not a context (only primary contexts exist here)", (void *)ctx);
  if (ctx && ctx->refs == 0)
    return cd_leave(cd_refuse(CD_CTX_SET_CURRENT, CUDA_ERROR_INVALID_CONTEXT,
                              "device %d's primary context is not retained", ctx->ordinal));
  if ((r = cd_fault_hit(CD_CTX_SET_CURRENT))) return cd_leave(r);
  cd_current = ctx;
  return cd_leave(r);
}

CUresult cd_need_context(cd_entry e, struct CUctx_st **out) {
  if (!cd_current) return cd_refuse(e, CUDA_ERROR_INVALID_CONTEXT, "no context is current on this thread");
  if (cd_current->refs == 0)
    return cd_refuse(e, CUDA_ERROR_CONTEXT_IS_DESTROYED,
                     "the current context (device %d's primary) was released by its last owner",
                     cd_current->ordinal);
  *out = cd_current;
  return CUDA_SUCCESS;
}

/* ---- Capture rules ---- */

CUresult cd_capture_unsafe(cd_entry e) {
  if (cd_mode == CU_STREAM_CAPTURE_MODE_RELAXED) return CUDA_SUCCESS;
  pthread_t self = pthread_self();
  int prohibited = 0;
  for (size_t i = 0; i < cd.streams.n; i++) {
    struct CUstream_st *stream = cd.streams.v[i];
    if (!stream->cap.active || stream->cap.mode == CU_STREAM_CAPTURE_MODE_RELAXED) continue;
    int local = pthread_equal(stream->cap.thread, self);
    /* The thread's own capture forbids it in global and thread-local mode;
     * another thread's global capture forbids it in global mode. */
    if (local ||
        (cd_mode == CU_STREAM_CAPTURE_MODE_GLOBAL && stream->cap.mode == CU_STREAM_CAPTURE_MODE_GLOBAL)) {
      stream->cap.invalidated = 1;
      prohibited = 1;
    }
  }
  if (!prohibited) return CUDA_SUCCESS;
  cd.captures_broken++;
  return cd_refuse(
      e, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
      "a potentially unsafe call while a capture is underway and this thread is in the %s capture "
      "mode (the capture is invalidated)",
      cd_mode == CU_STREAM_CAPTURE_MODE_GLOBAL ? "global" : "thread-local");
}

int cd_mode_valid(CUstreamCaptureMode m) {
  return m == CU_STREAM_CAPTURE_MODE_GLOBAL || m == CU_STREAM_CAPTURE_MODE_THREAD_LOCAL ||
         m == CU_STREAM_CAPTURE_MODE_RELAXED;
}

CD_EXPORT CUresult CUDAAPI cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *mode) {
  CUresult r = cd_enter(CD_EXCHANGE_CAPTURE_MODE);
  if (r) return cd_leave(r);
  if (!mode) return cd_leave(cd_refuse(CD_EXCHANGE_CAPTURE_MODE, CUDA_ERROR_INVALID_VALUE, "mode is NULL"));
  if (!cd_mode_valid(*mode))
    return cd_leave(cd_refuse(CD_EXCHANGE_CAPTURE_MODE, CUDA_ERROR_INVALID_VALUE, "mode %d", (int)*mode));
  if ((r = cd_fault_hit(CD_EXCHANGE_CAPTURE_MODE))) return cd_leave(r);
  CUstreamCaptureMode prev = cd_mode;
  cd_mode = *mode;
  *mode = prev;
  return cd_leave(r);
}

/* ---- Entry points the double does not model ----
 * The driver also exports the unversioned, older ABI of these calls; cuda.h
 * maps the names to the _v2 entry points. Resolving an old one is a bug. */

#define CD_LEGACY(name, v2)                                                                        \
  CD_EXPORT void name(void);                                                                       \
  CD_EXPORT void name(void) {                                                                      \
    fprintf(stderr, "cuda double: %s is the old entry point; cuda.h maps it to %s\n", #name, #v2); \
    abort();                                                                                       \
  }
#undef cuMemGetInfo
#undef cuMemAlloc
#undef cuMemFree
#undef cuMemcpyDtoH
#undef cuMemcpyHtoD
#undef cuEventDestroy
#undef cuStreamDestroy
#undef cuDevicePrimaryCtxRelease
#undef cuStreamBeginCapture
CD_LEGACY(cuMemGetInfo, cuMemGetInfo_v2)
CD_LEGACY(cuMemAlloc, cuMemAlloc_v2)
CD_LEGACY(cuMemFree, cuMemFree_v2)
CD_LEGACY(cuMemcpyDtoH, cuMemcpyDtoH_v2)
CD_LEGACY(cuMemcpyHtoD, cuMemcpyHtoD_v2)
CD_LEGACY(cuEventDestroy, cuEventDestroy_v2)
CD_LEGACY(cuStreamDestroy, cuStreamDestroy_v2)
CD_LEGACY(cuDevicePrimaryCtxRelease, cuDevicePrimaryCtxRelease_v2)
CD_LEGACY(cuStreamBeginCapture, cuStreamBeginCapture_v2)

/* ---- Test controls ---- */

CD_EXPORT CUresult cudadouble_configure(int devices, size_t bytes) {
  pthread_mutex_lock(&cd.mu);
  CUresult r = live_objects() ? CUDA_ERROR_ILLEGAL_STATE : machine_set(devices, bytes);
  pthread_mutex_unlock(&cd.mu);
  return r;
}

CD_EXPORT CUresult cudadouble_set_vmm(int ordinal, int supported) {
  pthread_mutex_lock(&cd.mu);
  CUresult r = ordinal < 0 || ordinal >= cd.ndev ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
  if (!r) cd.dev[ordinal].no_vmm = !supported;
  pthread_mutex_unlock(&cd.mu);
  return r;
}

CD_EXPORT CUresult cudadouble_set_fabric(int ordinal, CUresult result) {
  pthread_mutex_lock(&cd.mu);
  CUresult r = ordinal < 0 || ordinal >= cd.ndev ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
  if (!r) cd.dev[ordinal].fabric = result;
  pthread_mutex_unlock(&cd.mu);
  return r;
}

CD_EXPORT CUresult cudadouble_usage_get(int ordinal, cudadouble_usage *u) {
  pthread_mutex_lock(&cd.mu);
  if (ordinal < 0 || ordinal >= cd.ndev || !u) {
    pthread_mutex_unlock(&cd.mu);
    return CUDA_ERROR_INVALID_VALUE;
  }
  const struct CUctx_st *ctx = &cd.dev[ordinal].ctx;
  *u = (cudadouble_usage){.capacity = cd.dev[ordinal].ngran * CD_GRAN,
                          .used = cd.dev[ordinal].used * CD_GRAN,
                          .live_reservations = cd.resv.n,
                          .context_refs = ctx->refs,
                          .waits = cd.waits,
                          .faults_fired = cd.faults_fired,
                          .captures_broken = cd.captures_broken,
                          .refusals = cd.refusals};
  for (size_t i = 0; i < cd.mallocs.n; i++) u->live_mallocs += cd.mallocs.v[i].ph->ordinal == ordinal;
  u->live_pinned = cd.pinned.n;
  for (size_t i = 0; i < cd.maps.n; i++) u->live_mappings += cd.maps.v[i].ph->ordinal == ordinal;
  for (size_t i = 0; i < cd.handles.n; i++)
    u->live_handles += ((cd_phys *)cd.handles.v[i])->ordinal == ordinal;
  for (size_t i = 0; i < cd.streams.n; i++)
    u->live_streams += ((struct CUstream_st *)cd.streams.v[i])->ctx == ctx;
  for (size_t i = 0; i < cd.events.n; i++) {
    const struct CUevent_st *ev = cd.events.v[i];
    u->live_events += ev->ctx == ctx;
    u->pending_events += ev->ctx == ctx && ev->pending;
  }
  pthread_mutex_unlock(&cd.mu);
  return CUDA_SUCCESS;
}

/* The entry points named in a comma-separated list, as a mask. 0 if one is unknown. */
static uint64_t entry_mask(const char *calls) {
  uint64_t mask = 0;
  while (calls && *calls) {
    size_t n = strcspn(calls, ",");
    int found = 0;
    for (int e = 0; e < CD_NENTRIES; e++)
      if (strlen(cd_entry_name[e]) == n && strncmp(cd_entry_name[e], calls, n) == 0)
        mask |= (uint64_t)1 << e, found = 1;
    if (!found) return 0;
    calls += n + (calls[n] == ',');
  }
  return mask;
}

CD_EXPORT CUresult cudadouble_inject(const char *calls, unsigned nth, CUresult result, int repeat) {
  uint64_t mask = entry_mask(calls);
  if (!mask || nth == 0 || result == CUDA_SUCCESS) return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&cd.mu);
  CUresult r = CUDA_ERROR_OUT_OF_MEMORY;
  if (cd.nfaults < CD_MAX_FAULTS) {
    cd.faults[cd.nfaults++] = (cd_fault){.mask = mask, .countdown = nth, .result = result, .repeat = repeat};
    r = CUDA_SUCCESS;
  }
  pthread_mutex_unlock(&cd.mu);
  return r;
}

CD_EXPORT void cudadouble_clear_faults(void) {
  pthread_mutex_lock(&cd.mu);
  cd.nfaults = 0;
  pthread_mutex_unlock(&cd.mu);
}

CD_EXPORT uint64_t cudadouble_calls(const char *calls) {
  uint64_t mask = entry_mask(calls), n = 0;
  pthread_mutex_lock(&cd.mu);
  for (int e = 0; e < CD_NENTRIES; e++)
    if (mask >> e & 1) n += cd.calls[e];
  pthread_mutex_unlock(&cd.mu);
  return n;
}

CD_EXPORT size_t cudadouble_leaks(char *buf, size_t len) {
  char dummy[1];
  if (!buf || !len) buf = dummy, len = sizeof dummy;
  buf[0] = 0;
  size_t at = 0, n = 0;
  pthread_mutex_lock(&cd.mu);
  for (int i = 0; i < cd.ndev; i++)
    if (cd.dev[i].ctx.refs) {
      cd_report(buf, len, &at, "device %d's primary context retained %d more times than released\n", i,
                cd.dev[i].ctx.refs);
      n++;
    }
  n += cd_memory_describe_leaks(buf, len, &at);
  n += cd_streams_describe_leaks(buf, len, &at);
  pthread_mutex_unlock(&cd.mu);
  return n;
}

CD_EXPORT const char *cudadouble_last_refusal(void) { return last_refusal; }

CD_EXPORT void cudadouble_quiet(int quiet) {
  pthread_mutex_lock(&cd.mu);
  cd.quiet = quiet;
  pthread_mutex_unlock(&cd.mu);
}

/* ---- Exit ---- */

__attribute__((destructor)) static void leak_check_at_exit(void) {
  char buf[4096];
  size_t n = cudadouble_leaks(buf, sizeof buf);
  if (!n) return;
  fprintf(stderr, "cuda double: %zu driver objects alive at exit (leaked):\n%s", n, buf);
  abort();
}
