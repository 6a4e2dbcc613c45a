/* fit.c — "would these fit?": ga_would_fit and ga_largest_free answer from
 * a model of the allocator's state, changing nothing.
 *
 * The model is a list of the free blocks (size, address, stream, pool,
 * whether a whole native segment), the bytes reserved, the device's free
 * memory and, for expandable segments, the page cache. Each request walks
 * ga_malloc's sequence on it: best fit with the oversize rules, the split
 * rule, then the retry ladder (garbage collection, a new segment within the
 * memory fraction, oversize blocks given back, the whole cache flushed) in
 * native mode. In expandable mode a growth extends the stream's block at
 * the end of a mapped range (a free block, or an empty one where unmapped
 * space follows a live block) by granules from the page cache, new pages
 * and moves of whole mappings inside free blocks, in the order of the
 * default policy's setting. With expandable_policy:pytorch it is PyTorch's ladder
 * instead: the fraction's test of alloc_size, whole pages that extend the
 * stream's free block at the end of a mapped range (or a new range), and
 * once, every whole free page given back. Frees still waiting on stream
 * events count as in use.
 *
 * Most dry runs need few of the free blocks: they first run on a lazy model
 * (fit_lazily) that reads the free trees and the segments' unmapped index
 * under an overlay of what the dry run took and made, O(log n) per request
 * plus what it passes over; only a ladder step that reads every free block
 * (garbage collection that is due, blocks given back, moves of pages)
 * builds the full model and starts again.
 */
#include <stdlib.h>

#include "policy.h"

typedef struct fblk {
  size_t size;
  uint32_t tie; /* ga_block.tie */
  uintptr_t ptr;
  ga_stream_t stream;
  uint64_t gc_base;
  uint8_t size_class;
  uint8_t whole;      /* a native segment of one block: it can go back */
  uint8_t expandable; /* in an expandable segment */
  uint8_t serving;    /* in the trees that serve the stream (general or its private pool) */
  uint8_t general;    /* in the general trees (the ladder's steps give these back) */
  uint8_t removed;    /* out of the model's free blocks: handed out or given back */
  uint8_t at_end;     /* expandable: unmapped space follows it (a growth extends it) */
  size_t room;        /* expandable: the bytes of that unmapped space (ga_alloc_growable's) */
  uintptr_t follow;   /* expandable: the free block after that unmapped space (0: none) */
  uintptr_t base;     /* expandable: its segment's base, where its pages are counted from */
  size_t mg0, mg1;    /* expandable: the granules a move can take, [mg0, mg1) by absolute number */
  uint64_t created;   /* expandable: its segment's creation number (growth tries the newest first) */
} fblk;

typedef struct fmodel {
  const ga_allocator_t *a;
  fblk *v;
  size_t n, cap;
  int oom;
  size_t reserved, dev_free, cache; /* cache: granules in the page cache */
  uint64_t gc_calls;                /* the general large tree's clock */
  uint64_t next_ptr;                /* addresses for blocks of new segments */
  uint64_t created;                 /* creation numbers given to new segments */
  ga_private *priv;
  int routing;
  struct fast *lazy; /* NULL: v holds every free block; else what the dry run took and made */
  int bail;          /* lazy: a step would read every free block: the full model must answer */
} fmodel;

/* The lazy model's reads of the trees and the unmapped index (below). */
struct fast;
static fblk *fast_best(struct fast *f, int size_class, ga_stream_t stream, size_t size);
static fblk *fast_end_run(struct fast *f, int size_class, ga_stream_t stream, size_t rounded);
static void fast_join(struct fast *f, fblk *run);
static int fast_device(struct fast *f);

typedef struct fwalk {
  fmodel *m;
  uint8_t serving, general;
} fwalk;

/* Free block b as the model holds it. */
static fblk fblk_of(const ga_allocator_t *a, const ga_block *b, uint8_t serving, uint8_t general) {
  const ga_block *hole = b->next && b->next->state == GA_BLOCK_UNMAPPED ? b->next : NULL;
  uintptr_t follow = hole && hole->next && hole->next->state == GA_BLOCK_FREE ? hole->next->ptr : 0;
  size_t g0 = 0, g1 = 0;
  if (b->seg->expandable) (void)ga_expandable_movable_locked(&a->space, b, &g0, &g1);
  return (fblk){.size = b->size,
                .tie = b->tie,
                .ptr = b->ptr,
                .stream = b->stream,
                .gc_base = b->gc_base,
                .size_class = b->size_class,
                .whole = !ga_tiles_is_split(b) && !b->seg->expandable,
                .expandable = b->seg->expandable,
                .serving = serving,
                .general = general,
                .at_end = b->seg->expandable && b->next && b->next->state == GA_BLOCK_UNMAPPED,
                .room = ga_alloc_growable(b->size, b->next) - b->size,
                .follow = follow,
                .base = b->seg->base,
                .mg0 = g0,
                .mg1 = g1,
                .created = b->seg->created};
}

static int add(ga_block *b, void *arg) {
  fwalk *w = arg;
  fmodel *m = w->m;
  if (GA_VEC_ROOM(m->v, m->cap, m->n + 1)) return m->oom = 1;
  m->v[m->n++] = fblk_of(m->a, b, w->serving, w->general);
  return 0;
}

/* UNMAPPED block u of a segment of the serving pool and stream, as the
 * model holds it when no FREE block precedes it: an empty block at the end
 * of a mapped range, where a growth may start. */
static fblk hole_of(const ga_block *u) {
  const ga_segment *seg = u->seg;
  return (fblk){.tie = u->tie,
                .ptr = u->ptr,
                .stream = seg->stream,
                .size_class = seg->size_class,
                .expandable = 1,
                .serving = 1,
                .general = !seg->priv,
                .at_end = 1,
                .room = u->size,
                .follow = u->next && u->next->state == GA_BLOCK_FREE ? u->next->ptr : 0,
                .base = seg->base,
                .created = seg->created};
}

