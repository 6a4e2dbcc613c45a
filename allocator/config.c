/* config.c — parser for GARDENALLOC_CONF / the create-time string.
 *
 * The grammar is PYTORCH_CUDA_ALLOC_CONF's: "key:value,key:value", a list
 * value is "[a:b,c:d]", whitespace is dropped, booleans are exactly True or
 * False. Unlike recent PyTorch, every separator is checked. The parse works on
 * a copy of the defaults and only copies it out when the whole string is
 * valid, so nothing is half-applied.
 */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "errors.h"

#define MiB ((size_t)1 << 20)

/* ---- Tokens ---- */

typedef struct tok {
  const char *s;
  size_t n;
} tok;

typedef struct lexer {
  tok t[256];
  size_t n, i;
} lexer;

static int is_sep(char c) { return c == ',' || c == ':' || c == '[' || c == ']'; }

static int lex(const char *str, lexer *lx, char *err, size_t errlen) {
  lx->n = lx->i = 0;
  for (const char *p = str; *p;) {
    if (isspace((unsigned char)*p)) {
      p++;
      continue;
    }
    if (lx->n == sizeof lx->t / sizeof lx->t[0]) {
      snprintf(err, errlen, "configuration string too long (more than %zu tokens)", lx->n);
      return GA_DEV_EINVAL;
    }
    const char *b = p;
    if (is_sep(*p))
      p++;
    else
      while (*p && !is_sep(*p) && !isspace((unsigned char)*p)) p++;
    lx->t[lx->n++] = (tok){b, (size_t)(p - b)};
  }
  return 0;
}

static int tok_is(const tok *t, const char *str) {
  return t->n == strlen(str) && memcmp(t->s, str, t->n) == 0;
}

/* Copies a token into a NUL-terminated buffer; one longer than 63 chars is
 * shown by its start and its length, never cut without saying so. */
static const char *tok_str(const tok *t, char buf[64]) {
  if (t->n > 63) {
    unsigned n = t->n < 999999999 ? (unsigned)t->n : 999999999u;
    snprintf(buf, 64, "%.32s... (%u characters)", t->s, n);
    return buf;
  }
  memcpy(buf, t->s, t->n);
  buf[t->n] = 0;
  return buf;
}

static const tok *next(lexer *lx) { return lx->i < lx->n ? &lx->t[lx->i++] : NULL; }

/* ---- Value parsers ---- */

typedef struct ctx {
  lexer *lx;
  ga_config *c;
  char key[64];
  char *err;
  size_t errlen;
} ctx;

static int fail(ctx *x, const char *fmt, ...) {
  va_list ap;
  int n = snprintf(x->err, x->errlen, "invalid GARDENALLOC_CONF option %s: ", x->key);
  va_start(ap, fmt);
  if (n >= 0 && (size_t)n < x->errlen) vsnprintf(x->err + n, x->errlen - (size_t)n, fmt, ap);
  va_end(ap);
  return GA_DEV_EINVAL;
}

/* The value token; refuses a missing value or a separator. */
static int value(ctx *x, const tok **out, const char *allowed) {
  const tok *v = next(x->lx);
  if (!v || (v->n == 1 && is_sep(v->s[0]))) return fail(x, "missing value (allowed: %s)", allowed);
  *out = v;
  return 0;
}

/* What parse_u64 found. */
enum { NUMBER = 0, NOT_DIGITS = 1, TOO_LARGE = 2 };

/* A whole number in decimal digits: NUMBER with *out set, NOT_DIGITS for
 * anything else, TOO_LARGE for a value past 2^64 - 1 (however many digits). */
static int parse_u64(const tok *v, uint64_t *out) {
  uint64_t n = 0;
  int over = 0;
  if (v->n == 0) return NOT_DIGITS;
  for (size_t i = 0; i < v->n; i++) {
    if (!isdigit((unsigned char)v->s[i])) return NOT_DIGITS;
    unsigned d = (unsigned)(v->s[i] - '0');
    if (n > (UINT64_MAX - d) / 10)
      over = 1;
    else
      n = n * 10 + d;
  }
  if (over) return TOO_LARGE;
  *out = n;
  return NUMBER;
}

/* The token as written, for a message (long ones shortened). */
static const char *shown(const tok *v, char buf[64]) {
  if (v->n <= 40) return tok_str(v, buf);
  snprintf(buf, 64, "%.24s... (%zu digits)", v->s, v->n);
  return buf;
}

