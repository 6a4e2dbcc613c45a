/* test_env.c — PYTORCH_CUDA_ALLOC_CONF honoured by the PyTorch entry points
 * when GARDENALLOC_CONF is not set: PyTorch's keys applied as PyTorch applies
 * them, everything else named and left out, GARDENALLOC_CONF strict and first. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "env.h"
#include "gardenalloc.h"

#define MiB ((int64_t)1 << 20)

static char out[1024], notes[4096];

static void tr(const char *s) {
  cr_assert_eq(ga_env_translate("PYTORCH_CUDA_ALLOC_CONF", s, out, sizeof out, notes, sizeof notes), 0);
  cr_assert_eq(ga_config_validate(out), GA_OK, "the result parses: %s", out);
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

Test(env, unknown_and_gardenalloc_keys_are_named_and_left_out) {
  tr("throw_on_cudamalloc_oom:True,max_split_size_mb:64,sim_capacity_mb:64,expandable_page_size_mb:2");
  cr_assert_str_eq(out, "max_split_size_mb:64");
  cr_assert(strstr(notes, "ignoring unknown key 'throw_on_cudamalloc_oom'\n"), "%s", notes);
  cr_assert(
      strstr(notes, "ignoring 'sim_capacity_mb', a key of gardenalloc's own: set it in GARDENALLOC_CONF"),
      "%s", notes);
  cr_assert(strstr(notes, "'expandable_page_size_mb'"), "%s", notes);
  cr_assert_eq(count(notes, "\n"), 3, "%s", notes);
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

Test(env, a_refused_value_is_named_and_the_rest_applies) {
  tr("max_split_size_mb:abc,expandable_segments:yes,garbage_collection_threshold:0.5");
  cr_assert_str_eq(out, "garbage_collection_threshold:0.5");
  cr_assert(strstr(notes,
                   "ignoring 'max_split_size_mb:abc' (max_split_size_mb: 'abc' is not a whole number of "
                   "MiB"),
            "%s", notes);
  cr_assert(strstr(notes, "ignoring 'expandable_segments:yes' (expandable_segments: 'yes' is not a boolean"),
            "%s", notes);
  /* Checked against what came before it: large_segment_size_mb raises the
   * floor of max_split_size_mb. */
  tr("large_segment_size_mb:64,max_split_size_mb:32");
  cr_assert_str_eq(out, "large_segment_size_mb:64");
  cr_assert(strstr(notes, "'max_split_size_mb:32'") && strstr(notes, "too small"), "%s", notes);
}

Test(env, malformed_items) {
  tr(",,:x,foo,expandable_segments:True,");
  cr_assert_str_eq(out, "expandable_segments:True");
  cr_assert(strstr(notes, "ignoring ':x': not a key:value option"), "%s", notes);
  cr_assert(strstr(notes, "ignoring 'foo': not a key:value option"), "%s", notes);
  cr_assert_eq(count(notes, "\n"), 2, "%s", notes);
  char small[8];
  cr_assert_eq(ga_env_translate("X", "max_split_size_mb:128", small, sizeof small, NULL, 0), 0);
  cr_assert_str_eq(small, "", "an item that does not fit is left out, not cut");
}

/* Each test runs in a process of its own, so the once-per-process reading
 * starts afresh. */
Test(env, the_torch_allocators_follow_pytorchs_variable) {
  unsetenv("GARDENALLOC_CONF");
  unsetenv("PYTORCH_ALLOC_CONF");
  setenv("PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:128,release_lock_on_cudamalloc:True,bogus:1", 1);
  const char *src = NULL;
  cr_assert_str_eq(ga_torch_config(&src), "max_split_size_mb:128,release_lock_on_cudamalloc:True");
  cr_assert_str_eq(src, "PYTORCH_CUDA_ALLOC_CONF");
  ga_allocator_t *a = ga_torch_allocator(0);
  cr_assert(a != NULL, "%s", ga_last_error());
  ga_stats_t s;
  cr_assert_eq(ga_stats(a, &s), GA_OK);
  cr_assert_eq(s.max_split_size, 128 * MiB);
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
