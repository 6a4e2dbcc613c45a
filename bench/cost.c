/* cost.c — driver time in the benchmark.
 *
 * Every replay reports the time its device calls took, from the device's own
 * clock (allocator statistics driver_us, num_stalls, stall_us): on a GPU the
 * wall time of each call, on the simulated device the time of its cost table
 * (allocator/device/sim.c: microseconds per call plus per mapping or granule
 * touched, VMM figures from published driver timings). --cost replaces
 * figures of that table ("kind=C" per call, "kind=C+U" per call and per
 * unit); `ga-bench drivercost` measures per-call figures on a GPU and prints
 * them in that form.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "device/sim.h"
#include "internal.h"

double ga_cost_us[GA_CALL_COUNT];      /* per call; NAN = the device's own figure */
double ga_cost_unit_us[GA_CALL_COUNT]; /* per unit; NAN = the device's own figure */
char cost_source[256] = "the simulated device's cost table";

static void cost_init(void) {
  static int done;
  if (done) return;
  for (int k = 0; k < GA_CALL_COUNT; k++) ga_cost_us[k] = ga_cost_unit_us[k] = NAN;
  done = 1;
}

int cost_parse(const char *spec, char *err, size_t errlen) {
  char buf[512];
  cost_init();
  snprintf(buf, sizeof buf, "%s", spec);
  for (char *save = NULL, *item = strtok_r(buf, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
    char *eq = strchr(item, '=');
    int k = -1;
    if (eq) {
      *eq = 0;
      for (int i = 0; i < GA_CALL_COUNT; i++)
        if (!strcmp(item, ga_device_call_name((ga_device_call_t)i))) k = i;
    }
    char *end = NULL, *end2 = NULL;
    double call = eq ? strtod(eq + 1, &end) : -1, unit = NAN;
    if (end && *end == '+') unit = strtod(end + 1, &end2), end = end2;
    if (k < 0 || !end || *end || !(call >= 0) || (!isnan(unit) && !(unit >= 0))) {
      snprintf(err, errlen,
               "--cost: '%s' is not kind=microseconds or kind=per_call+per_unit (kinds: malloc, free, "
               "reserve, unreserve, create, release, map, unmap, set_access, copy, event_*, "
               "stream_synchronize, synchronize, mem_info, capture_query, capture_mode)",
               item);
      return -1;
    }
    ga_cost_us[k] = call;
    if (!isnan(unit)) ga_cost_unit_us[k] = unit;
  }
  snprintf(cost_source, sizeof cost_source, "the simulated device's cost table, with --cost");
  return 0;
}

void cost_apply(ga_allocator_t *a) {
  ga_device *d = ga_allocator_device(a);
  cost_init();
  for (int k = 0; k < GA_CALL_COUNT && ga_sim_is(d); k++) {
    double call, unit;
    if (isnan(ga_cost_us[k]) && isnan(ga_cost_unit_us[k])) continue;
    ga_sim_get_cost(d, (ga_device_call_t)k, &call, &unit);
    ga_sim_set_cost(d, (ga_device_call_t)k, isnan(ga_cost_us[k]) ? call : ga_cost_us[k],
                    isnan(ga_cost_unit_us[k]) ? unit : ga_cost_unit_us[k]);
  }
}

double cost_ms(const ga_stats_t *stats) { return (double)stats->driver_us / 1000.0; }

void cost_print(FILE *f) {
  char err[256];
  ga_device *d = NULL;
  const replay_opts *o = trace_replay_options();
  if (ga_sim_open(0, (size_t)2 << 20, &d, err, sizeof err)) return;
  ga_allocator_t *a = NULL;
  if (ga_create_on_device("", d, &a) == GA_OK) cost_apply(a);
  ga_strbuf t = {0};
  strbuf_put(&t,
             "driver time on a GPU: each call's wall time; on the simulated device, %s '%s' (a "
             "configuration's sim_cost_table chooses blackwell or a100; us per call[+per unit]):",
             cost_source, ga_sim_cost_table(d));
  static const ga_device_call_t shown[] = {
      GA_CALL_MALLOC, GA_CALL_FREE,       GA_CALL_CREATE,       GA_CALL_RELEASE,           GA_CALL_MAP,
      GA_CALL_UNMAP,  GA_CALL_SET_ACCESS, GA_CALL_EVENT_RECORD, GA_CALL_STREAM_SYNCHRONIZE};
  for (size_t i = 0; i < sizeof shown / sizeof shown[0]; i++) {
    double call, unit;
    const char *u = ga_sim_cost_unit(shown[i]);
    ga_sim_get_cost(d, shown[i], &call, &unit);
    strbuf_put(&t, " %s=%g", ga_device_call_name(shown[i]), call);
    if (u && unit > 0) strbuf_put(&t, "+%g/%s", unit, u);
  }
  strbuf_put(&t,
             "; GPU work completes %g us after it is queued (--lag-us); the program takes %g us per event "
             "(--pace-us; a trace's own times where it has them) and queues %g us of GPU work after each "
             "(--kernel-us); %d iteration%s (--iterations)\n",
             o->lag_us, o->pace_us, o->kernel_us, o->iterations > 0 ? o->iterations : 1,
             o->iterations > 1 ? "s" : "");
  print_wrapped(f, t.s, "  ");
  strbuf_free(&t);
  ga_destroy(a);
  ga_dev_destroy(d);
}
