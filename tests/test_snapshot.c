/* test_snapshot.c — the memory snapshot (PyTorch's schema) and the recorded
 * allocation history. The Python tests load it and check the schema fully. */
#include <stdio.h>
#include <stdlib.h>

#include "fixture.h"

TestSuite(snapshot, .fini = fx_close);

static char *snap(void) {
  size_t n = ga_snapshot_json(fx_a, NULL, 0);
  char *buf = malloc(n + 1);
  cr_assert(buf != NULL);
  cr_assert_eq(ga_snapshot_json(fx_a, buf, n + 1), n);
  cr_assert_eq(strlen(buf), n);
  return buf;
}

static int count(const char *json, const char *what) {
  int n = 0;
  for (const char *p = json; (p = strstr(p, what)); p++) n++;
  return n;
}

Test(snapshot, segments_blocks_and_states) {
  fx_open("max_split_size_mb:64", GiB);
  fx_hold(S2, 1);
  char *a = fx_alloc(3 * MiB), *b = fx_alloc(1000), *c = fx_alloc(3 * MiB);
  ga_record_stream(fx_a, c, S2);
  fx_free(c); /* pending */
  char *json = snap();
  cr_assert_eq(count(json, "\"segment_type\":\"large\""), 1, "%s", json);
  cr_assert_eq(count(json, "\"segment_type\":\"small\""), 1);
  cr_assert_eq(count(json, "\"state\":\"active_allocated\""), 2);
  cr_assert_eq(count(json, "\"state\":\"active_pending_free\""), 1);
  cr_assert_eq(count(json, "\"state\":\"inactive\""), 2, "the free tails of both segments");
  char want[128];
  snprintf(want, sizeof want,
           "\"address\":%llu,\"size\":3145728,\"requested_size\":3145728,\"state\":\"active_allocated\"",
           (unsigned long long)(uintptr_t)a);
  cr_assert(strstr(json, want) != NULL, "%s", json);
  cr_assert(strstr(json,
                   "\"total_size\":20971520,\"allocated_size\":3145728,\"active_size\":6291456,\"requested_"
                   "size\":6291456") != NULL,
            "%s", json);
  cr_assert(
      strstr(json, "\"PYTORCH_CUDA_ALLOC_CONF\":\"max_split_size_mb:64\",\"max_split_size\":67108864") !=
          NULL,
      "%s", json);
  cr_assert(strstr(json, "\"device_traces\":[[]]") != NULL, "nothing recorded when recording is off");
  free(json);
  fx_hold(S2, 0);
  fx_free(a);
  fx_free(b);
}

/* Tabs, newlines and other spaces separate settings as a space does; the
 * settings string is copied into the snapshot with every control character
 * escaped, so the JSON stays valid. */
Test(snapshot, settings_with_tabs_and_newlines_stay_valid_json) {
  fx_open("max_split_size_mb:64,\texpandable_segments:False\n\r\v\f", 64 * MiB);
  char *json = snap();
  for (const char *p = json; *p; p++)
    cr_assert_geq((unsigned char)*p, 0x20, "a raw control character 0x%02x at %zu: %s", (unsigned char)*p,
                  (size_t)(p - json), json);
  cr_assert(strstr(json,
                   "\"PYTORCH_CUDA_ALLOC_CONF\":\"max_split_size_mb:64,\\u0009expandable_segments:"
                   "False\\u000a\\u000d\\u000b\\u000c\",") != NULL,
            "%s", json);
  free(json);
}

