/* frames.h — stack frames for the allocation history: the return addresses
 * of the C caller (backtrace, symbolised lazily with dladdr when a snapshot
 * is written) and, in a Python process, the Python frames of the calling
 * thread (read only when that thread holds the GIL: nothing here waits for
 * it or calls Python code). A leaf.
 */
#ifndef GA_FRAMES_H
#define GA_FRAMES_H

#include <stddef.h>
#include <stdint.h>

#include "text.h"

#define GA_FRAMES_MAX 32 /* frames kept per history entry */
#define GA_FRAMES_C   16 /* of which C frames, at most */

typedef struct ga_frame {
  uintptr_t where; /* C: return address; Python: index + 1 of an interned code object */
  int32_t line;    /* Python: the line; C: -1 */
} ga_frame;

/* Looks up the Python interpreter's API in this process, once. 0, or
 * GA_DEV_ENOTSUP when the process has no interpreter. */
int ga_frames_python_init(void);

/* The calling thread's stack, innermost first: C frames when `c`, then
 * Python frames when `python` (and the thread holds the GIL). Returns how
 * many were written to out (at most max). */
int ga_frames_capture(int c, int python, ga_frame *out, int max);

/* Writes frames as PyTorch's list of {"filename", "line", "name"}. */
void ga_frames_json(ga_text *t, const ga_frame *f, int n);

#endif /* GA_FRAMES_H */
