/* test_stats.c — PyTorch's memory_stats() keys and meanings. */
#include <stdlib.h>

#include "fixture.h"

TestSuite(stats, .fini = fx_close);

Test(stats, every_metric_follows_a_scenario) {
  fx_open(NULL, GiB);
  void *a = fx_alloc(3 * MiB + 100); /* large: 20 MiB segment, block 3 MiB + 512 */
  void *b = fx_alloc(1000);          /* small: 2 MiB segment, block 1024 */
  ga_stats_t stats = fx_stats();
  cr_assert_eq(stats.allocation[GA_POOL_ALL].current, 2);
  cr_assert_eq(stats.allocation[GA_POOL_SMALL].current, 1);
  cr_assert_eq(stats.allocated_bytes[GA_POOL_LARGE].current, 3 * MiB + 512);
  cr_assert_eq(stats.allocated_bytes[GA_POOL_SMALL].current, 1024);
  cr_assert_eq(stats.requested_bytes[GA_POOL_ALL].current, 3 * MiB + 1100);
  cr_assert_eq(stats.reserved_bytes[GA_POOL_ALL].current, 22 * MiB);
  cr_assert_eq(stats.segment[GA_POOL_ALL].current, 2);
  cr_assert_eq(stats.inactive_split_bytes[GA_POOL_ALL].current, 22 * MiB - 3 * MiB - 512 - 1024);
  cr_assert_eq(stats.num_device_alloc, 2);
  cr_assert_eq(stats.max_split_size, -1);
  fx_free(a);
  stats = fx_stats();
  cr_assert_eq(stats.allocated_bytes[GA_POOL_ALL].current, 1024);
  cr_assert_eq(stats.allocated_bytes[GA_POOL_ALL].peak, 3 * MiB + 512 + 1024);
  cr_assert_eq(stats.allocated_bytes[GA_POOL_ALL].allocated, 3 * MiB + 512 + 1024);
  cr_assert_eq(stats.allocated_bytes[GA_POOL_ALL].freed, 3 * MiB + 512);
  cr_assert_eq(stats.allocation[GA_POOL_LARGE].freed, 1);
  cr_assert_eq(stats.inactive_split[GA_POOL_LARGE].current, 0, "the large segment is whole again");
  fx_free(b);
}

/* inactive_split changes by the net difference of each split or merge, as
 * PyTorch counts it, so its allocated/freed totals are PyTorch's too. */
static void assert_split(int64_t cur, int64_t alloc, int64_t freed, int64_t bcur, int64_t balloc,
                         int64_t bfreed) {
  ga_stats_t stats = fx_stats();
  const ga_stat_t *n = &stats.inactive_split[GA_POOL_LARGE], *b = &stats.inactive_split_bytes[GA_POOL_LARGE];
  cr_assert_eq(n->current, cur);
  cr_assert_eq(n->allocated, alloc);
  cr_assert_eq(n->freed, freed);
  cr_assert_eq(b->current, bcur * MiB);
  cr_assert_eq(b->allocated, balloc * MiB);
  cr_assert_eq(b->freed, bfreed * MiB);
  cr_assert_eq(stats.inactive_split_bytes[GA_POOL_ALL].allocated, balloc * MiB,
               "the aggregate follows the pool");
}

Test(stats, inactive_split_counts_net_changes) {
  fx_open(NULL, GiB);
  void *a = fx_alloc(4 * MiB); /* 20 MiB segment: a new split inactive block of 16 MiB */
  assert_split(1, 1, 0, 16, 16, 0);
  void *b = fx_alloc(4 * MiB); /* that block shrinks by 4 MiB */
  assert_split(1, 1, 0, 12, 16, 4);
  fx_free(b); /* merges with it: still one block, 4 MiB longer */
  assert_split(1, 1, 0, 16, 20, 4);
  fx_free(a); /* the segment is whole: no split block left */
  assert_split(0, 1, 1, 0, 20, 20);
}

