/* rtree.c — an ordered set of disjoint address ranges: a treap by start
 * address, plus a list in address order (see rtree.h).
 *
 * Owns nothing: nodes are the caller's. Insert recurses to an expected
 * depth of O(log n); removal and searches are iterative.
 */
#include "rtree.h"

#include "../debug.h"

/* A mix of the address (splitmix64's finaliser): granule-aligned addresses
 * differ only in high bits, and the priorities must look random anyway. */
static uint32_t prio_of(uintptr_t va) {
  uint64_t z = (uint64_t)va + 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return (uint32_t)((z ^ (z >> 31)) >> 32);
}

static ga_rnode *rot_right(ga_rnode *t) {
  ga_rnode *l = t->left;
  t->left = l->right;
  l->right = t;
  return l;
}

static ga_rnode *rot_left(ga_rnode *t) {
  ga_rnode *r = t->right;
  t->right = r->left;
  r->left = t;
  return r;
}

static ga_rnode *insert(ga_rnode *t, ga_rnode *x) {
  if (!t) return x;
  if (x->va < t->va) {
    t->left = insert(t->left, x);
    if (t->left->prio > t->prio) t = rot_right(t);
  } else {
    t->right = insert(t->right, x);
    if (t->right->prio > t->prio) t = rot_left(t);
  }
  return t;
}

/* Joins two treaps, every key of l below every key of r. */
static ga_rnode *merge(ga_rnode *l, ga_rnode *r) {
  ga_rnode *root = NULL, **link = &root;
  while (l && r) {
    if (l->prio >= r->prio) {
      *link = l;
      link = &l->right;
      l = l->right;
    } else {
      *link = r;
      link = &r->left;
      r = r->left;
    }
  }
  *link = l ? l : r;
  return root;
}

ga_rnode *ga_rtree_floor(const ga_rtree *t, uintptr_t key) {
  ga_rnode *best = NULL;
  for (ga_rnode *n = t->root; n;)
    if (n->va <= key)
      best = n, n = n->right;
    else
      n = n->left;
  return best;
}

ga_rnode *ga_rtree_lower(const ga_rtree *t, uintptr_t key) {
  ga_rnode *best = NULL;
  for (ga_rnode *n = t->root; n;)
    if (n->va >= key)
      best = n, n = n->left;
    else
      n = n->right;
  return best;
}

void ga_rtree_insert(ga_rtree *t, ga_rnode *x) {
  ga_rnode *prev = ga_rtree_floor(t, x->va);
  GA_ASSERT(x->size > 0 && (!prev || prev->va != x->va));
  x->left = x->right = NULL;
  x->prio = prio_of(x->va);
  x->prev = prev;
  x->next = prev ? prev->next : t->first;
  if (x->next) x->next->prev = x;
  if (prev)
    prev->next = x;
  else
    t->first = x;
  t->root = insert(t->root, x);
  t->n++;
}

void ga_rtree_remove(ga_rtree *t, ga_rnode *x) {
  ga_rnode **link = &t->root;
  GA_ASSERT(t->n > 0);
  while (*link != x) link = x->va < (*link)->va ? &(*link)->left : &(*link)->right;
  *link = merge(x->left, x->right);
  if (x->prev)
    x->prev->next = x->next;
  else
    t->first = x->next;
  if (x->next) x->next->prev = x->prev;
  x->left = x->right = x->prev = x->next = NULL;
  t->n--;
}

ga_rnode *ga_rtree_find(const ga_rtree *t, uintptr_t addr) {
  ga_rnode *n = ga_rtree_floor(t, addr);
  return (n && addr - n->va < n->size) ? n : NULL;
}

int ga_rtree_overlaps(const ga_rtree *t, uintptr_t va, size_t size) {
  ga_rnode *n = ga_rtree_lower(t, va);
  if (n && n->va - va < size) return 1;
  n = n ? n->prev : ga_rtree_floor(t, va);
  return n && n->va + n->size > va;
}

/* ---- Checking ---- */

/* Walks the subtree; counts broken order and heap rules and the nodes. */
static size_t check_sub(const ga_rnode *n, uintptr_t lo, uintptr_t hi, int bounded_hi, size_t *count) {
  if (!n) return 0;
  size_t bad = 0;
  if (n->va < lo || (bounded_hi && n->va >= hi)) bad++;
  if (n->left && n->left->prio > n->prio) bad++;
  if (n->right && n->right->prio > n->prio) bad++;
  (*count)++;
  return bad + check_sub(n->left, lo, n->va, 1, count) +
         check_sub(n->right, n->va + 1, hi, bounded_hi, count);
}

size_t ga_rtree_check(const ga_rtree *t) {
  size_t count = 0, listed = 0, bad = check_sub(t->root, 0, 0, 0, &count);
  const ga_rnode *prev = NULL;
  for (const ga_rnode *n = t->first; n && listed <= t->n; prev = n, n = n->next, listed++) {
    if (n->prev != prev) bad++;
    if (prev && (prev->va >= n->va || prev->va + prev->size > n->va)) bad++; /* order, overlap */
    if (ga_rtree_floor(t, n->va) != n) bad++;                                /* listed, not in the tree */
  }
  if (count != t->n) bad++;
  if (listed != t->n) bad++;
  return bad;
}
