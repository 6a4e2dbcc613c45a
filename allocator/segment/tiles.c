/* tiles.c — block records and the segment list: the blocks of a segment tile
 * it in address order, and these are the only operations that change that
 * tiling (split, unlink, absorb, merge). They change addresses, sizes and
 * states, never a free tree: a block a caller keeps in a tree while its key
 * changes is re-keyed there by the caller. Also the segment layer's set-up
 * and teardown.
 */
#include <stdlib.h>

#include "segment.h"

/* ---- Records ----
 * Records come from slabs (ga_host_table; on huge pages from 2 MiB up), so
 * records made one after the other (a segment's blocks as it fills) lie
 * side by side, each in two whole cache lines, and 10^6 of them take 64 TLB
 * entries, not 32k. A slab's first record is its header: the next slab
 * (->next) and its bytes (->size). Each slab is twice the last, from
 * SLAB_MIN to SLAB_MAX; a recycled record goes to block_cache and back out
 * before any fresh one; slabs are freed only with the space.
 *
 * Colouring: a record's first line (what a tree search reads) would always
 * fall in an even-numbered cache set if records lay 128 bytes apart from a
 * 128-byte boundary, and the tree's nodes would compete for half of each
 * cache. So records start at offset 0 of an even 4 KiB page (32 of them) and
 * at offset 64 of an odd one (31), and never cross a page. */
#define SLAB_MIN  ((size_t)16 << 10)
#define SLAB_MAX  ((size_t)8 << 20)
#define SLAB_PAGE ((uintptr_t)4096)

/* The first place a record may begin at or after address at. */
static uintptr_t record_place(uintptr_t at) {
  for (;;) {
    uintptr_t page = at & ~(SLAB_PAGE - 1), first = page + ((page / SLAB_PAGE) & 1) * 64;
    uintptr_t p = at <= first
                      ? first
                      : first + (at - first + sizeof(ga_block) - 1) / sizeof(ga_block) * sizeof(ga_block);
    if (p + sizeof(ga_block) <= page + SLAB_PAGE) return p;
    at = page + SLAB_PAGE;
  }
}

/* 0, or GA_DEV_ENOMEM (host memory). */
static int new_slab(ga_space *sp) {
  size_t bytes = sp->slabs ? sp->slabs->size * 2 : SLAB_MIN;
  if (bytes > SLAB_MAX) bytes = SLAB_MAX;
  ga_block *slab = ga_host_table(bytes);
  if (!slab) return GA_DEV_ENOMEM;
  slab->next = sp->slabs;
  slab->size = bytes;
  sp->slabs = slab;
  sp->slab_next = record_place((uintptr_t)(slab + 1));
  sp->slab_end = (uintptr_t)slab + bytes;
  return 0;
}

ga_block *ga_tiles_new_locked(ga_space *sp) {
  GA_ASSERT_SPACE_LOCKED(sp);
  ga_block *b = sp->block_cache;
  if (b) {
    sp->block_cache = b->next;
  } else {
    if (sp->slab_next + sizeof *b > sp->slab_end && new_slab(sp)) return NULL;
    b = (ga_block *)sp->slab_next;
    sp->slab_next = record_place(sp->slab_next + sizeof *b);
  }
  *b = (ga_block){0};
  return b;
}

void ga_tiles_delete_locked(ga_space *sp, ga_block *b) {
  GA_ASSERT_SPACE_LOCKED(sp);
  GA_ASSERT(b->state != GA_BLOCK_ALLOCATED); /* never a live allocation (the block map relies on it) */
  if (b->uses) {
    free(b->uses);
    b->uses = NULL;
  }
  if (b->in_map) {
    (void)ga_blockmap_take(sp->map, b->ptr);
    b->in_map = 0;
  }
  b->next = sp->block_cache;
  sp->block_cache = b;
}

int ga_tiles_reserve_locked(ga_space *sp, int n) {
  GA_ASSERT_SPACE_LOCKED(sp);
  ga_block *got[4];
  GA_ASSERT(n <= 4);
  int k = 0;
  for (; k < n; k++)
    if (!(got[k] = ga_tiles_new_locked(sp))) break;
  int ok = k == n;
  while (k-- > 0) ga_tiles_delete_locked(sp, got[k]);
  return ok ? 0 : GA_DEV_ENOMEM;
}

/* ---- Tiling ---- */

/* b and its address neighbours tile their segment: each begins where the one
 * before ends, the links agree both ways, all in one segment (the rule every
 * function here keeps). */
