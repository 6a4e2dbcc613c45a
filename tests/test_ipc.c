/* test_ipc.c — sharing an allocation with another process
 * (ga_ipc_export, ga_ipc_import, ga_ipc_close), on the simulated device and
 * on the CUDA driver double.
 *
 * The importer is a real second process (fork, then exec of ipc_peer), given
 * the descriptor over a Unix socket (SCM_RIGHTS): each sees the other's
 * writes, and the exporter's free is refused while the import is held
 * (closed, or its process gone, the free goes through).
 */
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fixture.h"

TestSuite(ipc, .fini = fx_close);

#define SHARED "expandable_segments:True,shareable_handles:posix_fd"

static pid_t peer;
static int sock = -1;

/* Starts ipc_peer in MODE on one end of a socket pair. */
static void peer_start(const char *mode) {
  int sv[2];
  cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  char conf[160], fd[16];
  snprintf(conf, sizeof conf, "%s", fx_machine_conf(1, 1024));
  snprintf(fd, sizeof fd, "%d", sv[1]);
  peer = fork();
  cr_assert(peer >= 0);
  if (peer == 0) {
    int keep = dup(sv[1]); /* without CLOEXEC: the peer inherits it */
    snprintf(fd, sizeof fd, "%d", keep);
    execl(GA_IPC_PEER, GA_IPC_PEER, fd, conf, mode, (char *)NULL);
    _exit(127);
  }
  close(sv[1]);
  sock = sv[0];
}

static char hear(void) {
  char c = 0;
  cr_assert_eq(read(sock, &c, 1), 1, "the peer said nothing (it ended?)");
  return c;
}

static void peer_end(void) {
  close(sock);
  sock = -1;
  int status = 0;
  cr_assert_eq(waitpid(peer, &status, 0), peer);
  cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the peer ended with status 0x%x", status);
}

static void *exported(size_t size, ga_ipc_desc_t *d) {
  void *p = fx_alloc(size);
  memset(p, 0x5a, size);
  ga_status_t st = ga_ipc_export(fx_a, p, d);
  cr_assert_eq(st, GA_OK, "ga_ipc_export: %s", ga_last_error());
  cr_assert_gt(d->npieces, 0);
  return p;
}

static void all_bytes(const void *p, size_t n, unsigned char v) {
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++) cr_assert_eq(b[i], v, "byte %zu is 0x%x, not 0x%x", i, b[i], v);
}

Test(ipc, two_processes_see_each_others_writes_and_the_free_waits_for_the_close) {
  fx_open(SHARED, 1024 * MiB);
  void *keep = fx_alloc(3 * MiB); /* the exported one does not start at a granule */
  ga_ipc_desc_t d;
  size_t size = 45 * MiB + 4096;
  void *p = exported(size, &d);
  peer_start("close");
  cr_assert_eq(ga_ipc_send(sock, &d), GA_OK, "%s", ga_last_error());
  ga_ipc_desc_close(&d);
  cr_assert_eq(hear(), 'S');
  cr_assert_eq(hear(), GA_OK);
  cr_assert_eq(hear(), 'R', "the peer did not read the exporter's bytes");
  cr_assert_eq(hear(), 'W');
  all_bytes(p, size, 0xc3); /* the peer's writes, here */
  /* Imported: the free is refused and changes nothing. */
  cr_assert_eq(ga_free(fx_a, p), GA_ERR_INVALID);
  cr_assert(strstr(ga_last_error(), "still imported"), "%s", ga_last_error());
  cr_assert_eq(ga_check(fx_a), 0);
  size_t req = 0;
  cr_assert_eq(ga_allocation_size(fx_a, p, &req, NULL), GA_OK, "still live");
  cr_assert_eq(req, size);
  cr_assert_eq(write(sock, "C", 1), 1);
  cr_assert_eq(hear(), 'D');
  peer_end();
  cr_assert_eq(ga_free(fx_a, p), GA_OK, "%s", ga_last_error());
  fx_free(keep);
}

