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
#include <string.h>

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

/* Bytes of a live allocation, cheap to write and to check whole: every byte
 * is the allocation's own value, but for a word at every 4 KiB that names
 * the allocation and the offset (so memory of another allocation never
 * passes for it). */
#define FZ_CHUNK 4096
static inline unsigned char fz_vbyte(unsigned seed) { return (unsigned char)(seed >> 24 | 1u); }
static inline uint64_t fz_stamp(unsigned seed, size_t off) { return (uint64_t)seed << 32 ^ (uint64_t)off; }
static inline void fz_fill(unsigned char *p, size_t size, unsigned seed) {
  memset(p, fz_vbyte(seed), size);
  for (size_t off = 0; off + 8 <= size; off += FZ_CHUNK) {
    uint64_t w = fz_stamp(seed, off);
    memcpy(p + off, &w, 8);
  }
}
/* The first byte of [from, to) (whole chunks) that is not what fz_fill
 * wrote, or SIZE_MAX. */
static inline size_t fz_wrong_in(const unsigned char *p, size_t size, unsigned seed, size_t from, size_t to) {
  static unsigned char ref[FZ_CHUNK];
  unsigned char v = fz_vbyte(seed);
  if (ref[0] != v) memset(ref, v, sizeof ref);
  for (size_t off = from / FZ_CHUNK * FZ_CHUNK; off < to && off < size; off += FZ_CHUNK) {
    size_t n = size - off < FZ_CHUNK ? size - off : FZ_CHUNK, skip = 0;
    if (n >= 8) {
      uint64_t w = fz_stamp(seed, off);
      if (memcmp(p + off, &w, 8) != 0) return off;
      skip = 8;
    }
    if (memcmp(p + off + skip, ref, n - skip) != 0)
      for (size_t i = off + skip; i < off + n; i++)
        if (p[i] != v) return i;
  }
  return SIZE_MAX;
}
static inline size_t fz_wrong(const unsigned char *p, size_t size, unsigned seed) {
  return fz_wrong_in(p, size, seed, 0, size);
}
/* Its first and last chunks only. */
static inline size_t fz_ends_wrong(const unsigned char *p, size_t size, unsigned seed) {
  size_t bad = fz_wrong_in(p, size, seed, 0, FZ_CHUNK);
  return bad != SIZE_MAX ? bad : fz_wrong_in(p, size, seed, size ? size - 1 : 0, size);
}

#endif
