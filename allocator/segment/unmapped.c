/* unmapped.c — the unmapped index of an expandable segment: its UNMAPPED
 * blocks in address order, in a treap on the blocks' tree links (a block in
 * the index is never FREE, so it is in no free tree), so that growth finds
 * the lowest run of free and unmapped space that holds a request in
 * O(log n), not by a walk over every block of the segment.
 *
 * Each unmapped block u carries a bound, `reach`, on the bytes from the FREE
 * block just before it (u itself when there is none) to the end of the run
 * of FREE and UNMAPPED blocks that holds it, and each node the largest
 * reach in its subtree (reach_max). A bound may be too high: a FREE block of
 * the run may have been cut since (an allocation), and the query tightens
 * the bounds it finds stale. It is never too low: blocks enter and leave
 * here with their exact reach, and the policy reports a FREE block that grew
 * or appeared next to unmapped space (ga_unmapped_touch_locked).
 * Priorities are a hash of the address, as in the free tree, so the shape is
 * deterministic.
 */
#include "segment.h"

static uint32_t prio_of(uintptr_t p) {
  uint64_t h = (uint64_t)p * 0x9e3779b97f4a7c15ULL;
  return (uint32_t)(h >> 32);
}

static int free_or_unmapped(const ga_block *b) {
  return b && (b->state == GA_BLOCK_FREE || b->state == GA_BLOCK_UNMAPPED);
}

static size_t max_of(const ga_block *t) { return t ? t->reach_max : 0; }

static void pull(ga_block *t) {
  size_t m = t->reach, l = max_of(t->left), r = max_of(t->right);
  if (l > m) m = l;
  if (r > m) m = r;
  t->reach_max = m;
}

static ga_block *rot_right(ga_block *t) {
  ga_block *l = t->left;
  t->left = l->right;
  l->right = t;
  pull(t);
  pull(l);
  return l;
}

static ga_block *rot_left(ga_block *t) {
  ga_block *r = t->right;
  t->right = r->left;
  r->left = t;
  pull(t);
  pull(r);
  return r;
}

static ga_block *insert(ga_block *t, ga_block *u) {
  if (!t) return u;
  if (u->ptr < t->ptr) {
    t->left = insert(t->left, u);
    if (t->left->prio > t->prio) return rot_right(t);
  } else {
    t->right = insert(t->right, u);
    if (t->right->prio > t->prio) return rot_left(t);
  }
  pull(t);
  return t;
}

static ga_block *join(ga_block *l, ga_block *r) {
  if (!l) return r;
  if (!r) return l;
  if (l->prio > r->prio) {
    l->right = join(l->right, r);
    pull(l);
    return l;
  }
  r->left = join(l, r->left);
  pull(r);
  return r;
}

static ga_block *remove_node(ga_block *t, ga_block *u) {
  GA_ASSERT(t != NULL);
  if (t == u) return join(t->left, t->right);
  if (u->ptr < t->ptr)
    t->left = remove_node(t->left, u);
  else
    t->right = remove_node(t->right, u);
  pull(t);
  return t;
}

/* Sets u's reach and the maxima on the path down to it. */
static void set_reach(ga_block *t, ga_block *u, size_t reach) {
  if (t == u) {
    u->reach = reach;
  } else {
    GA_ASSERT(t != NULL);
    set_reach(u->ptr < t->ptr ? t->left : t->right, u, reach);
  }
  pull(t);
}

/* ---- Reach ---- */

/* The block a run counted from u starts at: the FREE blocks just before it. */
static const ga_block *reach_start(const ga_block *u) {
  while (u->prev && u->prev->state == GA_BLOCK_FREE) u = u->prev;
  return u;
}

size_t ga_unmapped_reach(const ga_block *u) {
  size_t n = 0;
  for (const ga_block *b = reach_start(u); free_or_unmapped(b); b = b->next) n += b->size;
  return n;
}

/* ---- Entering and leaving ---- */

void ga_unmapped_add_locked(ga_block *u) {
  ga_segment *seg = u->seg;
  GA_ASSERT(u->state == GA_BLOCK_UNMAPPED && seg->expandable);
  u->left = u->right = NULL;
  u->prio = prio_of(u->ptr);
  u->reach = u->reach_max = ga_unmapped_reach(u);
  seg->unmapped_root = insert(seg->unmapped_root, u);
  seg->unmapped_bytes += u->size;
  seg->nunmapped++;
}

