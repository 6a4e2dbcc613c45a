/* sim.h — controls of the simulated device, for tests and benchmarks.
 *
 * The simulated device (sim.c) implements device.h on host memory with the
 * driver's rules. These functions let a test hold stream work open, inject
 * faults and read what is live. All of them are safe to call from any thread
 * while an allocator uses the device. Each returns GA_DEV_EINVAL when `d` is
 * not a simulated device.
 */
#ifndef GA_SIM_H
#define GA_SIM_H

#include "device.h"

/* What the simulated device holds right now. */
typedef struct ga_sim_usage {
  size_t capacity;     /* bytes of simulated device memory */
  size_t used;         /* bytes of physical memory allocated (malloc + create) */
  size_t live_mallocs; /* malloc'd ranges not yet freed */
  size_t live_handles; /* create'd handles not yet released (or still mapped) */
  size_t live_reservations;
  size_t live_mappings;
  size_t live_events;
  size_t pending_events;    /* recorded on a held stream, not yet complete */
  uint64_t waits;           /* synchronisations that had to wait for held work */
  uint64_t faults_fired;    /* injected faults that made a call fail */
  uint64_t captures_broken; /* calls refused because they would invalidate a capture */
  uint64_t now_ns;          /* the CPU's virtual clock */
  uint64_t driver_ns;       /* time spent in device calls (the cost table), waits excluded */
  uint64_t stalls;          /* synchronisations that had to wait for queued work (the lag model) */
  uint64_t stall_ns;        /* and how long they waited */
  uint64_t lag_ns;          /* the lag queued work completes after */
  uint64_t host_failures;   /* calls that failed because the host could not back them ("host: ...") */
  size_t live_pinned;       /* host_alloc'd buffers not yet given back (host_free) */
} ga_sim_usage;

/* Is `d` a simulated device? */
int ga_sim_is(const ga_device *d);

/* Fills *u. */
int ga_sim_usage_get(ga_device *d, ga_sim_usage *u);

/* While `hold` is set, `stream` has work running: events recorded on it stay
 * pending. Clearing it completes them. Default: not held, events complete as
 * soon as they are recorded. Synchronising the stream, the event or the device
 * completes the work too and counts a wait (synchronising a held stream always
 * counts one: it had work running). */
int ga_sim_hold_stream(ga_device *d, ga_stream_t stream, int hold);

/* Makes the `nth` next call of `kind` (1 = the very next) fail with `err`
 * (GA_DEV_EOOM or GA_DEV_EDRIVER). With `repeat` 1, every call of that kind
 * from the nth on fails; with GA_SIM_STICKY, every call of every kind from
 * then on fails the same way (a sticky driver error, as after an illegal
 * address: the context is unusable). Until ga_sim_clear_faults. */
#define GA_SIM_STICKY 2
int ga_sim_inject(ga_device *d, ga_device_call_t kind, unsigned nth, int err, int repeat);

/* Makes the `nth` next host mmap that backs simulated memory (a
 * reservation, a mapping, the window of mallocs) fail with errno `err`, as a
 * host out of address space or of mappings (vm.max_map_count) does. The call
 * then fails with GA_DEV_ENOMEM and a message that starts "<call>: host:".
 * With `repeat`, every such mmap from the nth on fails, until
 * ga_sim_clear_faults. */
int ga_sim_inject_host(ga_device *d, unsigned nth, int err, int repeat);

/* Disarms every injected fault (host faults included). */
int ga_sim_clear_faults(ga_device *d);

/* The devices that may access the mapping holding `va` (bit = ordinal).
 * EINVAL when va is not in a mapping (malloc'd memory included). */
int ga_sim_access(ga_device *d, void *va, uint64_t *mask);

/* With `seed` != 0, every address range the device hands out from now on
 * (malloc, reserve) lies at a place drawn from the seed, scattered over the
 * host's address space, instead of where the device would put it (the next
 * free granules, or the host's choice): two devices with different seeds
 * give the same requests different addresses in a different order, as the
 * GPUs of two ranks do. Mallocs then leave the mirror (each gets a host
 * mapping of its own). 0 turns it off. Config key sim_scatter_addresses. */
int ga_sim_scatter_addresses(ga_device *d, uint64_t seed);

/* Marks `stream` as capturing a CUDA graph (stream_capturing reports it). */
int ga_sim_set_capturing(ga_device *d, ga_stream_t stream, int capturing);

/* Whether create() makes fabric handles (shareable_handles:fabric): the
 * default, GA_SIM_FABRIC_OK, does; GA_SIM_FABRIC_NOT_PERMITTED refuses as
 * the driver does for a process without an IMEX channel,
 * GA_SIM_FABRIC_NOT_SUPPORTED as for a device without fabric support. */
#define GA_SIM_FABRIC_OK            0
#define GA_SIM_FABRIC_NOT_PERMITTED 1
#define GA_SIM_FABRIC_NOT_SUPPORTED 2
int ga_sim_set_fabric(ga_device *d, int refused);

/* ---- Time (see sim.c: a virtual clock for the CPU, streams that lag) ---- */

/* Work queued from now on completes at least lag_ns after it was queued. */
int ga_sim_set_lag(ga_device *d, uint64_t lag_ns);
/* The CPU does ns of work of its own (the program between allocator calls). */
int ga_sim_advance(ga_device *d, uint64_t ns);
/* The program queues work_ns of GPU work on `stream` now: it completes at
 * max(the stream's previous work, now + lag) + work_ns. */
int ga_sim_enqueue(ga_device *d, ga_stream_t stream, uint64_t work_ns);
/* A position on `stream`: the work queued on it so far (held work included),
 * for a test to learn when the stream has passed it, as an event recorded
 * now would say, but without a device call (no cost, no fault). */
typedef struct ga_sim_mark {
  ga_stream_t stream;
  uint64_t seq, done_ns;
  int held;
} ga_sim_mark;
int ga_sim_stream_mark(ga_device *d, ga_stream_t stream, ga_sim_mark *m);
/* 1 when the stream has passed the mark: its work then was completed (the
 * hold released, or a wait for the stream, for an event recorded after the
 * mark, or for the device) and the clock has reached its end; else 0. */
int ga_sim_stream_passed(ga_device *d, const ga_sim_mark *m);
/* The cost of a call of `kind`: call_us per call plus unit_us per unit it
 * touches (ga_sim_cost_unit: "mapping", "granule", or NULL for none). */
int ga_sim_set_cost(ga_device *d, ga_device_call_t kind, double call_us, double unit_us);
int ga_sim_get_cost(ga_device *d, ga_device_call_t kind, double *call_us, double *unit_us);
const char *ga_sim_cost_unit(ga_device_call_t kind);
/* A copy from or into pinned host memory (host_alloc) takes this fraction
 * of the time the cost table gives a pageable one (sim.c names the
 * published measurement they come from). */
#define GA_SIM_PINNED_TO_DEVICE (4.5 / 5.9)
#define GA_SIM_PINNED_TO_HOST   (2.3 / 5.9)
/* Every figure from a named table: "blackwell" (the default) or "a100"
 * (sim.c and docs/benchmarks.md give their sources). GA_DEV_EINVAL for
 * another name. ga_sim_cost_table names the table last set. */
int ga_sim_set_cost_table(ga_device *d, const char *name);
const char *ga_sim_cost_table(ga_device *d);

#endif /* GA_SIM_H */
