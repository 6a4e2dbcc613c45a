/* text.c — the calling thread's error text, text buffers, size format.
 * and the failure report of a broken precondition (debug.h). A leaf.
 */
#include "text.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "debug.h"

static _Thread_local char tls_error[2048];

void ga_error_set(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(tls_error, sizeof tls_error, fmt, ap);
  va_end(ap);
}

const char *ga_error_text(void) { return tls_error; }

void ga_error_rename(const char *from, const char *to) {
  size_t n = strlen(from);
  if (strncmp(tls_error, from, n) != 0 || tls_error[n] != ':') return;
  char rest[sizeof tls_error];
  snprintf(rest, sizeof rest, "%s", tls_error + n);
  ga_error_set("%s%s", to, rest);
}

ga_status_t ga_err_status(ga_err rc) {
  switch (rc) {
    case GA_DEV_OK: return GA_OK;
    case GA_DEV_ENOMEM: return GA_ERR_HOST_MEMORY;
    case GA_DEV_ENOTSUP: return GA_ERR_UNSUPPORTED;
    default: return GA_ERR_DEVICE;
  }
}

const char *ga_err_words(ga_err rc, const char *devtext) {
  if (rc == GA_DEV_ENOMEM) return "out of host memory";
  return devtext && devtext[0] ? devtext : "device call failed";
}

ga_status_t ga_fail(ga_err rc, const char *fn, const char *devtext, const char *context, ...) {
  if (rc == GA_DEV_OK) return GA_OK;
  char what[sizeof tls_error];
  what[0] = 0;
  if (context) {
    va_list ap;
    va_start(ap, context);
    vsnprintf(what, sizeof what, context, ap);
    va_end(ap);
  }
  if (rc == GA_DEV_ENOMEM)
    ga_error_set("%s: %s%s%s", fn, ga_err_words(rc, devtext), what[0] ? " " : "", what);
  else if (what[0])
    ga_error_set("%s: device call failed %s: %s", fn, what, ga_err_words(rc, devtext));
  else
    ga_error_set("%s: %s", fn, ga_err_words(rc, devtext));
  return ga_err_status(rc);
}

void ga_text_put(ga_text *t, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  size_t room = t->len < t->cap ? t->cap - t->len : 0;
  int n = vsnprintf(room ? t->buf + t->len : NULL, room, fmt, ap);
  va_end(ap);
  if (n > 0) t->len += (size_t)n;
}

void ga_text_json_str(ga_text *t, const char *str) {
  ga_text_put(t, "\"");
  for (; *str; str++) {
    unsigned char ch = (unsigned char)*str;
    if (ch == '"' || ch == '\\')
      ga_text_put(t, "\\%c", ch);
    else if (ch < 0x20 || ch == 0x7f)
      ga_text_put(t, "\\u%04x", ch);
    else
      ga_text_put(t, "%c", ch);
  }
  ga_text_put(t, "\"");
}

size_t ga_text_end(ga_text *t) {
  if (t->cap && t->len >= t->cap) t->buf[t->cap - 1] = 0;
  return t->len;
}

void ga_format_size(size_t bytes, char *buf, size_t len) {
  const double KiB = 1024.0, MiB = KiB * 1024.0, GiB = MiB * 1024.0;
  if (bytes <= 1024)
    snprintf(buf, len, "%zu bytes", bytes);
  else if (bytes <= (size_t)1 << 20)
    snprintf(buf, len, "%.2f KiB", (double)bytes / KiB);
  else if (bytes <= (size_t)1 << 30)
    snprintf(buf, len, "%.2f MiB", (double)bytes / MiB);
  else
    snprintf(buf, len, "%.2f GiB", (double)bytes / GiB);
}

void ga_assert_fail(const char *file, int line, const char *rule) {
  fprintf(stderr, "gardenalloc: %s:%d: broken rule: %s\n", file, line, rule);
  abort();
}
