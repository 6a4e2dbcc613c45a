/* segment.h — the segment layer: WHERE the bytes live.
 *
 * Owns the segment list, the block records that tile each segment (their
 * address order, sizes and states; "tiles"), native segments (one device
 * malloc each), expandable segments (a reserved range mapped granule by
 * granule), the physical handles and the page cache, and which devices may
 * access expandable memory. Records reserved_bytes, segment, mapped_bytes and
 * page_cache_bytes, and the segment history entries.
 *
 * It knows no free tree and decides nothing: every function here takes and
 * returns blocks that are in no free tree (the one exception, noted at
 * ga_tiles_*, is that tile operations leave a block's tree links alone), and
 * the policy above chooses what to map, unmap, move or give back.
 * Functions return 0 or a GA_DEV_* code (errors.h); *_locked ones need the
 * allocator's lock.
 */
#ifndef GA_SEGMENT_H
#define GA_SEGMENT_H

#include "space.h"

/* ---- Tiles: block records and the segment list (tiles.c) ----
 * These change address order, sizes and states only; a block's free-tree
 * links and the trees are not touched (a caller that keeps a block in a tree
 * while its key changes re-keys it there). */

/* A zeroed block record, from the recycled ones when there are. NULL on host OOM. */
ga_block *ga_tiles_new_locked(ga_space *sp);
/* Recycles a block record (out of every list and tree). */
void ga_tiles_delete_locked(ga_space *sp, ga_block *b);
/* At least n recycled records, so that the next n splits cannot fail. */
int ga_tiles_reserve_locked(ga_space *sp, int n);
/* Splits b at offset at (0 < at < b->size): b keeps the front, the new record
 * (same state, stream and free_seq) the rest. NULL on host OOM. */
ga_block *ga_tiles_split_locked(ga_space *sp, ga_block *b, size_t at);
/* x takes over its next neighbour's place in the address list (the caller has
 * added that neighbour's bytes to x, or will); returns the neighbour, out of
 * the list, not yet recycled. x keeps the later free_seq of the two. */
ga_block *ga_tiles_unlink_next(ga_block *x);
/* x absorbs its next neighbour (its bytes and its place), which is recycled. */
void ga_tiles_absorb_next_locked(ga_space *sp, ga_block *x);
/* b becomes UNMAPPED and merges with UNMAPPED neighbours; returns the merged
 * block (the earlier record survives). */
ga_block *ga_tiles_merge_unmapped_locked(ga_space *sp, ga_block *b);
/* b (FREE) merges with FREE neighbours, all in no tree; returns the merged
 * block (the earlier record survives). */
ga_block *ga_tiles_merge_free_locked(ga_space *sp, ga_block *b);
/* Adds seg to / removes it from the segment list. */
void ga_tiles_link_locked(ga_space *sp, ga_segment *seg);
void ga_tiles_unlink_locked(ga_space *sp, ga_segment *seg);
/* A new segment's two records: the segment (zeroed) and the block that will
 * tile it; both or neither (GA_DEV_ENOMEM). Taken before the device call, so
 * that memory once obtained never waits on a host allocation. */
int ga_tiles_segment_records_locked(ga_space *sp, ga_segment **seg, ga_block **head);
/* Gives back the records of a segment whose memory could not be obtained. */
void ga_tiles_segment_delete_locked(ga_space *sp, ga_segment *seg, ga_block *head);
/* seg (base, size, pool, stream and the rest set by the caller) gets head as
 * its one block, in `state`, and joins the segment list with the next
 * creation number (seg->created; head->tie, see ga_block). */
void ga_tiles_segment_open_locked(ga_space *sp, ga_segment *seg, ga_block *head, int state);
/* Whether a block shares its segment with others (it has neighbours). */
static inline int ga_tiles_is_split(const ga_block *b) { return b->prev || b->next; }

/* ---- Native segments (native.c) ---- */

/* A segment of `size` bytes from the device's malloc; *out is its one block
 * (state FREE, in no tree). */
int ga_native_new_locked(ga_space *sp, size_t size, int size_class, ga_stream_t stream, ga_block **out);
/* Gives a whole-segment FREE block (in no tree) back to the device with its
 * segment. On failure nothing changed. */
int ga_native_release_locked(ga_space *sp, ga_block *b);

/* ---- Handles and the page cache (pages.c) ---- */

