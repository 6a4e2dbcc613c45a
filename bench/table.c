/* table.c — text for a person: growable text, paragraphs wrapped to
 * BENCH_COLUMNS, and the row names of the tables. Calls nothing else of
 * ga-bench. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

/* ---- Growable text ---- */

void strbuf_put(ga_strbuf *b, const char *fmt, ...) {
  va_list ap;
  for (;;) {
    size_t room = b->cap - b->len;
    va_start(ap, fmt);
    int n = b->cap ? vsnprintf(b->s + b->len, room, fmt, ap) : vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if (b->cap && (size_t)n < room) {
      b->len += (size_t)n;
      return;
    }
    size_t cap = b->cap ? b->cap * 2 : 256;
    while (cap < b->len + (size_t)n + 1) cap *= 2;
    char *grown = realloc(b->s, cap);
    if (!grown) exit(2);
    b->s = grown;
    b->cap = cap;
  }
}

void strbuf_free(ga_strbuf *b) {
  free(b->s);
  memset(b, 0, sizeof *b);
}

/* ---- Wrapped text and row names ---- */

void print_wrapped(FILE *f, const char *text, const char *indent) {
  size_t col = 0, ind = strlen(indent);
  int fresh = 1; /* no word on this line yet */
  for (const char *p = text; *p;) {
    if (*p == '\n') {
      fputc('\n', f);
      col = 0, fresh = 1, p++;
      continue;
    }
    if (*p == ' ') {
      if (fresh) fputc(' ', f), col++; /* a line keeps its indent */
      p++;
      continue;
    }
    size_t w = strcspn(p, " \n");
    if (!fresh && col + 1 + w > BENCH_COLUMNS) {
      fprintf(f, "\n%s", indent);
      col = ind;
    } else if (!fresh)
      fputc(' ', f), col++;
    fwrite(p, 1, w, f);
    col += w, p += w, fresh = 0;
  }
  if (!fresh) fputc('\n', f);
}

void key_cell(ga_strbuf *b, int width, const char *name, int len) {
  if (len > width)
    strbuf_put(b, "%.*s\n%*s", len, name, width, "");
  else
    strbuf_put(b, "%-*.*s", width, len, name);
}

const char *trace_file_name(const char *p) {
  const char *slash = strrchr(p, '/');
  return slash ? slash + 1 : p;
}

int trace_key_len(const char *path) {
  const char *n = trace_file_name(path);
  size_t len = strlen(n);
  return (int)(len > 4 && !strcmp(n + len - 4, ".csv") ? len - 4 : len);
}

int row_key_width(const paths *p, const bench_config *configs, size_t nconfigs, int max) {
  int key = nconfigs > 1 ? 8 : 5; /* "  config", "trace" */
  for (size_t i = 0; nconfigs <= 1 && i < p->n; i++)
    if (trace_key_len(p->v[i]) > key) key = trace_key_len(p->v[i]);
  for (size_t c = 0; nconfigs > 1 && c < nconfigs; c++)
    if (2 + (int)strlen(configs[c].name) > key) key = 2 + (int)strlen(configs[c].name);
  return key < max ? key : max;
}
