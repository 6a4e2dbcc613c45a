// fuzz_torch.cpp — the entry points PyTorch calls (allocator/torch_abi.c and
// the C++ capture hooks of torch_abi_throw.cpp), as PyTorch calls them and as
// it should not.
//
// The allocators are the process's, one per device, made on first use from
// GARDENALLOC_CONF (a simulated machine of two devices, expandable segments;
// FUZZ_TORCH_CONF replaces it). Each input is a program over them: alloc
// with right and wrong sizes (0, negative), devices (-1, 64, one not made)
// and streams; free with the right arguments or a wrong size, device or
// stream (reported, done as recorded), of a pointer inside an allocation, a
// foreign one, NULL, or twice; record_stream of live and foreign pointers;
// base_alloc of interior and foreign pointers; reset; memory fractions
// (outside [0, 1] too); the capture hooks (begin with a filter that routes
// one stream, end, release, and a pool released while its capture runs);
// streams that hold their work.
//
// Checked after every call: ga_check of both devices finds nothing; every
// live allocation keeps both ends of its bytes (and all of them at its free);
// a free never leaves the allocation live, a bad free changes nothing; no
// memory is handed out while a stream recorded on it (held) has not passed
// its free (a cudaFree after it counts as a wait for the device, as on a GPU); alloc's failures say why. At
// the end of each input everything is freed, holds released, captures ended and pools released, and after
// reset nothing is allocated or reserved on either device.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#include "gardenalloc.h"
extern "C" {
#include "device/sim.h"
#include "fuzz.h"
}

struct CUstream_st;
typedef CUstream_st *cudaStream_t;
struct ga_mempool_id {
  unsigned long long first, second;
};
extern "C" void ga_torch_begin_allocate_to_pool(int device, ga_mempool_id id,
                                                std::function<bool(cudaStream_t)> filter);
extern "C" void ga_torch_end_allocate_to_pool(int device, ga_mempool_id id);
extern "C" void ga_torch_release_pool(int device, ga_mempool_id id);
extern "C" ga_device *ga_allocator_device(ga_allocator_t *a);

