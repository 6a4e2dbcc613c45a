/* trace.c — reading RMM CSV traces and replaying them through ga_malloc /
 * ga_free. Ids are mapped to pointers with an open-addressing table. */
#include "trace.h"

#include "device/sim.h"
#include "internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- Reading ---- */

static int push(trace *t, trace_event e) {
  if (t->n == t->cap) {
    size_t cap = t->cap ? t->cap * 2 : 4096;
    trace_event *v = realloc(t->ev, cap * sizeof *v);
    if (!v) return -1;
    t->ev = v;
    t->cap = cap;
  }
  t->ev[t->n++] = e;
  return 0;
}

/* "HH:MM:SS.ffffff" (any number of fraction digits) as ns; 0 if it is not that. */
static uint64_t parse_time(const char *field) {
  unsigned h, m, sec;
  int used = 0;
  if (sscanf(field, "%u:%u:%u%n", &h, &m, &sec, &used) != 3) return 0;
  uint64_t ns = ((uint64_t)h * 3600 + m * 60 + sec) * 1000000000ull, scale = 100000000ull;
  if (field[used] == '.')
    for (const char *p = field + used + 1; *p >= '0' && *p <= '9' && scale; p++, scale /= 10)
      ns += (uint64_t)(*p - '0') * scale;
  return ns;
}

static int parse_num(const char *field, uint64_t *out) {
  if (*field < '0' || *field > '9') return -1; /* strtoull would skip spaces and take a sign: " -100" */
  errno = 0;
  char *end;
  unsigned long long v = strtoull(field, &end, 0);
  if (errno || *end || field[0] == '-') return -1;
  *out = v;
  return 0;
}

/* Splits a line into at most 6 comma-separated fields, in place. */
static int split(char *line, char *f[6]) {
  int n = 0;
  f[n++] = line;
  for (char *p = line; *p; p++)
    if (*p == ',') {
      if (n == 6) return -1;
      *p = 0;
      f[n++] = p + 1;
    }
  return n;
}

/* One line of at most TRACE_LINE_MAX bytes, its end of line removed: 1, or 0
 * at the end of the file, or -1 with the reason in err. The line is read
 * into a buffer of that size and no more: a file without newlines
 * (/dev/zero) is refused after TRACE_LINE_MAX + 2 bytes, never read whole. */
#define TRACE_LINE_MAX 4096
static int read_line(FILE *f, char **line, size_t *cap, size_t *len, const char *name, size_t lineno,
                     char *err, size_t errlen) {
  if (!*line) {
    *cap = TRACE_LINE_MAX + 2;
    *line = malloc(*cap);
    if (!*line) {
      snprintf(err, errlen, "%s: out of memory", name);
      return -1;
    }
  }
  size_t l = 0;
  int c;
  while ((c = getc_unlocked(f)) != EOF && c != '\n') {
    if (c == 0) {
      snprintf(err, errlen, "%s:%zu: a NUL byte at column %zu (a text file has none)", name, lineno, l + 1);
      return -1;
    }
    if (l == TRACE_LINE_MAX + 1) break; /* too long, whatever follows */
    (*line)[l++] = (char)c;
  }
  if (c == EOF && l == 0) return 0;
  int cut = c != EOF && c != '\n';
  while (!cut && l && (*line)[l - 1] == '\r') l--;
  if (cut || l > TRACE_LINE_MAX) {
    snprintf(err, errlen, "%s:%zu: line too long (more than %d bytes)", name, lineno, TRACE_LINE_MAX);
    return -1;
  }
  (*line)[l] = 0;
  *len = l;
  return 1;
}

/* The columns of an RMM trace. A header line, when there is one, names them
 * in any order; col[k] is then the field that holds column k. */
static const char *const COLUMN[6] = {"Thread", "Time", "Action", "Pointer", "Size", "Stream"};

