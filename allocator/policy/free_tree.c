/* free_tree.c — a free tree: the best-fit index of free blocks, a treap ordered by
 * (stream, size, tie, address).
 *
 * lower_bound(stream, size) gives PyTorch's best fit: the smallest block of
 * that stream at least `size` bytes long, the lowest address among equals.
 * With deterministic:True, equals of different segments go by the creation
 * number of their segment first (b->tie; 0 for every block otherwise), as
 * PyTorch's deterministic mode breaks ties by an allocation counter: an
 * address depends on where the device put the segment, which differs from
 * one rank (process) to the next, and would make the offsets differ too.
 * Priorities are a hash of the block address (kept by a block that takes
 * another's node in ga_free_tree_rekey), so the shape is deterministic for a
 * given history and the expected depth is O(log n).
 * Owns nothing: blocks are the allocator's; this file only links them.
 */
#include "policy.h"

static uint32_t prio_of(uintptr_t p) {
  uint64_t h = (uint64_t)p * 0x9e3779b97f4a7c15ULL;
  return (uint32_t)(h >> 32);
}

/* -1, 0, 1 as block `b` orders before, equal to, after the key. */
static int cmp(const ga_block *b, ga_stream_t stream, size_t size, uint32_t tie, uintptr_t ptr) {
  uintptr_t bs = (uintptr_t)b->stream, ks = (uintptr_t)stream;
  if (bs != ks) return bs < ks ? -1 : 1;
  if (b->size != size) return b->size < size ? -1 : 1;
  if (b->tie != tie) return b->tie < tie ? -1 : 1;
  if (b->ptr != ptr) return b->ptr < ptr ? -1 : 1;
  return 0;
}
/* cmp against block k's key with the size ksize. */
static int cmp_key(const ga_block *b, const ga_block *k, size_t ksize) {
  return cmp(b, k->stream, ksize, k->tie, k->ptr);
}

static ga_block *rot_right(ga_block *t) {
  ga_block *l = t->left;
  t->left = l->right;
  l->right = t;
  return l;
}

static ga_block *rot_left(ga_block *t) {
  ga_block *r = t->right;
  t->right = r->left;
  r->left = t;
  return r;
}

static ga_block *insert(ga_block *t, ga_block *b) {
  if (!t) return b;
  if (cmp_key(t, b, b->size) > 0) {
    t->left = insert(t->left, b);
    if (t->left->prio > t->prio) t = rot_right(t);
  } else {
    t->right = insert(t->right, b);
    if (t->right->prio > t->prio) t = rot_left(t);
  }
  return t;
}

static ga_block *merge(ga_block *l, ga_block *r) {
  if (!l) return r;
  if (!r) return l;
  if (l->prio > r->prio) {
    l->right = merge(l->right, r);
    return l;
  }
  r->left = merge(l, r->left);
  return r;
}

static ga_block *remove_node(ga_block *t, ga_block *b) {
  if (!t) return NULL;
  if (t == b) return merge(t->left, t->right);
  if (cmp_key(t, b, b->size) > 0)
    t->left = remove_node(t->left, b);
  else
    t->right = remove_node(t->right, b);
  return t;
}

void ga_free_tree_insert(ga_free_tree *p, ga_block *b) {
  GA_ASSERT(!b->in_tree && b->state == GA_BLOCK_FREE);
  b->in_tree = 1;
  b->left = b->right = NULL;
  b->prio = prio_of(b->ptr);
  p->root = insert(p->root, b);
  p->count++;
}

void ga_free_tree_remove(ga_free_tree *p, ga_block *b) {
  GA_ASSERT(b->in_tree);
  b->in_tree = 0;
  p->root = remove_node(p->root, b);
  b->left = b->right = NULL;
  p->count--;
}

/* x sits in the tree under the key (x->stream, xsize, xptr), which x itself
 * may no longer hold; y (x itself or another block of the same stream) takes
 * its place. When y's key orders between x's neighbours, y takes x's node
 * where it stands (its links and priority): one descent, no rotations. This
 * is the common case of a split (the remainder replaces the block it came
 * from) and of a merge (the merged block replaces the neighbour it
 * absorbed). Otherwise x is removed and y inserted. */
void ga_free_tree_rekey(ga_free_tree *p, ga_block *x, size_t xsize, uintptr_t xptr, ga_block *y) {
  GA_ASSERT(x->in_tree && (y == x || !y->in_tree) && y->state == GA_BLOCK_FREE && y->tie == x->tie);
  x->in_tree = 0;
  y->in_tree = 1;
  ga_block **link = &p->root, *lo = NULL, *hi = NULL;
  while (*link && *link != x) {
    ga_block *t = *link;
    if (cmp(t, x->stream, xsize, x->tie, xptr) > 0) {
      hi = t;
      link = &t->left;
    } else {
      lo = t;
      link = &t->right;
    }
  }
  ga_block *pred = lo, *succ = hi;
  if (x->left)
    for (pred = x->left; pred->right;) pred = pred->right;
  if (x->right)
    for (succ = x->right; succ->left;) succ = succ->left;
  if ((!pred || cmp_key(pred, y, y->size) < 0) && (!succ || cmp_key(succ, y, y->size) > 0)) {
    if (y != x) {
      y->left = x->left;
      y->right = x->right;
      y->prio = x->prio;
      x->left = x->right = NULL;
      *link = y;
    }
    return;
  }
  *link = merge(x->left, x->right);
  x->left = x->right = NULL;
  y->left = y->right = NULL;
  y->prio = prio_of(y->ptr);
  p->root = insert(p->root, y);
}