/* The one rule for integer settings: a whole number from lo to hi, in MiB
 * when `mib`. A value out of range, whatever its size, is "too small" or "too
 * large"; anything that is not digits is "not a whole number". */
static int value_uint(ctx *x, uint64_t lo, uint64_t hi, int mib, const char *allowed, uint64_t *out) {
  const tok *v = NULL;
  char buf[64];
  uint64_t n = 0;
  if (value(x, &v, allowed)) return GA_DEV_EINVAL;
  int rc = parse_u64(v, &n);
  if (rc == NOT_DIGITS)
    return fail(x, "'%s' is not a whole number%s (allowed: %s)", tok_str(v, buf), mib ? " of MiB" : "",
                allowed);
  if (rc || n > hi)
    return fail(x, "%s%s is too large (allowed: %s)", shown(v, buf), mib ? " MiB" : "", allowed);
  if (n < lo) return fail(x, "%s%s is too small (allowed: %s)", shown(v, buf), mib ? " MiB" : "", allowed);
  *out = n;
  return 0;
}

/* A size in MiB from lo to hi MiB, as bytes. */
static int value_mib(ctx *x, uint64_t lo, uint64_t hi, size_t *bytes, const char *allowed) {
  uint64_t mb = 0;
  if (value_uint(x, lo, hi, 1, allowed, &mb)) return GA_DEV_EINVAL;
  *bytes = (size_t)mb * MiB; /* hi <= GA_CONFIG_MAX_MIB: it fits */
  return 0;
}

static int value_bool(ctx *x, int *out) {
  const tok *v = NULL;
  char buf[64];
  if (value(x, &v, "True or False")) return GA_DEV_EINVAL;
  if (tok_is(v, "True"))
    *out = 1;
  else if (tok_is(v, "False"))
    *out = 0;
  else
    return fail(x, "'%s' is not a boolean (allowed: True or False)", tok_str(v, buf));
  return 0;
}

static int value_double(ctx *x, double *out, const char *allowed) {
  const tok *v = NULL;
  char buf[64], *end;
  if (value(x, &v, allowed)) return GA_DEV_EINVAL;
  tok_str(v, buf);
  errno = 0;
  double d = strtod(buf, &end);
  if (*end || errno || !isfinite(d) || v->n > 63)
    return fail(x, "'%s' is not a number (allowed: %s)", buf, allowed);
  *out = d;
  return 0;
}

static int is_pow2(uint64_t v) { return v && !(v & (v - 1)); }
static size_t log2u(uint64_t v) {
  size_t r = 0;
  while (v >>= 1) r++;
  return r;
}

/* ---- One parser per option ---- */

static int opt_backend(ctx *x) {
  const tok *v = NULL;
  char buf[64];
  const char *allowed = "auto, cuda, sim, native";
  if (value(x, &v, allowed)) return GA_DEV_EINVAL;
  tok_str(v, buf);
  if (tok_is(v, "native")) strcpy(buf, "auto");
  if (strcmp(buf, "auto") && strcmp(buf, "cuda") && strcmp(buf, "sim")) {
    if (tok_is(v, "cudaMallocAsync") || tok_is(v, "hipMallocAsync"))
      return fail(x, "'%s' is not supported: gardenalloc is itself the caching allocator (allowed: %s)", buf,
                  allowed);
    return fail(x, "unknown backend '%s' (allowed: %s)", buf, allowed);
  }
  strcpy(x->c->backend, buf);
  return 0;
}

#define MAX_MIB    GA_STR(GA_CONFIG_MAX_MIB_VALUE)
#define GA_STR_(x) #x
#define GA_STR(x)  GA_STR_(x)

static int opt_sim_capacity_mb(ctx *x) {
  return value_mib(x, 2, GA_CONFIG_MAX_SIM_MIB, &x->c->sim_capacity,
                   "an integer >= 2 and <= " GA_STR(GA_CONFIG_MAX_SIM_MIB_VALUE) " (16 TiB)");
}

static int opt_sim_devices(ctx *x) {
  uint64_t n = 0;
  if (value_uint(x, 1, 64, 0, "an integer from 1 to 64", &n)) return GA_DEV_EINVAL;
  x->c->sim_devices = (int)n;
  return 0;
}

