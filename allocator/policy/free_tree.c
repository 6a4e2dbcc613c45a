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
 *
 * Two aggregates keep the out-of-memory report and the moves of expandable
 * memory from walking every free block. The tree's sums (bytes, bytes in
 * whole granules, stranded bytes) change by each block that comes and goes,
 * in O(1). Each node's `whole` byte says whether the block holds a whole
 * granule of an expandable segment that could be unmapped (WHOLE_OWN, exact:
 * a whole granule inside a mapping that reaches past the block cannot, and
 * such blocks pile up among many live ones) and whether some block of its
 * subtree may (WHOLE_SUB): set on the way down whenever such a block
 * comes in, never cleared by a removal, and tightened to the children's by
 * ga_free_tree_whole_at as it passes. A search skips every subtree without
 * WHOLE_SUB, so it costs O(log n) plus the marks it clears, each of them made
 * by one insertion: O(log n) amortised. Nothing of this is on the path of
 * the free kept back (block.c), which leaves the tree alone.
 */
#include "policy.h"

#define WHOLE_OWN 1u /* the block holds a whole granule of an expandable segment that can be unmapped */
#define WHOLE_SUB 2u /* some block of its subtree may (always set when one does) */

void ga_free_tree_init(ga_free_tree *p, const ga_space *space) {
  GA_ASSERT(space->gran > 0 && !p->root);
  p->space = space;
}

/* The bytes in whole granules of [ptr, ptr + size). */
static size_t whole_bytes(uintptr_t ptr, size_t size, size_t g) {
  if (size < g) return 0;
  uintptr_t lo = (ptr + g - 1) / g, hi = (ptr + size) / g;
  return hi > lo ? (size_t)(hi - lo) * g : 0;
}

/* Takes away from the sums a block of b's segment at [ptr, ptr + size) (b's
 * extent when it went in). */
static void untally(ga_free_tree *p, const ga_block *b, uintptr_t ptr, size_t size) {
  size_t w = whole_bytes(ptr, size, p->space->gran);
  p->bytes -= size;
  p->whole_bytes -= w;
  p->stranded -= b->seg->expandable ? size - w : 0;
}

/* Adds block b to the sums; returns WHOLE_OWN when it holds a whole granule
 * of an expandable segment that could be unmapped: one mapping at least lies
 * inside its whole granules (ga_expandable_movable_locked). That stays true
 * or false while the block is in the tree: only an unmap of the block itself
 * (out of the tree) changes the mappings of its granules. */
static unsigned tally(ga_free_tree *p, const ga_block *b) {
  size_t w = whole_bytes(b->ptr, b->size, p->space->gran), g0, g1;
  p->bytes += b->size;
  p->whole_bytes += w;
  p->stranded += b->seg->expandable ? b->size - w : 0;
  return w && b->seg->expandable && ga_expandable_movable_locked(p->space, b, &g0, &g1) ? WHOLE_OWN : 0;
}

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

/* The new root of a subtree takes its marks: it holds what t held. */
static ga_block *rot_right(ga_block *t) {
  ga_block *l = t->left;
  t->left = l->right;
  l->right = t;
  l->whole |= t->whole & WHOLE_SUB;
  return l;
}

static ga_block *rot_left(ga_block *t) {
  ga_block *r = t->right;
  t->right = r->left;
  r->left = t;
  r->whole |= t->whole & WHOLE_SUB;
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
    l->whole |= r->whole & WHOLE_SUB;
    return l;
  }
  r->left = merge(l, r->left);
  r->whole |= l->whole & WHOLE_SUB;
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

/* Marks WHOLE_SUB on the path from the root to where the key (b's, with
 * the size `size` and the address `ptr`) is or goes, `stop` excluded. */
static void mark_path(ga_free_tree *p, const ga_block *b, size_t size, uintptr_t ptr, const ga_block *stop) {
  for (ga_block *t = p->root; t && t != stop;) {
    t->whole |= WHOLE_SUB;
    t = cmp(t, b->stream, size, b->tie, ptr) > 0 ? t->left : t->right;
  }
}

/* b (its sums counted, own = its WHOLE_OWN) goes in as a leaf and up. */
static void insert_marked(ga_free_tree *p, ga_block *b, unsigned own) {
  b->left = b->right = NULL;
  b->prio = prio_of(b->ptr);
  b->whole = (uint8_t)(own ? WHOLE_OWN | WHOLE_SUB : 0);
  if (own) mark_path(p, b, b->size, b->ptr, NULL);
  p->root = insert(p->root, b);
}

