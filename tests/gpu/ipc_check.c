/* ipc_check.c — what only a GPU confirms of issue 25's parts 1 and 2 (tests/gpu/run.sh
 * builds and runs it):
 *   1. two processes share an allocation through the real driver's POSIX fd
 *      handles (ga_ipc_export in this one, ga_ipc_import in a child started
 *      with fork and exec): each reads the other's bytes, and the exporter's
 *      free is refused until the child closes its import;
 *   2. deterministic:True places alike under real GPU timing: the same
 *      request sequence on two allocators, each with GPU work of different
 *      lengths queued between requests (cuMemsetD8Async) and record_stream on
 *      a second stream, ends with the same snapshot once addresses are left
 *      out (the default mode's result is printed, not checked).
 *   3. (ipc_check fabric) fabric handles: ga_ipc_export_fabric here, the
 *      descriptor written to a child as plain bytes, ga_ipc_import_fabric
 *      there: each reads the other's bytes, and the free is refused until
 *      ga_ipc_unexport. Without an IMEX channel or fabric support the driver
 *      refuses the handles: exit status 77 (a skip) with the reason.
 * Exit status 0 when every check passes. */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gardenalloc.h"

#define MiB ((size_t)1 << 20)
static int failures;
#define CHECK(cond, ...)             \
  do {                               \
    int ok_ = (cond);                \
    printf(ok_ ? "ok   " : "FAIL "); \
    failures += !ok_;                \
    printf(__VA_ARGS__);             \
    printf("\n");                    \
  } while (0)

static int (*cu_init)(unsigned), (*cu_retain)(void **, int), (*cu_set)(void *);
static int (*htod)(uintptr_t, const void *, size_t), (*dtoh)(void *, uintptr_t, size_t);
static int (*memset_async)(uintptr_t, unsigned char, size_t, void *), (*stream_create)(void **, unsigned);
static int (*mem_alloc)(uintptr_t *, size_t), (*ctx_sync)(void), (*cu_release)(int);

static int cuda_up(void) {
  void *cu = dlopen("libcuda.so.1", RTLD_NOW);
  if (!cu) return -1;
  *(void **)&cu_init = dlsym(cu, "cuInit");
  *(void **)&cu_retain = dlsym(cu, "cuDevicePrimaryCtxRetain");
  *(void **)&cu_set = dlsym(cu, "cuCtxSetCurrent");
  *(void **)&htod = dlsym(cu, "cuMemcpyHtoD_v2");
  *(void **)&dtoh = dlsym(cu, "cuMemcpyDtoH_v2");
  *(void **)&memset_async = dlsym(cu, "cuMemsetD8Async");
  *(void **)&stream_create = dlsym(cu, "cuStreamCreate");
  *(void **)&mem_alloc = dlsym(cu, "cuMemAlloc_v2");
  *(void **)&ctx_sync = dlsym(cu, "cuCtxSynchronize");
  *(void **)&cu_release = dlsym(cu, "cuDevicePrimaryCtxRelease_v2");
  void *ctx = NULL;
  return !cu_init || cu_init(0) || cu_retain(&ctx, 0) || cu_set(ctx) ? -1 : 0;
}

static int all(uintptr_t p, size_t n, unsigned char v) {
  unsigned char *b = malloc(n);
  int ok = b && dtoh(b, p, n) == 0;
  for (size_t i = 0; ok && i < n; i++) ok = b[i] == v;
  free(b);
  return ok;
}

/* The importing process: ipc_check child FD. */
static int child(int sock) {
  if (cuda_up()) return 10;
  ga_allocator_t *a;
  ga_ipc_desc_t d;
  void *p = NULL;
  if (ga_create("backend:cuda", 0, &a) != GA_OK || ga_ipc_recv(sock, &d) != GA_OK) return 11;
  ga_status_t st = ga_ipc_import(a, &d, &p);
  ga_ipc_desc_close(&d);
  if (st != GA_OK) {
    fprintf(stderr, "child: %s\n", ga_last_error());
    return 12;
  }
  char c = all((uintptr_t)p, d.size, 0x5a) ? 'R' : 'r';
  unsigned char *w = malloc(d.size);
  memset(w, 0xc3, d.size);
  htod((uintptr_t)p, w, d.size);
  free(w);
  if (write(sock, &c, 1) != 1 || read(sock, &c, 1) != 1) return 13;
  c = ga_ipc_close(a, p) == GA_OK ? 'D' : 'F';
  if (write(sock, &c, 1) != 1) return 14;
  ga_destroy(a);
  if (cu_release) cu_release(0);
  return 0;
}