static int add_hole(const ga_block *u, void *arg) {
  fmodel *m = arg;
  if (u->prev && u->prev->state == GA_BLOCK_FREE) return 0; /* that block stands for it */
  if (GA_VEC_ROOM(m->v, m->cap, m->n + 1)) return m->oom = 1;
  m->v[m->n++] = hole_of(u);
  return 0;
}

/* The free trees that serve `stream` (ga_alloc_flags_locked's choice): a
 * private pool's while a capture routes the stream to it (*priv, when
 * asked, names it), else the general ones. */
static const ga_free_tree *serving_trees(ga_allocator_t *a, ga_stream_t stream, ga_private **priv) {
  ga_private *p = a->pol.capture.routing ? ga_private_routed_locked(a, stream) : NULL;
  if (priv) *priv = p;
  return p ? p->trees : a->pol.trees;
}

static int model_init(ga_allocator_t *a, ga_stream_t stream, size_t dev_free, fmodel *m) {
  *m = (fmodel){.a = a,
                .reserved = a->space.reserved,
                .dev_free = dev_free,
                .cache = a->space.ncache,
                .gc_calls = a->pol.trees[GA_CLASS_LARGE].gc_calls,
                .next_ptr = UINTPTR_MAX / 2,
                .created = a->space.created,
                .routing = a->pol.capture.routing};
  (void)serving_trees(a, stream, &m->priv);
  fwalk w = {m, (uint8_t)!m->priv, 1};
  for (int p = 0; p < 2; p++) ga_free_tree_walk(&a->pol.trees[p], add, &w);
  for (ga_private *priv = a->pol.capture.privates; priv; priv = priv->next) {
    /* Released pools no stream uses give their whole segments back in a flush. */
    w = (fwalk){m, (uint8_t)(priv == m->priv), 0};
    if (priv == m->priv || (priv->released && !priv->nstreams))
      for (int p = 0; p < 2; p++) ga_free_tree_walk(&priv->trees[p], add, &w);
  }
  /* Where the serving pool's ranges may grow from an allocated block. */
  for (ga_segment *seg = a->space.segs; seg && !m->oom; seg = seg->next)
    if (seg->expandable && seg->priv == m->priv && seg->stream == stream)
      (void)ga_unmapped_walk(seg, add_hole, m);
  return m->oom ? GA_DEV_ENOMEM : 0;
}

/* Tree order (stream, size, tie, address): is x before y? */
static int before(const fblk *x, const fblk *y) {
  if (x->stream != y->stream) return (uintptr_t)x->stream < (uintptr_t)y->stream;
  if (x->size != y->size) return x->size < y->size;
  if (x->tie != y->tie) return x->tie < y->tie;
  return x->ptr < y->ptr;
}

/* The tie of a block of a segment the model creates (tiles.c's rule). */
static uint32_t new_tie(fmodel *m) {
  m->created++;
  return m->a->cfg.deterministic ? (uint32_t)m->created : 0;
}

/* The first serving block of (size_class, stream) in tree order after `after`
 * (NULL: from the start) at least `size` bytes long. */
static fblk *first_after(fmodel *m, int size_class, ga_stream_t stream, size_t size, const fblk *after) {
  fblk *b = NULL;
  for (size_t i = 0; i < m->n; i++) {
    fblk *x = &m->v[i];
    if (x->removed || !x->serving || x->size_class != size_class || x->stream != stream || x->size < size ||
        (after && !before(after, x)))
      continue;
    if (!b || before(x, b)) b = x;
  }
  return b;
}

/* get_free_block on the serving trees, with PyTorch's walk by expandable
 * size where the allocator walks (ga_alloc_fit_walks). The default policy's
 * choice among the best fits with pages of one granule is not modelled. */
static fblk *best_fit(fmodel *m, int size_class, ga_stream_t stream, size_t size) {
  const ga_config *c = &m->a->cfg;
  if (!m->priv && ga_limit_gc_on(m->a) && size_class == GA_CLASS_LARGE) m->gc_calls++;
  if (m->lazy) return fast_best(m->lazy, size_class, stream, size);
  fblk *b = first_after(m, size_class, stream, size, NULL);
  if (!b) return NULL;
  if (ga_alloc_policy_walks(m->a))
    for (fblk *n; b->expandable && (n = first_after(m, size_class, stream, size, b)) &&
                  n->size + n->room < b->size + b->room;)
      b = n;
  if (ga_alloc_oversize_refuses(c, size, b->size)) return NULL;
  return b;
}

/* ga_block_hand_out_locked's split rule: the rest stays free. */
static void hand_out(fmodel *m, fblk *b, size_t rounded) {
  size_t rest = b->size - rounded;
  int split = (b->size_class == GA_CLASS_SMALL || b->expandable)
                  ? rest >= GA_MIN_BLOCK
                  : rounded < m->a->cfg.max_split_size && rest > GA_SMALL_SIZE;
  if (!split) {
    /* Handed out whole; unmapped space after it is still where a growth
     * may start (an empty block, as add_hole makes). */
    b->removed = !b->at_end;
    b->ptr += b->size;
    b->size = 0;
    b->mg1 = b->mg0;
    return;
  }
  b->size = rest;
  b->ptr += rounded;
  /* A mapping the hand-out cut now reaches past the free rest: where it
   * ends is not modelled, so nothing of the rest counts as movable. */
  if (b->ptr > b->mg0 * m->a->space.gran) b->mg1 = b->mg0;
  b->whole = 0;
}

static void give_back(fmodel *m, fblk *b) {
  b->removed = 1;
  m->reserved -= b->size;
  m->dev_free += b->size;
}

/* The block at the end of a mapped range of the stream with room for
 * `rounded` where a growth starts (find_run: the newest segment first, the
 * lowest address in it); NULL: a new range. Its room is the unmapped space
 * right after it: a run that reaches past that space, over the free memory
 * after it into more unmapped space (find_run's reach), is not modelled. */
static int run_before(const fblk *x, const fblk *y) {
  return x->created > y->created || (x->created == y->created && x->ptr < y->ptr);
}