Test(ipc, an_importer_that_exits_without_closing_lets_the_free_through) {
  fx_open(SHARED, 1024 * MiB);
  ga_ipc_desc_t d;
  void *p = exported(8 * MiB, &d);
  peer_start("exit");
  cr_assert_eq(ga_ipc_send(sock, &d), GA_OK, "%s", ga_last_error());
  cr_assert_eq(hear(), 'S');
  cr_assert_eq(hear(), GA_OK);
  cr_assert_eq(hear(), 'R');
  cr_assert_eq(hear(), 'W');
  peer_end(); /* gone, holding the import */
  cr_assert_eq(ga_free(fx_a, p), GA_OK, "%s", ga_last_error());
  /* The descriptor of a freed allocation is refused. */
  peer_start("close");
  cr_assert_eq(ga_ipc_send(sock, &d), GA_OK, "%s", ga_last_error());
  ga_ipc_desc_close(&d);
  cr_assert_eq(hear(), 'S');
  cr_assert_eq(hear(), GA_ERR_INVALID, "an import of a freed allocation went through");
  peer_end();
}

Test(ipc, import_in_the_same_process_and_close) {
  fx_open(SHARED, 1024 * MiB);
  ga_ipc_desc_t d;
  size_t size = 30 * MiB;
  void *p = exported(size, &d);
  void *q = NULL;
  cr_assert_eq(ga_ipc_import(fx_a, &d, &q), GA_OK, "%s", ga_last_error());
  cr_assert(q != NULL && q != p);
  all_bytes(q, size, 0x5a);
  memset(q, 0x11, size);
  all_bytes(p, size, 0x11);
  cr_assert_eq(ga_check(fx_a), 0);
  cr_assert_eq(ga_free(fx_a, q), GA_ERR_BAD_POINTER, "an import is not an allocation");
  cr_assert_eq(ga_tag(fx_a, p, "weights"), GA_ERR_INVALID, "an exported allocation must not sleep");
  cr_assert_eq(ga_ipc_close(fx_a, q), GA_OK, "%s", ga_last_error());
  cr_assert_eq(ga_ipc_close(fx_a, q), GA_ERR_BAD_POINTER);
  ga_ipc_desc_close(&d);
  cr_assert_eq(ga_free(fx_a, p), GA_OK, "%s", ga_last_error());
  cr_assert_eq(ga_check(fx_a), 0);
}

Test(ipc, destroy_closes_what_is_imported) {
  fx_open(SHARED, 1024 * MiB);
  ga_ipc_desc_t d;
  void *p = exported(4 * MiB, &d);
  void *q = NULL;
  cr_assert_eq(ga_ipc_import(fx_a, &d, &q), GA_OK, "%s", ga_last_error());
  ga_ipc_desc_close(&d);
  (void)p; /* ga_destroy (in fx_close) gives back the import and the allocation; the device checks */
}

Test(ipc, what_is_refused_is_named) {
  fx_open("expandable_segments:True", 256 * MiB);
  ga_ipc_desc_t d;
  void *p = fx_alloc(4 * MiB);
  cr_assert_eq(ga_ipc_export(fx_a, p, &d), GA_ERR_UNSUPPORTED);
  cr_assert(strstr(ga_last_error(), "shareable_handles:posix_fd"), "%s", ga_last_error());
  cr_assert_eq(ga_ipc_export(fx_a, (char *)p + 512, &d), GA_ERR_BAD_POINTER);
  cr_assert_eq(ga_ipc_export(fx_a, p, NULL), GA_ERR_INVALID);
  memset(&d, 0, sizeof d);
  void *q;
  cr_assert_eq(ga_ipc_import(fx_a, &d, &q), GA_ERR_INVALID);
  cr_assert(strstr(ga_last_error(), "not a descriptor"), "%s", ga_last_error());
  fx_free(p);
}

Test(ipc, native_memory_is_refused_clearly) {
  fx_open("shareable_handles:posix_fd", 256 * MiB);
  ga_ipc_desc_t d;
  void *p = fx_alloc(4 * MiB);
  cr_assert_eq(ga_ipc_export(fx_a, p, &d), GA_ERR_UNSUPPORTED);
  cr_assert(strstr(ga_last_error(), "native memory (cudaMalloc)"), "%s", ga_last_error());
  fx_free(p);
}
