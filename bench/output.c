/* output.c — how ga-bench writes results: the command that made them, in a
 * form a shell takes back; files written under a temporary name and renamed
 * only once the run has succeeded, so a failed run never clobbers results;
 * folders made with their parents; JSON strings escaped. */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bench.h"

/* ---- The command ---- */

static void quote(ga_strbuf *b, const char *arg) {
  int plain = *arg != 0;
  for (const char *p = arg; *p; p++)
    if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-+=./:,@%^", *p)) plain = 0;
  if (plain) {
    strbuf_put(b, "%s", arg);
    return;
  }
  strbuf_put(b, "'");
  for (const char *p = arg; *p; p++)
    if (*p == '\'')
      strbuf_put(b, "'\\''");
    else
      strbuf_put(b, "%c", *p);
  strbuf_put(b, "'");
}

/* How ga-bench was started (main sets it), for the command each result records. */
const char *bench_argv0 = "ga-bench";

void bench_command(ga_strbuf *b, const char *sub, int argc, char **argv) {
  char cwd[PATH_MAX];
  if (getcwd(cwd, sizeof cwd)) {
    strbuf_put(b, "cd ");
    quote(b, cwd);
    strbuf_put(b, " && ");
  }
  quote(b, bench_argv0);
  strbuf_put(b, " %s", sub);
  for (int i = 0; i < argc; i++) {
    strbuf_put(b, " ");
    quote(b, argv[i]);
  }
}

void json_string(FILE *f, const char *str) {
  fputc('"', f);
  for (const unsigned char *p = (const unsigned char *)str; *p; p++) {
    if (*p == '"' || *p == '\\')
      fprintf(f, "\\%c", *p);
    else if (*p == '\n')
      fputs("\\n", f);
    else if (*p < 0x20)
      fprintf(f, "\\u%04x", *p);
    else
      fputc(*p, f);
  }
  fputc('"', f);
}

/* ---- Files ---- */

int mkdir_p(const char *path, char *err, size_t errlen) {
  char buf[PATH_MAX];
  if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf) {
    snprintf(err, errlen, "%s: path too long", path);
    return -1;
  }
  for (char *p = buf + 1;; p++) {
    if (*p == '/' || !*p) {
      char c = *p;
      *p = 0;
      if (mkdir(buf, 0777) != 0 && errno != EEXIST) {
        snprintf(err, errlen, "cannot create %s: %s", buf, strerror(errno));
        return -1;
      }
      *p = c;
      if (!c) break;
    }
  }
  struct stat st;
  if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode)) {
    snprintf(err, errlen, "%s is not a folder", path);
    return -1;
  }
  return 0;
}

FILE *staged_open(staged *s, const char *path) {
  snprintf(s->path, sizeof s->path, "%s", path);
  snprintf(s->tmp, sizeof s->tmp, "%s.tmp-%ld", path, (long)getpid());
  s->f = fopen(s->tmp, "w");
  return s->f;
}

int staged_close(staged *s) {
  int rc = s->f && fclose(s->f) == 0 ? 0 : -1;
  s->f = NULL;
  return rc;
}

int staged_commit(staged *s) {
  if (s->f && staged_close(s)) return -1;
  return rename(s->tmp, s->path);
}

void staged_discard(staged *s) {
  if (s->f) fclose(s->f);
  s->f = NULL;
  unlink(s->tmp);
}

/* ---- One replay as a JSON object ---- */

static void json_u64s(FILE *f, const char *key, const uint64_t *v, size_t n) {
  fprintf(f, "\"%s\":[", key);
  for (size_t k = 0; k < n; k++) fprintf(f, "%s%llu", k ? "," : "", (unsigned long long)v[k]);
  fprintf(f, "]");
}

