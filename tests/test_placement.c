/* test_placement.c — placement and statistics stay what they were, event by
 * event, on every trace in traces/.
 *
 * Each trace is replayed under several configurations (native as PyTorch,
 * native with max_split_size and power-of-two rounding, expandable segments
 * as the default and with expandable_move_pages:settle, PyTorch's expandable
 * policy), as written and with its allocations spread
 * over three streams. Every allocation is recorded as (segment, offset in
 * it, block size, status), a segment named by the order in which it first
 * held an allocation, so the record does not depend on where the device put
 * it. Every 256 events and at the end, the PyTorch statistics (every key,
 * peaks included) go into the record too, and the digest of the record so
 * far is kept every 1024 events. tests/placement.golden holds those digests
 * as the code made them when the file was written; a difference names the
 * first 1024 events in which the two part.
 *
 * The file is written again (only when a change of placement is meant) with
 *   GA_PLACEMENT_WRITE=tests/placement.golden build/tests/test_placement
 * and GA_PLACEMENT_DUMP=DIR writes each replay's events, one line each, to
 * compare two builds line by line.
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../bench/trace.h"
#include "fixture.h"

#define GOLDEN      GA_TESTS_DIR "/placement.golden"
#define CHECKPOINT  1024
#define STATS_EVERY 256

static const struct {
  const char *name, *conf;
} configs[] = {
    {"native", ""},
    {"native_split", "max_split_size_mb:40,roundup_power2_divisions:4"},
    {"expandable", "expandable_segments:True"}, /* expandable_move_pages:when_full */
    {"expandable_settle", "expandable_segments:True,expandable_move_pages:settle"},
    {"expandable_pytorch", "expandable_segments:True,expandable_policy:pytorch"},
};

/* ---- The record ---- */

typedef struct digest {
  uint64_t h;
  FILE *dump; /* NULL: no dump */
} digest;

static void mix(digest *d, uint64_t v) {
  uint64_t h = (d->h ^ v) * 0x100000001b3ULL;
  d->h = h ^ (h >> 29);
}

static void mix_stat(digest *d, const ga_stat_t *stat) {
  mix(d, (uint64_t)stat->current);
  mix(d, (uint64_t)stat->peak);
  mix(d, (uint64_t)stat->allocated);
  mix(d, (uint64_t)stat->freed);
}

/* Every PyTorch key of memory_stats(), and ours that placement decides. */
static void mix_stats(digest *d, ga_allocator_t *a, size_t event) {
  ga_stats_t stats;
  cr_assert_eq(ga_stats(a, &stats), GA_OK);
#define GA_X(name, doc) \
  for (int p = 0; p < GA_POOL_COUNT; p++) mix_stat(d, &stats.name[p]);
  GA_POOL_STATS(GA_X)
#undef GA_X
  mix_stat(d, &stats.oversize_allocations);
  mix_stat(d, &stats.oversize_segments);
#define GA_X(name, doc) mix(d, (uint64_t)stats.name);
  GA_SCALAR_STATS(GA_X)
#undef GA_X
  mix_stat(d, &stats.mapped_bytes);
  mix_stat(d, &stats.page_cache_bytes);
  if (d->dump)
    fprintf(d->dump, "%zu stats allocated %lld/%lld active %lld/%lld requested %lld/%lld split %lld/%lld\n",
            event, (long long)stats.allocated_bytes[GA_POOL_ALL].current,
            (long long)stats.allocated_bytes[GA_POOL_ALL].peak,
            (long long)stats.active_bytes[GA_POOL_ALL].current,
            (long long)stats.active_bytes[GA_POOL_ALL].peak,
            (long long)stats.requested_bytes[GA_POOL_ALL].current,
            (long long)stats.requested_bytes[GA_POOL_ALL].peak,
            (long long)stats.inactive_split_bytes[GA_POOL_ALL].current,
            (long long)stats.inactive_split_bytes[GA_POOL_ALL].peak);
}

/* Segments named by the order in which they first held an allocation. */
typedef struct seen {
  struct {
    const ga_segment *seg;
    uintptr_t base;
    size_t size;
  } * v;
  size_t n, cap;
} seen;

static uint64_t segment_name(seen *s, const ga_segment *seg) {
  for (size_t i = s->n; i-- > 0;)
    if (s->v[i].seg == seg && s->v[i].base == seg->base && s->v[i].size == seg->size) return i;
  if (s->n == s->cap) {
    s->cap = s->cap ? 2 * s->cap : 64;
    s->v = realloc(s->v, s->cap * sizeof *s->v);
    cr_assert(s->v != NULL);
  }
  s->v[s->n].seg = seg;
  s->v[s->n].base = seg->base;
  s->v[s->n].size = seg->size;
  return s->n++;
}

static const ga_block *block_at(ga_allocator_t *a, uintptr_t p) {
  for (const ga_segment *seg = a->space.segs; seg; seg = seg->next) {
    if (p < seg->base || p - seg->base >= seg->size) continue;
    for (const ga_block *b = seg->head; b; b = b->next)
      if (b->ptr == p) return b;
  }
  return NULL;
}

