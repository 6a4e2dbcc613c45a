/* device.c — backend selection and the device error text.
 *
 * backend "auto" tries the CUDA driver and falls back to the simulated device
 * when no driver or device answers; "cuda" and "sim" take exactly that one.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "device.h"

void ga_dev_set_error(ga_device *d, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(d->error, sizeof d->error, fmt, ap);
  va_end(ap);
}

int ga_device_open(const char *backend, int ordinal, size_t sim_capacity, int sim_devices, ga_device **out,
                   char *err, size_t errlen, const char **notice) {
  *notice = NULL;
  if (strcmp(backend, "sim") == 0)
    return ga_sim_open_of(ordinal, sim_devices, sim_capacity, out, err, errlen);
  int rc = ga_cuda_open(ordinal, out, err, errlen);
  if (rc == 0 || strcmp(backend, "cuda") == 0) return rc;
  *notice = "gardenalloc: no usable CUDA driver or device; using the simulated device (backend:sim)";
  return ga_sim_open_of(ordinal, sim_devices, sim_capacity, out, err, errlen);
}

const char *ga_dev_call_name(ga_device_call_t kind) {
  static const char *const names[GA_CALL_COUNT] = {
      "malloc",        "free",
      "reserve",       "unreserve",
      "create",        "release",
      "map",           "unmap",
      "event_create",  "event_record",
      "event_query",   "event_synchronize",
      "event_destroy", "stream_synchronize",
      "synchronize",   "mem_info",
      "capture_query", "set_access",
      "copy",          "capture_mode",
  };
  return (unsigned)kind < GA_CALL_COUNT ? names[kind] : "unknown";
}
