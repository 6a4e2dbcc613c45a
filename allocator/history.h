/* history.h — the allocation history (PyTorch's device trace): a ring buffer
 * of the last N actions. A leaf: the layers that act record what they did.
 */
#ifndef GA_HISTORY_H
#define GA_HISTORY_H

#include <stddef.h>
#include <stdint.h>

#include "frames.h"

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
  uint8_t nframes; /* frames of this entry in the history's frame slots */
} ga_history_entry;

enum { GA_HISTORY_STACKS_C = 1, GA_HISTORY_STACKS_PYTHON = 2 };

typedef struct ga_history {
  ga_history_entry *v; /* ring buffer; cap 0 = not recording */
  size_t cap, n, next;
  int stacks;       /* GA_HISTORY_STACKS_* recorded with each entry */
  ga_frame *frames; /* GA_FRAMES_MAX slots per entry, when stacks */
} ga_history;

/* A history recording up to max_entries (0: 100000) when `enabled`, with
 * the stacks asked for, else an empty one. 0, GA_DEV_ENOMEM, or
 * GA_DEV_ENOTSUP (Python stacks in a process without Python), *h empty. */
int ga_history_init(ga_history *h, int enabled, size_t max_entries, int stacks);
void ga_history_free(ga_history *h);
static inline int ga_history_on(const ga_history *h) { return h->cap != 0; }
/* Records one entry (no-op when not recording). */
void ga_history_add(ga_history *h, int action, uintptr_t addr, size_t size, uintptr_t stream);
/* Entry k of the n recorded, oldest first (pre: k < h->n). */
const ga_history_entry *ga_history_at(const ga_history *h, size_t k);
/* Its frames (e->nframes of them). */
const ga_frame *ga_history_frames(const ga_history *h, size_t k);
/* PyTorch's name of an action ("alloc", "segment_map", ...). */
const char *ga_history_action_name(int action);

#endif /* GA_HISTORY_H */
