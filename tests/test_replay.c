/* test_replay.c — the trace reader and replayer behind `ga-bench replay`. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "../bench/trace.h"
#include "fixture.h"

static char path[64];

static const char *write_trace_n(const char *text, size_t n) {
  if (path[0]) unlink(path);
  snprintf(path, sizeof path, "/tmp/ga_trace_XXXXXX");
  int fd = mkstemp(path);
  cr_assert(fd >= 0);
  cr_assert_eq(write(fd, text, n), (ssize_t)n);
  close(fd);
  return path;
}
static const char *write_trace(const char *text) { return write_trace_n(text, strlen(text)); }

static void cleanup(void) {
  if (path[0]) unlink(path);
}

TestSuite(replay, .fini = cleanup);

Test(replay, peaks_of_a_small_trace) {
  const char *p = write_trace(
      "Thread,Time,Action,Pointer,Size,Stream\n"
      "1,00:00:00.0,allocate,0x1,16777216,0\n"
      "1,00:00:00.0,allocate,0x2,1000,0\n"
      "1,00:00:00.0,allocate failure,0x0,99999999999,0\n"
      "1,00:00:00.0,free,0x1,16777216,0\n"
      "1,00:00:00.0,allocate,0x3,8388608,0x7\n"
      "1,00:00:00.0,free,0x2,1000,0\n");
  trace t;
  replay_result r;
  char err[256];
  cr_assert_eq(trace_load(p, &t, err, sizeof err), 0, "%s", err);
  cr_assert_eq(t.n, 5);
  cr_assert_eq(t.skipped_failures, 1);
  cr_assert_eq(trace_replay(&t, "backend:sim,sim_capacity_mb:1024", &r, err, sizeof err), 0, "%s", err);
  cr_assert_eq(r.peak_requested, 16777216 + 1000);
  cr_assert_eq(r.peak_allocated, 16777216 + 1024);
  cr_assert_eq(r.peak_reserved, 16 * MiB + 2 * MiB + 20 * MiB, "stream 7 cannot reuse stream 0's 16 MiB");
  cr_assert_eq(r.allocs, 3);
  cr_assert_eq(r.frees, 2);
  cr_assert_eq(r.stats.device_calls[GA_CALL_MALLOC], 3);
  trace_free(&t);
}

Test(replay, ooms_are_counted_and_their_frees_skipped) {
  const char *p =
      write_trace("1,0,allocate,0x1,83886080,0\n1,0,allocate,0x2,83886080,0\n1,0,free,0x2,83886080,0\n");
  trace t;
  replay_result r;
  char err[256];
  cr_assert_eq(trace_load(p, &t, err, sizeof err), 0, "%s", err);
  cr_assert_eq(trace_replay(&t, "backend:sim,sim_capacity_mb:100", &r, err, sizeof err), 0, "%s", err);
  cr_assert_eq(r.num_ooms, 1);
  trace_free(&t);
}

static void expect_load_error(const char *text, const char *phrase) {
  const char *p = write_trace(text);
  trace t;
  char err[512];
  cr_assert_eq(trace_load(p, &t, err, sizeof err), -1, "accepted: %s", text);
  cr_assert(strstr(err, phrase) != NULL, "expected '%s' in: %s", phrase, err);
}

Test(replay, bad_lines_are_reported_with_their_line_number) {
  expect_load_error("Thread,Time,Action,Pointer,Size,Stream\n1,0,allocate,0x1,100,0\n1,0,allocate,0x2\n",
                    ":3: expected 6 fields");
  expect_load_error("1,0,alloc,0x1,100,0\n", ":1: unknown action 'alloc'");
  expect_load_error("1,0,allocate,0x1,12abc,0\n", ":1: malformed size field");
  expect_load_error("1,0,allocate,zz,100,0\n", ":1: malformed pointer field");
  expect_load_error("1,0,allocate,0x1,100,-1\n", ":1: malformed stream field");
  /* strtoull skips spaces and takes a sign: " -100" would be 2^64 - 100 bytes. */
  expect_load_error("1,0,allocate,0x1, -100,0\n", ":1: malformed size field");
  expect_load_error("1,0,allocate,0x1,+100,0\n", ":1: malformed size field");
  expect_load_error("1,0,allocate, 0x1,100,0\n", ":1: malformed pointer field");
  expect_load_error("1,0,allocate,0x1,100,\t-1\n", ":1: malformed stream field");
  trace t;
  char err[256];
  cr_assert_eq(trace_load("/nonexistent/trace.csv", &t, err, sizeof err), -1);
  cr_assert(strstr(err, "cannot open") != NULL, "%s", err);
}

