/* device.c — backend selection.
 *
 * backend "auto" tries the CUDA driver and falls back to the simulated device
 * when no driver or device answers; "cuda" and "sim" take exactly that one.
 */
#include <string.h>

#include "device.h"

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