static fblk *end_run_in(fmodel *m, int size_class, ga_stream_t stream, size_t rounded) {
  fblk *run = NULL;
  for (size_t i = 0; i < m->n; i++) {
    fblk *x = &m->v[i];
    if (!x->removed && x->serving && x->at_end && x->size_class == size_class && x->stream == stream &&
        x->size + x->room >= rounded && (!run || run_before(x, run)))
      run = x;
  }
  return run;
}

static fblk *end_run(fmodel *m, int size_class, ga_stream_t stream, size_t rounded) {
  return m->lazy ? fast_end_run(m->lazy, size_class, stream, rounded)
                 : end_run_in(m, size_class, stream, rounded);
}

/* run takes in f, the free block after its unmapped space. */
static void absorb(fblk *run, const fblk *f) {
  run->size += f->size;
  run->at_end = f->at_end;
  run->room = f->room;
  run->follow = f->follow;
}

/* The entry of m at address ptr, or NULL. */
static fblk *entry_at(fmodel *m, uintptr_t ptr) {
  for (size_t i = 0; ptr && i < m->n; i++)
    if (!m->v[i].removed && m->v[i].ptr == ptr) return &m->v[i];
  return NULL;
}

/* A run whose unmapped space is all mapped now merges with the free block
 * after it (map_block merges with the free neighbours). */
static void join_follow(fmodel *m, fblk *run) {
  if (m->lazy) {
    fast_join(m->lazy, run);
    return;
  }
  run->at_end = 0;
  fblk *f = entry_at(m, run->follow);
  if (f) {
    absorb(run, f);
    f->removed = 1;
    return;
  }
  run->follow = 0;
}

/* The empty block of a new range, where a growth of `bytes` starts when no
 * block ends a mapped range of the stream: the start of unmapped space, at
 * a page boundary, after the blocks the model knows (as its address is). */
static fblk *new_range(fmodel *m, int size_class, ga_stream_t stream, size_t bytes) {
  if (GA_VEC_ROOM(m->v, m->cap, m->n + 1)) return m->oom = 1, NULL;
  uintptr_t at = (uintptr_t)(m->next_ptr += bytes + GA_SMALL_BUFFER);
  m->v[m->n] = (fblk){.size = 0,
                      .tie = m->a->cfg.deterministic ? UINT32_MAX : 0,
                      .ptr = at,
                      .stream = stream,
                      .size_class = (uint8_t)size_class,
                      .expandable = 1,
                      .serving = 1,
                      .general = !m->priv,
                      .at_end = 1,
                      .room = (size_t)1 << 40,
                      .base = at,
                      .created = UINT64_MAX};
  return &m->v[m->n++];
}

/* ---- Native segments ---- */

static int fraction_allows(const fmodel *m, size_t bytes) {
  return ga_limit_allows(m->a, m->reserved, bytes);
}

static int new_segment(fmodel *m, size_t alloc_size, int size_class, ga_stream_t stream, size_t rounded) {
  if (!fraction_allows(m, alloc_size) || alloc_size > m->dev_free) return 0;
  m->reserved += alloc_size;
  m->dev_free -= alloc_size;
  fblk nb = {.size = alloc_size,
             .tie = new_tie(m),
             .ptr = (uintptr_t)(m->next_ptr += alloc_size),
             .stream = stream,
             .gc_base = m->gc_calls,
             .size_class = (uint8_t)size_class,
             .whole = 1,
             .serving = 1,
             .general = !m->priv};
  if (GA_VEC_ROOM(m->v, m->cap, m->n + 1)) return m->oom = 1, 0;
  m->v[m->n] = nb;
  hand_out(m, &m->v[m->n++], rounded);
  return 1;
}

/* ga_reclaim_gc_locked. */
static void gc(fmodel *m) {
  const ga_allocator_t *a = m->a;
  if (!ga_limit_gc_on(a)) return;
  size_t threshold = ga_limit_gc_threshold(a);
  if (m->reserved <= threshold) return;
  if (m->lazy) { /* it reads every whole segment */
    m->bail = 1;
    return;
  }
  size_t target = m->reserved - threshold, reclaimed = 0, left = 0;
  double total_age = 0.0;
  for (size_t i = 0; i < m->n; i++) {
    fblk *x = &m->v[i];
    if (!x->removed && x->general && x->size_class == GA_CLASS_LARGE && x->whole) {
      total_age += (double)(m->gc_calls - x->gc_base);
      left++;
    }
  }
  int freed = 1;
  while (reclaimed < target && freed && left > 0) {
    double avg = total_age / (double)left;
    freed = 0;
    for (size_t i = 0; i < m->n; i++) {
      fblk *x = &m->v[i];
      if (x->removed || !x->general || x->size_class != GA_CLASS_LARGE || !x->whole) continue;
      double age = (double)(m->gc_calls - x->gc_base);
      if (age < avg) continue;
      reclaimed += x->size;
      give_back(m, x);
      freed = 1;
      total_age -= age;
      left--;
    }
  }
}

/* ga_reclaim_oversize_locked: 1 when it freed enough. */
static int oversize(fmodel *m, int size_class, ga_stream_t stream, size_t size) {
  size_t max_split = m->a->cfg.max_split_size;
  if (max_split == SIZE_MAX) return 0;
  if (m->lazy) return m->bail = 1, 0;
  size_t key = size < max_split ? max_split : size;
  fblk *b = NULL;
  for (size_t i = 0; i < m->n; i++) {
    fblk *x = &m->v[i];
    if (x->removed || !x->general || x->size_class != size_class || x->stream != stream || x->size < key)
      continue;
    if (!b || before(x, b)) b = x;
  }
  if (b) {
    if (!b->whole) return 0;
    give_back(m, b);
    return 1;
  }
  /* Largest first, below key, while they are oversize. */
  size_t released = 0;
  fblk cursor = {.size = key, .ptr = 0, .stream = stream};
  while (released < key) {
    fblk *it = NULL;
    for (size_t i = 0; i < m->n; i++) {
      fblk *x = &m->v[i];
      if (x->removed || !x->general || x->size_class != size_class || x->stream != stream ||
          !before(x, &cursor))
        continue;
      if (!it || before(it, x)) it = x;
    }
    if (!it || it->size < max_split) break;
    cursor = *it;
    if (it->whole) {
      released += it->size;
      give_back(m, it);
    }
  }
  return released >= key;
}