Test(stats, reset_peak_and_accumulated) {
  fx_open(NULL, GiB);
  void *a = fx_alloc(50 * MiB);
  fx_free(a);
  cr_assert_eq(ga_reset_peak_stats(fx_a), GA_OK);
  ga_stats_t stats = fx_stats();
  cr_assert_eq(stats.allocated_bytes[GA_POOL_ALL].peak, 0);
  cr_assert_eq(stats.reserved_bytes[GA_POOL_ALL].peak, 50 * MiB, "peak = current");
  cr_assert_eq(ga_reset_accumulated_stats(fx_a), GA_OK);
  stats = fx_stats();
  cr_assert_eq(stats.allocated_bytes[GA_POOL_ALL].allocated, 0);
  cr_assert_eq(stats.allocated_bytes[GA_POOL_ALL].freed, 0);
  cr_assert_eq(stats.num_device_alloc, 0);
  cr_assert_eq(stats.reserved_bytes[GA_POOL_ALL].current, 50 * MiB, "current is kept");
}

Test(stats, json_has_all_122_pytorch_keys_and_device_calls) {
  fx_open(NULL, GiB);
  void *a = fx_alloc(7 * MiB);
  size_t n = ga_stats_json(fx_a, NULL, 0);
  cr_assert_gt(n, 1000);
  char *buf = malloc(n + 1);
  cr_assert_eq(ga_stats_json(fx_a, buf, n + 1), n);
  cr_assert_eq(strlen(buf), n);
  cr_assert_eq(buf[0], '{');
  cr_assert_eq(buf[n - 1], '}');
  int keys = 0;
  for (char *p = buf; (p = strstr(p, "\":")); p++) keys++;
  /* PyTorch's, ours (3 with four metrics and 9 scalars), device calls and time */
  cr_assert_eq(keys, 122 + 3 * 4 + 9 + 2 * GA_CALL_COUNT);
  cr_assert(strstr(buf, "_pages\"") == NULL, "no alias of version 0.1: %s", buf);
  cr_assert(strstr(buf, "\"quarantined_bytes.current\":0,") != NULL, "%s", buf);
  cr_assert(strstr(buf, "\"num_capture_deferred_flushes\":0,") != NULL, "%s", buf);
  cr_assert(strstr(buf, "\"allocated_bytes.all.current\":7340032,") != NULL, "%s", buf);
  cr_assert(strstr(buf, "\"reserved_bytes.large_pool.peak\":20971520,") != NULL);
  cr_assert(strstr(buf, "\"oversize_segments.current\":0,") != NULL);
  cr_assert(strstr(buf, "\"max_split_size\":-1,") != NULL);
  cr_assert(strstr(buf, "\"device_calls.malloc\":1") != NULL);
  char small[16];
  cr_assert_eq(ga_stats_json(fx_a, small, sizeof small), n, "truncation reports the full length");
  cr_assert_eq(strlen(small), sizeof small - 1);
  free(buf);
  fx_free(a);
}

/* ---- The free kept back for the next allocation (policy/block.c) ----
 * A free that the next allocation of its size may take again is kept back
 * instead of merged; anything else completes it first. Two allocators take
 * the same random mallocs and frees; after each of B's frees another entry
 * point is called, which completes any free kept back, so B never reuses
 * one. Every allocation lands at the same place in both, the statistics
 * (peaks, allocated and freed totals) agree wherever they are read, and A
 * did reuse kept frees. */

typedef struct keep_side {
  ga_allocator_t *a;
  uintptr_t bases[256];
  int nbases;
} keep_side;

/* The allocation at p as (segment by order of first use, offset, size). */
static void keep_place(keep_side *k, void *ptr, uint64_t out[3]) {
  uintptr_t p = (uintptr_t)ptr;
  for (const ga_segment *seg = k->a->space.segs; seg; seg = seg->next) {
    if (p < seg->base || p - seg->base >= seg->size) continue;
    int id = 0;
    while (id < k->nbases && k->bases[id] != seg->base) id++;
    if (id == k->nbases) {
      cr_assert(k->nbases < 256);
      k->bases[k->nbases++] = seg->base;
    }
    for (const ga_block *b = seg->head; b; b = b->next)
      if (b->ptr == p) {
        out[0] = (uint64_t)id, out[1] = p - seg->base, out[2] = b->size;
        return;
      }
  }
  cr_assert_fail("%p is in no block", ptr);
}

static void keep_compare(ga_allocator_t *a, ga_allocator_t *b, const char *conf, int event) {
  ga_stats_t sa, sb;
  memset(&sa, 0, sizeof sa);
  memset(&sb, 0, sizeof sb);
  cr_assert_eq(ga_stats(a, &sa), GA_OK);
  cr_assert_eq(ga_stats(b, &sb), GA_OK);
  cr_assert(!memcmp(&sa, &sb, sizeof sa), "conf \"%s\", event %d: statistics differ", conf, event);
}