static int opt_sim_cost_table(ctx *x) {
  const tok *v = NULL;
  char buf[64];
  const char *allowed = "blackwell, a100";
  if (value(x, &v, allowed)) return GA_DEV_EINVAL;
  tok_str(v, buf);
  if (strcmp(buf, "blackwell") && strcmp(buf, "a100"))
    return fail(x, "unknown cost table '%s' (allowed: %s)", buf, allowed);
  strcpy(x->c->sim_cost_table, buf);
  return 0;
}

static int opt_sim_scatter_addresses(ctx *x) {
  return value_uint(x, 0, (uint64_t)1 << 32, 0, "an integer from 0 (off) to 2^32",
                    &x->c->sim_scatter_addresses);
}

static int opt_max_split_size_mb(ctx *x) {
  return value_mib(x, 0, GA_CONFIG_MAX_MIB, &x->c->max_split_size,
                   "an integer >= large_segment_size_mb (20) and <= " MAX_MIB);
}
static int opt_max_non_split_rounding_mb(ctx *x) {
  return value_mib(x, 0, GA_CONFIG_MAX_MIB, &x->c->max_non_split_rounding,
                   "an integer >= large_segment_size_mb (20) and <= " MAX_MIB);
}

static int opt_large_segment_size_mb(ctx *x) {
  return value_mib(x, 11, GA_CONFIG_MAX_MIB, &x->c->large_segment_size, "an integer > 10 and <= " MAX_MIB);
}

static int opt_garbage_collection_threshold(ctx *x) {
  double d = 0.0;
  if (value_double(x, &d, "a number in (0.0, 1.0)")) return GA_DEV_EINVAL;
  if (!(d > 0.0 && d < 1.0)) return fail(x, "%g is out of range (allowed: a number in (0.0, 1.0))", d);
  x->c->gc_threshold = d;
  return 0;
}

static int opt_per_process_memory_fraction(ctx *x) {
  double d = 0.0;
  if (value_double(x, &d, "a number in [0.0, 1.0]")) return GA_DEV_EINVAL;
  if (!(d >= 0.0 && d <= 1.0)) return fail(x, "%g is out of range (allowed: a number in [0.0, 1.0])", d);
  x->c->memory_fraction = d;
  return 0;
}

/* "N" (a power of 2 for every interval) or "[K:N,...,>:N]" with K a power of
 * 2 in MiB selecting the interval [K MiB, 2K MiB), and N 0 or a power of 2. */
static int opt_roundup_power2_divisions(ctx *x) {
  const char *allowed =
      "a power of 2 up to " GA_STR(GA_CONFIG_MAX_DIVISIONS_VALUE) ", or a list [MiB:N,...,>:N] of power-of-2 MiB "
      "keys and N = 0 or such a power of 2";
  const tok *v = NULL;
  char buf[64];
  uint64_t n;
  size_t *tab = x->c->roundup_divisions;
  v = next(x->lx);
  if (!v || (v->n == 1 && is_sep(v->s[0]) && !tok_is(v, "[")))
    return fail(x, "missing value (allowed: %s)", allowed);
  if (!tok_is(v, "[")) {
    int rc = parse_u64(v, &n);
    if (rc == TOO_LARGE || (!rc && n > GA_CONFIG_MAX_DIVISIONS))
      return fail(x, "%s divisions is too large (allowed: %s)", shown(v, buf), allowed);
    if (rc || !is_pow2(n))
      return fail(x, "'%s': the divisions have to be a power of 2 (allowed: %s)", tok_str(v, buf), allowed);
    for (size_t i = 0; i < GA_ROUNDUP_INTERVALS; i++) tab[i] = (size_t)n;
    return 0;
  }
  size_t last = 0;
  int first = 1;
  for (;;) {
    const tok *k = next(x->lx), *colon = next(x->lx), *d = next(x->lx), *sep = next(x->lx);
    if (!k || !colon || !d || !sep || !tok_is(colon, ":"))
      return fail(x, "malformed list (allowed: %s)", allowed);
    int rc = parse_u64(d, &n);
    if (rc == TOO_LARGE || (!rc && n > GA_CONFIG_MAX_DIVISIONS))
      return fail(x, "%s divisions is too large (allowed: %s)", shown(d, buf), allowed);
    if (rc || (n != 0 && !is_pow2(n)))
      return fail(x, "'%s': the divisions have to be a power of 2 or 0 to disable roundup", tok_str(d, buf));
    if (tok_is(k, ">")) {
      for (size_t i = last + 1; i < GA_ROUNDUP_INTERVALS; i++) tab[i] = (size_t)n;
    } else {
      uint64_t mb;
      if (parse_u64(k, &mb) || !is_pow2(mb) || log2u(mb) >= GA_ROUNDUP_INTERVALS)
        return fail(x,
                    "interval '%s': the intervals have to be a power of 2 MiB from 1 to 32768 (allowed: %s)",
                    tok_str(k, buf), allowed);
      size_t idx = log2u(mb);
      if (first)
        for (size_t i = 0; i < idx; i++) tab[i] = (size_t)n;
      first = 0;
      tab[idx] = (size_t)n;
      last = idx;
    }
    if (tok_is(sep, "]")) return 0;
    if (!tok_is(sep, ",")) return fail(x, "malformed list: expected ',' or ']' (allowed: %s)", allowed);
  }
}