void ga_unmapped_remove_locked(ga_block *u) {
  ga_segment *seg = u->seg;
  GA_ASSERT(u->state == GA_BLOCK_UNMAPPED);
  seg->unmapped_root = remove_node(seg->unmapped_root, u);
  seg->unmapped_bytes -= u->size;
  seg->nunmapped--;
  u->left = u->right = NULL;
  u->prio = 0;
  u->reach = u->reach_max = 0;
}

void ga_unmapped_touch_locked(ga_block *b) {
  ga_segment *seg = b->seg;
  if (!seg->expandable || !seg->unmapped_root) return;
  const ga_block *first = b;
  while (free_or_unmapped(first->prev)) first = first->prev;
  size_t total = 0;
  for (const ga_block *x = first; free_or_unmapped(x); x = x->next) total += x->size;
  /* Each unmapped block of the run reaches from the FREE blocks just before
   * it (or itself) to the run's end: the total less what lies before. */
  size_t before = 0, lead = 0; /* lead: the bytes before the FREE blocks just passed */
  for (ga_block *x = (ga_block *)first; free_or_unmapped(x); x = x->next) {
    if (x->state == GA_BLOCK_UNMAPPED) set_reach(seg->unmapped_root, x, total - lead);
    before += x->size;
    if (x->state != GA_BLOCK_FREE) lead = before;
  }
}

/* ---- The query ---- */

/* The lowest-address node whose reach is at least size. */
static ga_block *leftmost(ga_block *t, size_t size) {
  while (t) {
    if (max_of(t->left) >= size)
      t = t->left;
    else if (t->reach >= size)
      return t;
    else if (max_of(t->right) >= size)
      t = t->right;
    else
      return NULL;
  }
  return NULL;
}

ga_block *ga_unmapped_find_run_locked(ga_segment *seg, size_t size) {
  for (;;) {
    ga_block *u = leftmost(seg->unmapped_root, size);
    if (!u) return NULL;
    size_t reach = ga_unmapped_reach(u);
    if (reach >= size) {
      /* No unmapped block before u reaches size bytes, so none lies in u's
       * run: u is its first, and the run starts at the FREE blocks before it. */
      return (ga_block *)reach_start(u);
    }
    set_reach(seg->unmapped_root, u, reach); /* stale: its run was cut since */
  }
}

/* The first entry of t's subtree at or after `from` whose bound is at least
 * size: subtrees whose largest bound is less are skipped whole. */
static const ga_block *first_from(const ga_block *t, uintptr_t from, size_t size) {
  if (max_of(t) < size) return NULL;
  if (t->ptr < from) return first_from(t->right, from, size);
  const ga_block *r = first_from(t->left, from, size);
  if (r) return r;
  return t->reach >= size ? t : first_from(t->right, from, size);
}

const ga_block *ga_unmapped_first_from(const ga_segment *seg, uintptr_t from, size_t size) {
  return first_from(seg->unmapped_root, from, size);
}

static int walk(const ga_block *t, int (*fn)(const ga_block *, void *), void *arg) {
  if (!t) return 0;
  int r = walk(t->left, fn, arg);
  if (!r) r = fn(t, arg);
  return r ? r : walk(t->right, fn, arg);
}

int ga_unmapped_walk(const ga_segment *seg, int (*fn)(const ga_block *, void *), void *arg) {
  return walk(seg->unmapped_root, fn, arg);
}

/* ---- For ga_check ---- */

static int valid(const ga_block *t, const ga_segment *seg, const ga_block **last, size_t *n, size_t *bytes) {
  if (!t) return 1;
  if (!valid(t->left, seg, last, n, bytes)) return 0;
  if (t->seg != seg || t->state != GA_BLOCK_UNMAPPED) return 0;
  if (*last && (*last)->ptr >= t->ptr) return 0;
  if ((t->left && t->left->prio > t->prio) || (t->right && t->right->prio > t->prio)) return 0;
  size_t m = t->reach;
  if (max_of(t->left) > m) m = max_of(t->left);
  if (max_of(t->right) > m) m = max_of(t->right);
  if (t->reach_max != m) return 0;
  *last = t;
  (*n)++;
  *bytes += t->size;
  return valid(t->right, seg, last, n, bytes);
}

int ga_unmapped_valid(const ga_segment *seg, size_t *n, size_t *bytes) {
  const ga_block *last = NULL;
  *n = *bytes = 0;
  return valid(seg->unmapped_root, seg, &last, n, bytes);
}

const ga_block *ga_unmapped_lookup(const ga_segment *seg, uintptr_t ptr) {
  for (const ga_block *t = seg->unmapped_root; t; t = ptr < t->ptr ? t->left : t->right)
    if (t->ptr == ptr) return t;
  return NULL;
}