static int tiled(const ga_block *b) {
  const ga_block *p = b->prev, *n = b->next;
  return b->size > 0 && (!p || (p->next == b && p->seg == b->seg && p->ptr + p->size == b->ptr)) &&
         (!n || (n->prev == b && n->seg == b->seg && b->ptr + b->size == n->ptr));
}

ga_block *ga_tiles_split_locked(ga_space *sp, ga_block *b, size_t at) {
  GA_ASSERT_SPACE_LOCKED(sp);
  GA_ASSERT(at > 0 && at < b->size);
  ga_block *rest = ga_tiles_new_locked(sp);
  if (!rest) return NULL;
  rest->ptr = b->ptr + at;
  rest->size = b->size - at;
  rest->stream = b->stream;
  rest->seg = b->seg;
  rest->tie = b->tie;
  rest->size_class = b->size_class;
  rest->free_seq = b->free_seq;
  rest->state = b->state;
  rest->prev = b;
  rest->next = b->next;
  if (b->next) b->next->prev = rest;
  b->next = rest;
  b->size = at;
  GA_ASSERT(tiled(b) && tiled(rest) && rest->state == b->state && rest->stream == b->stream);
  return rest;
}

ga_block *ga_tiles_unlink_next(ga_block *x) {
  ga_block *y = x->next;
  GA_ASSERT(y != NULL);
  if (y->free_seq > x->free_seq) x->free_seq = y->free_seq; /* the latest free of the two */
  x->next = y->next;
  if (x->next) x->next->prev = x;
  return y;
}

void ga_tiles_absorb_next_locked(ga_space *sp, ga_block *x) {
  GA_ASSERT_SPACE_LOCKED(sp);
  x->size += x->next->size;
  ga_tiles_delete_locked(sp, ga_tiles_unlink_next(x));
  GA_ASSERT(tiled(x));
}

ga_block *ga_tiles_merge_unmapped_locked(ga_space *sp, ga_block *b) {
  GA_ASSERT_SPACE_LOCKED(sp);
  b->state = GA_BLOCK_UNMAPPED;
  if (b->prev && b->prev->state == GA_BLOCK_UNMAPPED) {
    ga_unmapped_remove_locked(b->prev);
    b = b->prev;
    ga_tiles_absorb_next_locked(sp, b);
  }
  if (b->next && b->next->state == GA_BLOCK_UNMAPPED) {
    ga_unmapped_remove_locked(b->next);
    ga_tiles_absorb_next_locked(sp, b);
  }
  ga_unmapped_add_locked(b);
  GA_ASSERT(tiled(b) && (!b->prev || b->prev->state != GA_BLOCK_UNMAPPED) &&
            (!b->next || b->next->state != GA_BLOCK_UNMAPPED));
  return b;
}

ga_block *ga_tiles_merge_free_locked(ga_space *sp, ga_block *b) {
  GA_ASSERT_SPACE_LOCKED(sp);
  GA_ASSERT(b->state == GA_BLOCK_FREE && !b->in_tree);
  if (b->prev && b->prev->state == GA_BLOCK_FREE) {
    GA_ASSERT(!b->prev->in_tree);
    b = b->prev;
    ga_tiles_absorb_next_locked(sp, b);
  }
  if (b->next && b->next->state == GA_BLOCK_FREE) {
    GA_ASSERT(!b->next->in_tree);
    ga_tiles_absorb_next_locked(sp, b);
  }
  GA_ASSERT(b->state == GA_BLOCK_FREE && !b->in_tree && tiled(b) &&
            (!b->prev || b->prev->state != GA_BLOCK_FREE) && (!b->next || b->next->state != GA_BLOCK_FREE));
  return b;
}

/* ---- The segment list ---- */

void ga_tiles_link_locked(ga_space *sp, ga_segment *seg) {
  GA_ASSERT_SPACE_LOCKED(sp);
  seg->prev = NULL;
  seg->next = sp->segs;
  if (sp->segs) sp->segs->prev = seg;
  sp->segs = seg;
  sp->nsegs++;
}

void ga_tiles_unlink_locked(ga_space *sp, ga_segment *seg) {
  GA_ASSERT_SPACE_LOCKED(sp);
  if (seg->prev)
    seg->prev->next = seg->next;
  else
    sp->segs = seg->next;
  if (seg->next) seg->next->prev = seg->prev;
  sp->nsegs--;
}

