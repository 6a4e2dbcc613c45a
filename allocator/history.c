/* history.c — the allocation history: a ring buffer of the last N actions
 * (alloc, free requested and completed, segment alloc/free, map/unmap, OOM),
 * each with its time and, when asked, the stack that made it (frames.c).
 * Recording is off until ga_record_history turns it on.
 * A leaf: it knows entries, not blocks; snapshot.c writes it out.
 */
#include "history.h"

#include <stdlib.h>
#include <time.h>

#include "errors.h"
#include "host.h"

static const char *const action_names[GA_H_COUNT] = {
    [GA_H_ALLOC] = "alloc",
    [GA_H_FREE_REQUESTED] = "free_requested",
    [GA_H_FREE_COMPLETED] = "free_completed",
    [GA_H_SEGMENT_ALLOC] = "segment_alloc",
    [GA_H_SEGMENT_FREE] = "segment_free",
    [GA_H_SEGMENT_MAP] = "segment_map",
    [GA_H_SEGMENT_UNMAP] = "segment_unmap",
    [GA_H_OOM] = "oom",
};

static int64_t now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_REALTIME, &t);
  return (int64_t)t.tv_sec * 1000000 + t.tv_nsec / 1000;
}

int ga_history_init(ga_history *h, int enabled, size_t max_entries, int stacks) {
  *h = (ga_history){0};
  if (!enabled) return 0;
  if ((stacks & GA_HISTORY_STACKS_PYTHON) && ga_frames_python_init()) return GA_DEV_ENOTSUP;
  if (max_entries == 0) max_entries = 100000;
  if (!(h->v = ga_host_calloc(max_entries, sizeof *h->v))) return GA_DEV_ENOMEM;
  if (stacks && !(h->frames = ga_host_calloc(max_entries, GA_FRAMES_MAX * sizeof *h->frames))) {
    free(h->v);
    h->v = NULL;
    return GA_DEV_ENOMEM;
  }
  h->cap = max_entries;
  h->stacks = stacks;
  return 0;
}

void ga_history_free(ga_history *h) {
  free(h->v);
  free(h->frames);
  *h = (ga_history){0};
}

void ga_history_add(ga_history *h, int action, uintptr_t addr, size_t size, uintptr_t stream) {
  if (!h->cap) return;
  h->v[h->next] =
      (ga_history_entry){.action = action, .addr = addr, .size = size, .stream = stream, .time_us = now_us()};
  if (h->stacks)
    h->v[h->next].nframes =
        (uint8_t)ga_frames_capture(h->stacks & GA_HISTORY_STACKS_C, h->stacks & GA_HISTORY_STACKS_PYTHON,
                                   h->frames + h->next * GA_FRAMES_MAX, GA_FRAMES_MAX);
  h->next = (h->next + 1) % h->cap;
  if (h->n < h->cap) h->n++;
}

const ga_history_entry *ga_history_at(const ga_history *h, size_t k) {
  return &h->v[(h->next + h->cap - h->n + k) % h->cap];
}

const ga_frame *ga_history_frames(const ga_history *h, size_t k) {
  return h->frames + (h->next + h->cap - h->n + k) % h->cap * GA_FRAMES_MAX;
}

const char *ga_history_action_name(int action) {
  return action >= 0 && action < GA_H_COUNT ? action_names[action] : "unknown";
}