static void flush(fmodel *m) {
  if (m->lazy) {
    m->bail = 1;
    return;
  }
  for (size_t i = 0; i < m->n; i++)
    if (!m->v[i].removed && m->v[i].whole && (m->v[i].general || !m->v[i].serving)) give_back(m, &m->v[i]);
}

static int native_one(fmodel *m, int size_class, ga_stream_t stream, size_t rounded) {
  size_t alloc_size = ga_allocation_size_for(&m->a->cfg, rounded);
  gc(m);
  if (m->bail) return 0;
  if (new_segment(m, alloc_size, size_class, stream, rounded)) return 1;
  if (oversize(m, size_class, stream, rounded) && new_segment(m, alloc_size, size_class, stream, rounded))
    return 1;
  if (m->routing || m->bail) return 0;
  flush(m);
  return !m->bail && new_segment(m, alloc_size, size_class, stream, rounded);
}

/* ---- Expandable segments ---- */

/* The granules a move can take from x now: its whole mappings, within what
 * is left of it. */
static size_t movable(const fblk *x, size_t g) {
  size_t lo = (x->ptr + g - 1) / g, hi = (x->ptr + x->size) / g;
  if (x->mg0 > lo) lo = x->mg0;
  if (x->mg1 < hi) hi = x->mg1;
  return hi > lo ? hi - lo : 0;
}

/* Granules the ladder can gather: the cache, free granules of the general
 * trees whose mappings lie inside their blocks (none during a capture:
 * nothing moves), new ones. */
static size_t gatherable(const fmodel *m) {
  size_t g = m->a->space.gran, n = m->cache;
  if (!m->routing)
    for (size_t i = 0; i < m->n; i++) {
      const fblk *x = &m->v[i];
      if (!x->removed && x->general && x->expandable) n += movable(x, g);
    }
  size_t room = m->dev_free, left = ga_limit_left(m->a, m->reserved);
  if (left < room) room = left;
  return n + room / g;
}

/* create_until on the model: handles until the page cache holds `need`
 * granules, each a whole page where the limit and the device allow, else
 * what is missing. *extra: the granules of the last page past the need. */
static void create(fmodel *m, size_t need, size_t page, size_t *extra) {
  size_t g = m->a->space.gran, lim = m->a->pol.allowed_max;
  while (m->cache < need) {
    size_t size = (need - m->cache) * g < page ? (need - m->cache) * g : page, made;
    if (!ga_limit_room(lim, m->reserved, size)) break;
    if (size < page && ga_limit_room(lim, m->reserved, page) && page <= m->dev_free)
      made = page;
    else if (size <= m->dev_free)
      made = size;
    else
      break;
    m->reserved += made;
    m->dev_free -= made;
    m->cache += made / g;
    *extra = m->cache > need ? m->cache - need : 0;
  }
}

/* steal on the model: into the page cache until it holds `need` granules,
 * those of whole mappings inside free blocks of the general trees, from the
 * smallest blocks, from their backs. */
static void take(fmodel *m, size_t need) {
  if (m->lazy) { /* a move reads every free block */
    m->bail = m->cache < need && !m->routing;
    return;
  }
  size_t g = m->a->space.gran;
  while (m->cache < need && !m->routing) {
    fblk *smallest = NULL;
    for (size_t i = 0; i < m->n; i++) {
      fblk *x = &m->v[i];
      if (!x->removed && x->general && x->expandable && movable(x, g) &&
          (!smallest || x->size < smallest->size))
        smallest = x;
    }
    if (!smallest) break;
    size_t i = (size_t)(smallest - m->v), w = movable(smallest, g),
           t = w < need - m->cache ? w : need - m->cache;
    /* The last t granules of its movable range go: a hole, with the free
     * front before it and the free back after it (what follows the range). */
    uintptr_t cut = (smallest->mg1 - t) * g, hole_end = smallest->mg1 * g,
              end = smallest->ptr + smallest->size;
    if (end > hole_end) {
      if (GA_VEC_ROOM(m->v, m->cap, m->n + 1)) {
        m->oom = 1;
        return;
      }
      fblk *x = &m->v[i], *back = &m->v[m->n++];
      *back = *x;
      back->ptr = hole_end;
      back->size = end - hole_end;
      back->mg0 = back->mg1 = 0; /* it may start inside a mapping the move cut */
      x->follow = hole_end;
      x->room = hole_end - cut;
    } else {
      fblk *x = &m->v[i];
      x->room = hole_end - cut + (x->at_end ? x->room : 0); /* the hole joins the unmapped space after */
    }
    fblk *x = &m->v[i];
    x->size = cut - x->ptr; /* may be 0: a growth still starts there */
    x->mg1 -= t;
    x->at_end = 1;
    m->cache += t;
  }
}

/* The default policy's growth (ga_move_grow_locked) on the model: the
 * stream's free block at the end of its mapped range grows (or a new range
 * is made) by the granules the request needs: from the page cache, then new
 * pages (expandable_move_pages:when_full) or moves first, then the other,
 * and the rest of a new page mapped behind it. */
static int expandable_one(fmodel *m, int size_class, ga_stream_t stream, size_t rounded) {
  const ga_allocator_t *a = m->a;
  size_t g = a->space.gran, need = (rounded + g - 1) / g, extra = 0;
  size_t page = ga_page_of(a, size_class);
  /* The run's own granules are there already, and none of them moves away
   * (ga_move_obtain_locked keeps the run's range). */
  fblk *run = end_run(m, size_class, stream, rounded);
  if (m->oom) return 0;
  size_t at = run ? (size_t)(run - m->v) : 0;
  if (run) {
    uintptr_t hi = (run->ptr + rounded + g - 1) / g * g, have = run->ptr + run->size;
    need = hi > have ? (hi - have) / g : 0;
    run->mg1 = run->mg0;
  }
  if (a->cfg.expandable_move_when_full) create(m, need, page, &extra);
  take(m, need); /* may move m->v */
  create(m, need, page, &extra);
  if (m->oom || m->cache < need) return 0;
  if (run) run = &m->v[at];
  size_t mapped = need + extra;
  if (!run && !(run = new_range(m, size_class, stream, mapped * g))) return 0;
  /* The request's granules, then the rest of the last page behind them while
   * the unmapped space lasts; what does not fit stays cached. */
  size_t got = mapped * g < run->room ? mapped * g : run->room;
  m->cache -= got / g;
  run->size += got;
  run->room -= got;
  if (!run->room) join_follow(m, run);
  hand_out(m, run, rounded);
  /* ga_pages_release_locked: the page cache keeps expandable_cache_max. */
  size_t keep = a->cfg.expandable_cache_max / g;
  if (m->cache > keep) {
    m->reserved -= (m->cache - keep) * g;
    m->dev_free += (m->cache - keep) * g;
    m->cache = keep;
  }
  return 1;
}

