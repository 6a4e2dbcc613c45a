/* cost.c — an estimate of driver time on a GPU from device-call counts.
 *
 * The figures are per-call costs in microseconds. They are assumptions of the
 * order of magnitude the CUDA driver API is commonly reported to take on
 * current GPUs when nothing is queued (allocation calls in the tens of
 * microseconds, cuMemSetAccess the slowest VMM step, event calls about a
 * microsecond), not measurements of ours. On a GPU, `ga-bench run`
 * replaces them with figures measured on the device before it starts
 * (drivercost.c), and `ga-bench drivercost` prints them as a --cost string.
 * Our "map" is cuMemMap followed by cuMemSetAccess, and "malloc"/"free" are
 * cuMemAlloc/cuMemFree.
 */
#include <stdlib.h>
#include <string.h>

#include "bench.h"

double ga_cost_us[GA_CALL_COUNT] = {
    [GA_CALL_MALLOC] = 50.0,       [GA_CALL_FREE] = 40.0,
    [GA_CALL_RESERVE] = 5.0,       [GA_CALL_UNRESERVE] = 5.0,
    [GA_CALL_CREATE] = 25.0,       [GA_CALL_RELEASE] = 15.0,
    [GA_CALL_MAP] = 30.0,          [GA_CALL_UNMAP] = 20.0,
    [GA_CALL_EVENT_CREATE] = 2.0,  [GA_CALL_EVENT_RECORD] = 2.0,
    [GA_CALL_EVENT_QUERY] = 0.5,   [GA_CALL_EVENT_SYNCHRONIZE] = 5.0,
    [GA_CALL_EVENT_DESTROY] = 2.0, [GA_CALL_STREAM_SYNCHRONIZE] = 5.0,
    [GA_CALL_SYNCHRONIZE] = 10.0,  [GA_CALL_MEM_INFO] = 5.0,
    [GA_CALL_CAPTURE_QUERY] = 0.5, [GA_CALL_SET_ACCESS] = 10.0,
};

char cost_source[256] = "assumed";

int cost_parse(const char *s, char *err, size_t errlen) {
  char buf[512];
  snprintf(buf, sizeof buf, "%s", s);
  for (char *save = NULL, *item = strtok_r(buf, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
    char *eq = strchr(item, '=');
    int k = -1;
    if (eq) {
      *eq = 0;
      for (int i = 0; i < GA_CALL_COUNT; i++)
        if (!strcmp(item, ga_device_call_name((ga_device_call_t)i))) k = i;
    }
    char *end = NULL;
    double us = eq ? strtod(eq + 1, &end) : 0.0;
    if (k < 0 || !end || *end || us < 0) {
      snprintf(err, errlen,
               "--cost: '%s' is not kind=microseconds (kinds: malloc, free, reserve, unreserve, create, "
               "release, map, unmap, event_*, stream_synchronize, synchronize, mem_info, capture_query)",
               item);
      return -1;
    }
    ga_cost_us[k] = us;
  }
  snprintf(cost_source, sizeof cost_source, "given with --cost");
  return 0;
}

double cost_ms(const ga_stats_t *stats) {
  double us = 0.0;
  for (int k = 0; k < GA_CALL_COUNT; k++) us += (double)stats->device_calls[k] * ga_cost_us[k];
  return us / 1000.0;
}

void cost_print(FILE *f) {
  fprintf(f, "estimated driver time uses (microseconds per call, %s; override with --cost):", cost_source);
  for (int k = 0; k < GA_CALL_COUNT; k++)
    if (k == GA_CALL_MALLOC || k == GA_CALL_FREE || k == GA_CALL_CREATE || k == GA_CALL_RELEASE ||
        k == GA_CALL_MAP || k == GA_CALL_UNMAP || k == GA_CALL_STREAM_SYNCHRONIZE ||
        k == GA_CALL_EVENT_RECORD)
      fprintf(f, " %s=%g", ga_device_call_name((ga_device_call_t)k), ga_cost_us[k]);
  fprintf(f, "\n");
}
