/* text.h — leaf utilities for words: the calling thread's error text, text
 * buffers that count what did not fit, and PyTorch's size format.
 *
 * Depends on nothing else of the allocator; every layer may use it.
 */
#ifndef GA_TEXT_H
#define GA_TEXT_H

#include <stddef.h>

#include "errors.h"
#include "gardenalloc.h"

#if defined(__GNUC__)
#define GA_PRINTF(fmt, args) __attribute__((format(printf, fmt, args)))
#else
#define GA_PRINTF(fmt, args)
#endif

/* Sets the calling thread's error text (what ga_last_error() returns). */
void ga_error_set(const char *fmt, ...) GA_PRINTF(1, 2);
/* The calling thread's error text ("" when none was set). */
const char *ga_error_text(void);

/* The one mapping from an internal code (errors.h) to a public status, with
 * the calling thread's error text set (context: a printf format or NULL,
 * such as "while obtaining device memory"; devtext: the device's text):
 *   GA_DEV_OK       GA_OK               (no text set)
 *   GA_DEV_ENOMEM   GA_ERR_HOST_MEMORY  "fn: out of host memory[ context]"
 *   GA_DEV_ENOTSUP  GA_ERR_UNSUPPORTED  "fn: [device call failed context: ]devtext"
 *   any other       GA_ERR_DEVICE       "fn: [device call failed context: ]devtext" */
/* The error text, when it begins "from: ", begins "to: " instead (a public
 * call made of another names itself). */
void ga_error_rename(const char *from, const char *to);

/* The two halves of that mapping, for messages that say more around it:
 * the status of rc, and its words ("out of host memory" for GA_DEV_ENOMEM,
 * else devtext). */
ga_status_t ga_err_status(ga_err rc);
const char *ga_err_words(ga_err rc, const char *devtext);
ga_status_t ga_fail(ga_err rc, const char *fn, const char *devtext, const char *context, ...) GA_PRINTF(4, 5);

/* Appends to a caller's buffer of `cap` bytes, counting the full length even
 * past the end (so callers can size the buffer with cap 0). */
typedef struct ga_text {
  char *buf;
  size_t cap, len;
} ga_text;
void ga_text_put(ga_text *t, const char *fmt, ...) GA_PRINTF(2, 3);
/* Appends str as a JSON string, quotes included: '"' and '\\' escaped, control
 * characters as \u00XX. */
void ga_text_json_str(ga_text *t, const char *str);
/* Terminates a truncated text; returns the full length. */
size_t ga_text_end(ga_text *t);

/* PyTorch's format_size: "N bytes", "x.xx KiB", "x.xx MiB", "x.xx GiB". */
void ga_format_size(size_t bytes, char *buf, size_t len);

#endif /* GA_TEXT_H */