/* ---- Replay ---- */

typedef struct live {
  uint64_t id;
  void *ptr;
} live;

static size_t slot_of(uint64_t id, size_t cap) {
  return (size_t)((id * 0x9e3779b97f4a7c15ULL) >> 20) & (cap - 1);
}

/* Replays t under conf (streams: 1 = as written, 3 = spread by id); fills
 * sums[k] with the digest after event (k + 1) * CHECKPOINT, the last one at
 * the end. Returns the number of digests. */
static size_t replay(const trace *t, const char *conf, int streams, uint64_t *sums, FILE *dump) {
  char full[512];
  snprintf(full, sizeof full, "backend:sim,sim_capacity_mb:81920%s%s", conf[0] ? "," : "", conf);
  ga_allocator_t *a;
  cr_assert_eq(ga_create(full, 0, &a), GA_OK, "%s", ga_last_error());
  size_t cap = 1;
  while (cap < 2 * t->n + 2) cap *= 2;
  live *m = calloc(cap, sizeof *m);
  cr_assert(m != NULL);
  seen segs = {0};
  digest d = {0xcbf29ce484222325ULL, dump};
  size_t nsums = 0;
  for (size_t i = 0; i < t->n; i++) {
    const trace_event *e = &t->ev[i];
    size_t s = slot_of(e->id, cap);
    while (m[s].ptr && m[s].id != e->id) s = (s + 1) & (cap - 1);
    uint64_t stream = streams == 1 ? e->stream : (e->id * 0x9e3779b97f4a7c15ULL >> 40) % 3;
    if (!e->is_free) {
      void *p = NULL;
      ga_status_t st = ga_malloc(a, (size_t)e->size, (ga_stream_t)(uintptr_t)stream, &p);
      mix(&d, (uint64_t)st);
      if (st == GA_OK) {
        const ga_block *b = block_at(a, (uintptr_t)p);
        cr_assert(b != NULL, "event %zu: %p is in no segment", i, p);
        uint64_t name = segment_name(&segs, b->seg);
        mix(&d, name);
        mix(&d, b->ptr - b->seg->base);
        mix(&d, b->size);
        if (dump)
          fprintf(dump, "%zu alloc %llu stream %llu -> segment %llu +%llu size %zu\n", i,
                  (unsigned long long)e->size, (unsigned long long)stream, (unsigned long long)name,
                  (unsigned long long)(b->ptr - b->seg->base), b->size);
        if (!m[s].ptr) m[s] = (live){e->id, p};
      } else if (dump) {
        fprintf(dump, "%zu alloc %llu -> status %d\n", i, (unsigned long long)e->size, (int)st);
      }
    } else if (m[s].ptr) {
      ga_status_t st = ga_free(a, m[s].ptr);
      mix(&d, (uint64_t)st + 100);
      if (dump) fprintf(dump, "%zu free %llx -> status %d\n", i, (unsigned long long)e->id, (int)st);
      /* Backward-shift deletion keeps the probe chains whole. */
      size_t hole = s;
      m[hole] = (live){0};
      for (size_t j = (hole + 1) & (cap - 1); m[j].ptr; j = (j + 1) & (cap - 1)) {
        size_t home = slot_of(m[j].id, cap);
        if (((j - home) & (cap - 1)) >= ((j - hole) & (cap - 1))) {
          m[hole] = m[j];
          m[j] = (live){0};
          hole = j;
        }
      }
    }
    if ((i + 1) % STATS_EVERY == 0) mix_stats(&d, a, i);
    if ((i + 1) % CHECKPOINT == 0) sums[nsums++] = d.h;
  }
  mix_stats(&d, a, t->n);
  sums[nsums++] = d.h;
  cr_assert_eq(ga_check(a), 0, "ga_check after the replay");
  ga_destroy(a);
  free(segs.v);
  free(m);
  return nsums;
}

/* ---- The traces ---- */

static int csv_name(const struct dirent *e) {
  size_t n = strlen(e->d_name);
  return n > 4 && !strcmp(e->d_name + n - 4, ".csv");
}

/* Paths of every trace (relative to traces/), in a fixed order. */
static size_t list_traces(char names[][160], size_t max) {
  static const char *const dirs[] = {"allocatorsim_alexnet", "minimalloc", "pytorch_snapshots"};
  size_t n = 0;
  for (size_t k = 0; k < sizeof dirs / sizeof *dirs; k++) {
    char dir[512];
    snprintf(dir, sizeof dir, "%s/traces/%s", GA_SHARED_DIR, dirs[k]);
    struct dirent **ents;
    int m = scandir(dir, &ents, csv_name, alphasort);
    cr_assert(m > 0, "no traces in %s", dir);
    for (int i = 0; i < m; i++) {
      if (n < max && strlen(ents[i]->d_name) < 120)
        snprintf(names[n++], 160, "%s/%.120s", dirs[k], ents[i]->d_name);
      free(ents[i]);
    }
    free(ents);
  }
  return n;
}