static int opt_expandable_segments(ctx *x) { return value_bool(x, &x->c->expandable_segments); }

static int opt_expandable_page_size_mb(ctx *x) {
  const char *allowed = "a positive even integer <= " MAX_MIB;
  if (value_mib(x, 0, GA_CONFIG_MAX_MIB, &x->c->expandable_page_size, allowed)) return GA_DEV_EINVAL;
  if (x->c->expandable_page_size == 0 || x->c->expandable_page_size % (2 * MiB))
    return fail(x, "%zu MiB is not a page size (allowed: %s; pages are made of 2 MiB granules)",
                x->c->expandable_page_size / MiB, allowed);
  return 0;
}

static int opt_expandable_move_pages(ctx *x) {
  const tok *v = NULL;
  char buf[64];
  if (value(x, &v, "when_full, settle or always")) return GA_DEV_EINVAL;
  if (tok_is(v, "settle") || tok_is(v, "always") || tok_is(v, "when_full")) {
    x->c->expandable_move_always = tok_is(v, "always");
    x->c->expandable_move_when_full = tok_is(v, "when_full");
  } else
    return fail(x, "'%s' is not a policy (allowed: when_full, settle or always)", tok_str(v, buf));
  return 0;
}

static int opt_expandable_move_hold(ctx *x) {
  uint64_t n = 0;
  if (value_uint(x, 0, GA_CONFIG_MAX_HOLD, 0, "an integer from 0 to " GA_STR(GA_CONFIG_MAX_HOLD_VALUE), &n))
    return GA_DEV_EINVAL;
  x->c->expandable_move_hold = (size_t)n;
  return 0;
}

static int opt_expandable_policy(ctx *x) {
  const tok *v = NULL;
  char buf[64];
  if (value(x, &v, "gardenalloc or pytorch")) return GA_DEV_EINVAL;
  if (tok_is(v, "gardenalloc"))
    x->c->expandable_pytorch = 0;
  else if (tok_is(v, "pytorch"))
    x->c->expandable_pytorch = 1;
  else
    return fail(x, "'%s' is not a policy (allowed: gardenalloc or pytorch)", tok_str(v, buf));
  return 0;
}

static int opt_expandable_cache_max_mb(ctx *x) {
  return value_mib(x, 0, GA_CONFIG_MAX_MIB, &x->c->expandable_cache_max, "an integer >= 0 and <= " MAX_MIB);
}

static int opt_max_reserved_mb(ctx *x) {
  return value_mib(x, 0, GA_CONFIG_MAX_MIB, &x->c->max_reserved, "an integer >= 0 and <= " MAX_MIB);
}

static int opt_headroom_mb(ctx *x) {
  return value_mib(x, 0, GA_CONFIG_MAX_MIB, &x->c->headroom, "an integer >= 0 and <= " MAX_MIB);
}

static int opt_shareable_handles(ctx *x) {
  const tok *v = NULL;
  char buf[64];
  if (value(x, &v, "none, posix_fd or fabric")) return GA_DEV_EINVAL;
  if (tok_is(v, "none"))
    x->c->shareable_handles = 0;
  else if (tok_is(v, "posix_fd"))
    x->c->shareable_handles = 1;
  else if (tok_is(v, "fabric"))
    x->c->shareable_handles = 2;
  else
    return fail(x, "'%s' is not a handle type (allowed: none, posix_fd or fabric)", tok_str(v, buf));
  return 0;
}

