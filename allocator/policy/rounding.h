/* rounding.h — PyTorch's sizes: what a request is rounded to, and the size
 * of the segment made for it when none can serve it (round_size and
 * get_allocation_size in CUDACachingAllocator.cpp). Pure functions of the
 * configuration; policy.h includes this header.
 */
#ifndef GA_ROUNDING_H
#define GA_ROUNDING_H

#include "state.h"

/* The rounding with roundup_power2_divisions set for some interval. */
size_t ga_round_size_divided(const ga_config *c, size_t size);

/* PyTorch's rounding of a request (roundup_power2_divisions included):
 * at least 512 B, multiples of 512 B, or one of N steps between powers of
 * two when divisions are set for the size's interval. */
static inline size_t ga_round_size(const ga_config *c, size_t size) {
  if (c->any_roundup) return ga_round_size_divided(c, size);
  return size < GA_MIN_BLOCK ? GA_MIN_BLOCK : (size + GA_MIN_BLOCK - 1) / GA_MIN_BLOCK * GA_MIN_BLOCK;
}

/* The size of a new segment for a request rounded to `rounded`
 * (get_allocation_size): 2 MiB for the small pool, the large segment size
 * below 10 MiB, else the request rounded up to 2 MiB. */
size_t ga_allocation_size_for(const ga_config *c, size_t rounded);

#endif