/* ---- Expandable segments, PyTorch's policy ---- */

/* release_cached_blocks (ga_reclaim_all_locked): the whole pages inside each
 * free block of an expandable segment that may go back are unmapped; what is
 * left of the block on either side stays free. */
static void unmap_pages(fmodel *m) {
  if (m->lazy) {
    m->bail = 1;
    return;
  }
  size_t n = m->n;
  for (size_t i = 0; i < n; i++) {
    fblk *x = &m->v[i];
    if (x->removed || !x->expandable || !(x->general || !x->serving)) continue;
    size_t page = ga_page_of(m->a, x->size_class);
    uintptr_t lo = x->base + (x->ptr - x->base + page - 1) / page * page;
    uintptr_t hi = x->base + (x->ptr + x->size - x->base) / page * page;
    if (hi <= lo) continue;
    m->reserved -= hi - lo;
    m->dev_free += hi - lo;
    uintptr_t end = x->ptr + x->size;
    size_t after = end > hi ? 0 : x->at_end ? x->room : 0; /* unmapped space the hole joins */
    if (end > hi) {
      if (GA_VEC_ROOM(m->v, m->cap, m->n + 1)) {
        m->oom = 1;
        return;
      }
      x = &m->v[i]; /* the vector may have moved */
      m->v[m->n] = *x;
      m->v[m->n].ptr = hi;
      m->v[m->n++].size = end - hi;
    }
    x->follow = end > hi ? hi : x->follow;
    x->size = lo - x->ptr;
    x->at_end = 1;
    x->room = hi - lo + after; /* x may be empty now: a growth still starts there */
  }
}

/* PyTorch's malloc past get_free_block, on the model: alloc_block's test of
 * alloc_size against the fraction, then the whole pages that make the run
 * end_run picks (find_expandable_block; a new range without one) long
 * enough, within the device's room and the budget; failing that,
 * release_cached_blocks and once more. */
static int pytorch_one(fmodel *m, int size_class, ga_stream_t stream, size_t rounded) {
  const ga_allocator_t *a = m->a;
  size_t alloc_size = ga_allocation_size_for(&a->cfg, rounded);
  size_t page = ga_page_of(a, size_class);
  for (int retry = 0;; retry = 1) {
    fblk *run = end_run(m, size_class, stream, rounded);
    if (m->oom) return 0;
    size_t bytes = (rounded + page - 1) / page * page;
    if (run) { /* the pages up to the request's end, within the unmapped space */
      uintptr_t end = run->base + (run->ptr + rounded - run->base + page - 1) / page * page;
      bytes = end > run->ptr + run->size ? end - (run->ptr + run->size) : 0;
      if (bytes > run->room) bytes = run->room;
    }
    if (ga_limit_room(a->pol.fraction_max, m->reserved, alloc_size) && bytes <= m->dev_free &&
        ga_limit_room(a->pol.budget_max, m->reserved, bytes)) {
      if (!run && !(run = new_range(m, size_class, stream, bytes))) return 0;
      m->reserved += bytes;
      m->dev_free -= bytes;
      run->size += bytes;
      run->room -= bytes;
      if (!run->room) join_follow(m, run);
      hand_out(m, run, rounded);
      return 1;
    }
    if (retry || m->routing) return 0;
    flush(m);
    unmap_pages(m);
    if (m->oom || m->bail) return 0;
  }
}

/* One request on the model: 1 if ga_malloc would hand it out. */
static int one(fmodel *m, size_t size, ga_stream_t stream) {
  if (size == 0) return 1;
  if (size > GA_MAX_REQUEST) return 0;
  size_t rounded = ga_round_size(&m->a->cfg, size);
  int size_class = rounded <= GA_SMALL_SIZE ? GA_CLASS_SMALL : GA_CLASS_LARGE;
  fblk *b = best_fit(m, size_class, stream, rounded);
  if (b) {
    hand_out(m, b, rounded);
    return 1;
  }
  if (m->oom || (m->lazy && !fast_device(m->lazy))) return 0;
  if (!m->a->cfg.expandable_segments) return native_one(m, size_class, stream, rounded);
  return m->a->cfg.expandable_pytorch ? pytorch_one(m, size_class, stream, rounded)
                                      : expandable_one(m, size_class, stream, rounded);
}

/* ---- The lazy model: the trees under an overlay ----
 * A dry run rarely needs every free block: best fit reads the serving trees
 * themselves (O(log n)), and a growth finds the end of a mapped range
 * through the segments' unmapped index. So the dry run first runs on a lazy
 * model (ov.lazy): its vector holds only what the dry run took from the
 * trees and the index (each held as the full model would hold it, then
 * handed out, grown and joined by the same code) and what it created (new
 * segments and ranges). One request after another goes through one(), the
 * model's own sequence; a step that would read every free block (garbage
 * collection that is due, oversize blocks or the whole cache given back,
 * moves of pages, PyTorch's release of free pages) sets ov.bail instead, and
 * the caller builds the full model and starts again. */

#define FAST_MAX  64                 /* requests: the overlay is searched linearly */
#define FAST_OV   (FAST_MAX + 2)     /* overlay entries: a request adds one at most */
#define FAST_HELD (2 * FAST_MAX + 2) /* blocks taken: two at most (a run and the block it joins) */

