/* replay.c — runs a fuzz harness over files, without libFuzzer: every
 * argument is a file or a folder of files (the seed corpus, the crashing
 * inputs kept as regression cases). Exits non-zero if a folder is missing
 * or empty; a broken promise aborts in the harness. */
#include <dirent.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz.h"

static int run_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "replay: cannot open %s\n", path);
    return -1;
  }
  size_t cap = 1 << 16, n = 0;
  uint8_t *buf = malloc(cap);
  for (size_t got; buf && (got = fread(buf + n, 1, cap - n, f)) > 0;) {
    n += got;
    if (n == cap) {
      uint8_t *nb = realloc(buf, cap *= 2);
      if (!nb) free(buf);
      buf = nb;
    }
  }
  fclose(f);
  if (!buf) {
    fprintf(stderr, "replay: out of memory for %s\n", path);
    return -1;
  }
  LLVMFuzzerTestOneInput(buf, n);
  free(buf);
  return 0;
}

int main(int argc, char **argv) {
  size_t inputs = 0;
  for (int i = 1; i < argc; i++) {
    struct stat st;
    if (stat(argv[i], &st) != 0) {
      fprintf(stderr, "replay: %s does not exist\n", argv[i]);
      return 1;
    }
    if (!S_ISDIR(st.st_mode)) {
      if (run_file(argv[i])) return 1;
      inputs++;
      continue;
    }
    DIR *d = opendir(argv[i]);
    if (!d) return 1;
    for (struct dirent *e; (e = readdir(d));) {
      if (e->d_name[0] == '.') continue;
      char path[4096];
      snprintf(path, sizeof path, "%s/%s", argv[i], e->d_name);
      if (run_file(path)) {
        closedir(d);
        return 1;
      }
      inputs++;
    }
    closedir(d);
  }
  if (!inputs) {
    fprintf(stderr, "replay: no inputs\n");
    return 1;
  }
  printf("replay: %zu inputs, every promise held\n", inputs);
  return 0;
}
