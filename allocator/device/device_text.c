/* device_text.c — the device layer's words: the name of each kind of device
 * call and the text of a device's last error. A leaf of the device layer:
 * both backends and the factory call it, and it calls none of them.
 */
#include <stdarg.h>
#include <stdio.h>

#include "device.h"

void ga_dev_set_error(ga_device *d, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(d->error, sizeof d->error, fmt, ap);
  va_end(ap);
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
      "host_alloc",    "host_free",
  };
  return (unsigned)kind < GA_CALL_COUNT ? names[kind] : "unknown";
}

/* (device.h) */
int ga_dev_fabric_refused(ga_device *d, const char *call, int not_permitted) {
  ga_dev_set_error(d,
                   "%s: %s: fabric handles (CU_MEM_HANDLE_TYPE_FABRIC) are %s (%s); use "
                   "shareable_handles:posix_fd to share within one node",
                   call, not_permitted ? "CUDA_ERROR_NOT_PERMITTED" : "CUDA_ERROR_NOT_SUPPORTED",
                   not_permitted ? "not permitted" : "not supported",
                   not_permitted ? "this process has no IMEX channel, /dev/nvidia-caps-imex-channels/channelN"
                                 : "the device or driver has no fabric support");
  return GA_DEV_ENOTSUP;
}