static void ipc(const char *self) {
  ga_allocator_t *a;
  if (ga_create("backend:cuda,expandable_segments:True,shareable_handles:posix_fd", 0, &a) != GA_OK) {
    CHECK(0, "ga_create with shareable handles: %s", ga_last_error());
    return;
  }
  size_t size = 64 * MiB + 4096;
  void *p = NULL;
  ga_ipc_desc_t d;
  CHECK(ga_malloc(a, size, NULL, &p) == GA_OK, "malloc");
  unsigned char *w = malloc(size);
  memset(w, 0x5a, size);
  htod((uintptr_t)p, w, size);
  free(w);
  ga_status_t st = ga_ipc_export(a, p, &d);
  CHECK(st == GA_OK, "export: %u piece(s): %s", d.npieces, st ? ga_last_error() : "");
  int sv[2];
  if (st || socketpair(AF_UNIX, SOCK_STREAM, 0, sv)) return;
  pid_t pid = fork();
  if (pid == 0) {
    char fd[16];
    snprintf(fd, sizeof fd, "%d", sv[1]);
    execl(self, self, "child", fd, (char *)NULL);
    _exit(127);
  }
  close(sv[1]);
  CHECK(ga_ipc_send(sv[0], &d) == GA_OK, "send");
  ga_ipc_desc_close(&d);
  char c = 0;
  CHECK(read(sv[0], &c, 1) == 1 && c == 'R', "the child read the exporter's bytes (%c)", c);
  CHECK(all((uintptr_t)p, size, 0xc3), "the exporter reads the child's bytes");
  CHECK(ga_free(a, p) == GA_ERR_INVALID, "free refused while imported");
  CHECK(write(sv[0], "C", 1) == 1 && read(sv[0], &c, 1) == 1 && c == 'D', "the child closed");
  int status = 0;
  waitpid(pid, &status, 0);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the child ended well (0x%x)", status);
  st = ga_free(a, p);
  CHECK(st == GA_OK, "free after the close%s%s", st ? ": " : "", st ? ga_last_error() : "");
  close(sv[0]);
  ga_destroy(a);
}

/* The importing process of the fabric check: ipc_check fchild FD. */
static int fabric_child(int sock) {
  if (cuda_up()) return 10;
  ga_allocator_t *a;
  ga_ipc_fabric_desc_t d;
  void *p = NULL;
  if (ga_create("backend:cuda", 0, &a) != GA_OK) return 11;
  for (size_t got = 0; got < sizeof d;) {
    ssize_t k = read(sock, (char *)&d + got, sizeof d - got);
    if (k <= 0) return 11;
    got += (size_t)k;
  }
  if (ga_ipc_import_fabric(a, &d, &p) != GA_OK) {
    fprintf(stderr, "child: %s\n", ga_last_error());
    return 12;
  }
  char c = all((uintptr_t)p, d.size, 0x5a) ? 'R' : 'r';
  unsigned char *w = malloc(d.size);
  memset(w, 0xc3, d.size);
  htod((uintptr_t)p, w, d.size);
  free(w);
  if (write(sock, &c, 1) != 1 || read(sock, &c, 1) != 1) return 13;
  c = ga_ipc_close(a, p) == GA_OK ? 'D' : 'F';
  if (write(sock, &c, 1) != 1) return 14;
  ga_destroy(a);
  if (cu_release) cu_release(0);
  return 0;
}

/* 0: checked (failures counted); 77: the driver makes no fabric handles here. */
static int fabric(const char *self) {
  ga_allocator_t *a;
  if (ga_create("backend:cuda,expandable_segments:True,shareable_handles:fabric", 0, &a) != GA_OK) {
    CHECK(0, "ga_create with shareable_handles:fabric: %s", ga_last_error());
    return 0;
  }
  size_t size = 64 * MiB + 4096;
  void *p = NULL;
  ga_status_t st = ga_malloc(a, size, NULL, &p);
  if (st == GA_ERR_UNSUPPORTED && strstr(ga_last_error(), "fabric handles")) {
    printf("skip: %s\n", ga_last_error());
    ga_destroy(a);
    return 77;
  }
  CHECK(st == GA_OK, "malloc with fabric handles%s%s", st ? ": " : "", st ? ga_last_error() : "");
  if (st) {
    ga_destroy(a);
    return 0;
  }
  unsigned char *w = malloc(size);
  memset(w, 0x5a, size);
  htod((uintptr_t)p, w, size);
  free(w);
  ga_ipc_fabric_desc_t d;
  st = ga_ipc_export_fabric(a, p, &d);
  CHECK(st == GA_OK, "export_fabric: %u piece(s): %s", d.npieces, st ? ga_last_error() : "");
  int sv[2];
  if (st || socketpair(AF_UNIX, SOCK_STREAM, 0, sv)) return 0;
  pid_t pid = fork();
  if (pid == 0) {
    char fd[16];
    snprintf(fd, sizeof fd, "%d", sv[1]);
    execl(self, self, "fchild", fd, (char *)NULL);
    _exit(127);
  }
  close(sv[1]);
  CHECK(write(sv[0], &d, sizeof d) == (ssize_t)sizeof d, "the descriptor sent as plain bytes");
  char c = 0;
  CHECK(read(sv[0], &c, 1) == 1 && c == 'R', "the child read the exporter's bytes (%c)", c);
  CHECK(all((uintptr_t)p, size, 0xc3), "the exporter reads the child's bytes");
  CHECK(ga_free(a, p) == GA_ERR_INVALID, "free refused while exported");
  CHECK(write(sv[0], "C", 1) == 1 && read(sv[0], &c, 1) == 1 && c == 'D', "the child closed");
  int status = 0;
  waitpid(pid, &status, 0);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the child ended well (0x%x)", status);
  CHECK(ga_free(a, p) == GA_ERR_INVALID, "free still refused before ga_ipc_unexport");
  CHECK(ga_ipc_unexport(a, p) == GA_OK, "unexport");
  st = ga_free(a, p);
  CHECK(st == GA_OK, "free after unexport%s%s", st ? ": " : "", st ? ga_last_error() : "");
  close(sv[0]);
  ga_destroy(a);
  return 0;
}

