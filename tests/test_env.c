/* test_env.c — PYTORCH_CUDA_ALLOC_CONF honoured by the PyTorch entry points
 * when GARDENALLOC_CONF is not set: PyTorch's keys applied as PyTorch applies
 * them, everything else named and left out, GARDENALLOC_CONF strict and first. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "env.h"
#include "gardenalloc.h"

#define MiB ((int64_t)1 << 20)

static char out[1024], notes[4096], err[2048];

static void tr(const char *conf) {
  cr_assert_eq(ga_env_translate("PYTORCH_CUDA_ALLOC_CONF", conf, NULL, out, sizeof out, notes, sizeof notes,
                                err, sizeof err),
               0, "'%s' refused: %s", conf, err);
  cr_assert_eq(ga_config_validate(out), GA_OK, "the result parses: %s", out);
  cr_assert_str_eq(err, "");
}

/* `conf` is refused, with `phrase` in the message. */
static void refused(const char *conf, const char *ignore, const char *phrase) {
  cr_assert_eq(ga_env_translate("PYTORCH_CUDA_ALLOC_CONF", conf, ignore, out, sizeof out, notes, sizeof notes,
                                err, sizeof err),
               1, "'%s' accepted", conf);
  cr_assert(strncmp(err, "PYTORCH_CUDA_ALLOC_CONF: ", 25) == 0 && strstr(err, phrase), "'%s' -> %s", conf,
            err);
}

static int count(const char *hay, const char *needle) {
  int n = 0;
  for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle)) n++;
  return n;
}

Test(env, pytorch_keys_are_applied_as_given) {
  tr("max_split_size_mb:128");
  cr_assert_str_eq(out, "max_split_size_mb:128");
  cr_assert_str_eq(notes, "");
  tr(" expandable_segments : True , roundup_power2_divisions:[256:1, "
     "512:2,>:8],garbage_collection_threshold:0.6,"
     "per_process_memory_fraction:0.5,max_non_split_rounding_mb:64,large_segment_size_mb:32");
  cr_assert_str_eq(out,
                   "expandable_segments:True,roundup_power2_divisions:[256:1,512:2,>:8],garbage_collection_"
                   "threshold:0.6,per_process_memory_fraction:0.5,max_non_split_rounding_mb:64,large_"
                   "segment_size_mb:32");
  cr_assert_str_eq(notes, "", "%s", notes);
  tr("");
  cr_assert_str_eq(out, "");
  tr(NULL);
  cr_assert_str_eq(out, "");
}

Test(env, compatibility_keys_are_kept_and_named) {
  tr("release_lock_on_cudamalloc:True,pinned_use_hip_host_register:True,pinned_num_register_threads:8");
  cr_assert_str_eq(out,
                   "release_lock_on_cudamalloc:True,pinned_use_hip_host_register:True,pinned_num_register_"
                   "threads:8");
  cr_assert(strstr(notes,
                   "gardenalloc: PYTORCH_CUDA_ALLOC_CONF: release_lock_on_cudamalloc has no effect in "
                   "gardenalloc: gardenalloc holds its lock over device calls\n"),
            "%s", notes);
  cr_assert(strstr(notes,
                   "pinned_use_hip_host_register has no effect in gardenalloc: host pinned memory is not "
                   "managed by gardenalloc\n"),
            "an alias is traced to its key: %s", notes);
  cr_assert_eq(count(notes, "\n"), 3, "%s", notes);
}

Test(env, what_pytorch_refuses_is_refused) {
  refused(
      "expandable_segment:True", NULL,
      "unrecognized key 'expandable_segment' (did you mean 'expandable_segments'?), which PyTorch refuses "
      "too; `ga-bench keys` lists the keys. A key of a newer PyTorch that gardenalloc "
      "does not know is let through, without effect, by GARDENALLOC_IGNORE_KEYS=expandable_segment");
  refused("max_split_size_mb:64,sim_capacity_mb:64", NULL,
          "'sim_capacity_mb' is a key of gardenalloc's own, which PyTorch refuses in its variable: set it in "
          "GARDENALLOC_CONF");
  refused("expandable_page_size_mb:2", NULL, "'expandable_page_size_mb' is a key of gardenalloc's own");
  refused("expandable_segments=True", NULL,
          "unrecognized key 'expandable_segments=True': the separator between a key and its value is ':' "
          "(write expandable_segments:True)");
  refused("zz:1", NULL, "unrecognized key 'zz', which PyTorch refuses too; `ga-bench keys`");
  refused("foo", NULL, "unrecognized key 'foo'");
  refused(":x", NULL, "':x' is not a key:value option");
  refused("expandable_segments", NULL,
          "'expandable_segments' has no value (write expandable_segments:VALUE)");
  refused("backend:tpu", NULL, "backend:tpu: PyTorch's backends are native and cudaMallocAsync");
}