static int column_of(const char *field) {
  for (int k = 0; k < 6; k++)
    if (strcmp(field, COLUMN[k]) == 0) return k;
  return -1;
}

/* fld is a header when one of its fields names a column: 1 with col[] set,
 * 0 when it is not a header, -1 with the reason in err. */
static int read_header(char *fld[6], int n, int col[6], const char *name, size_t lineno, char *err,
                       size_t errlen) {
  int named = 0;
  for (int i = 0; i < n; i++) named |= column_of(fld[i]) >= 0;
  if (!named) return 0;
  for (int k = 0; k < 6; k++) col[k] = -1;
  for (int i = 0; i < n; i++) {
    int k = column_of(fld[i]);
    if (k < 0 || col[k] >= 0) {
      snprintf(err, errlen,
               "%s:%zu: a header names the six columns Thread,Time,Action,Pointer,Size,Stream "
               "once each, in any order: '%.64s' %s",
               name, lineno, fld[i], k < 0 ? "is not one" : "comes twice");
      return -1;
    }
    col[k] = i;
  }
  if (n != 6) {
    snprintf(err, errlen,
             "%s:%zu: the header has %d of the six columns Thread,Time,Action,Pointer,Size,Stream", name,
             lineno, n);
    return -1;
  }
  return 1;
}

int trace_read(FILE *f, const char *name, trace *t, char *err, size_t errlen) {
  memset(t, 0, sizeof *t);
  t->path = strdup(name);
  char *line = NULL;
  size_t cap = 0, len = 0, lineno = 0;
  int rc = t->path ? 0 : -1, got, first = 1, header = 0, col[6] = {0, 1, 2, 3, 4, 5};
  if (rc) snprintf(err, errlen, "%s: out of memory", name);
  while (!rc && (got = read_line(f, &line, &cap, &len, name, lineno + 1, err, errlen)) != 0) {
    lineno++;
    if (got < 0) {
      rc = -1;
      break;
    }
    if (len == 0) continue;
    char *in[6], *fld[6];
    uint64_t id, size, stream;
    int n = split(line, in);
    if (first) {
      first = 0;
      header = read_header(in, n, col, name, lineno, err, errlen);
      if (header < 0) {
        rc = -1;
        break;
      }
      if (header) continue;
    }
    if (n != 6) {
      snprintf(err, errlen, "%s:%zu: expected 6 fields (Thread,Time,Action,Pointer,Size,Stream)", name,
               lineno);
      rc = -1;
      break;
    }
    for (int k = 0; k < 6; k++) fld[k] = in[col[k]];
    if (strcmp(fld[2], "allocate failure") == 0) {
      t->skipped_failures++;
      continue;
    }
    int is_free = strcmp(fld[2], "free") == 0;
    if (!is_free && strcmp(fld[2], "allocate") != 0) {
      snprintf(err, errlen, "%s:%zu: unknown action '%.64s' (allowed: allocate, free, allocate failure)",
               name, lineno, fld[2]);
      rc = -1;
      break;
    }
    const char *bad = parse_num(fld[3], &id)       ? "pointer"
                      : parse_num(fld[4], &size)   ? "size"
                      : parse_num(fld[5], &stream) ? "stream"
                                                   : NULL;
    if (bad) {
      snprintf(err, errlen, "%s:%zu: malformed %s field", name, lineno, bad);
      rc = -1;
      break;
    }
    uint64_t when = parse_time(fld[1]);
    if (t->n && when != t->ev[t->n - 1].time_ns) t->timed = 1;
    if (push(t,
             (trace_event){
                 .id = id, .size = size, .stream = stream, .time_ns = when, .is_free = (uint8_t)is_free})) {
      snprintf(err, errlen, "%s: out of memory", name);
      rc = -1;
      break;
    }
  }
  free(line);
  if (!rc && ferror(f)) {
    snprintf(err, errlen, "%s: read error: %s", name, strerror(errno));
    rc = -1;
  }
  if (!rc && t->n == 0) {
    snprintf(err, errlen, "%s: no allocate or free event to replay (%s)", name,
             t->skipped_failures ? "only allocate failures, which are not replayed"
             : header            ? "a header and no events"
                                 : "the file is empty");
    rc = -1;
  }
  for (size_t i = 1; i < t->n && t->timed; i++) t->timed = t->ev[i].time_ns >= t->ev[i - 1].time_ns;
  if (rc) trace_free(t);
  return rc;
}

