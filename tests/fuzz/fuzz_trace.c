/* fuzz_trace.c — the RMM CSV reader and the replay behind ga-bench replay.
 *
 * The input is a trace file. Promises checked: the reader accepts it or
 * refuses it with a message that names the file (and, for a bad line, its
 * number); an accepted trace holds only allocate and free events; its replay
 * on a small simulated device either finishes or refuses the trace with a
 * message — exactly when the trace frees an id that is not live or
 * allocates a live one (an oracle of its own says so), at that event — never
 * crashes, and leaves ga_check clean (the replay checks it).
 */
#include <string.h>

#include "../../bench/trace.h"
#include "fuzz.h"

/* The first event that breaks the trace (a free of an id that is not live,
 * an allocate of a live one), 1-based, or 0: an oracle of its own (a sorted
 * copy of the ids, then one live flag per distinct id), to compare with the
 * replay's verdict. */
static int by_id(const void *x, const void *y) {
  uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;
  return a < b ? -1 : a > b;
}
static size_t first_inconsistent(const trace *t) {
  uint64_t *ids = malloc((t->n + 1) * sizeof *ids);
  unsigned char *live = calloc(t->n + 1, 1);
  FZ_CHECK(ids && live, "out of memory");
  for (size_t i = 0; i < t->n; i++) ids[i] = t->ev[i].id;
  qsort(ids, t->n, sizeof *ids, by_id);
  size_t bad = 0;
  for (size_t i = 0; i < t->n && !bad; i++) {
    size_t lo = 0, hi = t->n; /* the first copy of the id in the sorted array */
    while (lo < hi) {
      size_t mid = lo + (hi - lo) / 2;
      if (ids[mid] < t->ev[i].id)
        lo = mid + 1;
      else
        hi = mid;
    }
    if (t->ev[i].is_free ? !live[lo] : live[lo]) bad = i + 1;
    live[lo] = !t->ev[i].is_free;
  }
  free(ids);
  free(live);
  return bad;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  FILE *f = fmemopen((void *)(uintptr_t)data, size, "r");
  if (!f) return 0; /* size 0: fmemopen refuses it */
  trace t;
  char err[512] = "";
  int rc = trace_read(f, "fuzz.csv", &t, err, sizeof err);
  fclose(f);
  if (rc) {
    FZ_CHECK(strncmp(err, "fuzz.csv", 8) == 0, "a refusal that does not name the file: '%s'", err);
    return 0;
  }
  FZ_CHECK(t.n == 0 || t.ev != NULL, "events without storage");
  if (t.n <= 4000) {
    replay_result r;
    char rerr[512] = "";
    int rr = trace_replay(&t, "backend:sim,sim_capacity_mb:256", &r, rerr, sizeof rerr);
    FZ_CHECK(rr == 0 || (rr == -1 && strstr(rerr, "fuzz.csv") && !strstr(rerr, "ga_check")),
             "replay: %d '%s'", rr, rerr);
    FZ_CHECK(rr != 0 || r.events == r.allocs + r.frees, "event counts");
    /* The replay refuses exactly the traces that break, at the event that breaks them. */
    size_t bad = first_inconsistent(&t);
    char at[64];
    snprintf(at, sizeof at, "event %zu ", bad);
    FZ_CHECK(bad ? rr == -1 && strstr(rerr, at) && strstr(rerr, "live") : rr == 0,
             "the trace breaks at event %zu, the replay says %d '%s'", bad, rr, rerr);
  }
  trace_free(&t);
  return 0;
}