static int opt_deterministic(ctx *x) { return value_bool(x, &x->c->deterministic); }

static int opt_release_lock_on_cudamalloc(ctx *x) { return value_bool(x, &x->c->release_lock_on_cudamalloc); }
static int opt_release_lock_on_hipmalloc(ctx *x) { return value_bool(x, &x->c->release_lock_on_cudamalloc); }
static int opt_graph_capture_record_stream_reuse(ctx *x) {
  return value_bool(x, &x->c->graph_capture_record_stream_reuse);
}
static int opt_pinned_use_cuda_host_register(ctx *x) {
  return value_bool(x, &x->c->pinned_use_host_register);
}
static int opt_pinned_use_hip_host_register(ctx *x) { return value_bool(x, &x->c->pinned_use_host_register); }
static int opt_pinned_use_background_threads(ctx *x) {
  return value_bool(x, &x->c->pinned_use_background_threads);
}

static int opt_pinned_num_register_threads(ctx *x) {
  uint64_t n = 0;
  if (value_uint(x, 1, 128, 0, "a power of 2 <= 128", &n)) return GA_DEV_EINVAL;
  if (!is_pow2(n))
    return fail(x, "'%llu': the number of register threads has to be a power of 2 <= 128",
                (unsigned long long)n);
  x->c->pinned_num_register_threads = (int)n;
  return 0;
}

static int opt_pinned_reserve_segment_size_mb(ctx *x) {
  uint64_t n = 0;
  if (value_uint(x, 1, GA_CONFIG_MAX_MIB, 1, "an integer > 0 and <= " MAX_MIB, &n)) return GA_DEV_EINVAL;
  x->c->pinned_reserve_segment_size_mb = (size_t)n;
  return 0;
}

/* ---- Dispatch ---- */

typedef struct option {
  const char *name, *type, *dflt, *origin, *doc;
  int (*parse)(ctx *);
} option;

static const option options[] = {
#define GA_X(key, type, dflt, origin, doc) {#key, type, dflt, origin, doc, opt_##key},
    GA_OPTIONS(GA_X)
#undef GA_X
};
#define NOPTIONS (sizeof options / sizeof options[0])

/* ---- Unknown keys ---- */

/* The edit distance between a and b (insertions, deletions, substitutions
 * and swaps of neighbours count 1), up to 64 characters each; longer words
 * are "far" (64). */
static size_t distance(const char *a, size_t n, const char *b, size_t m) {
  if (n > 64 || m > 64) return 64;
  size_t d[65][65];
  for (size_t i = 0; i <= n; i++) d[i][0] = i;
  for (size_t j = 0; j <= m; j++) d[0][j] = j;
  for (size_t i = 1; i <= n; i++)
    for (size_t j = 1; j <= m; j++) {
      size_t best = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
      if (d[i - 1][j] + 1 < best) best = d[i - 1][j] + 1;
      if (d[i][j - 1] + 1 < best) best = d[i][j - 1] + 1;
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] && d[i - 2][j - 2] + 1 < best)
        best = d[i - 2][j - 2] + 1;
      d[i][j] = best;
    }
  return d[n][m];
}

/* The option named by the n bytes at str, or NULL. */
static const option *find(const char *str, size_t n) {
  for (size_t i = 0; i < NOPTIONS; i++)
    if (strlen(options[i].name) == n && memcmp(options[i].name, str, n) == 0) return &options[i];
  return NULL;
}

const char *ga_config_closest_key(const char *key, size_t n) {
  const option *best = NULL;
  size_t best_d = SIZE_MAX;
  for (size_t i = 0; i < NOPTIONS; i++) {
    size_t d = distance(key, n, options[i].name, strlen(options[i].name));
    if (d < best_d) best_d = d, best = &options[i];
  }
  return best && best_d <= (n / 3 > 2 ? n / 3 : 2) ? best->name : NULL;
}

