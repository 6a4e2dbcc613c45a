/* test_config.c — the parser: PyTorch's grammar and meanings, our keys. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "config.h"
#include "errors.h"
#include "gardenalloc.h"

#define MiB ((size_t)1 << 20)

static ga_config parse_ok(const char *conf) {
  ga_config c;
  char err[512] = "";
  cr_assert_eq(ga_config_parse(conf, &c, err, sizeof err), 0, "'%s': %s", conf, err);
  return c;
}

Test(config, defaults_match_pytorch) {
  ga_config c = parse_ok(NULL);
  cr_assert_eq(c.max_split_size, SIZE_MAX);
  cr_assert_eq(c.max_non_split_rounding, 20 * MiB);
  cr_assert_eq(c.large_segment_size, 20 * MiB);
  cr_assert_eq(c.gc_threshold, 0.0);
  cr_assert_eq(c.expandable_segments, 0);
  cr_assert_eq(c.memory_fraction, 1.0);
  for (int i = 0; i < GA_ROUNDUP_INTERVALS; i++) cr_assert_eq(c.roundup_divisions[i], 0);
  cr_assert_str_eq(c.backend, "auto");
  cr_assert_eq(c.sim_capacity, (size_t)80 << 30);
  ga_config e = parse_ok("");
  cr_assert_eq(memcmp(&c, &e, sizeof c), 0);
}

Test(config, pytorch_keys_and_whitespace) {
  ga_config c = parse_ok(
      " max_split_size_mb : 128 , garbage_collection_threshold:0.6,"
      "expandable_segments:False,release_lock_on_cudamalloc:True,"
      "per_process_memory_fraction:0.75,pinned_num_register_threads:8");
  cr_assert_eq(c.max_split_size, 128 * MiB);
  cr_assert_float_eq(c.gc_threshold, 0.6, 1e-12);
  cr_assert_eq(c.release_lock_on_cudamalloc, 1);
  cr_assert_float_eq(c.memory_fraction, 0.75, 1e-12);
  cr_assert_eq(c.pinned_num_register_threads, 8);
}

Test(config, max_split_size_boundary_is_large_segment_size) {
  ga_config c = parse_ok("max_split_size_mb:20");
  cr_assert_eq(c.max_split_size, 20 * MiB);
  char err[256];
  cr_assert_eq(ga_config_parse("max_split_size_mb:19", &c, err, sizeof err), GA_DEV_EINVAL);
  c = parse_ok("max_split_size_mb:1099511627776");
  cr_assert_eq(c.max_split_size, (size_t)1 << 60, "up to 2^40 MiB");
  cr_assert_eq(ga_config_parse("max_split_size_mb:1099511627777", &c, err, sizeof err), GA_DEV_EINVAL);
  cr_assert(strstr(err, "1099511627777 MiB is too large"), "%s", err);
  /* large_segment_size_mb is applied before the check, wherever it appears. */
  c = parse_ok("max_split_size_mb:32,large_segment_size_mb:32");
  cr_assert_eq(c.max_non_split_rounding, 32 * MiB, "defaults to large_segment_size");
}

Test(config, roundup_single_value_fills_every_interval) {
  ga_config c = parse_ok("roundup_power2_divisions:8");
  for (int i = 0; i < GA_ROUNDUP_INTERVALS; i++) cr_assert_eq(c.roundup_divisions[i], 8);
}

Test(config, roundup_list_applies_keys_as_lower_bounds) {
  ga_config c = parse_ok("roundup_power2_divisions:[256:1,512:2,1024:4,>:8]");
  size_t want[GA_ROUNDUP_INTERVALS] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 4, 8, 8, 8, 8, 8};
  for (int i = 0; i < GA_ROUNDUP_INTERVALS; i++) cr_assert_eq(c.roundup_divisions[i], want[i], "index %d", i);
  c = parse_ok("roundup_power2_divisions:[1:4,64:0]");
  cr_assert_eq(c.roundup_divisions[0], 4);
  cr_assert_eq(c.roundup_divisions[5], 0);
  cr_assert_eq(c.roundup_divisions[6], 0);
}

