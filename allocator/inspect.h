/* inspect.h — read-only views of a whole allocator, called by api.c only:
 * ga_check's walk of every invariant (check.c), the memory snapshot
 * (snapshot.c) and the statistics as JSON (stats_json.c). They read every
 * layer and change none.
 */
#ifndef GA_INSPECT_H
#define GA_INSPECT_H

#include "policy/policy.h"

/* The number of broken invariants, each described on stderr. Caller holds
 * the lock. */
int ga_check_locked(ga_allocator_t *a);

/* ga_create lists every allocator (until ga_destroy) so that ga_check can
 * add up what all the allocators on one device hold. Register: 0 or
 * GA_DEV_ENOMEM. Others: adds the other allocators' objects to *w; nonzero
 * when one of them holds its lock (tried, never waited for), so that the
 * device's figures cannot be compared now. */
int ga_check_register(ga_allocator_t *a);
void ga_check_unregister(ga_allocator_t *a);
int ga_check_others_on_device(ga_allocator_t *a, ga_device_usage *w);

/* Appends the snapshot JSON of `a` to *o. Caller holds the lock. */
void ga_snapshot_write_locked(ga_allocator_t *a, ga_text *o);

/* Writes *stats as one flat JSON object with PyTorch's key names. */
void ga_stats_write_json(const ga_stats_t *stats, ga_text *j);

#endif /* GA_INSPECT_H */