int trace_load(const char *path, trace *t, char *err, size_t errlen) {
  memset(t, 0, sizeof *t);
  FILE *f = fopen(path, "r");
  if (!f) {
    snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
    return -1;
  }
  int rc = trace_read(f, path, t, err, errlen);
  fclose(f);
  return rc;
}

void trace_free(trace *t) {
  free(t->ev);
  free(t->path);
  memset(t, 0, sizeof *t);
}

/* ---- Id -> pointer table ---- */

typedef struct slot {
  uint64_t id; /* the trace's id (any 64-bit value) */
  void *ptr;   /* NULL: the allocate failed */
  uint64_t size;
  int used; /* 0 = an empty slot */
} slot;

typedef struct idmap {
  slot *s;
  size_t cap;
} idmap;

static size_t home(const idmap *m, uint64_t key) {
  key ^= key >> 31;
  key *= 0x9e3779b97f4a7c15ULL;
  return (size_t)(key >> 17) & (m->cap - 1);
}

static slot *find(idmap *m, uint64_t id, int insert) {
  size_t i = home(m, id);
  while (m->s[i].used && m->s[i].id != id) i = (i + 1) & (m->cap - 1);
  if (!m->s[i].used && !insert) return NULL;
  return &m->s[i];
}

/* Removes slot x keeping probe chains intact (backward shift). */
static void erase(idmap *m, slot *x) {
  size_t hole = (size_t)(x - m->s), mask = m->cap - 1;
  for (size_t j = (hole + 1) & mask; m->s[j].used; j = (j + 1) & mask) {
    size_t h = home(m, m->s[j].id);
    if (((j - h) & mask) >= ((j - hole) & mask)) {
      m->s[hole] = m->s[j];
      hole = j;
    }
  }
  m->s[hole].used = 0;
}

/* ---- Replay ---- */

static replay_opts options = {.lag_us = 0, .pace_us = 10, .kernel_us = 0, .iterations = 1};

void trace_replay_set_options(const replay_opts *o) { options = *o; }
const replay_opts *trace_replay_options(void) { return &options; }

/* Calls that obtain, map or give back device memory. */
static uint64_t memory_calls(const ga_stats_t *stats) {
  return stats->device_calls[GA_CALL_MALLOC] + stats->device_calls[GA_CALL_FREE] +
         stats->device_calls[GA_CALL_MAP] + stats->device_calls[GA_CALL_UNMAP] +
         stats->device_calls[GA_CALL_SET_ACCESS] + stats->device_calls[GA_CALL_CREATE] +
         stats->device_calls[GA_CALL_RELEASE];
}

void replay_samples_free(replay_samples *s) {
  free(s->event);
  free(s->reserved);
  free(s->allocated);
  free(s->live);
  s->event = s->reserved = s->allocated = s->live = NULL;
  s->n = 0;
}

/* The running peaks of the last point: a bucket whose peak rose reached it. */
typedef struct sampler {
  int64_t peak_reserved, peak_allocated;
  uint64_t live_max;
} sampler;