Test(config, later_keys_override_earlier_ones) {
  ga_config c = parse_ok("max_split_size_mb:40,max_split_size_mb:64");
  cr_assert_eq(c.max_split_size, 64 * MiB);
}

Test(config, native_backend_means_auto_and_our_keys_parse) {
  ga_config c = parse_ok("backend:native,sim_capacity_mb:4096");
  cr_assert_str_eq(c.backend, "auto");
  cr_assert_eq(c.sim_capacity, 4096 * MiB);
  c = parse_ok("backend:sim");
  cr_assert_str_eq(c.backend, "sim");
}

Test(config, the_cost_table_is_named) {
  cr_assert_str_eq(parse_ok("").sim_cost_table, "blackwell");
  cr_assert_str_eq(parse_ok("sim_cost_table:a100").sim_cost_table, "a100");
  ga_config c;
  char err[256];
  cr_assert_eq(ga_config_parse("sim_cost_table:h100", &c, err, sizeof err), GA_DEV_EINVAL);
  cr_assert(strstr(err, "unknown cost table 'h100' (allowed: blackwell, a100)"), "%s", err);
}

Test(config, nothing_is_half_applied) {
  ga_config c = parse_ok("max_split_size_mb:40");
  ga_config before = c;
  char err[256];
  cr_assert_eq(ga_config_parse("max_split_size_mb:64,garbage_collection_threshold:7", &c, err, sizeof err),
               GA_DEV_EINVAL);
  cr_assert_eq(memcmp(&c, &before, sizeof c), 0);
  cr_assert(strstr(err, "garbage_collection_threshold") && strstr(err, "7"), "%s", err);
}

Test(config, expandable_segment_keys) {
  ga_config c = parse_ok("expandable_segments:True,expandable_page_size_mb:2,expandable_cache_max_mb:0");
  cr_assert_eq(c.expandable_segments, 1);
  cr_assert_eq(c.expandable_page_size, 2 * MiB);
  cr_assert_eq(c.expandable_cache_max, 0);
  c = parse_ok(NULL);
  cr_assert_eq(c.expandable_page_size, 0, "0 = large_segment_size");
  cr_assert_eq(c.expandable_cache_max, 256 * MiB);
  char err[256];
  cr_assert_eq(ga_config_parse("expandable_page_size_mb:3", &c, err, sizeof err), GA_DEV_EINVAL);
  cr_assert(strstr(err, "expandable_page_size_mb") && strstr(err, "3 MiB"), "%s", err);
  cr_assert_eq(ga_config_parse("expandable_page_size_mb:0", &c, err, sizeof err), GA_DEV_EINVAL);
  cr_assert(c.expandable_move_when_full && !c.expandable_move_always, "when_full is the default");
  c = parse_ok("expandable_move_pages:settle");
  cr_assert(!c.expandable_move_when_full && !c.expandable_move_always);
  c = parse_ok("expandable_move_pages:settle,expandable_move_pages:when_full");
  cr_assert(c.expandable_move_when_full && !c.expandable_move_always);
  c = parse_ok("expandable_move_pages:always");
  cr_assert(!c.expandable_move_when_full && c.expandable_move_always);
  c = parse_ok("expandable_move_pages:always,expandable_move_pages:settle");
  cr_assert(!c.expandable_move_when_full && !c.expandable_move_always, "the last one counts");
  cr_assert_eq(ga_config_parse("expandable_move_pages:sometimes", &c, err, sizeof err), GA_DEV_EINVAL);
  cr_assert(strstr(err, "expandable_move_pages") && strstr(err, "when_full, settle or always"), "%s", err);
}

