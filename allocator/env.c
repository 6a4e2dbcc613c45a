/* env.c — the configuration PyTorch's entry points take from the environment.
 *
 * GARDENALLOC_CONF wins and is used as it is (the parser refuses anything
 * wrong in it). Without it, PyTorch's own variable is honoured, so that the
 * settings people already export for PyTorch keep working: the first of
 * PYTORCH_CUDA_ALLOC_CONF and PYTORCH_ALLOC_CONF that is set. It is read as
 * PyTorch reads it: its keys mean what they mean in PyTorch, and what PyTorch
 * refuses is refused — an unrecognized key (a typo, or a key of gardenalloc's
 * own), a bad value, another backend — with one message, so that a job never
 * runs with settings it did not ask for. Keys of PyTorch that gardenalloc
 * does not apply (compatibility keys, keys of recent releases) are named on
 * stderr once per process; the names in GARDENALLOC_IGNORE_KEYS are let
 * through without effect (a key a newer PyTorch adds).
 *
 * Beside the public API's (ga_config_key, ga_config_validate), it uses the
 * parser's messages for unknown keys (config.h); torch_abi.c makes it public
 * as ga_torch_config.
 */
#include "env.h"

#include <ctype.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "gardenalloc.h"
#include "text.h"

typedef struct sink {
  char *s;
  size_t cap, n;
} sink;

static void put(sink *o, const char *fmt, ...) {
  if (!o->s || !o->cap) return;
  va_list ap;
  va_start(ap, fmt);
  int k = o->n < o->cap ? vsnprintf(o->s + o->n, o->cap - o->n, fmt, ap) : 0;
  va_end(ap);
  if (k > 0) o->n = o->n + (size_t)k < o->cap ? o->n + (size_t)k : o->cap - 1;
}

static void note(sink *o, const char *var, const char *fmt, ...) {
  if (!o->s || !o->cap) return;
  put(o, "gardenalloc: %s: ", var);
  va_list ap;
  va_start(ap, fmt);
  int k = o->n < o->cap ? vsnprintf(o->s + o->n, o->cap - o->n, fmt, ap) : 0;
  va_end(ap);
  if (k > 0) o->n = o->n + (size_t)k < o->cap ? o->n + (size_t)k : o->cap - 1;
  put(o, "\n");
}

/* The option table's entry for `key` (n bytes), or -1. */
static int find_key(const char *key, size_t n) {
  const char *name;
  for (int i = 0; ga_config_key(i, &name, NULL, NULL, NULL, NULL); i++)
    if (strlen(name) == n && memcmp(name, key, n) == 0) return i;
  return -1;
}

/* The reason a key has no effect ("gardenalloc holds its lock ..."), when the
 * table says it is accepted only for compatibility (directly or as an alias). */
static const char *compat_reason(int i) {
  static const char compat[] = "accepted for compatibility", alias[] = "alias of ";
  for (int depth = 0; depth < 4 && i >= 0; depth++) {
    const char *doc;
    ga_config_key(i, NULL, NULL, NULL, NULL, &doc);
    if (strncmp(doc, compat, sizeof compat - 1) == 0) {
      const char *r = doc + sizeof compat - 1;
      while (*r == ';' || *r == ' ') r++;
      return *r ? r : "it has no effect";
    }
    if (strncmp(doc, alias, sizeof alias - 1) != 0) return NULL;
    const char *target = doc + sizeof alias - 1;
    size_t n = 0;
    while (target[n] && !isspace((unsigned char)target[n]) && target[n] != ',' && target[n] != ';') n++;
    i = find_key(target, n);
  }
  return NULL;
}

/* Keys of recent PyTorch releases that gardenalloc's table does not have:
 * accepted, with a note that they have no effect. */
static const char *const pytorch_only[] = {
    "throw_on_cudamalloc_oom",   "pinned_free_catch_all",       "pinned_max_round_threshold_mb",
    "pinned_max_cached_size_mb", "expandable_segments_reserve", "expandable_segments_reserve_by_class"};

