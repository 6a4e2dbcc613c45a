/* fuzz.h — what the fuzz harnesses share.
 *
 * Each harness defines LLVMFuzzerTestOneInput. Built with clang and
 * -fsanitize=fuzzer,address,undefined it is a libFuzzer target (tests/fuzz.sh
 * runs them); built by any compiler with replay.c it runs the inputs of
 * the corpus folders it is given, so the seed corpus and every crashing
 * input kept in the repository run in the normal test suite too.
 *
 * A harness never returns on a broken promise: FZ_CHECK prints what broke
 * and aborts, which libFuzzer reports as a crash and the replayer as a
 * failure.
 */
#ifndef GA_FUZZ_H
#define GA_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FZ_CHECK(cond, ...)                                              \
  do {                                                                   \
    if (!(cond)) {                                                       \
      fprintf(stderr, "%s:%d: broken: %s: ", __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                                      \
      fprintf(stderr, "\n");                                             \
      abort();                                                           \
    }                                                                    \
  } while (0)

/* Reads the input a byte at a time; past the end every read is 0. */
typedef struct fz_in {
  const uint8_t *p;
  size_t n, i;
} fz_in;
static inline unsigned fz_byte(fz_in *in) { return in->i < in->n ? in->p[in->i++] : 0u; }
static inline int fz_more(const fz_in *in) { return in->i < in->n; }
static inline uint32_t fz_u32(fz_in *in) {
  uint32_t v = 0;
  for (int k = 0; k < 4; k++) v = v << 8 | fz_byte(in);
  return v;
}

#endif