Test(snapshot, the_history_records_every_event_in_order) {
  fx_open(NULL, 64 * MiB);
  cr_assert_eq(ga_record_history(fx_a, 1, 0), GA_OK);
  void *a = fx_alloc(30 * MiB);
  fx_free(a);
  void *p;
  cr_assert_eq(ga_malloc(fx_a, 100 * MiB, S1, &p), GA_ERR_OOM);
  char *json = snap();
  const char *order[] = {"segment_alloc",  "\"alloc\"",    "free_requested",
                         "free_completed", "segment_free", "\"oom\""};
  const char *at = json;
  for (int i = 0; i < 6; i++) {
    const char *q = strstr(at, order[i]);
    cr_assert(q != NULL, "%s missing or out of order in %s", order[i], json);
    at = q;
  }
  cr_assert(strstr(json, "\"action\":\"oom\",\"device_free\":") != NULL, "%s", json);
  free(json);
  cr_assert_eq(ga_record_history(fx_a, 0, 0), GA_OK);
  json = snap();
  cr_assert(strstr(json, "\"device_traces\":[[]]") != NULL);
  free(json);
}

Test(snapshot, the_ring_keeps_the_last_entries) {
  fx_open(NULL, GiB);
  ga_record_history(fx_a, 1, 4);
  for (int i = 0; i < 10; i++) fx_free(fx_alloc(MiB));
  char *json = snap();
  cr_assert_eq(count(json, "\"action\":"), 4);
  /* ... free_completed | alloc, free_requested, free_completed */
  cr_assert_eq(count(json, "\"action\":\"alloc\""), 1);
  cr_assert_eq(count(json, "\"action\":\"free_completed\""), 2);
  free(json);
}

Test(snapshot, expandable_segments_report_each_mapped_range) {
  fx_open("expandable_segments:True,expandable_page_size_mb:2", GiB);
  ga_record_history(fx_a, 1, 0);
  char *p[3];
  for (int i = 0; i < 3; i++) p[i] = fx_alloc(4 * MiB);
  fx_free(p[1]);
  cr_assert_eq(ga_empty_cache(fx_a), GA_OK); /* unmaps the middle: two mapped ranges */
  char *json = snap();
  cr_assert_eq(count(json, "\"is_expandable\":true"), 2, "%s", json);
  cr_assert_geq(count(json, "segment_map"), 1);
  cr_assert_eq(count(json, "segment_unmap"), 2, "one event per 2 MiB granule: %s", json);
  cr_assert_eq(fx_stats().segment[GA_POOL_ALL].current, 2, "the segment statistic counts the same ranges");
  free(json);
  fx_free(p[0]);
  fx_free(p[2]);
}

Test(snapshot, c_stacks_on_every_entry_and_on_live_blocks) {
  fx_open(NULL, GiB);
  cr_assert_eq(ga_record_history_stacks(fx_a, 1, 0, GA_STACKS_C), GA_OK, "%s", ga_last_error());
  void *p = fx_alloc(3 * MiB), *q = fx_alloc(100);
  fx_free(q);
  char *json = snap();
  /* alloc, segment_alloc x2, alloc, free_requested, free_completed: each with frames, and the live block */
  cr_assert_geq(count(json, "\"frames\":[{\"filename\":"), 7, "%s", json);
  cr_assert_eq(count(json, "\"line\":0"), count(json, "\"filename\":"), "C frames have no line");
  free(json);
  ga_record_history_stacks(fx_a, 1, 0, 0);
  void *r = fx_alloc(5 * MiB);
  json = snap();
  cr_assert_eq(count(json, "\"filename\":"), 0, "no stacks asked, none recorded: %s", json);
  free(json);
  fx_free(r);
  fx_free(p);
}

Test(snapshot, python_stacks_need_an_interpreter_and_masks_are_checked) {
  fx_open(NULL, GiB);
  cr_assert_eq(ga_record_history_stacks(fx_a, 1, 0, GA_STACKS_PYTHON), GA_ERR_INVALID);
  cr_assert(strstr(ga_last_error(), "this process runs no Python interpreter") != NULL, "%s",
            ga_last_error());
  cr_assert_eq(ga_record_history_stacks(fx_a, 1, 0, 8), GA_ERR_INVALID);
  cr_assert(strstr(ga_last_error(), "stacks 8 is not a combination") != NULL, "%s", ga_last_error());
}