/* Room in the page cache for n more granules. */
int ga_pages_room_locked(ga_space *sp, size_t n);
/* Puts a granule into the page cache. */
int ga_pages_put_locked(ga_space *sp, ga_granule g);
/* Takes the last granule put into the cache (pre: ncache > 0). */
ga_granule ga_pages_take_locked(ga_space *sp);
/* Creates a handle of `size` bytes (a multiple of the granularity) for `size_class`;
 * all its granules go into the page cache. */
int ga_pages_create_locked(ga_space *sp, size_t size, int size_class);
/* A granule of handle h was mapped into (mapped) or unmapped from a segment
 * of `size_class`: reserved_bytes per pool follows it. */
void ga_pages_attribute_locked(ga_space *sp, const ga_handle *h, int size_class, int mapped);
/* Bytes of the page cache whose handles were created by `size_class`. */
size_t ga_pages_cached_bytes_locked(const ga_space *sp, int size_class);
/* Releases handles whose granules are all cached while the cache holds more
 * than `keep` bytes. The code of the first release that failed, if any (that
 * handle stays cached). */
int ga_pages_release_locked(ga_space *sp, size_t keep);

/* ---- Expandable segments (expandable.c) ---- */

/* Reserves a new expandable segment for (priv, size_class, stream), of the
 * reservation size or min_size rounded up to a granule if larger; it is one
 * UNMAPPED block. `priv` is a private pool or NULL (a tag, never read). */
int ga_expandable_new_locked(ga_space *sp, struct ga_private *priv, int size_class, ga_stream_t stream,
                             size_t min_size, ga_segment **out);
/* Gives an expandable segment that is one UNMAPPED block back (unreserve). */
int ga_expandable_release_locked(ga_space *sp, ga_segment *seg);
/* Maps granules from the page cache (pre: it holds enough) behind every
 * UNMAPPED block from `run` up to `hi` rounded up to a granule, a run of one
 * handle with each map call; with `extend`, the rest of the last run's handle
 * too while the block has room (a free tail). Pre: run's predecessor is not
 * FREE, and every FREE block from run to there (and one starting at that end)
 * is in no tree. Mapped memory becomes FREE and merges with its FREE
 * neighbours: on success `run` is one FREE block reaching at least hi. On
 * failure, a prefix may be mapped (FREE, in no tree) and the rest is
 * UNMAPPED; nothing is half-mapped. */
int ga_expandable_map_locked(ga_space *sp, ga_block *run, uintptr_t hi, int extend);
/* Unmaps granules [g0, g1) (absolute granule numbers, within what
 * ga_expandable_movable_locked gives) of FREE block b (in no tree) into the
 * page cache; the parts of their mappings outside are mapped again (or, if
 * that fails, unmapped too). The caller knows b's stream is past its free. On
 * success *front and *back are the FREE parts of b before and after (NULL
 * when empty), in no tree, and the middle is UNMAPPED. On failure b is
 * unchanged. */
int ga_expandable_unmap_locked(ga_space *sp, ga_block *b, size_t g0, size_t g1, ga_block **front,
                               ga_block **back);
/* Maps the last cached granule at granule i of seg (pre: ncache > 0, granule i
 * not mapped), gives the peers access, and copies `host` in when not NULL.
 * If a step fails the granule goes back to the cache; if even the unmap that
 * undoes it fails, it stays mapped (counted) and *stuck is set: the caller
 * must finish it later (ga_expandable_fill_locked) before anyone uses it. */
int ga_expandable_map_granule_locked(ga_space *sp, ga_segment *seg, size_t i, const void *host, int *stuck);
/* The steps after the map for granule i of seg: peers' access, then the copy
 * of `host` (when not NULL). */
int ga_expandable_fill_locked(ga_space *sp, ga_segment *seg, size_t i, const void *host);
/* The mapping holding granule i of seg: its first granule and length; 0 when i
 * is not mapped. */
int ga_expandable_mapping_locked(const ga_segment *seg, size_t i, size_t *start, size_t *n);
/* The mapping starting at granule i of seg goes to sleep: granule j's bytes are
 * copied to hosts[j] when not NULL, then it is unmapped into the page cache
 * and its granules are marked asleep. */
