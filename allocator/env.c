/* env.c — the configuration PyTorch's entry points take from the environment.
 *
 * GARDENALLOC_CONF wins and is used as it is (the parser refuses anything
 * wrong in it). Without it, PyTorch's own variable is honoured, so that the
 * settings people already export for PyTorch keep working: the first of
 * PYTORCH_CUDA_ALLOC_CONF and PYTORCH_ALLOC_CONF that is set. Its PyTorch keys
 * mean what they mean in PyTorch; everything else in it — a key gardenalloc
 * accepts only for compatibility, an unknown key, gardenalloc's own keys, a
 * value the parser refuses — is named on stderr once per process, and only
 * the compatibility keys are kept. A job that ran under PyTorch with that
 * variable therefore starts under gardenalloc too.
 *
 * A leaf: it sees the option table and the parser only through the public
 * API (ga_config_key, ga_config_validate); torch_abi.c makes it public as
 * ga_torch_config.
 */
#include "env.h"

#include <ctype.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gardenalloc.h"

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

int ga_env_translate(const char *var, const char *pytorch, char *out, size_t outlen, char *notes,
                     size_t noteslen) {
  sink o = {out, outlen, 0}, nt = {notes, noteslen, 0};
  if (out && outlen) out[0] = 0;
  if (notes && noteslen) notes[0] = 0;
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
    if (too_long) {
      note(&nt, var, "ignoring an option longer than %zu characters ('%.40s...')", sizeof item - 1, item);
      continue;
    }
    const char *colon = strchr(item, ':');
    if (!colon || colon == item) {
      note(&nt, var, "ignoring '%s': not a key:value option", item);
      continue;
    }
    size_t klen = (size_t)(colon - item);
    const char *val = colon + 1;
    int k = find_key(item, klen);
    const char *origin = NULL;
    if (k >= 0) ga_config_key(k, NULL, NULL, NULL, &origin, NULL);
    if (klen == 7 && memcmp(item, "backend", 7) == 0) {
      /* PyTorch's backend chooses its own allocator; native is the one
       * gardenalloc stands in for. */
      if (strcmp(val, "native") != 0)
        note(&nt, var,
             "ignoring backend:%s: gardenalloc is the allocator here (PyTorch's backends are native "
             "and cudaMallocAsync)",
             val);
      continue;
    }
    if (k < 0) {
      note(&nt, var, "ignoring unknown key '%.*s'", (int)klen, item);
      continue;
    }
    if (strcmp(origin, "pytorch") != 0) {
      note(&nt, var, "ignoring '%.*s', a key of gardenalloc's own: set it in GARDENALLOC_CONF", (int)klen,
           item);
      continue;
    }
    int t = snprintf(trial, sizeof trial, "%s%s%s", out, out[0] ? "," : "", item);
    if (t < 0 || (size_t)t >= sizeof trial || (size_t)t >= outlen) {
      note(&nt, var, "ignoring '%s': the configuration is too long", item);
      continue;
    }
    if (ga_config_validate(trial) != GA_OK) {
      const char *why = ga_last_error();
      static const char prefix[] = "invalid GARDENALLOC_CONF option ";
      if (strncmp(why, prefix, sizeof prefix - 1) == 0) why += sizeof prefix - 1;
      note(&nt, var, "ignoring '%s' (%s)", item, why);
      continue;
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
static const char *conf_ptr; /* NULL: no variable is set (the defaults) */
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
  ga_env_translate(var, pt, conf_buf, sizeof conf_buf, notes, sizeof notes);
  if (notes[0]) fputs(notes, stderr);
  conf_ptr = conf_buf;
  conf_source = var;
}

const char *ga_env_conf(const char **source) {
  pthread_once(&once, compute);
  if (source) *source = conf_source;
  return conf_ptr ? conf_ptr : "";
}