static void sample(replay_samples *s, sampler *z, ga_allocator_t *a, size_t i) {
  ga_stats_t st;
  ga_stats(a, &st);
  const ga_stat_t *r = &st.reserved_bytes[GA_POOL_ALL], *al = &st.allocated_bytes[GA_POOL_ALL];
  s->event[s->n] = i;
  s->reserved[s->n] = (uint64_t)(r->peak > z->peak_reserved ? r->peak : r->current);
  s->allocated[s->n] = (uint64_t)(al->peak > z->peak_allocated ? al->peak : al->current);
  s->live[s->n] = z->live_max;
  z->peak_reserved = r->peak;
  z->peak_allocated = al->peak;
  s->n++;
}

int trace_replay(const trace *t, const char *conf, replay_result *r, char *err, size_t errlen) {
  return trace_replay_ex(t, conf, r, NULL, 0, err, errlen);
}

int trace_replay_ex(const trace *t, const char *conf, replay_result *r, replay_samples *samples, int progress,
                    char *err, size_t errlen) {
  memset(r, 0, sizeof *r);
  size_t stride = 0;
  if (samples) {
    samples->n = 0;
    size_t max = samples->max ? samples->max : 1000;
    stride = t->n / max + 1;
    samples->event = malloc((max + 2) * sizeof *samples->event);
    samples->reserved = malloc((max + 2) * sizeof *samples->reserved);
    samples->allocated = malloc((max + 2) * sizeof *samples->allocated);
    samples->live = malloc((max + 2) * sizeof *samples->live);
    if (!samples->event || !samples->reserved || !samples->allocated || !samples->live) {
      replay_samples_free(samples);
      snprintf(err, errlen, "out of memory");
      return -1;
    }
  }
  ga_allocator_t *a;
  if (ga_create(conf, 0, &a) != GA_OK) {
    snprintf(err, errlen, "%s", ga_last_error());
    return -1;
  }
  idmap m = {0};
  m.cap = 1024;
  while (m.cap < t->n * 2) m.cap *= 2;
  m.s = calloc(m.cap, sizeof *m.s);
  if (!m.s) {
    ga_destroy(a);
    snprintf(err, errlen, "out of memory");
    return -1;
  }
  uint64_t live = 0, asked = 0; /* bytes served / bytes the trace has live */
  sampler z = {0};
  int rc = 0;
  struct timespec t0, t1, c0, c1;
  /* Time on the simulated device: the program's pace, its GPU work, the lag. */
  ga_device *dev = ga_allocator_device(a);
  int sim = ga_sim_is(dev);
  int iterations = options.iterations > 0 ? options.iterations : 1;
  uint64_t pace_ns = (uint64_t)(options.pace_us * 1000.0), kernel_ns = (uint64_t)(options.kernel_us * 1000.0);
  uint64_t first_memory = 0;
  if (sim) ga_sim_set_lag(dev, (uint64_t)(options.lag_us * 1000.0));
  if (options.on_create) options.on_create(a);
  r->iterations = iterations;
  r->lag_us = sim ? options.lag_us : 0;
  size_t total = t->n * (size_t)iterations;
  if (samples) stride = total / (samples->max ? samples->max : 1000) + 1;
  if (stride) sample(samples, &z, a, 0);
  clock_gettime(CLOCK_MONOTONIC, &t0);
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c0);
  size_t tenth = total / 10 + 1;
  for (size_t k = 0; k < total && !rc; k++) {
    size_t i = k % t->n;
    const trace_event *e = &t->ev[i];
    if (i == 0 && k) { /* the next iteration starts from nothing live */
      if (iterations > 1 && k == t->n) {
        ga_stats_t s1;
        ga_stats(a, &s1);
        first_memory = memory_calls(&s1);
      }
      for (size_t j = 0; j < m.cap && !rc; j++) {
        if (!m.s[j].used) continue;
        if (m.s[j].ptr && ga_free(a, m.s[j].ptr) != GA_OK) {
          snprintf(err, errlen, "%s: between iterations: %s", t->path, ga_last_error());
          rc = -1;
        }
        m.s[j].used = 0;
      }
      live = asked = 0;
      if (rc) break;
    }
    if (sim) ga_sim_advance(dev, t->timed && i ? e->time_ns - t->ev[i - 1].time_ns : pace_ns);
    if (stride && k % stride == 0 && k) {
      sample(samples, &z, a, k);
      z.live_max = live;
    }
    if (progress && total >= 200000 && k % tenth == 0 && k)
      fprintf(stderr, "  %s: %zu%% of %zu events\n", t->path, k * 100 / total, total);
    if (sim)
      ga_sim_enqueue(dev, (ga_stream_t)(uintptr_t)e->stream, kernel_ns); /* the kernel behind the event */
    slot *x = find(&m, e->id, !e->is_free);
    if (e->is_free) {
      if (!x) {
        snprintf(err, errlen, "%s: event %zu frees id 0x%llx that is not live", t->path, i + 1,
                 (unsigned long long)e->id);
        rc = -1;
        break;
      }
      if (x->ptr && ga_free(a, x->ptr) != GA_OK) {
        snprintf(err, errlen, "%s: event %zu: %s", t->path, i + 1, ga_last_error());
        rc = -1;
      }
      if (x->ptr) live -= x->size;
      asked -= x->size;
      erase(&m, x);
      r->frees++;
      continue;
    }
    if (x->used) {
      snprintf(err, errlen, "%s: event %zu allocates id 0x%llx that is already live", t->path, i + 1,
               (unsigned long long)e->id);
      rc = -1;
      break;
    }
    void *p = NULL;
    ga_status_t st = ga_malloc(a, (size_t)e->size, (ga_stream_t)(uintptr_t)e->stream, &p);
    if (st != GA_OK && st != GA_ERR_OOM) {
      snprintf(err, errlen, "%s: event %zu: %s", t->path, i + 1, ga_last_error());
      rc = -1;
      break;
    }
    if (st == GA_ERR_OOM && !r->first_oom_event) {
      r->first_oom_event = i + 1;
      r->first_oom_size = e->size;
      ga_stats_t now;
      ga_stats(a, &now);
      r->first_oom_reserved = (uint64_t)now.reserved_bytes[GA_POOL_ALL].current;
      r->first_oom_allocated = (uint64_t)now.allocated_bytes[GA_POOL_ALL].current;
      r->first_oom_live = live;
      snprintf(r->first_oom_report, sizeof r->first_oom_report, "%s", ga_last_error());
    }
    *x = (slot){.id = e->id, .ptr = p, .size = e->size, .used = 1};
    if (p) live += e->size;
    asked += e->size;
    if (live > r->peak_requested) r->peak_requested = live;
    if (live > z.live_max) z.live_max = live;
    if (asked > r->trace_peak_live) r->trace_peak_live = asked;
    r->allocs++;
  }
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c1);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  if (stride) sample(samples, &z, a, total);
  r->seconds = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
  r->cpu_seconds = (double)(c1.tv_sec - c0.tv_sec) + (double)(c1.tv_nsec - c0.tv_nsec) * 1e-9;
  r->events = r->allocs + r->frees;
  ga_stats(a, &r->stats);
  if (iterations > 1) r->steady_memory_calls = memory_calls(&r->stats) - first_memory;
  snprintf(r->backend, sizeof r->backend, "%s", ga_backend_name(a));
  ga_mem_get_info(a, NULL, &r->device_total);
  r->peak_allocated = (uint64_t)r->stats.allocated_bytes[GA_POOL_ALL].peak;
  r->peak_reserved = (uint64_t)r->stats.reserved_bytes[GA_POOL_ALL].peak;
  r->num_ooms = (uint64_t)r->stats.num_ooms;
  r->num_alloc_retries = (uint64_t)r->stats.num_alloc_retries;
  if (!rc && ga_check(a) != 0) {
    snprintf(err, errlen, "%s: ga_check found broken invariants after the replay", t->path);
    rc = -1;
  }
  free(m.s);
  ga_destroy(a);
  return rc;
}