Test(replay, an_empty_trace_or_a_header_alone_is_refused) {
  expect_load_error("", ": no allocate or free event to replay (the file is empty)");
  expect_load_error("\n\r\n", ": no allocate or free event to replay (the file is empty)");
  expect_load_error("Thread,Time,Action,Pointer,Size,Stream\n", "(a header and no events)");
  expect_load_error("1,0,allocate failure,0x0,100,0\n", "(only allocate failures, which are not replayed)");
}

Test(replay, a_header_names_the_columns_in_any_order) {
  const char *p = write_trace(
      "\nStream,Size,Pointer,Action,Time,Thread\n"
      "7,100,0x1,allocate,00:00:01.5,1\n0,4096,0x2,allocate,00:00:02.0,1\n"
      "7,100,0x1,free,00:00:03.0,1\n");
  trace t;
  char err[512];
  cr_assert_eq(trace_load(p, &t, err, sizeof err), 0, "%s", err);
  cr_assert_eq(t.n, 3);
  cr_assert_eq(t.ev[0].stream, 7);
  cr_assert_eq(t.ev[0].size, 100);
  cr_assert_eq(t.ev[0].id, 1);
  cr_assert_eq(t.ev[1].size, 4096);
  cr_assert_eq(t.ev[1].stream, 0);
  cr_assert(t.ev[2].is_free);
  cr_assert_eq(t.ev[0].time_ns, 1500000000ull);
  trace_free(&t);
  expect_load_error("Thread,Time,Action,Pointer,Bytes,Stream\n1,0,allocate,0x1,100,0\n",
                    ":1: a header names the six columns Thread,Time,Action,Pointer,Size,Stream once each, in "
                    "any order: 'Bytes' is not one");
  expect_load_error("Thread,Time,Action,Pointer,Size,Size\n", "'Size' comes twice");
  expect_load_error("Thread,Time,Action,Pointer,Size\n1,0,allocate,0x1,100\n",
                    ":1: the header has 5 of the six columns");
}

Test(replay, inconsistent_traces_are_refused) {
  const char *p = write_trace("1,0,free,0x9,100,0\n");
  trace t;
  replay_result r;
  char err[256];
  cr_assert_eq(trace_load(p, &t, err, sizeof err), 0);
  cr_assert_eq(trace_replay(&t, "backend:sim,sim_capacity_mb:64", &r, err, sizeof err), -1);
  cr_assert(strstr(err, "event 1 frees id 0x9 that is not live") != NULL, "%s", err);
  trace_free(&t);
  p = write_trace("1,0,allocate,0x1,100,0\n1,0,allocate,0x1,100,0\n");
  cr_assert_eq(trace_load(p, &t, err, sizeof err), 0);
  cr_assert_eq(trace_replay(&t, "backend:sim,sim_capacity_mb:64", &r, err, sizeof err), -1);
  cr_assert(strstr(err, "already live") != NULL, "%s", err);
  trace_free(&t);
}

/* Replays `text`; returns trace_replay's result with its message in err. */
static int replay_text(const char *text, char *err, size_t errlen) {
  trace t;
  replay_result r;
  cr_assert_eq(trace_load(write_trace(text), &t, err, errlen), 0, "%s", err);
  int rc = trace_replay(&t, "backend:sim,sim_capacity_mb:64", &r, err, errlen);
  trace_free(&t);
  return rc;
}

