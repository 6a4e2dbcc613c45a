/* peers.c — other devices' access to this allocator's expandable memory
 * (ga_enable_peer_access): which devices may be granted (another device of
 * this machine, counted when the call is made). The grants
 * themselves are segment/expandable.c's; alloc.c grants again before
 * anything is handed out when a granule was left mapped without its peers'
 * access.
 */
#include "policy.h"

ga_status_t ga_peers_enable_locked(ga_allocator_t *a, int peer) {
  GA_ASSERT_LOCKED(a);
  int count = 0;
  if (ga_dev_device_count(a->dev, &count)) {
    ga_error_set("ga_enable_peer_access: cannot count the devices: %s", a->dev->error);
    return GA_ERR_DEVICE;
  }
  if (count > 64) count = 64;
  /* Checked now: a peer the driver does not know would make every later map fail. */
  if (peer < 0 || peer >= count || peer == a->dev->ordinal) {
    ga_error_set(
        "ga_enable_peer_access: %d is not a peer of device %d (allowed: another device of this "
        "machine, 0 to %d)",
        peer, a->dev->ordinal, count - 1);
    return GA_ERR_INVALID;
  }
  for (int i = 0; i < a->space.naccess; i++)
    if (a->space.access[i] == peer) return GA_OK;
  ga_relax r; /* during a capture the grants run in the relaxed capture mode */
  int rc = ga_capture_relax_locked(a, &r);
  if (!rc) rc = ga_expandable_access_add_locked(&a->space, peer);
  ga_capture_unrelax_locked(a, &r);
  if (rc) {
    ga_error_set("ga_enable_peer_access: %s", a->dev->error);
    return GA_ERR_DEVICE;
  }
  return GA_OK;
}
