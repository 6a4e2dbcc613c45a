/* rounding.c — PyTorch's request rounding and segment sizes (rounding.h). */
#include "rounding.h"

static size_t floor_log2(size_t v) { return (size_t)(63 - __builtin_clzll((unsigned long long)v)); }

/* roundup_power2_divisions' setting for the power-of-two interval of size. */
static size_t divisions_for(const ga_config *c, size_t size) {
  size_t lg = floor_log2(size), idx = lg > 20 ? lg - 20 : 0;
  if (idx >= GA_ROUNDUP_INTERVALS) idx = GA_ROUNDUP_INTERVALS - 1;
  return c->roundup_divisions[idx];
}

/* Rounds up to the next of `div` equal steps between two powers of two. */
static size_t next_division(size_t size, size_t div) {
  if ((size & (size - 1)) == 0) return size;
  size_t floor2 = (size_t)1 << floor_log2(size);
  size_t step = floor2 >> floor_log2(div);
  if (step == 0) return floor2 << 1;
  size_t down = size & ~(step - 1);
  return down == size ? size : down + step;
}

size_t ga_round_size_divided(const ga_config *c, size_t size) {
  if (size < GA_MIN_BLOCK) return GA_MIN_BLOCK;
  size_t div = c->any_roundup ? divisions_for(c, size) : 0;
  /* size > GA_MIN_BLOCK * div, without the product (which could wrap). */
  if (div > 1 && (size - 1) / GA_MIN_BLOCK >= div) return next_division(size, div);
  return (size + GA_MIN_BLOCK - 1) / GA_MIN_BLOCK * GA_MIN_BLOCK;
}

size_t ga_allocation_size_for(const ga_config *c, size_t rounded) {
  if (rounded <= GA_SMALL_SIZE) return GA_SMALL_BUFFER;
  if (rounded < GA_MIN_LARGE_ALLOC) return ga_config_large_buffer(c);
  return (rounded + GA_ROUND_LARGE - 1) / GA_ROUND_LARGE * GA_ROUND_LARGE;
}