Test(replay, every_64_bit_id_is_an_id) {
  char err[512] = "";
  cr_assert_eq(replay_text("1,0,allocate,0xffffffffffffffff,100,0\n1,0,free,0xffffffffffffffff,100,0\n"
                           "1,0,allocate,0,100,0\n1,0,allocate,0xffffffffffffffff,100,0\n"
                           "1,0,free,0,100,0\n1,0,free,0xffffffffffffffff,100,0\n",
                           err, sizeof err),
               0, "%s", err);
  cr_assert_eq(replay_text("1,0,allocate,0xffffffffffffffff,100,0\n1,0,allocate,0xffffffffffffffff,100,0\n",
                           err, sizeof err),
               -1);
  cr_assert(strstr(err, "event 2 allocates id 0xffffffffffffffff that is already live"), "%s", err);
  cr_assert_eq(replay_text("1,0,free,0xffffffffffffffff,100,0\n", err, sizeof err), -1);
  cr_assert(strstr(err, "event 1 frees id 0xffffffffffffffff that is not live"), "%s", err);
}

Test(replay, a_nul_byte_or_a_long_line_is_named) {
  static const char nul[] = "1,0,allocate,0x1,100,0\n1,0,allo\0cate,0x2,100,0\n";
  const char *p = write_trace_n(nul, sizeof nul - 1);
  trace t;
  char err[512];
  cr_assert_eq(trace_load(p, &t, err, sizeof err), -1);
  cr_assert(strstr(err, ":2: a NUL byte at column 9"), "%s", err);
  char *longline = malloc(5000);
  cr_assert(longline != NULL);
  memset(longline, '1', 4999);
  longline[4999] = 0;
  p = write_trace(longline);
  free(longline);
  cr_assert_eq(trace_load(p, &t, err, sizeof err), -1);
  cr_assert(strstr(err, ":1: line too long (more than 4096 bytes)"), "%s", err);
  /* A last line without its newline, and CRLF ends, are fine. */
  p = write_trace("1,0,allocate,0x1,100,0\r\n1,0,free,0x1,100,0");
  cr_assert_eq(trace_load(p, &t, err, sizeof err), 0, "%s", err);
  cr_assert_eq(t.n, 2);
  trace_free(&t);
}

/* An endless line: the reader stops at the line limit, whatever the file. */
static size_t endless_read;
static ssize_t endless(void *cookie, char *buf, size_t n) {
  (void)cookie;
  if (endless_read >= 64 * MiB) return 0; /* the old reader would have read all of it */
  memset(buf, '1', n);
  endless_read += n;
  return (ssize_t)n;
}

Test(replay, a_file_without_newlines_is_refused_before_it_is_read_whole) {
  FILE *f = fopencookie(NULL, "r", (cookie_io_functions_t){.read = endless});
  cr_assert(f != NULL);
  trace t;
  char err[512];
  cr_assert_eq(trace_read(f, "endless", &t, err, sizeof err), -1);
  fclose(f);
  cr_assert(strstr(err, "endless:1: line too long (more than 4096 bytes)"), "%s", err);
  cr_assert_lt(endless_read, 64 * KiB, "%zu bytes read for one line", endless_read);
  /* /dev/zero: its first byte is named. */
  cr_assert_eq(trace_load("/dev/zero", &t, err, sizeof err), -1);
  cr_assert(strstr(err, "/dev/zero:1: a NUL byte at column 1"), "%s", err);
  /* A line of exactly the limit, with a CR, is a line. */
  char *line = malloc(4096 + 3);
  cr_assert(line != NULL);
  memset(line, ' ', 4096);
  memcpy(line, "1,0,allocate,0x1,100,0", 22);
  memcpy(line + 4096, "\r\n", 3);
  cr_assert_eq(trace_load(write_trace(line), &t, err, sizeof err), -1);
  cr_assert(strstr(err, "malformed stream field"), "the line was read whole: %s", err);
  free(line);
}