void ga_free_tree_insert(ga_free_tree *p, ga_block *b) {
  GA_ASSERT(!b->in_tree && b->state == GA_BLOCK_FREE);
  b->in_tree = 1;
  insert_marked(p, b, tally(p, b));
  p->count++;
  GA_ASSERT(p->bytes >= b->size && p->whole_bytes <= p->bytes && p->stranded <= p->bytes);
}

void ga_free_tree_remove(ga_free_tree *p, ga_block *b) {
  GA_ASSERT(b->in_tree && p->count > 0 && p->bytes >= b->size);
  b->in_tree = 0;
  p->root = remove_node(p->root, b);
  b->left = b->right = NULL;
  untally(p, b, b->ptr, b->size);
  p->count--;
  GA_ASSERT(p->whole_bytes <= p->bytes && p->stranded <= p->bytes && (p->count || !p->bytes));
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
  untally(p, x, xptr, xsize);
  unsigned own = tally(p, y);
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
    unsigned sub = x->whole & WHOLE_SUB;
    if (y != x) {
      y->left = x->left;
      y->right = x->right;
      y->prio = x->prio;
      x->left = x->right = NULL;
      *link = y;
    }
    y->whole = (uint8_t)(own ? WHOLE_OWN | WHOLE_SUB : sub);
    /* The blocks above hold no mark for it yet (rare: a block that gains a
     * whole granule where none was below). */
    if (own && !sub) mark_path(p, x, xsize, xptr, y);
    return;
  }
  *link = merge(x->left, x->right);
  x->left = x->right = NULL;
  insert_marked(p, y, own);
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
  ga_block *b = lower_bound(p, stream, size, 0, 0);
  /* Tree order is (stream, size, ...): the first of the stream at least size long, or a later stream's. */
  GA_ASSERT(!b || (b->in_tree && (b->stream != stream || b->size >= size)));
  return b;
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

static ga_block *before(const ga_free_tree *p, ga_stream_t stream, size_t size, uint32_t tie, uintptr_t ptr);

/* The first block from the key on that holds a whole granule: WHOLE_SUB
 * leads the way, and each node passed keeps only its children's and its own
 * (a bound that stays one). */
static ga_block *whole_from(ga_block *t, ga_stream_t stream, size_t size, uint32_t tie, uintptr_t ptr) {
  if (!t || !(t->whole & WHOLE_SUB)) return NULL;
  ga_block *r;
  if (cmp(t, stream, size, tie, ptr) < 0)
    r = whole_from(t->right, stream, size, tie, ptr);
  else if (!(r = whole_from(t->left, stream, size, tie, ptr)))
    r = t->whole & WHOLE_OWN ? t : whole_from(t->right, stream, size, tie, ptr);
  unsigned below = (t->left ? t->left->whole : 0) | (t->right ? t->right->whole : 0);
  if (!(t->whole & WHOLE_OWN) && !(below & WHOLE_SUB)) t->whole = 0;
  return r;
}

ga_block *ga_free_tree_whole_at(ga_free_tree *p, ga_stream_t stream, size_t size, uint32_t tie,
                                uintptr_t ptr) {
  return whole_from(p->root, stream, size, tie, ptr);
}

/* The largest block of each stream is the last of its stream. */
size_t ga_free_tree_largest(const ga_free_tree *p) {
  size_t most = 0;
  for (ga_block *f = lower_bound(p, NULL, 0, 0, 0); f;) {
    uintptr_t st = (uintptr_t)f->stream;
    ga_block *last = f, *next = NULL;
    if (st != UINTPTR_MAX) {
      next = lower_bound(p, (ga_stream_t)(st + 1), 0, 0, 0);
      last = before(p, (ga_stream_t)(st + 1), 0, 0, 0);
    } else {
      for (last = p->root; last->right;) last = last->right;
    }
    if (last->size > most) most = last->size;
    f = next;
  }
  return most;
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

typedef struct sums {
  ga_free_tree t; /* the sums recounted; space from the tree checked */
  const ga_block *bad;
} sums;

/* Recounts the sums; returns t's subtree's marks, and names a block whose
 * marks are wrong in s->bad. */
static unsigned recount(const ga_block *t, sums *s) {
  if (!t) return 0;
  unsigned below = recount(t->left, s) | recount(t->right, s);
  unsigned own = tally(&s->t, t);
  if (!s->bad && ((t->whole & WHOLE_OWN) != own || ((own || (below & WHOLE_SUB)) && !(t->whole & WHOLE_SUB))))
    s->bad = t;
  return t->whole;
}

int ga_free_tree_sums_valid(const ga_free_tree *p, const ga_block **bad) {
  sums s = {.t = {.space = p->space}};
  (void)recount(p->root, &s);
  *bad = s.bad;
  return !s.bad && s.t.bytes == p->bytes && s.t.whole_bytes == p->whole_bytes && s.t.stranded == p->stranded;
}