int ga_expandable_sleep_locked(ga_space *sp, ga_segment *seg, size_t i, void *const *hosts);
/* The granules [*g0, *g1) (absolute numbers) of FREE block b that can be
 * unmapped: its whole granules, less a mapping that reaches past them at
 * either end. 0 when there are none. */
int ga_expandable_movable_locked(const ga_space *sp, const ga_block *b, size_t *g0, size_t *g1);
/* Grants access to `devices` (this device first) on every mapped range;
 * *ranges counts the ranges granted. */
int ga_expandable_grant_locked(ga_space *sp, const int *devices, int n, size_t *ranges);
/* Adds `peer` to the devices given access, now on every mapped range and
 * on every granule mapped later. On failure the previous set is restored
 * (best effort) and the code returned. With nothing mapped the driver has not
 * seen the peer yet: if the first grant that names it is refused as an
 * argument error (GA_DEV_EINVAL), the peers not yet granted on real memory
 * are turned off and the error text says so; that grant fails, later ones
 * leave them out. */
int ga_expandable_access_add_locked(ga_space *sp, int peer);
/* Grants the current set again everywhere; clears sp->regrant. */
int ga_expandable_regrant_locked(ga_space *sp);

/* ---- The unmapped index (unmapped.c) ----
 * Each expandable segment keeps its UNMAPPED blocks in an index by address,
 * with s->unmapped_bytes and s->nunmapped their sum and number; tiles.c and
 * expandable.c keep it as blocks become unmapped, mapped, split or merged.
 * Each entry bounds its reach: the bytes from the FREE blocks just before it
 * (itself when none) to the end of the run of FREE and UNMAPPED blocks that
 * holds it. A bound may be too high (a FREE block of the run was cut since),
 * never too low: the policy reports a FREE block that grew or appeared next
 * to unmapped space with ga_unmapped_touch_locked. */

/* u (UNMAPPED, its neighbours final) enters / leaves its segment's index. */
void ga_unmapped_add_locked(ga_block *u);
void ga_unmapped_remove_locked(ga_block *u);
/* b (FREE) grew or became free: the bounds of the unmapped blocks of its run
 * are set to their reach (nothing when b's segment has no unmapped block). */
void ga_unmapped_touch_locked(ga_block *b);
/* The first block of the lowest-address run of FREE and UNMAPPED blocks of seg
 * that holds an UNMAPPED block and at least `size` bytes; NULL when none.
 * O(log n) amortised: stale bounds it meets are tightened. */
ga_block *ga_unmapped_find_run_locked(ga_segment *seg, size_t size);
/* The first UNMAPPED block of seg at or after address `from` whose bound
 * is at least `size`, or NULL; a bound may be too high, so the caller tests
 * what it needs of the block. Changes nothing (no bound is tightened):
 * O(log n) plus the entries whose bound is at least size that the caller
 * passes over. */
const ga_block *ga_unmapped_first_from(const ga_segment *seg, uintptr_t from, size_t size);
/* u's exact reach (a walk over its run). */
size_t ga_unmapped_reach(const ga_block *u);
/* Calls fn on each UNMAPPED block of seg in address order until it returns
 * non-zero; returns that, or 0. fn changes nothing of the index. */
int ga_unmapped_walk(const ga_segment *seg, int (*fn)(const ga_block *, void *), void *arg);
/* For ga_check: whether seg's index is ordered by address, a heap, its maxima
 * right and every entry an UNMAPPED block of seg; *n and *bytes count them. */
int ga_unmapped_valid(const ga_segment *seg, size_t *n, size_t *bytes);
/* The entry at ptr in seg's index, or NULL. */
const ga_block *ga_unmapped_lookup(const ga_segment *seg, uintptr_t ptr);

/* ---- The layer as a whole (tiles.c) ---- */

/* Sets up the segment layer of a new allocator for a device of `total`
 * bytes; its owner has set sp's mu, dev, stats, history and cfg (the rest is
 * zero): expandable segments reserve 1.125 x total (as PyTorch), rounded up
 * to a multiple of `page` bytes (itself rounded up to the granularity).
 * GA_DEV_EINVAL when one of those sizes does not fit in a size_t. */
int ga_space_init_locked(ga_space *sp, size_t total, size_t page);
/* Gives every mapping, reservation, handle and segment back to the device and
 * frees every record (live allocations included); what the owner lent stays. */
void ga_space_teardown_locked(ga_space *sp);

#endif /* GA_SEGMENT_H */
