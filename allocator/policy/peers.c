/* peers.c — other devices' access to this allocator's expandable memory
 * (ga_enable_peer_access): which devices may be granted. The grants
 * themselves are segment/expandable.c's; alloc.c grants again before
 * anything is handed out when a granule was left mapped without its peers'
 * access.
 */
#include "policy.h"

ga_status_t ga_peers_enable_locked(ga_allocator_t *a, int peer) {
  if (peer < 0 || peer >= 64 || peer == a->dev->ordinal) {
    ga_error_set("ga_enable_peer_access: %d is not a peer of device %d (allowed: another device, 0 to 63)",
                 peer, a->dev->ordinal);
    return GA_ERR_INVALID;
  }
  for (int i = 0; i < a->space.naccess; i++)
    if (a->space.access[i] == peer) return GA_OK;
  if (ga_expandable_access_add_locked(a, peer)) {
    ga_error_set("ga_enable_peer_access: %s", a->dev->error);
    return GA_ERR_DEVICE;
  }
  return GA_OK;
}