Test(stats, a_free_kept_back_places_and_counts_as_a_free_made_at_once) {
  static const char *confs[] = {
      "",
      "max_split_size_mb:40,roundup_power2_divisions:4",
      "garbage_collection_threshold:0.6,per_process_memory_fraction:0.9",
      "expandable_segments:True",
      "expandable_segments:True,expandable_policy:pytorch",
      "expandable_segments:True,expandable_move_pages:settle",
      "expandable_segments:True,expandable_page_size_mb:2",
  };
  static const size_t sizes[] = {512,        4096,    4096,     65536,    700 * KiB,
                                 1536 * KiB, 3 * MiB, 12 * MiB, 25 * MiB, 64 * MiB};
  for (size_t c = 0; c < sizeof confs / sizeof *confs; c++) {
    char full[256];
    snprintf(full, sizeof full, "backend:sim,sim_capacity_mb:2048%s%s", confs[c][0] ? "," : "", confs[c]);
    keep_side A = {0}, B = {0};
    cr_assert_eq(ga_create(full, 0, &A.a), GA_OK, "%s", ga_last_error());
    cr_assert_eq(ga_create(full, 0, &B.a), GA_OK, "%s", ga_last_error());
    enum { LIVE = 48 };
    void *pa[LIVE] = {0}, *pb[LIVE] = {0};
    uint64_t rng = 0x9e3779b97f4a7c15ULL + c, kept = 0, reused = 0;
    size_t sz[LIVE] = {0}, last_size = 4096;
    ga_stream_t st_of[LIVE] = {0}, last_stream = NULL;
    for (int e = 0; e < 6000; e++) {
      rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
      int slot = (int)((rng >> 33) % LIVE);
      void *kept_ptr = A.a->pol.kept ? (void *)A.a->pol.kept->ptr : NULL;
      if (pa[slot]) {
        last_size = sz[slot], last_stream = st_of[slot];
        cr_assert_eq(ga_free(A.a, pa[slot]), GA_OK);
        cr_assert_eq(ga_free(B.a, pb[slot]), GA_OK);
        (void)ga_get_memory_fraction(B.a); /* completes B's kept free */
        kept += A.a->pol.kept != NULL;
        pa[slot] = pb[slot] = NULL;
      } else {
        /* Mostly the size just freed, on one of two streams. */
        size_t size = sizes[(rng >> 40) % (sizeof sizes / sizeof *sizes)] - ((rng >> 50) & 7) * 64;
        ga_stream_t stream = (ga_stream_t)(uintptr_t)((rng >> 60) & 1);
        if ((rng >> 56) & 1) size = last_size + ((rng >> 44) & 1) * 64, stream = last_stream;
        sz[slot] = size, st_of[slot] = stream;
        ga_status_t st = ga_malloc(A.a, size, stream, &pa[slot]);
        cr_assert_eq(ga_malloc(B.a, size, stream, &pb[slot]), st, "conf \"%s\", event %d", confs[c], e);
        if (st == GA_OK) {
          uint64_t qa[3], qb[3];
          keep_place(&A, pa[slot], qa);
          keep_place(&B, pb[slot], qb);
          cr_assert(!memcmp(qa, qb, sizeof qa), "conf \"%s\", event %d: placed differently", confs[c], e);
          reused += kept_ptr && pa[slot] == kept_ptr;
        }
      }
      if ((rng >> 20) % 16 == 0) keep_compare(A.a, B.a, confs[c], e);
    }
    keep_compare(A.a, B.a, confs[c], -1);
    cr_assert_eq(ga_check(A.a), 0);
    cr_assert_eq(ga_check(B.a), 0);
    if (c < 6) /* not with pages of one granule under gardenalloc's policy, which weighs the best fits */
      cr_assert(reused > 100 && kept > reused, "conf \"%s\": %llu frees kept back, %llu reused", confs[c],
                (unsigned long long)kept, (unsigned long long)reused);
    else
      cr_assert_eq(kept, 0);
    ga_destroy(A.a);
    ga_destroy(B.a);
  }
}
