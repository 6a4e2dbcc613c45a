/* test_ranks.c — deterministic:True: the same placement on every rank.
 *
 * Every real PyTorch trace in traces/pytorch_snapshots is replayed as four
 * ranks, each on a simulated GPU with its own lag and kernel times, every
 * seventh allocation also used on a second stream (record_stream). With
 * deterministic:True every rank places every allocation at the same segment
 * and offset, in native and expandable mode; without it the GPU's timing
 * shows through (so the comparison can see a difference).
 *
 * With scattered addresses (sim_scatter_addresses: each rank's device puts
 * its segments at addresses drawn for it), equal free blocks of different
 * segments must be told apart by the segments' creation numbers, not their
 * addresses, or the ranks' offsets differ (an address tie-break fails the
 * native test on all 13 traces).
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../bench/ranks.h"
#include "fixture.h"

static int csv_name(const struct dirent *e) {
  size_t n = strlen(e->d_name);
  return n > 4 && !strcmp(e->d_name + n - 4, ".csv");
}

static const ranks_opts opts = {
    .ranks = 4, .seed = 25, .lag_max_us = 3000, .kernel_max_us = 300, .pace_us = 10, .record_every = 7};

/* Replays every trace under conf with the options o; counts the traces
 * whose ranks differ. */
static size_t replay_with(const char *conf, const ranks_opts *o, int want_identical) {
  char dir[512];
  snprintf(dir, sizeof dir, "%s/traces/pytorch_snapshots", GA_SHARED_DIR);
  struct dirent **ents;
  int m = scandir(dir, &ents, csv_name, alphasort);
  cr_assert(m > 0, "no traces in %s", dir);
  size_t differ = 0;
  for (int i = 0; i < m; i++) {
    char path[800], err[512];
    snprintf(path, sizeof path, "%s/%s", dir, ents[i]->d_name);
    trace t;
    cr_assert_eq(trace_load(path, &t, err, sizeof err), 0, "%s", err);
    ranks_result r;
    cr_assert_eq(ranks_replay(&t, conf, o, &r, err, sizeof err), 0, "%s", err);
    cr_assert_gt(r.allocs, 100);
    if (!r.identical) differ++;
    if (want_identical)
      cr_expect(r.identical, "%s under %s: allocation %zu differs: %s", ents[i]->d_name, conf, r.first_diff,
                r.diff_what);
    trace_free(&t);
    free(ents[i]);
  }
  free(ents);
  return differ;
}

static size_t replay_all(const char *conf, int want_identical) {
  return replay_with(conf, &opts, want_identical);
}

/* Two ranks, different lags, each device scattering its segments' addresses. */
static const ranks_opts scattered = {.ranks = 2,
                                     .seed = 7,
                                     .lag_max_us = 3000,
                                     .kernel_max_us = 300,
                                     .pace_us = 10,
                                     .record_every = 7,
                                     .scatter = 1};

Test(ranks, deterministic_places_alike_on_scattered_addresses, .timeout = 300) {
  replay_with("deterministic:True", &scattered, 1);
  replay_with("deterministic:True,expandable_segments:True", &scattered, 1);
}

/* The scatter is real: the two devices put the same first segment (20 MiB,
 * three allocations in it) at different addresses, the offsets agree. */
Test(ranks, scattered_devices_differ_in_addresses) {
  ga_allocator_t *a[2];
  void *p[2][3];
  cr_assert_eq(ga_create("backend:sim,sim_capacity_mb:256,sim_scatter_addresses:1", 0, &a[0]), GA_OK);
  cr_assert_eq(ga_create("backend:sim,sim_capacity_mb:256,sim_scatter_addresses:2", 0, &a[1]), GA_OK);
  for (int k = 0; k < 2; k++)
    for (int i = 0; i < 3; i++) cr_assert_eq(ga_malloc(a[k], (size_t)(i + 2) << 20, NULL, &p[k][i]), GA_OK);
  cr_expect_neq(p[0][0], p[1][0]);
  for (int i = 1; i < 3; i++)
    cr_expect_eq((char *)p[0][i] - (char *)p[0][0], (char *)p[1][i] - (char *)p[1][0]);
  for (int k = 0; k < 2; k++) {
    cr_expect_eq(ga_check(a[k]), 0);
    ga_destroy(a[k]);
  }
}

Test(ranks, deterministic_native_places_alike_on_every_rank, .timeout = 300) {
  replay_all("deterministic:True", 1);
}

Test(ranks, deterministic_expandable_places_alike_on_every_rank, .timeout = 300) {
  replay_all("deterministic:True,expandable_segments:True", 1);
}

Test(ranks, deterministic_with_max_split_and_small_pages_places_alike, .timeout = 300) {
  replay_all("deterministic:True,expandable_segments:True,expandable_page_size_mb:2", 1);
  replay_all("deterministic:True,max_split_size_mb:40,roundup_power2_divisions:4", 1);
}

/* Without the setting, the GPU's timing decides: the test sees it. */
Test(ranks, without_it_timing_shows_through, .timeout = 300) {
  cr_expect_gt(replay_all("", 0), 0, "native: every rank placed alike without deterministic");
  cr_expect_gt(replay_all("expandable_segments:True", 0), 0,
               "expandable: every rank placed alike without deterministic");
}

Test(ranks, the_setting_is_parsed) {
  cr_assert_eq(ga_config_validate("deterministic:True"), GA_OK);
  cr_assert_eq(ga_config_validate("deterministic:maybe"), GA_ERR_CONFIG);
  cr_assert_eq(ga_config_validate("sim_scatter_addresses:4294967296"), GA_OK);
  cr_assert_eq(ga_config_validate("sim_scatter_addresses:4294967297"), GA_ERR_CONFIG);
}
