/* rtree.h — an ordered set of disjoint address ranges, O(log n) per call.
 *
 * The simulated device keeps its reservations, mappings and mallocs in these.
 * A node is intrusive (embed it first in a record of your own): the tree
 * links it, the caller allocates and frees it. Search is a treap ordered by
 * start address, with priorities hashed from the address (deterministic for
 * a given history, expected depth O(log n)); nodes are also on a list in
 * address order, so walking to the next range is O(1).
 *
 * Invariant: starts are unique; nothing here checks that ranges do not
 * overlap (callers ask ga_rtree_overlaps first).
 */
#ifndef GA_RTREE_H
#define GA_RTREE_H

#include <stddef.h>
#include <stdint.h>

typedef struct ga_rnode {
  uintptr_t va;                  /* start */
  size_t size;                   /* bytes, > 0 */
  struct ga_rnode *left, *right; /* treap children */
  struct ga_rnode *prev, *next;  /* neighbours in address order */
  uint32_t prio;                 /* treap priority: a parent's is >= its children's */
} ga_rnode;

typedef struct ga_rtree {
  ga_rnode *root;
  ga_rnode *first; /* the lowest range, then ->next */
  size_t n;        /* nodes in the tree */
} ga_rtree;

/* Links x (x->va and x->size set). pre: no node of t starts at x->va. */
void ga_rtree_insert(ga_rtree *t, ga_rnode *x);
/* Unlinks x. pre: x is in t. */
void ga_rtree_remove(ga_rtree *t, ga_rnode *x);
/* The first range starting at or after key, or NULL. */
ga_rnode *ga_rtree_lower(const ga_rtree *t, uintptr_t key);
/* The last range starting at or before key, or NULL. */
ga_rnode *ga_rtree_floor(const ga_rtree *t, uintptr_t key);
/* The range containing addr, or NULL. */
ga_rnode *ga_rtree_find(const ga_rtree *t, uintptr_t addr);
/* Does any range overlap [va, va+size)? */
int ga_rtree_overlaps(const ga_rtree *t, uintptr_t va, size_t size);
/* Number of broken invariants (order, heap, list, count, overlaps); for tests. */
size_t ga_rtree_check(const ga_rtree *t);

#endif /* GA_RTREE_H */
