/* report.h — the out-of-memory report, formatted from facts the policy
 * gathers. A leaf: it reads no allocator state of its own.
 */
#ifndef GA_REPORT_H
#define GA_REPORT_H

#include <stddef.h>

/* What an OOM report says; the policy fills it in. */
typedef struct ga_oom_facts {
  int device;             /* the device's ordinal */
  size_t tried;           /* bytes of the device allocation attempted */
  size_t rounded;         /* the request, rounded */
  size_t gran;            /* the granule expandable segments map (2 MiB) */
  size_t movable;         /* free cached bytes in whole granules of free blocks */
  size_t total;           /* device memory */
  size_t free;            /* free device memory, when have_free */
  int have_free;          /* the device answered the free-memory query */
  size_t allowed;         /* memory fraction limit in bytes; SIZE_MAX = none */
  size_t allocated;       /* allocated_bytes now */
  size_t reserved;        /* bytes obtained from the device */
  size_t largest_free;    /* largest cached free block */
  int expandable;         /* expandable segments are on */
  size_t stranded;        /* expandable: free cached bytes in partly used granules */
  int limit_refused;      /* the memory fraction refused the request */
  size_t budget;          /* max_reserved_mb / headroom_mb in bytes, when budget_refused */
  int budget_refused;     /* the request is past that budget: no device call was made */
  size_t cached_free;     /* free bytes in the cache, every pool */
  size_t largest_pool[2]; /* largest free block of the small and the large pool */
} ga_oom_facts;

/* Writes PyTorch's OOM text (and ours) into the thread's error text. */
void ga_report_oom(const ga_oom_facts *f);

#endif /* GA_REPORT_H */