namespace {

const size_t MiB = size_t(1) << 20;
const int MAXLIVE = 48, MAXFREED = 64, NSTREAMS = 3;

struct live {
  unsigned char *p;
  size_t size;
  int device, stream;
  unsigned seed, used; // used: bit k, stream k recorded on it
};

struct freed {
  uintptr_t p;
  size_t size;
  int device, stream;
  ga_sim_mark m[NSTREAMS];
  unsigned marks;
  uint64_t cudafree; // cudaFree calls that had succeeded at its free (each one waits for the device)
};

struct state {
  live v[MAXLIVE];
  int n;
  freed f[MAXFREED];
  int nf;
  unsigned held; // bit 3 * device + k
  int capturing; // a capture runs on device cap_dev, routing stream cap_stream
  int cap_dev, cap_stream;
  unsigned long long cap_id, first_pool, last_pool; // pools begun in this input
};

unsigned long long pools_made; // pool ids are never used twice in the process

bool tracing;
#define TRACE(...)                                  \
  do {                                              \
    if (tracing) fprintf(stderr, "  " __VA_ARGS__); \
  } while (0)

void *stream(int k) { return reinterpret_cast<void *>(uintptr_t(0x3001u) * unsigned(k + 1)); }
ga_allocator_t *alloc_of(int d) { return ga_torch_allocator(d); }
ga_device *dev_of(int d) { return ga_allocator_device(alloc_of(d)); }

void fill(const live &l) { fz_fill(l.p, l.size, l.seed); }

void check_ends(const live &l, const char *after) {
  size_t bad = fz_ends_wrong(l.p, l.size, l.seed);
  FZ_CHECK(bad == SIZE_MAX, "after %s: the allocation at %p (%zu bytes, device %d) lost byte %zu", after,
           static_cast<void *>(l.p), l.size, l.device, bad);
}

void check_whole(const live &l, const char *when) {
  size_t bad = fz_wrong(l.p, l.size, l.seed);
  FZ_CHECK(bad == SIZE_MAX, "%s: the allocation at %p (%zu bytes) lost byte %zu", when,
           static_cast<void *>(l.p), l.size, bad);
}

bool is_live(int d, void *p) {
  size_t req = 0;
  return ga_allocation_info(alloc_of(d), p, &req, nullptr, nullptr) == GA_OK;
}

int64_t allocated(int d) {
  ga_stats_t s;
  FZ_CHECK(ga_stats(alloc_of(d), &s) == GA_OK, "stats");
  return s.allocated_bytes[GA_POOL_ALL].current;
}

uint64_t cudafrees(int d) { return dev_of(d)->calls[GA_CALL_FREE] - dev_of(d)->failures[GA_CALL_FREE]; }

void prune(state &s) {
  for (int i = 0; i < s.nf;) {
    freed &f = s.f[i];
    bool all = true;
    for (int k = 0; k < NSTREAMS && all; k++)
      if ((f.marks >> k) & 1) all = ga_sim_stream_passed(dev_of(f.device), &f.m[k]) == 1;
    if (all || cudafrees(f.device) != f.cudafree)
      s.f[i] = s.f[--s.nf];
    else
      i++;
  }
}

void check(state &s, const char *after) {
  for (int d = 0; d < 2; d++)
    FZ_CHECK(ga_check(alloc_of(d)) == 0, "after %s: ga_check of device %d", after, d);
  prune(s);
  for (int i = 0; i < s.n; i++) {
    const live &l = s.v[i];
    check_ends(l, after);
    for (int j = 0; j < s.nf; j++) {
      const freed &f = s.f[j];
      if (f.device != l.device || !(uintptr_t(l.p) < f.p + f.size && f.p < uintptr_t(l.p) + l.size)) continue;
      for (int k = 0; k < NSTREAMS; k++)
        if (((f.marks >> k) & 1) && k != l.stream)
          FZ_CHECK(
              ga_sim_stream_passed(dev_of(f.device), &f.m[k]) == 1,
              "after %s: %p (stream %d) was handed out while stream %d, recorded on the allocation freed "
              "there, has not passed its free",
              after, static_cast<void *>(l.p), l.stream, k);
    }
  }
}

// A device argument: mostly 0 or 1, sometimes one PyTorch never passes.
int pick_device(unsigned b) {
  static const int bad[] = {-1, 64, 1000};
  return (b & 0x1f) == 0x1f ? bad[(b >> 5) % 3] : int(b & 1);
}

size_t pick_size(fz_in *in) {
  unsigned c = fz_byte(in), x = fz_byte(in) << 8;
  x |= fz_byte(in);
  switch (c % 4) {
    case 0: return 1 + x % 4096;
    case 1: return 1 + size_t(x) * 16;
    case 2: return MiB + size_t(x) * 96;
    default: return 8 * MiB + size_t(x) * 512;
  }
}

void op_alloc(state &s, fz_in *in) {
  unsigned b = fz_byte(in);
  int d = pick_device(fz_byte(in)), k = int(fz_byte(in) % NSTREAMS);
  ssize_t size = (b & 7) == 7 ? -ssize_t(1 + fz_byte(in)) : (b & 7) == 6 ? 0 : ssize_t(pick_size(in));
  void *p = nullptr;
  std::string why;
  try {
    p = ga_torch_alloc(size, d, stream(k));
  } catch (const std::runtime_error &e) {
    why = e.what();
  }
  TRACE("ga_torch_alloc(%zd, device %d, S%d) = %p%s%s\n", size, d, k, p, why.empty() ? "" : ": ",
        why.c_str());
  if (size <= 0 || d < 0 || d > 1) {
    FZ_CHECK(p == nullptr, "alloc(%zd, device %d) gave %p", size, d, p);
    if (size < 0 || (size > 0 && (d < 0 || d > 1))) FZ_CHECK(ga_last_error()[0], "a refusal without a word");
    return;
  }
  if (!p) {
    FZ_CHECK(why.find("out of memory") != std::string::npos, "alloc failed with '%s'", why.c_str());
    return;
  }
  if (s.n == MAXLIVE) {
    ga_torch_free(p, size, d, stream(k));
    return;
  }
  live &l = s.v[s.n++];
  l = live{static_cast<unsigned char *>(p), size_t(size), d, k, fz_byte(in) * 2654435761u | 1u, 1u << k};
  fill(l);
}

// Marks on the streams recorded on allocation i, taken before its free.
freed marks_of(const live &l) {
  freed f = {uintptr_t(l.p), l.size, l.device, l.stream, {}, 0, cudafrees(l.device)};
  for (int k = 0; k < NSTREAMS; k++)
    if (((l.used >> k) & 1) && k != l.stream) {
      FZ_CHECK(ga_sim_stream_mark(dev_of(l.device), stream(k), &f.m[k]) == 0, "mark");
      f.marks |= 1u << k;
    }
  return f;
}

void forget(state &s, int i, const freed &f) {
  if (f.marks) {
    if (s.nf == MAXFREED) prune(s);
    if (s.nf == MAXFREED) s.f[0] = s.f[--s.nf];
    s.f[s.nf++] = f;
  }
  s.v[i] = s.v[--s.n];
}

void op_free(state &s, fz_in *in) {
  unsigned b = fz_byte(in);
  if (!s.n || b % 8 == 7) { // a pointer that is no allocation: nothing changes
    static unsigned char host[64];
    void *p = b & 8 ? static_cast<void *>(host) : s.n ? s.v[0].p + 1 + b % 7 : nullptr;
    int64_t a0 = allocated(0), a1 = allocated(1);
    ga_torch_free(p, 64, int(b >> 4) % 2, stream(0));
    TRACE("ga_torch_free(foreign %p)\n", p);
    FZ_CHECK(allocated(0) == a0 && allocated(1) == a1,
             "a free of a foreign pointer changed what is allocated");
    return;
  }
  int i = int(fz_byte(in) % unsigned(s.n));
  live &l = s.v[i];
  check_whole(l, "before its free");
  ssize_t size = ssize_t(l.size);
  int d = l.device, k = l.stream;
  switch (b % 8) { // 0-3: as PyTorch frees; then a wrong size, device, stream
    case 4: size = b & 16 ? 0 : size * 2 + 1; break;
    case 5: d = 1 - d; break;
    case 6: k = (k + 1) % NSTREAMS; break;
    default: break;
  }
  TRACE("ga_torch_free(%p, %zd, device %d, S%d) of %zu bytes on device %d, S%d\n", static_cast<void *>(l.p),
        size, d, k, l.size, l.device, l.stream);
  void *p = l.p;
  int dev = l.device;
  freed f = marks_of(l);
  ga_torch_free(p, size, d, stream(k));
  FZ_CHECK(!is_live(dev, p), "ga_torch_free left %p live", p);
  forget(s, i, f);
  if (b & 32) ga_torch_free(p, size, d, stream(k)); // twice: nothing happens
}

void op_record(state &s, fz_in *in) {
  unsigned b = fz_byte(in);
  int k = int(b % NSTREAMS);
  if (!s.n || (b & 0x30) == 0x30) {
    static unsigned char host[8];
    ga_torch_record_stream(host, stream(k)); // foreign: nothing
    return;
  }
  live &l = s.v[fz_byte(in) % unsigned(s.n)];
  TRACE("ga_torch_record_stream(%p, S%d)\n", static_cast<void *>(l.p), k);
  ga_torch_record_stream(l.p, stream(k));
  l.used |= 1u << k;
}

void op_base(state &s, fz_in *in) {
  unsigned b = fz_byte(in);
  if (!s.n || (b & 7) == 7) {
    static unsigned char host[8];
    size_t size = 12345;
    FZ_CHECK(ga_torch_base_alloc(host + 1, &size) == host + 1, "base_alloc of a foreign pointer");
    return;
  }
  live &l = s.v[fz_byte(in) % unsigned(s.n)];
  size_t off = (size_t(b) * 2654435761u) % l.size, size = 0;
  void *base = ga_torch_base_alloc(l.p + off, &size);
  TRACE("ga_torch_base_alloc(%p + %zu) = %p, %zu\n", static_cast<void *>(l.p), off, base, size);
  FZ_CHECK(base == l.p && size >= l.size, "base_alloc(%p + %zu) = %p, %zu bytes (the allocation: %zu bytes)",
           static_cast<void *>(l.p), off, base, size, l.size);
}

void op_capture(state &s, fz_in *in) {
  unsigned b = fz_byte(in);
  if (!s.capturing) {
    s.cap_dev = int(b & 1);
    s.cap_stream = int((b >> 1) % NSTREAMS);
    s.cap_id = ++pools_made;
    if (!s.first_pool) s.first_pool = s.cap_id;
    s.last_pool = s.cap_id;
    int routed = s.cap_stream;
    TRACE("capture on device %d routes S%d to pool %llu\n", s.cap_dev, routed, s.cap_id);
    FZ_CHECK(ga_sim_set_capturing(dev_of(s.cap_dev), stream(routed), 1) == 0, "capturing");
    ga_torch_begin_allocate_to_pool(s.cap_dev, ga_mempool_id{1, s.cap_id}, [routed](cudaStream_t st) {
      return static_cast<void *>(st) == stream(routed);
    });
    s.capturing = 1;
    return;
  }
  if (b % 4 == 0) { // a pool of an earlier capture released while this one runs
    if (s.last_pool > s.first_pool)
      ga_torch_release_pool(int(b >> 2) & 1,
                            ga_mempool_id{1, s.first_pool + (b >> 3) % (s.last_pool - s.first_pool)});
    return;
  }
  FZ_CHECK(ga_sim_set_capturing(dev_of(s.cap_dev), stream(s.cap_stream), 0) == 0, "capturing");
  TRACE("the capture of pool %llu ends%s\n", s.cap_id, b % 4 == 1 ? " and its graph goes" : "");
  ga_torch_end_allocate_to_pool(s.cap_dev, ga_mempool_id{1, s.cap_id});
  if (b % 4 == 1) ga_torch_release_pool(s.cap_dev, ga_mempool_id{1, s.cap_id});
  s.capturing = 0;
}

void step(state &s, fz_in *in) {
  unsigned op = fz_byte(in) % 14;
  const char *what = "?";
  switch (op) {
    case 0:
    case 1:
    case 2:
    case 3: op_alloc(s, in), what = "alloc"; break;
    case 4:
    case 5:
    case 6: op_free(s, in), what = "free"; break;
    case 7: op_record(s, in), what = "record_stream"; break;
    case 8: op_base(s, in), what = "base_alloc"; break;
    case 9:
      TRACE("ga_torch_reset\n");
      ga_torch_reset();
      what = "reset";
      break;
    case 10: {
      unsigned b = fz_byte(in);
      double f = b >= 250 ? -0.5 : b >= 240 ? 1.5 : b >= 120 ? 1.0 : double(b) / 119.0;
      int d = pick_device(fz_byte(in));
      TRACE("ga_torch_memory_fraction(%g, device %d)\n", f, d);
      ga_torch_memory_fraction(f, d);
      what = "memory_fraction";
      break;
    }
    case 11: op_capture(s, in), what = "a capture hook"; break;
    case 12: {
      unsigned b = fz_byte(in);
      int d = int(b & 1), k = int((b >> 1) % NSTREAMS);
      s.held ^= 1u << (3 * d + k);
      bool on = (s.held >> (3 * d + k)) & 1;
      TRACE("device %d S%d %s\n", d, k, on ? "holds work" : "is released");
      FZ_CHECK(ga_sim_hold_stream(dev_of(d), stream(k), on) == 0, "hold");
      what = "a hold";
      break;
    }
    default:
      ga_torch_init(2); // PyTorch calls it once; again changes nothing
      what = "init";
      break;
  }
  check(s, what);
}

// Everything goes back: then nothing is allocated and, after reset, nothing
// reserved on either device (the next input starts from the same state).
void drain(state &s) {
  TRACE("drain\n");
  if (s.capturing) {
    FZ_CHECK(ga_sim_set_capturing(dev_of(s.cap_dev), stream(s.cap_stream), 0) == 0, "capturing");
    ga_torch_end_allocate_to_pool(s.cap_dev, ga_mempool_id{1, s.cap_id});
    s.capturing = 0;
  }
  for (int d = 0; d < 2; d++)
    for (int k = 0; k < NSTREAMS; k++) FZ_CHECK(ga_sim_hold_stream(dev_of(d), stream(k), 0) == 0, "hold");
  s.held = 0;
  while (s.n) {
    live &l = s.v[s.n - 1];
    check_whole(l, "at the end");
    ga_torch_free(l.p, ssize_t(l.size), l.device, stream(l.stream));
    s.n--;
  }
  for (unsigned long long id = s.first_pool; id && id <= s.last_pool; id++)
    for (int d = 0; d < 2; d++) ga_torch_release_pool(d, ga_mempool_id{1, id});
  for (int d = 0; d < 2; d++) ga_torch_memory_fraction(1.0, d);
  ga_torch_reset();
  for (int d = 0; d < 2; d++) {
    ga_stats_t st;
    FZ_CHECK(ga_stats(alloc_of(d), &st) == GA_OK, "stats");
    FZ_CHECK(ga_check(alloc_of(d)) == 0, "ga_check at the end, device %d", d);
    FZ_CHECK(st.allocated_bytes[GA_POOL_ALL].current == 0 && st.reserved_bytes[GA_POOL_ALL].current == 0,
             "device %d at the end: %lld allocated, %lld reserved", d,
             static_cast<long long>(st.allocated_bytes[GA_POOL_ALL].current),
             static_cast<long long>(st.reserved_bytes[GA_POOL_ALL].current));
  }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static bool ready = false;
  if (!ready) {
    const char *conf = getenv("FUZZ_TORCH_CONF");
    setenv("GARDENALLOC_CONF",
           conf ? conf : "backend:sim,sim_devices:2,sim_capacity_mb:128,expandable_segments:True", 1);
    tracing = getenv("FUZZ_TORCH_TRACE") != nullptr;
    FZ_CHECK(alloc_of(0) && alloc_of(1), "the allocators: %s", ga_last_error());
    ready = true;
  }
  fz_in in = {data, size, 0};
  state s = {};
  for (int steps = 0; fz_more(&in) && steps < 300; steps++) step(s, &in);
  drain(s);
  return 0;
}
