/* capture_mode.c — device calls while a CUDA-graph capture is underway.
 *
 * A capture forbids "potentially unsafe" calls (allocating, freeing,
 * mapping, granting access, copying, querying or synchronising events) from
 * threads in the global capture mode; in the relaxed mode they are allowed,
 * except synchronising a capturing stream or the whole device, which nothing
 * allows. Every policy path that makes device calls while a stream is routed
 * to a private pool (capture.c keeps that routing) brackets them with relax
 * and unrelax, and asks before synchronising a stream whether it captures.
 * Its own file: malloc, reclaim, sleep, peers and capture all use it, and it
 * calls only the device.
 */
#include "policy.h"

int ga_capture_relax_locked(ga_allocator_t *a, ga_relax *r) {
  GA_ASSERT_LOCKED(a);
  r->on = 0;
  if (!a->pol.capture.routing) return 0;
  int rc = ga_dev_capture_mode(a->dev, 1, &r->prev);
  if (!rc) r->on = 1;
  return rc;
}

void ga_capture_unrelax_locked(ga_allocator_t *a, ga_relax *r) {
  GA_ASSERT_LOCKED(a);
  if (r->on) (void)ga_dev_capture_mode(a->dev, r->prev, NULL);
  r->on = 0;
}

int ga_capture_is_capturing_locked(ga_allocator_t *a, ga_stream_t stream) {
  GA_ASSERT_LOCKED(a);
  int capturing = 1;
  if (!a->pol.capture.routing) return 0;
  return ga_dev_stream_capturing(a->dev, stream, &capturing) || capturing;
}