/* Is the n bytes at key one of the comma-separated names in `list`? */
static int listed(const char *list, const char *key, size_t n) {
  for (const char *p = list; p && *p;) {
    while (*p == ',' || isspace((unsigned char)*p)) p++;
    const char *e = p;
    while (*e && *e != ',' && !isspace((unsigned char)*e)) e++;
    if ((size_t)(e - p) == n && n && memcmp(p, key, n) == 0) return 1;
    p = e;
  }
  return 0;
}

static int pytorch_key(const char *key, size_t n) {
  for (size_t i = 0; i < sizeof pytorch_only / sizeof pytorch_only[0]; i++)
    if (strlen(pytorch_only[i]) == n && memcmp(pytorch_only[i], key, n) == 0) return 1;
  return 0;
}

/* Refuses with a message in err; returns 1. */
static int refuse(sink *err, const char *var, const char *fmt, ...) GA_PRINTF(3, 4);
static int refuse(sink *err, const char *var, const char *fmt, ...) {
  if (err->s && err->cap) {
    err->n = 0;
    put(err, "%s: ", var);
    va_list ap;
    va_start(ap, fmt);
    int k = err->n < err->cap ? vsnprintf(err->s + err->n, err->cap - err->n, fmt, ap) : 0;
    va_end(ap);
    if (k > 0) err->n = err->n + (size_t)k < err->cap ? err->n + (size_t)k : err->cap - 1;
  }
  return 1;
}

int ga_env_translate(const char *var, const char *pytorch, const char *ignore, char *out, size_t outlen,
                     char *notes, size_t noteslen, char *err, size_t errlen) {
  sink o = {out, outlen, 0}, nt = {notes, noteslen, 0}, e = {err, errlen, 0};
  if (out && outlen) out[0] = 0;
  if (notes && noteslen) notes[0] = 0;
  if (err && errlen) err[0] = 0;
  if (!out || outlen < 2) return -1;
  char item[512], trial[1024];
  const char *p = pytorch ? pytorch : "";
  while (*p) {
    /* One top-level item: up to a ',' outside brackets, whitespace dropped
     * (PyTorch's lexer drops it too). */
    size_t n = 0;
    int depth = 0, too_long = 0;
    for (; *p && !(*p == ',' && depth == 0); p++) {
      if (isspace((unsigned char)*p)) continue;
      if (*p == '[') depth++;
      if (*p == ']' && depth > 0) depth--;
      if (n + 1 < sizeof item)
        item[n++] = *p;
      else
        too_long = 1;
    }
    if (*p == ',') p++;
    item[n] = 0;
    if (n == 0) continue;
    if (too_long)
      return refuse(&e, var, "an option longer than %zu characters ('%.40s...')", sizeof item - 1, item);
    const char *colon = strchr(item, ':');
    size_t klen = colon ? (size_t)(colon - item) : n;
    if (klen == 0) return refuse(&e, var, "'%s' is not a key:value option", item);
    const char *val = colon ? colon + 1 : "";
    int k = find_key(item, klen);
    const char *origin = NULL;
    if (k >= 0) ga_config_key(k, NULL, NULL, NULL, &origin, NULL);
    if (listed(ignore, item, klen)) {
      note(&nt, var, "ignoring '%.*s' (named in GARDENALLOC_IGNORE_KEYS)", (int)klen, item);
      continue;
    }
    if (klen == 7 && memcmp(item, "backend", 7) == 0) {
      /* PyTorch's backend chooses its own allocator; native is the one
       * gardenalloc stands in for. */
      if (strcmp(val, "cudaMallocAsync") == 0 || strcmp(val, "hipMallocAsync") == 0)
        note(&nt, var, "ignoring backend:%s: gardenalloc is the allocator here", val);
      else if (strcmp(val, "native") != 0)
        return refuse(&e, var, "backend:%s: PyTorch's backends are native and cudaMallocAsync", val);
      continue;
    }
    if (k < 0 && pytorch_key(item, klen)) {
      note(&nt, var, "%.*s has no effect in gardenalloc: a key of PyTorch that gardenalloc does not apply",
           (int)klen, item);
      continue;
    }
    if (k < 0) {
      const char *eq = memchr(item, '=', klen), *close = ga_config_closest_key(item, klen);
      if (eq && find_key(item, (size_t)(eq - item)) >= 0)
        return refuse(&e, var,
                      "unrecognized key '%.*s': the separator between a key and its value is ':' (write "
                      "%.*s:%.*s)",
                      (int)klen, item, (int)(eq - item), item, (int)(klen - (size_t)(eq - item) - 1), eq + 1);
      return refuse(&e, var,
                    "unrecognized key '%.*s'%s%s%s, which PyTorch refuses too; `ga-bench keys` lists the "
                    "keys. A key of a newer PyTorch that gardenalloc does not know is let through, without "
                    "effect, by GARDENALLOC_IGNORE_KEYS=%.*s",
                    (int)klen, item, close ? " (did you mean '" : "", close ? close : "", close ? "'?)" : "",
                    (int)klen, item);
    }
    if (strcmp(origin, "pytorch") != 0)
      return refuse(&e, var,
                    "'%.*s' is a key of gardenalloc's own, which PyTorch refuses in its variable: set it in "
                    "GARDENALLOC_CONF",
                    (int)klen, item);
    if (!colon) return refuse(&e, var, "'%s' has no value (write %s:VALUE)", item, item);
    int t = snprintf(trial, sizeof trial, "%s%s%s", out, out[0] ? "," : "", item);
    if (t < 0 || (size_t)t >= sizeof trial || (size_t)t >= outlen)
      return refuse(&e, var, "the configuration is longer than %zu characters", outlen - 1);
    if (ga_config_validate(trial) != GA_OK) {
      const char *why = ga_last_error();
      static const char prefix[] = "invalid GARDENALLOC_CONF option ";
      if (strncmp(why, prefix, sizeof prefix - 1) == 0) why += sizeof prefix - 1;
      return refuse(&e, var, "%s", why);
    }
    const char *reason = compat_reason(k);
    if (reason) note(&nt, var, "%.*s has no effect in gardenalloc: %s", (int)klen, item, reason);
    o.n = 0;
    put(&o, "%s", trial);
  }
  return 0;
}