Test(replay, a_real_pytorch_trace_reaches_its_recorded_peak) {
  const char *csv = GA_SHARED_DIR "/traces/pytorch_snapshots/cs336_medium_ctx128_inference.csv";
  cr_assert(access(csv, R_OK) == 0, "%s is missing (the repository carries it under traces/)", csv);
  trace t;
  replay_result r;
  char err[512];
  cr_assert_eq(trace_load(csv, &t, err, sizeof err), 0, "%s", err);
  cr_assert_eq(trace_replay(&t, "backend:sim", &r, err, sizeof err), 0, "%s", err);
  /* peak_live_requested_bytes in the trace's .meta.json */
  FILE *f = fopen(GA_SHARED_DIR "/traces/pytorch_snapshots/cs336_medium_ctx128_inference.meta.json", "r");
  cr_assert(f != NULL);
  char text[8192];
  size_t n = fread(text, 1, sizeof text - 1, f);
  fclose(f);
  text[n] = 0;
  const char *k = strstr(text, "\"peak_live_requested_bytes\":");
  cr_assert(k != NULL);
  unsigned long long want = strtoull(k + strlen("\"peak_live_requested_bytes\":"), NULL, 10);
  cr_assert_eq(r.peak_requested, want);
  cr_assert_geq(r.peak_reserved, r.peak_allocated);
  cr_assert_geq(r.peak_allocated, r.peak_requested);
  cr_assert_eq(r.num_ooms, 0);
  trace_free(&t);
}

/* A real trace replayed 5 times in a row, what it leaves live freed between
 * the iterations: the same peak as one replay, five times the events, and no
 * memory call of the device after the first iteration with PyTorch's
 * expandable policy, with moves only when the device is full, and with the
 * default moves (the segment that gave memory away keeps what it grew back
 * to). */
static void iterate(const char *conf, int iterations, replay_result *r) {
  const char *csv = GA_SHARED_DIR "/traces/pytorch_snapshots/cs336_medium_ctx128_inference.csv";
  trace t;
  char err[512];
  cr_assert_eq(trace_load(csv, &t, err, sizeof err), 0, "%s", err);
  replay_opts o = *trace_replay_options(), keep = o;
  o.iterations = iterations;
  trace_replay_set_options(&o);
  int rc = trace_replay(&t, conf, r, err, sizeof err);
  trace_replay_set_options(&keep);
  trace_free(&t);
  cr_assert_eq(rc, 0, "%s: %s", conf, err);
}

Test(replay, repeated_iterations_reach_a_steady_state) {
  static const char *confs[] = {
      "backend:sim",
      "backend:sim,expandable_segments:True,expandable_policy:pytorch",
      "backend:sim,expandable_segments:True,expandable_move_pages:settle",
      "backend:sim,expandable_segments:True",
  };
  for (size_t i = 0; i < sizeof confs / sizeof *confs; i++) {
    replay_result one, five;
    iterate(confs[i], 1, &one);
    iterate(confs[i], 5, &five);
    cr_assert_eq(five.iterations, 5);
    cr_assert_eq(five.allocs, 5 * one.allocs, "%s", confs[i]);
    cr_assert_eq(five.frees, 5 * one.frees, "%s", confs[i]);
    cr_assert_eq(five.peak_requested, one.peak_requested, "%s", confs[i]);
    cr_assert_eq(five.peak_reserved, one.peak_reserved, "%s: the first iteration's memory serves the rest",
                 confs[i]);
    cr_assert_eq(five.steady_memory_calls, 0, "%s: %llu memory calls after the first iteration", confs[i],
                 (unsigned long long)five.steady_memory_calls);
    if (i == 0)
      cr_assert_eq(five.stats.device_calls[GA_CALL_MALLOC], one.stats.device_calls[GA_CALL_MALLOC],
                   "native: no cudaMalloc after the first iteration");
  }
}