static ga_block *lower_bound(const ga_free_tree *p, ga_stream_t stream, size_t size, uint32_t tie,
                             uintptr_t ptr) {
  ga_block *best = NULL;
  for (ga_block *t = p->root; t;) {
    if (cmp(t, stream, size, tie, ptr) >= 0) {
      best = t;
      t = t->left;
    } else {
      t = t->right;
    }
  }
  return best;
}

ga_block *ga_free_tree_lower_bound(const ga_free_tree *p, ga_stream_t stream, size_t size) {
  return lower_bound(p, stream, size, 0, 0);
}

ga_block *ga_free_tree_at(const ga_free_tree *p, ga_stream_t stream, size_t size, uint32_t tie,
                          uintptr_t ptr) {
  return lower_bound(p, stream, size, tie, ptr);
}

ga_block *ga_free_tree_next(const ga_free_tree *p, const ga_block *b) {
  return lower_bound(p, b->stream, b->size, b->tie, b->ptr + 1);
}

int ga_free_tree_holds(const ga_free_tree *p, const ga_block *b) {
  return lower_bound(p, b->stream, b->size, b->tie, b->ptr) == b;
}

/* As lower_bound, and *succ the next block in tree order after the one
 * returned (NULL when none, or when nothing is returned): the last node the
 * descent turned left at before the answer, or the leftmost of its right
 * subtree. */
static ga_block *lower_bound_next(const ga_free_tree *p, ga_stream_t stream, size_t size, ga_block **succ) {
  ga_block *best = NULL, *above = NULL;
  for (ga_block *t = p->root; t;) {
    if (cmp(t, stream, size, 0, 0) >= 0) {
      above = best;
      best = t;
      t = t->left;
    } else {
      t = t->right;
    }
  }
  if (best && best->right) {
    for (above = best->right; above->left;) above = above->left;
  }
  *succ = best ? above : NULL;
  return best;
}

int ga_free_tree_first_is(const ga_free_tree *p, ga_stream_t stream, size_t size, size_t ksize,
                          const ga_block *kb, const ga_block *instead, ga_block **after) {
  GA_ASSERT(ksize >= size && kb->stream == stream);
  ga_block *succ, *first = lower_bound_next(p, stream, size, &succ);
  if (first && first == instead) first = succ;
  *after = first; /* when the key is first, no block of the tree lies between the two */
  return !first || cmp(first, stream, ksize, kb->tie, kb->ptr) > 0;
}

static ga_block *before(const ga_free_tree *p, ga_stream_t stream, size_t size, uint32_t tie, uintptr_t ptr) {
  ga_block *best = NULL;
  for (ga_block *t = p->root; t;) {
    if (cmp(t, stream, size, tie, ptr) < 0) {
      best = t;
      t = t->right;
    } else {
      t = t->left;
    }
  }
  return best;
}

ga_block *ga_free_tree_before(const ga_free_tree *p, ga_stream_t stream, size_t size) {
  return before(p, stream, size, 0, 0);
}

ga_block *ga_free_tree_prev(const ga_free_tree *p, const ga_block *b) {
  return before(p, b->stream, b->size, b->tie, b->ptr);
}

static int walk(ga_block *t, int (*fn)(ga_block *, void *), void *arg) {
  if (!t) return 0;
  int r = walk(t->left, fn, arg);
  if (r) return r;
  r = fn(t, arg);
  return r ? r : walk(t->right, fn, arg);
}

int ga_free_tree_walk(const ga_free_tree *p, int (*fn)(ga_block *, void *), void *arg) {
  return walk(p->root, fn, arg);
}

static int valid(const ga_block *t, const ga_block **last, size_t *n) {
  if (!t) return 1;
  if (!valid(t->left, last, n)) return 0;
  if (*last && cmp_key(*last, t, t->size) >= 0) return 0;
  if ((t->left && t->left->prio > t->prio) || (t->right && t->right->prio > t->prio)) return 0;
  if (!t->in_tree) return 0;
  *last = t;
  (*n)++;
  return valid(t->right, last, n);
}

int ga_free_tree_valid(const ga_free_tree *p, size_t *n) {
  const ga_block *last = NULL;
  *n = 0;
  return valid(p->root, &last, n);
}