/* ---- A segment and the block that tiles it ---- */

int ga_tiles_segment_records_locked(ga_space *sp, ga_segment **seg, ga_block **head) {
  GA_ASSERT_SPACE_LOCKED(sp);
  *seg = ga_host_calloc(1, sizeof **seg);
  *head = *seg ? ga_tiles_new_locked(sp) : NULL;
  if (*head) return 0;
  free(*seg);
  return GA_DEV_ENOMEM;
}

void ga_tiles_segment_delete_locked(ga_space *sp, ga_segment *seg, ga_block *head) {
  GA_ASSERT_SPACE_LOCKED(sp);
  free(seg);
  ga_tiles_delete_locked(sp, head);
}

void ga_tiles_segment_open_locked(ga_space *sp, ga_segment *seg, ga_block *head, int state) {
  GA_ASSERT_SPACE_LOCKED(sp);
  seg->head = head;
  /* The creation number orders equal free blocks of different segments
   * with deterministic:True (the address would depend on the device). */
  seg->created = ++sp->created;
  head->tie = sp->cfg->deterministic ? (uint32_t)seg->created : 0;
  head->ptr = seg->base;
  head->size = seg->size;
  head->stream = seg->stream;
  head->size_class = seg->size_class;
  head->seg = seg;
  head->state = (uint8_t)state;
  ga_tiles_link_locked(sp, seg);
  if (state == GA_BLOCK_UNMAPPED) ga_unmapped_add_locked(head);
}

/* ---- The layer as a whole ---- */

int ga_space_init_locked(ga_space *sp, size_t total, size_t page) {
  GA_ASSERT_SPACE_LOCKED(sp);
  sp->access[0] = sp->dev->ordinal;
  sp->naccess = sp->nproven = 1;
  if (ga_dev_granularity(sp->dev, &sp->gran) || sp->gran == 0) sp->gran = GA_SMALL_BUFFER;
  /* PyTorch reserves 1.125x the device's memory per expandable segment. Each
   * size is checked before it is rounded up, so none wraps. */
  if (page == 0 || page > SIZE_MAX - sp->gran || total > SIZE_MAX / 9) return GA_DEV_EINVAL;
  page = (page + sp->gran - 1) / sp->gran * sp->gran;
  size_t want = total / 8 * 9;
  if (want > SIZE_MAX - page) return GA_DEV_EINVAL;
  sp->reserve_size = (want + page - 1) / page * page;
  return 0;
}

static void expandable_teardown(ga_space *sp, ga_segment *seg) {
  size_t g = sp->gran;
  for (size_t i = 0; i < seg->ngranules; i++) {
    ga_granule *m = &seg->granules[i];
    if (!m->handle || m->off) continue;
    /* A whole mapping, once. */
    size_t n = m->len;
    (void)ga_dev_unmap(sp->dev, (void *)(seg->base + i * g), n * g);
    for (size_t j = i; j < i + n; j++) {
      seg->granules[j].handle->nmapped--;
      seg->granules[j] = (ga_granule){0};
    }
  }
  (void)ga_dev_unreserve(sp->dev, (void *)seg->base, seg->size);
}

void ga_space_teardown_locked(ga_space *sp) {
  GA_ASSERT_SPACE_LOCKED(sp);
  for (ga_segment *seg = sp->segs; seg; seg = seg->next)
    if (seg->expandable) expandable_teardown(sp, seg);
  while (sp->handles) {
    ga_handle *h = sp->handles;
    sp->handles = h->next;
    (void)ga_dev_release(sp->dev, h->h);
    free(h);
  }
  free(sp->cache);
  while (sp->segs) {
    ga_segment *seg = sp->segs;
    sp->segs = seg->next;
    if (!seg->expandable) (void)ga_dev_free(sp->dev, (void *)seg->base);
    ga_host_zeroed_free(seg->granules, seg->ngranules * sizeof *seg->granules);
    for (ga_block *b = seg->head; b; b = b->next) free(b->uses);
    free(seg);
  }
  /* Every record, in a segment or recycled, is in a slab. */
  while (sp->slabs) {
    ga_block *slab = sp->slabs;
    sp->slabs = slab->next;
    ga_host_table_free(slab, slab->size);
  }
  /* What it works with stays: it is its owner's. */
  *sp = (ga_space){.mu = sp->mu, .dev = sp->dev, .stats = sp->stats, .history = sp->history, .cfg = sp->cfg};
}
