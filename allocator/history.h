/* history.h — the allocation history (PyTorch's device trace): a ring buffer
 * of the last N actions. A leaf: the layers that act record what they did.
 */
#ifndef GA_HISTORY_H
#define GA_HISTORY_H

#include <stddef.h>
#include <stdint.h>

enum {
  GA_H_ALLOC,
  GA_H_FREE_REQUESTED,
  GA_H_FREE_COMPLETED,
  GA_H_SEGMENT_ALLOC,
  GA_H_SEGMENT_FREE,
  GA_H_SEGMENT_MAP,
  GA_H_SEGMENT_UNMAP,
  GA_H_OOM,
  GA_H_COUNT
};

typedef struct ga_history_entry {
  int action;     /* GA_H_* */
  uintptr_t addr; /* device_free for GA_H_OOM */
  size_t size;
  uintptr_t stream;
  int64_t time_us;
} ga_history_entry;

typedef struct ga_history {
  ga_history_entry *v; /* ring buffer; cap 0 = not recording */
  size_t cap, n, next;
} ga_history;

/* A history recording up to max_entries (0: 100000) when `enabled`, else an
 * empty one. 0, or GA_DEV_ENOMEM with *h empty. */
int ga_history_init(ga_history *h, int enabled, size_t max_entries);
void ga_history_free(ga_history *h);
static inline int ga_history_on(const ga_history *h) { return h->cap != 0; }
/* Records one entry (no-op when not recording). */
void ga_history_add(ga_history *h, int action, uintptr_t addr, size_t size, uintptr_t stream);
/* Entry k of the n recorded, oldest first (pre: k < h->n). */
const ga_history_entry *ga_history_at(const ga_history *h, size_t k);
/* PyTorch's name of an action ("alloc", "segment_map", ...). */
const char *ga_history_action_name(int action);

#endif /* GA_HISTORY_H */