/* A snapshot without addresses: where everything lies, relative to its segment. */
static char *shape(ga_allocator_t *a) {
  size_t n = ga_snapshot_json(a, NULL, 0) + 1;
  char *json = malloc(n), *o = malloc(n);
  ga_snapshot_json(a, json, n);
  size_t k = 0;
  for (const char *p = json; *p;) {
    if (!strncmp(p, "\"address\":", 10)) {
      p += 10;
      while (*p == ' ' || (*p >= '0' && *p <= '9')) p++;
      continue;
    }
    o[k++] = *p++;
  }
  o[k] = 0;
  free(json);
  return o;
}

static char *rank(const char *conf, unsigned seed, void *s1, void *s2, uintptr_t scratch) {
  ga_allocator_t *a;
  char full[256];
  snprintf(full, sizeof full, "backend:cuda,%s", conf);
  if (ga_create(full, 0, &a) != GA_OK) return NULL;
  void *live[64] = {0};
  unsigned x = 12345, y = seed;
  for (int i = 0; i < 4000; i++) {
    x = x * 1103515245u + 12345u;   /* the requests: the same on every rank */
    y = y * 1664525u + 1013904223u; /* the GPU work: this rank's */
    int k = (int)((x >> 8) % 64);
    if (live[k]) {
      ga_free(a, live[k]);
      live[k] = NULL;
    } else if (ga_malloc(a, ((x >> 4) % 64 + 1) * MiB / 2, s1, &live[k]) == GA_OK && i % 7 == 0)
      ga_record_stream(a, live[k], s2);
    memset_async(scratch, 1, ((y >> 8) % 64 + 1) * MiB, (y >> 3) & 1 ? s1 : s2);
  }
  char *r = shape(a);
  ctx_sync();
  for (int k = 0; k < 64; k++) ga_free(a, live[k]);
  ga_destroy(a);
  return r;
}

static void deterministic(void) {
  void *s1 = NULL, *s2 = NULL;
  uintptr_t scratch = 0;
  if (!memset_async) { /* the driver double has none */
    printf("     no cuMemsetD8Async: the deterministic check needs a real driver\n");
    return;
  }
  if (stream_create(&s1, 0) || stream_create(&s2, 0) || mem_alloc(&scratch, 64 * MiB)) {
    CHECK(0, "streams and scratch memory");
    return;
  }
  const char *confs[] = {"deterministic:True", "deterministic:True,expandable_segments:True", "",
                         "expandable_segments:True"};
  for (int c = 0; c < 4; c++) {
    char *r1 = rank(confs[c], 1, s1, s2, scratch), *r2 = rank(confs[c], 977, s1, s2, scratch);
    int same = r1 && r2 && !strcmp(r1, r2);
    if (c < 2)
      CHECK(same, "%s: two ranks with different GPU work place alike", confs[c]);
    else
      printf("     %s: the two ranks place %s\n", confs[c][0] ? confs[c] : "defaults",
             same ? "alike" : "differently");
    free(r1);
    free(r2);
  }
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (argc == 3 && !strcmp(argv[1], "child")) return child(atoi(argv[2]));
  if (argc == 3 && !strcmp(argv[1], "fchild")) return fabric_child(atoi(argv[2]));
  if (cuda_up()) {
    printf("no CUDA context on device 0\n");
    return 2;
  }
  if (argc == 2 && !strcmp(argv[1], "fabric")) {
    if (fabric(argv[0]) == 77) return 77;
    if (cu_release) cu_release(0);
    printf("%d failure(s)\n", failures);
    return failures != 0;
  }
  ipc(argv[0]);
  deterministic();
  if (cu_release) cu_release(0);
  printf("%d failure(s)\n", failures);
  return failures != 0;
}