/* What the lazy model learnt of the device, for the full model's path: it
 * asks no second time (one cudaMemGetInfo per call, and debug builds check
 * both answers against the same reading). */
typedef struct lazy_device {
  int asked, failed; /* asked: free holds the device's answer; failed: no answer (a->dev->error says why) */
  size_t free;       /* the answer as read (the model's dev_free then counts down) */
} lazy_device;

/* On the stack, and nothing of it zeroed: a vector allocated per call made
 * the C library's malloc consolidate its heap, whose cost grew with the
 * blocks live (ga-bench scale's would_fit under callgrind: 85 % of the call
 * at 10^5 blocks of mixed sizes). */
typedef struct fast {
  fmodel ov;                 /* the overlay: what the dry run took or made, as it left them */
  const ga_free_tree *trees; /* the serving trees */
  size_t ntaken;
  lazy_device dev;                  /* the device's free memory, once a ladder asked for it */
  const ga_block *taken[FAST_HELD]; /* blocks of the trees and holes the overlay holds or joined */
  const ga_block *space[FAST_OV];   /* per overlay entry: the UNMAPPED block its room is, or NULL */
  fblk buf[FAST_OV];                /* ov.v */
} fast;

static int taken(const fast *f, const ga_block *b) {
  for (size_t i = 0; i < f->ntaken; i++)
    if (f->taken[i] == b) return 1;
  return 0;
}

/* The UNMAPPED block after b, whose bytes a growth of b maps, or NULL. */
static const ga_block *space_after(const ga_block *b) {
  return b->seg->expandable && b->next && b->next->state == GA_BLOCK_UNMAPPED ? b->next : NULL;
}

/* src (a block of the trees, or a hole) goes into the overlay as x. */
static fblk *fast_hold(fast *f, const ga_block *src, fblk x, const ga_block *space) {
  fmodel *ov = &f->ov;
  if (f->ntaken == FAST_HELD || ov->n == FAST_OV) return ov->oom = 1, NULL;
  f->taken[f->ntaken++] = src;
  f->space[ov->n] = space;
  ov->v[ov->n] = x;
  return &ov->v[ov->n++];
}

/* A candidate of the merged order: a block of the trees not taken, or one
 * of the overlay. */
typedef struct cand {
  fblk f;             /* as the model holds it */
  const ga_block *tb; /* from the trees, or NULL */
  fblk *ob;           /* from the overlay, or NULL */
} cand;

/* The first serving block of (size_class, stream) at least `size` bytes
 * long, after `after` in tree order (NULL: from the start): first_after on
 * what the model would hold. 0 when there is none. */
static int fast_first(fast *f, int size_class, ga_stream_t stream, size_t size, const fblk *after, cand *c) {
  const ga_free_tree *p = &f->trees[size_class];
  ga_block *t = after ? ga_free_tree_at(p, stream, after->size, after->tie, after->ptr + 1)
                      : ga_free_tree_lower_bound(p, stream, size);
  while (t && t->stream == stream && taken(f, t)) t = ga_free_tree_next(p, t);
  if (t && t->stream != stream) t = NULL;
  fblk *o = first_after(&f->ov, size_class, stream, size, after);
  if (!t && !o) return 0;
  *c = (cand){0};
  if (t) c->f = fblk_of(f->ov.a, t, 1, !f->ov.priv), c->tb = t;
  if (o && (!t || before(o, &c->f))) c->f = *o, c->ob = o, c->tb = NULL;
  return 1;
}

/* best_fit on the trees under the overlay; the block found is in the
 * overlay. NULL: none serves (the model's ladder would run), or no memory
 * for the overlay (ov.oom). */
static fblk *fast_best(fast *f, int size_class, ga_stream_t stream, size_t size) {
  const ga_config *c = &f->ov.a->cfg;
  cand b, n;
  if (!fast_first(f, size_class, stream, size, NULL, &b)) return NULL;
  if (ga_alloc_policy_walks(f->ov.a))
    while (b.f.expandable && fast_first(f, size_class, stream, size, &b.f, &n) &&
           n.f.size + n.f.room < b.f.size + b.f.room)
      b = n;
  if (ga_alloc_oversize_refuses(c, size, b.f.size)) return NULL;
  return b.ob ? b.ob : fast_hold(f, b.tb, b.f, space_after(b.tb));
}

/* end_run on the overlay and on the segments of the serving pool and
 * stream: in each, the first unmapped block (by address, through the index)
 * whose run as the model holds it (the FREE block before it and the
 * unmapped bytes, or the unmapped bytes alone) is long enough. The segments
 * are few (a stream's ranges per pool); the unmapped blocks passed over are
 * those whose bound reaches `rounded` but whose run does not. */
static fblk *fast_end_run(fast *f, int size_class, ga_stream_t stream, size_t rounded) {
  fmodel *ov = &f->ov;
  fblk *run = end_run_in(ov, size_class, stream, rounded), best = {0}, x;
  const ga_block *src = NULL, *space = NULL;
  for (const ga_segment *seg = ov->a->space.segs; seg; seg = seg->next) {
    if (!seg->expandable || seg->priv != ov->priv || seg->stream != stream || seg->size_class != size_class)
      continue;
    if ((run && run->created > seg->created) || (src && best.created > seg->created)) continue;
    for (const ga_block *u = ga_unmapped_first_from(seg, 0, rounded); u;
         u = ga_unmapped_first_from(seg, u->ptr + 1, rounded)) {
      const ga_block *c = u->prev && u->prev->state == GA_BLOCK_FREE ? u->prev : u;
      if (c != u && (!c->in_tree || c->stream != stream || c->size_class != size_class)) continue;
      if (taken(f, c)) continue; /* the overlay holds it as the dry run left it */
      x = c == u ? hole_of(u) : fblk_of(ov->a, c, 1, !ov->priv);
      if (x.size + x.room < rounded) continue;
      if ((!run || run_before(&x, run)) && (!src || run_before(&x, &best))) best = x, src = c, space = u;
      break; /* the lowest address of the segment */
    }
  }
  return src ? fast_hold(f, src, best, space) : run;
}

