/* workloads.c — the built-in workloads of ga-bench.
 *
 * Every generator emits allocate/free events into a trace (ids are unique per
 * allocation), uses its own seeded PRNG, and sizes its work by `scale`:
 * scale 1 is about 10^4 events. Sizes are bytes of fp16 (2 B) or fp32 (4 B)
 * tensors of a model whose shape is given in the comments, so the mix of
 * sizes and lifetimes is the one such a program has.
 */
#include "workloads.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- Emitting events ---- */

typedef struct gen {
  trace *t;
  uint64_t next_id;
  uint64_t rng;
  int oom; /* host out of memory while emitting */
} gen;

static uint64_t rnd(gen *g) { /* splitmix64 */
  uint64_t z = (g->rng += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}
static double unif(gen *g) { return (double)(rnd(g) >> 11) * (1.0 / 9007199254740992.0); }
static uint64_t range(gen *g, uint64_t lo, uint64_t hi) { return lo + rnd(g) % (hi - lo + 1); }

static int emit(gen *g, trace_event e) {
  if (g->t->n == g->t->cap) {
    size_t cap = g->t->cap ? g->t->cap * 2 : 4096;
    trace_event *v = realloc(g->t->ev, cap * sizeof *v);
    if (!v) return g->oom = 1, -1;
    g->t->ev = v;
    g->t->cap = cap;
  }
  g->t->ev[g->t->n++] = e;
  return 0;
}

static uint64_t alloc_on(gen *g, uint64_t size, uint64_t stream) {
  uint64_t id = ++g->next_id;
  emit(g, (trace_event){.id = id, .size = size ? size : 1, .stream = stream});
  return id;
}
static uint64_t alloc(gen *g, uint64_t size) { return alloc_on(g, size, 0); }
static void release(gen *g, uint64_t id) {
  if (id) emit(g, (trace_event){.id = id, .is_free = 1});
}

static int start(gen *g, trace *t, uint64_t seed, const char *name) {
  memset(t, 0, sizeof *t);
  t->path = strdup(name);
  *g = (gen){.t = t, .rng = seed * 0x2545F4914F6CDD1DULL + 1};
  return t->path ? 0 : -1;
}
static int finish(gen *g) {
  if (g->oom) trace_free(g->t);
  return g->oom ? -1 : 0;
}

/* ---- LLM serving: variable prompts, growing KV caches, two streams ----
 * Model: 24 layers, hidden 2048, 16 heads, vocabulary 32000, fp16.
 * KV cache per token = 2 (K and V) x 2048 x 2 B x 24 layers = 192 KiB.
 * Prefill runs on stream 1, decode on stream 2. Requests arrive with prompt
 * lengths from a heavy-tailed distribution (32 to 4096 tokens) and stop after
 * 16 to 512 generated tokens, so they finish out of order. */
static int gen_llm_serving(trace *t, double scale, uint64_t seed) {
  gen g;
  if (start(&g, t, seed, "llm_serving")) return -1;
  enum { LAYERS = 24, HIDDEN = 2048, VOCAB = 32000, MAXREQ = 24 };
  const uint64_t kv_per_token = 2ull * HIDDEN * 2 * LAYERS;
  struct req {
    uint64_t kv, cap, len, left;
  } r[MAXREQ] = {{0}};
  uint64_t weights = alloc(&g, 12ull * HIDDEN * HIDDEN * 2 * LAYERS); /* 2.25 GiB of fp16 weights */
  size_t target = (size_t)(1e4 * scale);
  while (g.t->n < target && !g.oom) {
    /* Admit a request when a slot is free (one in three steps). */
    int slot = -1;
    for (int i = 0; i < MAXREQ && slot < 0; i++)
      if (!r[i].kv) slot = i;
    if (slot >= 0 && range(&g, 0, 2) == 0) {
      uint64_t L = (uint64_t)(32.0 * pow(128.0, unif(&g))); /* 32..4096, log-uniform */
      for (int l = 0; l < LAYERS; l++) {                    /* prefill: activations live for one layer */
        uint64_t qkv = alloc_on(&g, L * 3 * HIDDEN * 2, 1), attn = alloc_on(&g, L * HIDDEN * 2, 1);
        uint64_t mlp = alloc_on(&g, L * 4 * HIDDEN * 2, 1);
        release(&g, qkv);
        release(&g, attn);
        release(&g, mlp);
      }
      uint64_t cap = (L + 64 + 255) / 256 * 256; /* room to grow, in 256-token pages */
      r[slot] = (struct req){alloc_on(&g, cap * kv_per_token, 1), cap, L, range(&g, 16, 512)};
    }
    /* One decode step for every running request, on stream 2. */
    int batch = 0;
    for (int i = 0; i < MAXREQ; i++) batch += r[i].kv != 0;
    if (!batch) continue;
    uint64_t hidden = alloc_on(&g, (uint64_t)batch * HIDDEN * 2 * 4, 2);
    uint64_t logits = alloc_on(&g, (uint64_t)batch * VOCAB * 4, 2);
    release(&g, logits);
    release(&g, hidden);
    for (int i = 0; i < MAXREQ; i++) {
      if (!r[i].kv) continue;
      if (++r[i].len > r[i].cap) { /* the KV cache is full: reallocate 1.5x bigger */
        uint64_t cap = (r[i].cap * 3 / 2 + 255) / 256 * 256, kv = alloc_on(&g, cap * kv_per_token, 2);
        release(&g, r[i].kv);
        r[i].kv = kv;
        r[i].cap = cap;
      }
      if (--r[i].left == 0) {
        release(&g, r[i].kv);
        r[i].kv = 0;
      }
    }
  }
  for (int i = 0; i < MAXREQ; i++) release(&g, r[i].kv);
  release(&g, weights);
  return finish(&g);
}

/* ---- Transformer training with micro-batches of varying sequence length ----
 * Model: 24 layers, hidden 1024, fp16 activations, fp32 master weights and
 * Adam state. Parameters per layer: 12 x 1024^2. Micro-batch 8 sequences of
 * 256 to 2048 tokens (multiples of 128). Forward saves 6 activations per layer
 * (input, qkv, attention output, MLP input, MLP hidden 4h, MLP output);
 * backward frees them in reverse while making temporary gradients. Gradients
 * are allocated at the first backward and kept; optimizer state at the first
 * step. */
static int gen_training(trace *t, double scale, uint64_t seed) {
  gen g;
  if (start(&g, t, seed, "training")) return -1;
  enum { LAYERS = 24, HIDDEN = 1024, BATCH = 8, SAVED = 6 };
  const uint64_t params = 12ull * HIDDEN * HIDDEN;
  uint64_t w[LAYERS], grad[LAYERS] = {0}, adam[LAYERS][2] = {{0}};
  for (int l = 0; l < LAYERS; l++) w[l] = alloc(&g, params * 4);
  size_t target = (size_t)(1e4 * scale);
  while (g.t->n < target && !g.oom) {
    uint64_t tokens = BATCH * 128 * range(&g, 2, 16);
    uint64_t saved[LAYERS][SAVED];
    const uint64_t mult[SAVED] = {1, 3, 1, 1, 4, 1};
    for (int l = 0; l < LAYERS; l++) {
      for (int k = 0; k < SAVED; k++) saved[l][k] = alloc(&g, tokens * HIDDEN * 2 * mult[k]);
      uint64_t scratch = alloc(&g, tokens * HIDDEN * 2 * 2); /* softmax / dropout temporaries */
      release(&g, scratch);
    }
    uint64_t loss = alloc(&g, tokens * 4);
    for (int l = LAYERS - 1; l >= 0; l--) {
      uint64_t dx = alloc(&g, tokens * HIDDEN * 2 * 4); /* gradient of the layer's activations */
      if (!grad[l]) grad[l] = alloc(&g, params * 4);
      for (int k = SAVED - 1; k >= 0; k--) release(&g, saved[l][k]);
      release(&g, dx);
    }
    release(&g, loss);
    for (int l = 0; l < LAYERS; l++) /* optimizer step */
      if (!adam[l][0]) adam[l][0] = alloc(&g, params * 4), adam[l][1] = alloc(&g, params * 4);
  }
  for (int l = 0; l < LAYERS; l++)
    release(&g, grad[l]), release(&g, adam[l][0]), release(&g, adam[l][1]), release(&g, w[l]);
  return finish(&g);
}

/* ---- Diffusion UNet at alternating resolutions ----
 * Latents of 64x64 (512 px images) and 128x128 (1024 px) alternate; batch 2;
 * four levels with 320, 640, 1280, 1280 channels, halving the resolution at
 * each level; fp16. The down path keeps two skip tensors per level for the up
 * path, which frees them as it consumes them. Feature maps of one resolution
 * do not fit the holes the other leaves, which is what fragments memory. */
static int gen_diffusion(trace *t, double scale, uint64_t seed) {
  gen g;
  if (start(&g, t, seed, "diffusion_unet")) return -1;
  const uint64_t ch[4] = {320, 640, 1280, 1280};
  uint64_t weights = alloc(&g, 860ull << 20); /* ~430 M parameters, fp16 */
  size_t target = (size_t)(1e4 * scale);
  for (int step = 0; g.t->n < target && !g.oom; step++) {
    uint64_t side = (step / 4) % 2 ? 128 : 64, batch = 2 + range(&g, 0, 1) * 2;
    uint64_t skip[4][2], x = alloc(&g, batch * 4 * side * side * 2);
    for (int lv = 0; lv < 4; lv++) {
      uint64_t s = side >> lv, fm = batch * ch[lv] * s * s * 2;
      for (int k = 0; k < 2; k++) {
        uint64_t h = alloc(&g, fm), attn = alloc(&g, batch * s * s * 8 * 64 * 2); /* 8 heads x 64 */
        release(&g, attn);
        skip[lv][k] = h;
      }
    }
    for (int lv = 3; lv >= 0; lv--) {
      uint64_t s = side >> lv, fm = batch * ch[lv] * s * s * 2;
      for (int k = 1; k >= 0; k--) {
        uint64_t cat = alloc(&g, fm * 2); /* concatenated with the skip tensor */
        release(&g, skip[lv][k]);
        release(&g, cat);
      }
    }
    release(&g, x);
  }
  release(&g, weights);
  return finish(&g);
}

/* ---- A workspace that grows a little every step, beside steady tensors ----
 * Each step allocates the same 40 tensors of 1 to 64 MiB and frees them, while
 * a workspace (a cuBLAS/cuDNN-style scratch buffer) grows by about 1 % per step:
 * a new, bigger buffer is allocated before the old one is freed. */
static int gen_growing_workspace(trace *t, double scale, uint64_t seed) {
  gen g;
  if (start(&g, t, seed, "growing_workspace")) return -1;
  uint64_t sizes[40], ws_size = 64ull << 20, ws = alloc(&g, ws_size);
  for (int i = 0; i < 40; i++) sizes[i] = range(&g, 1, 64) << 20;
  size_t target = (size_t)(1e4 * scale);
  while (g.t->n < target && !g.oom) {
    uint64_t ids[40];
    for (int i = 0; i < 40; i++) ids[i] = alloc(&g, sizes[i]);
    ws_size += ws_size / 100 + (range(&g, 0, 255) << 10);
    if (ws_size > (6ull << 30)) ws_size = 64ull << 20; /* reset, as a new phase would */
    uint64_t next = alloc(&g, ws_size);
    release(&g, ws);
    ws = next;
    for (int i = 39; i >= 0; i--) release(&g, ids[i]);
  }
  release(&g, ws);
  return finish(&g);
}

/* ---- Heavy-tailed random mix ----
 * Sizes from a Pareto distribution (alpha 0.8, from 4 KiB, capped at 2 GiB),
 * so most requests are small and a few are huge; a random slot is freed or
 * filled at each step, so lifetimes are geometric and about 150 allocations
 * live at once; a quarter of them on a second stream. */
static int gen_random_mix(trace *t, double scale, uint64_t seed) {
  gen g;
  if (start(&g, t, seed, "heavy_tailed_mix")) return -1;
  enum { SLOTS = 300 };
  uint64_t live[SLOTS] = {0};
  size_t target = (size_t)(1e4 * scale);
  while (g.t->n < target && !g.oom) {
    int i = (int)range(&g, 0, SLOTS - 1);
    if (live[i]) {
      release(&g, live[i]);
      live[i] = 0;
    } else {
      double x = 4096.0 / pow(1.0 - unif(&g) * 0.99999999, 1.0 / 0.8);
      uint64_t size = x > (double)(2ull << 30) ? (2ull << 30) : (uint64_t)x;
      live[i] = alloc_on(&g, size, range(&g, 0, 3) == 0 ? 1 : 0);
    }
  }
  for (int i = 0; i < SLOTS; i++) release(&g, live[i]);
  return finish(&g);
}

/* ---- The published PyTorch cases, repeated ----
 * 8 x 16 MiB then 4 x 32 MiB (native: 256 MiB reserved), the reverse order
 * (128 MiB), 2 MiB then 0.5 MiB (22 MiB), 2 MiB then 2 MiB (20 MiB). */
static int gen_pytorch_cases(trace *t, double scale, uint64_t seed) {
  gen g;
  if (start(&g, t, seed, "pytorch_cases")) return -1;
  size_t target = (size_t)(1e4 * scale);
  while (g.t->n < target && !g.oom) {
    uint64_t id[8];
    for (int r = 0; r < 2; r++) {
      uint64_t a = r ? 32 : 16, b = r ? 16 : 32;
      int na = r ? 4 : 8, nb = r ? 8 : 4;
      for (int i = 0; i < na; i++) id[i] = alloc(&g, a << 20);
      for (int i = 0; i < na; i++) release(&g, id[i]);
      for (int i = 0; i < nb; i++) id[i] = alloc(&g, b << 20);
      for (int i = 0; i < nb; i++) release(&g, id[i]);
    }
    uint64_t x = alloc(&g, 2 << 20), y = alloc(&g, 1 << 19);
    release(&g, x), release(&g, y);
    x = alloc(&g, 2 << 20), y = alloc(&g, 2 << 20);
    release(&g, x), release(&g, y);
  }
  return finish(&g);
}

const workload ga_workloads[] = {
    {"llm_serving", "LLM serving: variable prompts, growing KV caches, two streams", gen_llm_serving},
    {"training", "transformer training, micro-batches of varying length", gen_training},
    {"diffusion_unet", "diffusion UNet at alternating resolutions", gen_diffusion},
    {"growing_workspace", "a workspace growing 1 % per step beside steady tensors", gen_growing_workspace},
    {"heavy_tailed_mix", "heavy-tailed random sizes and lifetimes, two streams", gen_random_mix},
    {"pytorch_cases", "the published PyTorch fragmentation cases", gen_pytorch_cases},
};
const size_t ga_nworkloads = sizeof ga_workloads / sizeof ga_workloads[0];

const workload *workload_find(const char *name) {
  for (size_t i = 0; i < ga_nworkloads; i++)
    if (strcmp(ga_workloads[i].name, name) == 0) return &ga_workloads[i];
  return NULL;
}