void json_result(FILE *f, const json_fields *j) {
  const replay_result *r = j->r;
  double frag = r->peak_reserved ? 1.0 - (double)r->peak_allocated / (double)r->peak_reserved : 0.0;
  fprintf(f, "{\"trace\":");
  json_string(f, j->trace);
  fprintf(f, ",\"config\":");
  json_string(f, j->config);
  fprintf(f, ",\"conf\":");
  json_string(f, j->conf);
  fprintf(f, ",\"size_scale\":%llu,\"device\":", (unsigned long long)j->size_scale);
  json_string(f, r->backend);
  fprintf(f,
          ",\"device_total_bytes\":%zu,\"events\":%zu,\"allocs\":%zu,\"frees\":%zu,\"skipped_failures\":%zu,",
          r->device_total, r->events, r->allocs, r->frees, j->skipped_failures);
  fprintf(f,
          "\"trace_peak_live_bytes\":%llu,\"peak_requested_bytes\":%llu,\"peak_allocated_bytes\":%llu,"
          "\"peak_reserved_bytes\":%llu,\"reserved_over_requested\":%.4f,\"fragmentation\":%.4f,",
          (unsigned long long)r->trace_peak_live, (unsigned long long)r->peak_requested,
          (unsigned long long)r->peak_allocated, (unsigned long long)r->peak_reserved,
          r->peak_requested ? (double)r->peak_reserved / (double)r->peak_requested : 0.0, frag);
  fprintf(f,
          "\"num_ooms\":%llu,\"num_alloc_retries\":%llu,\"num_device_alloc\":%lld,\"num_device_free\":%lld,"
          "\"num_granules_moved\":%lld,\"num_unmap_syncs\":%lld,\"num_sync_all_streams\":%lld,",
          (unsigned long long)r->num_ooms, (unsigned long long)r->num_alloc_retries,
          (long long)r->stats.num_device_alloc, (long long)r->stats.num_device_free,
          (long long)r->stats.num_granules_moved, (long long)r->stats.num_unmap_syncs,
          (long long)r->stats.num_sync_all_streams);
  fprintf(f, "\"est_driver_ms\":%.3f,\"cpu_ns_per_alloc_free\":%.1f,\"seconds\":%.6f,\"cpu_seconds\":%.6f,",
          cost_ms(&r->stats), r->allocs ? r->cpu_seconds * 1e9 / (double)r->allocs : 0.0, r->seconds,
          r->cpu_seconds);
  fprintf(f,
          "\"driver_us\":%lld,\"num_stalls\":%lld,\"stall_us\":%lld,\"lag_us\":%g,\"iterations\":%d,"
          "\"steady_memory_calls\":%llu,",
          (long long)r->stats.driver_us, (long long)r->stats.num_stalls, (long long)r->stats.stall_us,
          r->lag_us, r->iterations, (unsigned long long)r->steady_memory_calls);
  fprintf(f, "\"device_us\":{");
  for (int k = 0; k < GA_CALL_COUNT; k++)
    fprintf(f, "\"%s\":%llu%s", ga_device_call_name((ga_device_call_t)k),
            (unsigned long long)(r->stats.device_ns[k] / 1000), k + 1 < GA_CALL_COUNT ? "," : "");
  fprintf(f, "},");
  if (j->pytorch_reserved)
    fprintf(f, "\"pytorch_reserved_bytes\":%llu,", (unsigned long long)j->pytorch_reserved);
  fprintf(f, "\"device_calls\":{");
  for (int k = 0; k < GA_CALL_COUNT; k++)
    fprintf(f, "\"%s\":%llu%s", ga_device_call_name((ga_device_call_t)k),
            (unsigned long long)r->stats.device_calls[k], k + 1 < GA_CALL_COUNT ? "," : "");
  fprintf(f, "},\"first_oom\":");
  if (r->first_oom_event) {
    fprintf(f, "{\"event\":%zu,\"size\":%llu,\"reserved\":%llu,\"allocated\":%llu,\"live\":%llu,\"report\":",
            r->first_oom_event, (unsigned long long)r->first_oom_size,
            (unsigned long long)r->first_oom_reserved, (unsigned long long)r->first_oom_allocated,
            (unsigned long long)r->first_oom_live);
    json_string(f, r->first_oom_report);
    fprintf(f, "}");
  } else
    fprintf(f, "null");
  if (j->samples && j->samples->n) {
    fprintf(f, ",\"curve\":{");
    json_u64s(f, "event", j->samples->event, j->samples->n);
    fprintf(f, ",");
    json_u64s(f, "reserved", j->samples->reserved, j->samples->n);
    fprintf(f, ",");
    json_u64s(f, "allocated", j->samples->allocated, j->samples->n);
    fprintf(f, ",");
    json_u64s(f, "live", j->samples->live, j->samples->n);
    fprintf(f, "}");
  }
  if (j->command) {
    fprintf(f, ",\"command\":");
    json_string(f, j->command);
  }
  fprintf(f, "}\n");
}
