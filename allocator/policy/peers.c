/* peers.c — other devices' access to this allocator's expandable memory
 * (ga_enable_peer_access): which devices are granted, granting every mapped
 * range when one is added, and granting again before anything is handed out
 * when a granule was left mapped without its peers' access.
 */
#include "../internal.h"

ga_status_t ga_peers_enable_locked(ga_allocator_t *a, int peer) {
  if (peer < 0 || peer >= 64 || peer == a->dev->ordinal) {
    ga_error_set("ga_enable_peer_access: %d is not a peer of device %d (allowed: another device, 0 to 63)",
                 peer, a->dev->ordinal);
    return GA_ERR_INVALID;
  }
  for (int i = 0; i < a->space.naccess; i++)
    if (a->space.access[i] == peer) return GA_OK;
  a->space.access[a->space.naccess] = peer;
  int rc = ga_expandable_grant_locked(a, a->space.access, a->space.naccess + 1);
  if (rc) {
    ga_error_set("ga_enable_peer_access: %s", a->dev->error);
    (void)ga_expandable_grant_locked(a, a->space.access, a->space.naccess); /* back to what it was */
    return GA_ERR_DEVICE;
  }
  a->space.naccess++;
  return GA_OK;
}

int ga_peers_regrant_locked(ga_allocator_t *a) {
  int rc = ga_expandable_grant_locked(a, a->space.access, a->space.naccess);
  if (!rc) a->space.regrant = 0;
  return rc;
}