/* join_follow on the overlay, or with the FREE block after the unmapped
 * block the run's room is (joined: taken, as the model removes it). */
static void fast_join(fast *f, fblk *run) {
  fmodel *ov = &f->ov;
  size_t i = (size_t)(run - ov->v);
  const ga_block *u = f->space[i], *fb = u ? u->next : NULL;
  run->at_end = 0;
  fblk *o = entry_at(ov, run->follow);
  if (o) {
    absorb(run, o);
    o->removed = 1;
    f->space[i] = f->space[o - ov->v];
    return;
  }
  if (run->follow && fb && fb->state == GA_BLOCK_FREE && fb->in_tree && fb->ptr == run->follow &&
      !taken(f, fb)) {
    if (f->ntaken == FAST_HELD) {
      ov->oom = 1;
      return;
    }
    fblk x = fblk_of(ov->a, fb, 1, !ov->priv);
    absorb(run, &x);
    f->taken[f->ntaken++] = fb;
    f->space[i] = space_after(fb);
    return;
  }
  run->follow = 0;
}

/* The device's free memory, asked once, before the first step of a ladder
 * (the model's dev_free); 0 when the device does not answer (dev.failed:
 * the call fails with the device's error, as the model's path would). */
static int fast_device(fast *f) {
  if (!f->dev.asked) {
    size_t total = 0;
    if (ga_dev_mem_info(f->ov.a->dev, &f->dev.free, &total)) return f->dev.failed = f->ov.bail = 1, 0;
    f->dev.asked = 1;
    f->ov.dev_free = f->dev.free;
  }
  return 1;
}

/* ga_would_fit's answer from the lazy model: 1 and *fit, or 0 when it
 * cannot answer (more than FAST_MAX requests, a step that reads every free
 * block, no memory for the overlay). */
static int fit_lazily(ga_allocator_t *a, const size_t *sizes, size_t n, ga_stream_t stream, size_t *fit,
                      lazy_device *dev) {
  *dev = (lazy_device){0};
  if (n > FAST_MAX) return 0;
  fast f;
  /* model_init's figures; dev_free once a ladder needs it (fast_device). */
  f.ov = (fmodel){.a = a,
                  .v = f.buf,
                  .cap = FAST_OV,
                  .reserved = a->space.reserved,
                  .cache = a->space.ncache,
                  .gc_calls = a->pol.trees[GA_CLASS_LARGE].gc_calls,
                  .next_ptr = UINTPTR_MAX / 2,
                  .created = a->space.created,
                  .routing = a->pol.capture.routing,
                  .lazy = &f};
  f.trees = serving_trees(a, stream, &f.ov.priv);
  f.ntaken = 0;
  f.dev = (lazy_device){0};
  size_t k = 0;
  int answered = 0;
  /* Each request adds one overlay entry at most: the vector never grows. */
  while (k < n && f.ov.n < FAST_OV) {
    f.space[f.ov.n] = NULL; /* the entry a new segment or range would be */
    int ok = one(&f.ov, sizes[k], stream);
    if (f.ov.bail || f.ov.oom) break;
    if (!ok) { /* refused with no more read than the lazy model holds: so would the model */
      answered = 1;
      break;
    }
    k++;
  }
  if (k == n) answered = 1;
  GA_ASSERT(f.ov.v == f.buf);
  *dev = f.dev;
  if (answered) *fit = k;
  return answered;
}

ga_status_t ga_fit_would_fit_locked(ga_allocator_t *a, const size_t *sizes, size_t n, ga_stream_t stream,
                                    size_t *fit) {
  GA_ASSERT_LOCKED(a);
  size_t quick = 0;
  lazy_device dev;
  int lazily = fit_lazily(a, sizes, n, stream, &quick, &dev);
#ifndef GA_ASSERTS
  if (lazily) { /* at most one device call, and none when the cache served every request */
    *fit = quick;
    return GA_OK;
  }
#endif
  size_t dev_free = dev.free, total = 0;
  int rc = dev.failed || (!dev.asked && ga_dev_mem_info(a->dev, &dev_free, &total));
  if (rc) {
    ga_error_set("ga_would_fit: cannot query the device's free memory: %s", a->dev->error);
    return GA_ERR_DEVICE;
  }
  fmodel m;
  rc = model_init(a, stream, dev_free, &m);
  size_t k = 0;
  while (!rc && k < n && one(&m, sizes[k], stream) && !m.oom) k++;
  free(m.v);
  if (rc || m.oom) {
    return ga_fail(GA_DEV_ENOMEM, "ga_would_fit", NULL, "for the model of %zu free blocks", m.n);
  }
  GA_ASSERT(!lazily || quick == k); /* debug builds run both */
  *fit = k;
  return GA_OK;
}

/* ---- The largest request ---- */

/* The largest request a free block of `size` bytes of pool `size_class`
 * serves: the largest one whose rounding (roundup_power2_divisions
 * included) fits in it and belongs to the pool (the small pool takes what
 * rounds to 1 MiB or less, the large one the rest); 0 when none. */
static size_t serves(const ga_config *c, int size_class, size_t size) {
  size_t cap = size_class == GA_CLASS_SMALL && size > GA_SMALL_SIZE ? GA_SMALL_SIZE : size;
  if (cap < GA_MIN_BLOCK) return 0;
  size_t lo = 1, hi = cap; /* ga_round_size(lo) <= cap, and rounding grows with the size */
  if (ga_round_size(c, hi) > cap)
    while (hi - lo > 1) {
      size_t mid = lo + (hi - lo) / 2;
      if (ga_round_size(c, mid) <= cap)
        lo = mid;
      else
        hi = mid;
    }
  else
    lo = hi;
  int large = ga_round_size(c, lo) > GA_SMALL_SIZE;
  return (size_class == GA_CLASS_LARGE) == large ? lo : 0;
}