static pthread_once_t once = PTHREAD_ONCE_INIT;
static char conf_buf[1024];
static char conf_error[GA_CONFIG_ERR_LEN + 256];
static const char *conf_ptr; /* NULL: no variable is set (the defaults), or refused */
static const char *conf_source = "defaults";

static void compute(void) {
  const char *own = getenv("GARDENALLOC_CONF");
  const char *vars[] = {"PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"};
  const char *var = NULL, *pt = NULL;
  for (size_t i = 0; i < sizeof vars / sizeof vars[0] && !pt; i++)
    if ((pt = getenv(vars[i]))) var = vars[i];
  if (own) {
    snprintf(conf_buf, sizeof conf_buf, "%s", own);
    conf_ptr = strlen(own) < sizeof conf_buf ? conf_buf : own; /* never truncate a strict string */
    conf_source = "GARDENALLOC_CONF";
    if (pt && *pt)
      fprintf(stderr, "gardenalloc: GARDENALLOC_CONF is set, so %s (\"%s\") is not used\n", var, pt);
    return;
  }
  if (!pt) return;
  char notes[4096];
  conf_source = var;
  if (ga_env_translate(var, pt, getenv("GARDENALLOC_IGNORE_KEYS"), conf_buf, sizeof conf_buf, notes,
                       sizeof notes, conf_error, sizeof conf_error))
    return; /* every caller gets the refusal: ga_torch_config, each allocator creation */
  if (notes[0]) fputs(notes, stderr);
  conf_ptr = conf_buf;
}

const char *ga_env_conf(const char **source) {
  pthread_once(&once, compute);
  if (source) *source = conf_source;
  if (conf_error[0]) return NULL;
  return conf_ptr ? conf_ptr : "";
}

const char *ga_env_error(void) {
  pthread_once(&once, compute);
  return conf_error;
}
