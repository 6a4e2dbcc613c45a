/* fuzz_config.c — a configuration string, from the parser to a working
 * allocator.
 *
 * The input is the string (up to 4096 bytes; a NUL ends it early). Promises
 * checked: ga_config_validate and the parser agree; a refusal is
 * GA_ERR_CONFIG with a message naming the option; a string that validates is
 * one ga_create accepts (on the simulated device it names, or on a small
 * simulated device when it names another backend); the allocator then serves
 * and frees a few allocations of every pool with their bytes intact, ga_check
 * finds nothing, empty_cache gives every byte back, and nothing is left on
 * the device after ga_destroy.
 */
#include <string.h>

#include "device/sim.h"
#include "fuzz.h"
#include "internal.h"

#define MiB ((size_t)1 << 20)

static void exercise(ga_allocator_t *a, ga_device *dev, const char *conf) {
  static const size_t sizes[] = {1, 511, 512 * 1024 + 3, 3 * MiB + 1, 20 * MiB, 100 * MiB, (size_t)3 << 30};
  void *p[sizeof sizes / sizeof sizes[0]] = {0};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    ga_status_t st = ga_malloc(a, sizes[i], (ga_stream_t)(uintptr_t)(i % 2), &p[i]);
    FZ_CHECK(st == GA_OK || st == GA_ERR_OOM, "'%s': malloc(%zu): %s: %s", conf, sizes[i], ga_status_str(st),
             ga_last_error());
    if (st == GA_OK) {
      size_t n = sizes[i] < 4096 ? sizes[i] : 4096;
      memset(p[i], (int)(i + 1), n);
      ((unsigned char *)p[i])[sizes[i] - 1] = (unsigned char)(0xa0 + i);
    }
    FZ_CHECK(ga_check(a) == 0, "'%s': ga_check after malloc(%zu)", conf, sizes[i]);
  }
  char json[256];
  FZ_CHECK(ga_stats_json(a, json, sizeof json) > sizeof json, "'%s': stats json", conf);
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    if (!p[i]) continue;
    const unsigned char *c = p[i];
    size_t n = sizes[i] < 4096 ? sizes[i] : 4096;
    for (size_t k = 0; k + 1 < n; k++)
      FZ_CHECK(c[k] == (unsigned char)(i + 1), "'%s': bytes of block %zu", conf, i);
    FZ_CHECK(c[sizes[i] - 1] == (unsigned char)(0xa0 + i) || sizes[i] <= 1, "'%s': last byte of block %zu",
             conf, i);
    FZ_CHECK(ga_free(a, p[i]) == GA_OK, "'%s': free: %s", conf, ga_last_error());
  }
  FZ_CHECK(ga_empty_cache(a) == GA_OK, "'%s': empty_cache: %s", conf, ga_last_error());
  ga_stats_t stats;
  FZ_CHECK(ga_stats(a, &stats) == GA_OK, "stats");
  FZ_CHECK(stats.reserved_bytes[GA_POOL_ALL].current == 0, "'%s': %lld bytes reserved after empty_cache",
           conf, (long long)stats.reserved_bytes[GA_POOL_ALL].current);
  FZ_CHECK(ga_check(a) == 0, "'%s': ga_check at the end", conf);
  ga_destroy(a);
  ga_sim_usage u;
  FZ_CHECK(ga_sim_usage_get(dev, &u) == 0, "usage");
  FZ_CHECK(u.used == 0 && u.live_handles == 0 && u.live_reservations == 0 && u.live_mallocs == 0 &&
               u.live_mappings == 0 && u.live_events == 0,
           "'%s': device leak after ga_destroy", conf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char conf[4097];
  size_t n = size < 4096 ? size : 4096;
  memcpy(conf, data, n);
  conf[n] = 0;
  ga_config cfg;
  char err[512] = "";
  int parsed = ga_config_parse(conf, &cfg, err, sizeof err) == 0;
  ga_status_t v = ga_config_validate(conf);
  FZ_CHECK((v == GA_OK) == parsed, "'%s': validate says %s, the parser %d", conf, ga_status_str(v), parsed);
  if (v != GA_OK) {
    FZ_CHECK(v == GA_ERR_CONFIG, "'%s': %s", conf, ga_status_str(v));
    FZ_CHECK(strstr(ga_last_error(), "GARDENALLOC_CONF") != NULL || strstr(ga_last_error(), "too long"),
             "'%s': the refusal names nothing: %s", conf, ga_last_error());
    return 0;
  }
  ga_allocator_t *a = NULL;
  ga_device *dev = NULL;
  int owned = strcmp(cfg.backend, "sim") == 0;
  if (owned) {
    /* The simulated device the string describes, as ga_create opens it. */
    ga_status_t st = ga_create(conf, 0, &a);
    FZ_CHECK(st == GA_OK, "'%s' validated but ga_create says %s: %s", conf, ga_status_str(st),
             ga_last_error());
    dev = ga_allocator_device(a);
    /* (ga_destroy destroys this device: what it holds is checked before.)
     * On a simulated device past 1 TiB only create and destroy: an
     * expandable segment's table of granules grows with the device (9
     * million entries at 16 TiB), and each allocation would take a tenth of a
     * second, so the fuzzer would spend its time there. */
    static const size_t sizes[] = {1, 3 * MiB + 1, 100 * MiB};
    void *p[3] = {0};
    int n = cfg.sim_capacity > ((size_t)1 << 40) ? 0 : 3;
    for (int i = 0; i < n; i++) {
      ga_status_t m = ga_malloc(a, sizes[i], NULL, &p[i]);
      FZ_CHECK(m == GA_OK || m == GA_ERR_OOM, "'%s': malloc: %s: %s", conf, ga_status_str(m),
               ga_last_error());
      FZ_CHECK(ga_check(a) == 0, "'%s': ga_check", conf);
    }
    for (int i = 0; i < 3; i++) FZ_CHECK(ga_free(a, p[i]) == GA_OK, "free");
    FZ_CHECK(ga_empty_cache(a) == GA_OK, "'%s': empty_cache: %s", conf, ga_last_error());
    ga_sim_usage u;
    FZ_CHECK(ga_sim_usage_get(dev, &u) == 0 && u.used == 0 && u.live_reservations == 0, "'%s': memory left",
             conf);
    ga_destroy(a);
  }
  /* Every string that validates also runs on a small simulated device of two. */
  char e[256];
  FZ_CHECK(ga_sim_open_of(0, 2, 512 * MiB, &dev, e, sizeof e) == 0, "sim: %s", e);
  ga_status_t st = ga_create_on_device(conf, dev, &a);
  FZ_CHECK(st == GA_OK, "'%s' validated but ga_create_on_device says %s: %s", conf, ga_status_str(st),
           ga_last_error());
  exercise(a, dev, conf);
  ga_dev_destroy(dev);
  return 0;
}