Test(env, keys_of_pytorch_without_effect_are_named_and_left_out) {
  tr("throw_on_cudamalloc_oom:True,max_split_size_mb:64,pinned_max_cached_size_mb:4");
  cr_assert_str_eq(out, "max_split_size_mb:64");
  cr_assert(strstr(notes,
                   "throw_on_cudamalloc_oom has no effect in gardenalloc: a key of PyTorch that "
                   "gardenalloc does not apply\n"),
            "%s", notes);
  cr_assert_eq(count(notes, "\n"), 2, "%s", notes);
}

Test(env, the_escape_lets_named_keys_through) {
  const char *conf = "expandable_segments:True,future_key:7,other_future:[1:2]";
  refused(conf, NULL, "unrecognized key 'future_key'");
  cr_assert_eq(ga_env_translate("PYTORCH_CUDA_ALLOC_CONF", conf, "future_key, other_future", out, sizeof out,
                                notes, sizeof notes, err, sizeof err),
               0, "%s", err);
  cr_assert_str_eq(out, "expandable_segments:True");
  cr_assert(strstr(notes, "ignoring 'future_key' (named in GARDENALLOC_IGNORE_KEYS)"), "%s", notes);
  cr_assert(strstr(notes, "ignoring 'other_future'"), "%s", notes);
  refused(conf, "future_ke", "unrecognized key 'future_key'");
}

Test(env, pytorch_backends) {
  tr("backend:native,expandable_segments:True");
  cr_assert_str_eq(out, "expandable_segments:True");
  cr_assert_str_eq(notes, "", "native is the allocator gardenalloc stands in for");
  tr("backend:cudaMallocAsync");
  cr_assert_str_eq(out, "");
  cr_assert(strstr(notes, "ignoring backend:cudaMallocAsync: gardenalloc is the allocator here"), "%s",
            notes);
}

Test(env, a_bad_value_is_refused_as_pytorch_refuses_it) {
  refused("max_split_size_mb:abc,garbage_collection_threshold:0.5", NULL,
          "PYTORCH_CUDA_ALLOC_CONF: max_split_size_mb: 'abc' is not a whole number of MiB");
  refused("expandable_segments:yes", NULL, "expandable_segments: 'yes' is not a boolean");
  /* Checked against what came before it: large_segment_size_mb raises the
   * floor of max_split_size_mb. */
  refused("large_segment_size_mb:64,max_split_size_mb:32", NULL, "too small");
}

Test(env, empty_items_and_buffers) {
  tr(",,expandable_segments:True,");
  cr_assert_str_eq(out, "expandable_segments:True");
  cr_assert_str_eq(notes, "");
  char small[8], why[200];
  cr_assert_eq(
      ga_env_translate("X", "max_split_size_mb:128", NULL, small, sizeof small, NULL, 0, why, sizeof why), 1);
  cr_assert_str_eq(small, "", "an item that does not fit is not cut");
  cr_assert_str_eq(why, "X: the configuration is longer than 7 characters");
  cr_assert_eq(ga_env_translate("X", "", NULL, small, 1, NULL, 0, NULL, 0), -1);
}

/* Each test runs in a process of its own, so the once-per-process reading
 * starts afresh. */
Test(env, the_torch_allocators_follow_pytorchs_variable) {
  unsetenv("GARDENALLOC_CONF");
  unsetenv("PYTORCH_ALLOC_CONF");
  setenv("PYTORCH_CUDA_ALLOC_CONF",
         "max_split_size_mb:128,release_lock_on_cudamalloc:True,throw_on_cudamalloc_oom:1", 1);
  const char *src = NULL;
  cr_assert_str_eq(ga_torch_config(&src), "max_split_size_mb:128,release_lock_on_cudamalloc:True");
  cr_assert_str_eq(src, "PYTORCH_CUDA_ALLOC_CONF");
  ga_allocator_t *a = ga_torch_allocator(0);
  cr_assert(a != NULL, "%s", ga_last_error());
  ga_stats_t stats;
  cr_assert_eq(ga_stats(a, &stats), GA_OK);
  cr_assert_eq(stats.max_split_size, 128 * MiB);
  /* Read once: a later change of the variable does not split the process. */
  setenv("PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:256", 1);
  cr_assert_str_eq(ga_torch_config(NULL), "max_split_size_mb:128,release_lock_on_cudamalloc:True");
}