/* The largest request that best fit serves from a free block, by pool: the
 * stream's blocks from the largest down, each with the largest request
 * whose rounding fits it, until best fit serves one. Best fit may refuse
 * it: the oversize rules refuse a block past max_split_size to a request
 * under it, or one that would leave max_non_split_rounding unused, and
 * PyTorch's walk may step on to such a block. Every block from that
 * rounding up to the block's size names the same request (and best fit
 * starts at the first of them), so a refusal steps down to the largest
 * block under the rounding: one test per distinct request, O(log n) each
 * on the trees, however many blocks share a size. Within one such range
 * the largest rounding fares best (the oversize test only gets easier as
 * the request grows), save the default policy's choice among best fits
 * with pages of one granule, which weighs each size apart: there the
 * answer can be low. `below` gives the largest block under a size (size
 * 0: none), `fits` best fit's verdict, both on whatever holds the blocks
 * (the trees, or the model). */
static size_t largest_served(const ga_config *c, int size_class, size_t (*below)(void *, size_t),
                             int (*fits)(void *, int, size_t), void *arg, size_t floor) {
  for (size_t size = below(arg, SIZE_MAX); size;) {
    size_t most = serves(c, size_class, size);
    if (most <= floor) return floor; /* nothing below does better */
    size_t rounded = ga_round_size(c, most);
    if (fits(arg, size_class, rounded)) return most;
    size = below(arg, rounded);
  }
  return floor;
}

/* ---- On the trees ---- */

typedef struct on_trees {
  const ga_allocator_t *a;
  const ga_free_tree *trees;
  ga_stream_t stream;
  int size_class;
} on_trees;

/* The size of the stream's largest block under `size` bytes, or 0. */
static size_t tree_below(void *arg, size_t size) {
  on_trees *t = arg;
  const ga_block *b = ga_free_tree_before(&t->trees[t->size_class], t->stream, size);
  return b && b->stream == t->stream ? b->size : 0;
}
static int tree_fits(void *arg, int size_class, size_t rounded) {
  on_trees *t = arg;
  return ga_alloc_best_fit_locked(t->a, t->trees, size_class, t->stream, rounded) != NULL;
}

/* The answer on the serving trees themselves, O(log n) per request tested
 * (the largest block of each pool first: the stream's last in tree order). */
static size_t largest_cached(ga_allocator_t *a, ga_stream_t stream) {
  const ga_free_tree *trees = serving_trees(a, stream, NULL);
  size_t best = 0;
  for (int p = 0; p < 2; p++) {
    on_trees t = {a, trees, stream, p};
    best = largest_served(&a->cfg, p, tree_below, tree_fits, &t, best);
  }
  return best;
}

/* ---- On the model ---- */

typedef struct on_model {
  fmodel *m;
  ga_stream_t stream;
  int size_class;
} on_model;

/* The size of the largest serving block of the stream and pool under
 * `size` bytes, or 0. */
static size_t model_below(void *arg, size_t size) {
  on_model *o = arg;
  size_t most = 0;
  for (size_t i = 0; i < o->m->n; i++) {
    const fblk *x = &o->m->v[i];
    if (!x->removed && x->serving && x->stream == o->stream && x->size_class == o->size_class &&
        x->size < size && x->size > most)
      most = x->size;
  }
  return most;
}
static int model_fits(void *arg, int size_class, size_t rounded) {
  on_model *o = arg;
  uint64_t clock = o->m->gc_calls; /* best_fit counts the call: a look changes nothing */
  int served = best_fit(o->m, size_class, o->stream, rounded) != NULL;
  o->m->gc_calls = clock;
  return served;
}

/* largest_cached on the model as it stands (after a flush, say): O(n) per
 * request tested. */
static size_t largest_block(fmodel *m, ga_stream_t stream) {
  size_t best = 0;
  for (int p = 0; p < 2; p++) {
    on_model o = {m, stream, p};
    best = largest_served(&m->a->cfg, p, model_below, model_fits, &o, best);
  }
  return best;
}

ga_status_t ga_fit_largest_locked(ga_allocator_t *a, ga_stream_t stream, size_t *cached, size_t *with_call) {
  GA_ASSERT_LOCKED(a);
  size_t here = largest_cached(a, stream), dev_free = 0, total = 0;
  if (cached) *cached = here;
  if (!with_call) return GA_OK; /* the cache alone: no model */
  int rc = ga_dev_mem_info(a->dev, &dev_free, &total);
  if (rc) {
    ga_error_set("ga_largest_free: cannot query the device's free memory: %s", a->dev->error);
    return GA_ERR_DEVICE;
  }
  fmodel m;
  if (model_init(a, stream, dev_free, &m)) {
    free(m.v);
    return ga_fail(GA_DEV_ENOMEM, "ga_largest_free", NULL, NULL);
  }
  /* The model's best fit leaves out the default policy's choice among best fits. */
  GA_ASSERT((a->pol.fit_weighs && !a->pol.fit_walks) || largest_block(&m, stream) == here);
  size_t g = a->space.gran, best = here;
  if (a->cfg.expandable_segments) {
    size_t n = gatherable(&m);
    if (n * g > best) best = n * g;
    /* Or a growth of a free block at the end of the stream's mapped range. */
    for (size_t i = 0; i < m.n; i++) {
      const fblk *x = &m.v[i];
      if (x->removed || !x->serving || !x->at_end || x->stream != stream || x->size_class != GA_CLASS_LARGE)
        continue;
      size_t own = !m.routing && x->general ? movable(x, g) : 0; /* counted in n */
      size_t more = (n > own ? n - own : 0) * g;
      if (more > x->room) more = x->room;
      if (x->size + more > best) best = x->size + more;
    }
  } else {
    if (!m.routing) flush(&m);
    size_t room = m.dev_free, left = ga_limit_left(a, m.reserved);
    if (left < room) room = left;
    room = room / GA_ROUND_LARGE * GA_ROUND_LARGE; /* segments of 10 MiB and more: multiples of 2 MiB */
    size_t fresh = room >= GA_MIN_LARGE_ALLOC ? room : room >= GA_SMALL_BUFFER ? GA_SMALL_SIZE : 0;
    size_t after = largest_block(&m, stream);
    if (after > best) best = after;
    if (fresh > best) best = fresh;
  }
  *with_call = best;
  free(m.v);
  return GA_OK;
}