/* One line of the golden file: "TRACE CONFIG STREAMS EVENTS DIGEST...". */
static int golden_line(FILE *g, const char *trace_name, const char *config, int streams, char *line,
                       size_t cap) {
  char key[320];
  snprintf(key, sizeof key, "%s %s %d ", trace_name, config, streams);
  rewind(g);
  while (fgets(line, (int)cap, g))
    if (!strncmp(line, key, strlen(key))) return 1;
  return 0;
}

Test(placement, every_trace_places_and_counts_as_before, .timeout = 300) {
  static char names[64][160];
  size_t ntraces = list_traces(names, 64);
  const char *write = getenv("GA_PLACEMENT_WRITE"), *dump_dir = getenv("GA_PLACEMENT_DUMP");
  FILE *g = fopen(write ? write : GOLDEN, write ? "w" : "r");
  cr_assert(g != NULL, "cannot open %s", write ? write : GOLDEN);
  if (write)
    fprintf(g, "# written by tests/test_placement.c: TRACE CONFIG STREAMS EVENTS DIGEST-EVERY-%d-EVENTS...\n",
            CHECKPOINT);
  static char line[1 << 16];
  size_t checked = 0, differ = 0;
  for (size_t k = 0; k < ntraces; k++) {
    char path[512], err[256];
    snprintf(path, sizeof path, "%s/traces/%s", GA_SHARED_DIR, names[k]);
    trace t;
    cr_assert_eq(trace_load(path, &t, err, sizeof err), 0, "%s", err);
    uint64_t *sums = calloc(t.n / CHECKPOINT + 2, sizeof *sums);
    cr_assert(sums != NULL);
    for (size_t c = 0; c < sizeof configs / sizeof *configs; c++) {
      for (int streams = 1; streams <= 3; streams += 2) {
        FILE *dump = NULL;
        if (dump_dir) {
          char dp[700], flat[160];
          snprintf(flat, sizeof flat, "%s", names[k]);
          for (char *q = flat; *q; q++)
            if (*q == '/') *q = '_';
          snprintf(dp, sizeof dp, "%s/%s.%s.%d.txt", dump_dir, flat, configs[c].name, streams);
          dump = fopen(dp, "w");
          cr_assert(dump != NULL, "cannot write %s", dp);
        }
        size_t n = replay(&t, configs[c].conf, streams, sums, dump);
        if (dump) fclose(dump);
        if (write) {
          fprintf(g, "%s %s %d %zu", names[k], configs[c].name, streams, t.n);
          for (size_t i = 0; i < n; i++) fprintf(g, " %016llx", (unsigned long long)sums[i]);
          fprintf(g, "\n");
          continue;
        }
        checked++;
        int found = golden_line(g, names[k], configs[c].name, streams, line, sizeof line);
        cr_expect(found, "%s %s streams %d: not in %s", names[k], configs[c].name, streams, GOLDEN);
        if (!found) {
          differ++;
          continue;
        }
        char *q = line;
        for (int f = 0; f < 4; f++) q = strchr(q, ' ') + 1;
        for (size_t i = 0; i < n; i++) {
          unsigned long long want = strtoull(q, &q, 16);
          if (want == sums[i]) continue;
          size_t lo = i * CHECKPOINT, hi = i + 1 == n ? t.n : (i + 1) * CHECKPOINT;
          cr_expect_fail("%s %s streams %d: placement or statistics first differ in events %zu..%zu (of %zu)",
                         names[k], configs[c].name, streams, lo, hi - 1, t.n);
          differ++;
          break;
        }
      }
    }
    free(sums);
    trace_free(&t);
  }
  fclose(g);
  if (!write) {
    cr_assert_gt(checked, 100, "only %zu replays checked", checked);
    cr_assert_eq(differ, 0, "%zu of %zu replays differ from %s", differ, checked, GOLDEN);
  }
}

/* The default expandable policy (expandable_move_pages:when_full) is
 * PyTorch's while the device has room, and the 80 GiB device of these
 * replays always has: its placement and statistics are PyTorch's expandable
 * segments' on every trace, event by event (the replays above hold the
 * golden file to the code). */
Test(placement, the_default_expandable_policy_places_as_pytorchs_on_every_trace) {
  FILE *g = fopen(GOLDEN, "r");
  cr_assert(g != NULL, "cannot open %s", GOLDEN);
  static char line[1 << 16], want[1 << 16];
  size_t compared = 0;
  while (fgets(line, sizeof line, g)) {
    char trace_name[200], config[64];
    int streams, used = 0;
    if (sscanf(line, "%199s %63s %d%n", trace_name, config, &streams, &used) != 3 ||
        strcmp(config, "expandable"))
      continue;
    long at = ftell(g);
    cr_assert(golden_line(g, trace_name, "expandable_pytorch", streams, want, sizeof want), "%s %d: no line",
              trace_name, streams);
    char *w = want;
    for (int f = 0; f < 3; f++) w = strchr(w, ' ') + 1;
    cr_assert_str_eq(line + used + 1, w, "%s streams %d: the default places otherwise than PyTorch's policy",
                     trace_name, streams);
    compared++;
    fseek(g, at, SEEK_SET);
  }
  fclose(g);
  cr_assert_geq(compared, 50, "only %zu traces compared", compared);
}