Test(config, the_key_table_describes_every_key) {
  const char *name, *type, *dflt, *origin, *doc;
  int n = 0, found_backend = 0;
  while (ga_config_key(n, &name, &type, &dflt, &origin, &doc)) {
    cr_assert(name[0] && type[0] && dflt[0] && doc[0]);
    cr_assert(!strcmp(origin, "pytorch") || !strcmp(origin, "gardenalloc"));
    found_backend |= !strcmp(name, "backend");
    n++;
  }
  cr_assert_geq(n, 15);
  cr_assert(found_backend);
  cr_assert_eq(ga_config_key(-1, NULL, NULL, NULL, NULL, NULL), 0);
}

/* ga_last_error() after validating `conf`. */
static const char *refusal(const char *conf) {
  cr_assert_eq(ga_config_validate(conf), GA_ERR_CONFIG, "'%s' accepted", conf);
  return ga_last_error();
}

Test(config, an_unknown_key_is_named_with_the_closest_one_or_all_of_them_in_full) {
  cr_assert_str_eq(refusal("expandable_segments:True,pinned_use_cuda_host_registe:True"),
                   "unrecognized GARDENALLOC_CONF key 'pinned_use_cuda_host_registe': did you mean "
                   "'pinned_use_cuda_host_register'? (`ga-bench keys` lists every key)");
  cr_assert(strstr(refusal("expandabel_segments:True"), "did you mean 'expandable_segments'?"), "%s",
            ga_last_error());
  cr_assert(strstr(refusal("max_split_size:128"), "did you mean 'max_split_size_mb'?"), "%s",
            ga_last_error());
  /* KEY=VALUE: the separator is named. */
  cr_assert_str_eq(
      refusal("expandable_segments=True"),
      "unrecognized GARDENALLOC_CONF key 'expandable_segments=True': the separator between a key "
      "and its value is ':' (write expandable_segments:True)");
  /* Nothing close: every key, the last one and the closing parenthesis too. */
  const char *e = refusal("zz:1");
  cr_assert(
      strncmp(e, "unrecognized GARDENALLOC_CONF key 'zz' (the keys are backend, sim_capacity_mb,",
              strlen("unrecognized GARDENALLOC_CONF key 'zz' (the keys are backend, sim_capacity_mb,")) == 0,
      "%s", e);
  const char *name;
  int n = 0;
  while (ga_config_key(n, &name, NULL, NULL, NULL, NULL)) {
    cr_assert(strstr(e, name), "'%s' missing from: %s", name, e);
    n++;
  }
  ga_config_key(n - 1, &name, NULL, NULL, NULL, NULL);
  char tail[96];
  snprintf(tail, sizeof tail, " %s)", name);
  cr_assert(strlen(e) > strlen(tail) && strcmp(e + strlen(e) - strlen(tail), tail) == 0, "cut short: %s", e);
  /* The same words from ga_create, after its own name. */
  ga_allocator_t *a = NULL;
  cr_assert_eq(ga_create("zz:1", 0, &a), GA_ERR_CONFIG);
  cr_assert(strncmp(ga_last_error(), "ga_create: unrecognized", 23) == 0 &&
                strcmp(ga_last_error() + strlen(ga_last_error()) - strlen(tail), tail) == 0,
            "%s", ga_last_error());
  /* A very long key is shown shortened, with its length. */
  char lng[300];
  memset(lng, 'q', 200);
  strcpy(lng + 200, ":1");
  cr_assert(strstr(refusal(lng), "'qqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqq... (200 characters)'"), "%s",
            ga_last_error());
}

Test(config, a_long_value_is_shown_by_its_start_and_length) {
  char conf[200] = "expandable_segments:";
  memset(conf + strlen(conf), 'y', 100);
  cr_assert_str_eq(
      refusal(conf),
      "invalid GARDENALLOC_CONF option expandable_segments: 'yyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyy... (100 "
      "characters)' is not a boolean (allowed: True or False)");
}