void ga_config_unknown_key(const char *key, size_t n, const char *where, char *err, size_t errlen) {
  char shown_key[80];
  if (n <= 64)
    snprintf(shown_key, sizeof shown_key, "%.*s", (int)n, key);
  else
    snprintf(shown_key, sizeof shown_key, "%.40s... (%zu characters)", key, n);
  const char *eq = memchr(key, '=', n);
  if (eq && find(key, (size_t)(eq - key))) {
    snprintf(err, errlen,
             "unrecognized %s key '%s': the separator between a key and its value is ':' (write %.*s:%.*s)",
             where, shown_key, (int)(eq - key), key, (int)(n - (size_t)(eq - key) - 1), eq + 1);
    return;
  }
  const char *best = ga_config_closest_key(key, n);
  if (best) {
    snprintf(err, errlen, "unrecognized %s key '%s': did you mean '%s'? (`ga-bench keys` lists every key)",
             where, shown_key, best);
    return;
  }
  /* Nothing close: every key, in full (the buffer is sized for them). */
  int k = snprintf(err, errlen, "unrecognized %s key '%s' (the keys are", where, shown_key);
  for (size_t i = 0; i < NOPTIONS && k > 0 && (size_t)k < errlen; i++)
    k += snprintf(err + k, errlen - (size_t)k, " %s%s", options[i].name, i + 1 < NOPTIONS ? "," : ")");
}

void ga_config_defaults(ga_config *c) {
  memset(c, 0, sizeof *c);
  c->max_split_size = SIZE_MAX;
  c->large_segment_size = 20 * MiB;
  c->pinned_num_register_threads = 1;
  c->memory_fraction = 1.0;
  strcpy(c->backend, "auto");
  c->sim_capacity = (size_t)81920 * MiB;
  c->expandable_cache_max = 256 * MiB;
  c->expandable_move_when_full = 1; /* expandable_move_pages:when_full */
  c->sim_devices = 1;
  strcpy(c->sim_cost_table, "blackwell");
}

int ga_config_parse(const char *str, ga_config *out, char *err, size_t errlen) {
  lexer lx;
  ga_config c;
  ga_config_defaults(&c);
  if (str && lex(str, &lx, err, errlen)) return GA_DEV_EINVAL;
  ctx x = {.lx = &lx, .c = &c, .err = err, .errlen = errlen};
  while (str && lx.i < lx.n) {
    const tok *k = next(&lx), *colon = next(&lx);
    tok_str(k, x.key);
    const option *o = NULL;
    for (size_t i = 0; i < NOPTIONS; i++)
      if (tok_is(k, options[i].name)) o = &options[i];
    if (!o) {
      ga_config_unknown_key(k->s, k->n, "GARDENALLOC_CONF", err, errlen);
      return GA_DEV_EINVAL;
    }
    if (!colon || !tok_is(colon, ":")) return fail(&x, "expected ':' after the key");
    if (o->parse(&x)) return GA_DEV_EINVAL;
    const tok *sep = next(&lx);
    if (sep && !tok_is(sep, ",")) {
      char buf[64];
      return fail(&x, "expected ',' between options, found '%s'", tok_str(sep, buf));
    }
  }
  for (int i = 0; i < GA_ROUNDUP_INTERVALS; i++) c.any_roundup |= c.roundup_divisions[i] > 1;
  /* Checks that depend on other keys (large_segment_size_mb may come later). */
  if (c.max_non_split_rounding == 0) c.max_non_split_rounding = c.large_segment_size;
  const char *lo_keys[] = {"max_split_size_mb", "max_non_split_rounding_mb"};
  size_t lo_vals[] = {c.max_split_size, c.max_non_split_rounding};
  for (int i = 0; i < 2; i++)
    if (lo_vals[i] < c.large_segment_size) {
      snprintf(err, errlen,
               "invalid GARDENALLOC_CONF option %s: %zu MiB is too small (allowed: an integer >= "
               "large_segment_size_mb, here %zu)",
               lo_keys[i], lo_vals[i] / MiB, c.large_segment_size / MiB);
      return GA_DEV_EINVAL;
    }
  *out = c;
  return 0;
}

int ga_config_option(int i, const char **name, const char **type, const char **dflt, const char **origin,
                     const char **doc) {
  if (i < 0 || (size_t)i >= NOPTIONS) return 0;
  if (name) *name = options[i].name;
  if (type) *type = options[i].type;
  if (dflt) *dflt = options[i].dflt;
  if (origin) *origin = options[i].origin;
  if (doc) *doc = options[i].doc;
  return 1;
}