Test(env, the_generic_name_is_read_too) {
  unsetenv("GARDENALLOC_CONF");
  unsetenv("PYTORCH_CUDA_ALLOC_CONF");
  setenv("PYTORCH_ALLOC_CONF", "expandable_segments:True", 1);
  const char *src = NULL;
  cr_assert_str_eq(ga_torch_config(&src), "expandable_segments:True");
  cr_assert_str_eq(src, "PYTORCH_ALLOC_CONF");
}

Test(env, gardenalloc_conf_wins_and_stays_strict) {
  setenv("GARDENALLOC_CONF", "backend:sim,sim_capacity_mb:512,max_split_size_mb:nope", 1);
  setenv("PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:128", 1);
  const char *src = NULL;
  cr_assert_str_eq(ga_torch_config(&src), "backend:sim,sim_capacity_mb:512,max_split_size_mb:nope");
  cr_assert_str_eq(src, "GARDENALLOC_CONF");
  cr_assert_null(ga_torch_allocator(0), "a bad GARDENALLOC_CONF is refused");
  cr_assert(strstr(ga_last_error(), "max_split_size_mb: 'nope' is not a whole number"), "%s",
            ga_last_error());
}

Test(env, no_variable_means_the_defaults) {
  unsetenv("GARDENALLOC_CONF");
  unsetenv("PYTORCH_CUDA_ALLOC_CONF");
  unsetenv("PYTORCH_ALLOC_CONF");
  const char *src = NULL;
  cr_assert_str_eq(ga_torch_config(&src), "");
  cr_assert_str_eq(src, "defaults");
}

Test(env, a_refused_variable_fails_every_allocator_with_its_reason) {
  unsetenv("GARDENALLOC_CONF");
  unsetenv("GARDENALLOC_IGNORE_KEYS");
  setenv("PYTORCH_CUDA_ALLOC_CONF", "expandable_segment:True", 1);
  const char *src = NULL;
  cr_assert_null(ga_torch_config(&src));
  cr_assert_str_eq(src, "PYTORCH_CUDA_ALLOC_CONF");
  cr_assert(
      strstr(ga_last_error(), "gardenalloc: PYTORCH_CUDA_ALLOC_CONF: unrecognized key 'expandable_segment'"),
      "%s", ga_last_error());
  cr_assert_null(ga_torch_allocator(0));
  cr_assert(strstr(ga_last_error(), "did you mean 'expandable_segments'?"), "%s", ga_last_error());
  cr_assert_null(ga_torch_alloc_nothrow(1000, 0, NULL));
  cr_assert(strstr(ga_last_error(), "GARDENALLOC_IGNORE_KEYS=expandable_segment"), "%s", ga_last_error());
}

Test(env, the_escape_from_the_environment) {
  unsetenv("GARDENALLOC_CONF");
  setenv("GARDENALLOC_IGNORE_KEYS", "expandable_segments_v2", 1);
  setenv("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments_v2:True,max_split_size_mb:64", 1);
  cr_assert_str_eq(ga_torch_config(NULL), "max_split_size_mb:64");
  cr_assert_not_null(ga_torch_allocator(0), "%s", ga_last_error());
}

Test(env, history_is_recorded_on_every_device_made_now_or_later) {
  setenv("GARDENALLOC_CONF", "backend:sim,sim_devices:2,sim_capacity_mb:256", 1);
  cr_assert_null(ga_torch_allocator_try(0), "nothing is made by asking");
  cr_assert_null(ga_torch_allocator_try(-1));
  cr_assert_null(ga_torch_allocator_try(64));
  void *p = ga_torch_alloc_nothrow(1000, 0, NULL);
  cr_assert_not_null(p, "%s", ga_last_error());
  cr_assert_eq(ga_torch_allocator_try(0), ga_torch_allocator(0));
  cr_assert_null(ga_torch_allocator_try(1));
  cr_assert_eq(ga_torch_record_history(1, 100, 0), GA_OK);
  void *q = ga_torch_alloc_nothrow(2000, 1, NULL); /* device 1 is made now, recording */
  cr_assert_not_null(q, "%s", ga_last_error());
  ga_torch_free(p, 1000, 0, NULL);
  for (int d = 0; d < 2; d++) {
    char buf[1 << 16];
    size_t n = ga_snapshot_json(ga_torch_allocator_try(d), buf, sizeof buf);
    cr_assert(n < sizeof buf);
    cr_assert(strstr(buf, d ? "\"size\":2000" : "\"action\":\"free_requested\""), "device %d: %s", d, buf);
  }
  cr_assert_eq(ga_torch_record_history(0, 0, 0), GA_OK);
  ga_torch_free(q, 2000, 1, NULL);
  char buf[1 << 16];
  ga_snapshot_json(ga_torch_allocator_try(1), buf, sizeof buf);
  cr_assert_null(strstr(buf, "\"action\""), "off on every device: %s", buf);
}
