/* test_ipc.c — sharing an allocation with another process
 * (ga_ipc_export, ga_ipc_import, ga_ipc_close), on the simulated device and
 * on the CUDA driver double.
 *
 * The importer is a real second process (fork, then exec of ipc_peer), given
 * the descriptor over a Unix socket (SCM_RIGHTS): each sees the other's
 * writes, and the exporter's free is refused while the import is held
 * (closed, or its process gone, the free goes through). Fabric handles
 * (shareable_handles:fabric): the peer imports from the descriptor's bytes
 * alone, written to the socket with write(2), no descriptor passed; the
 * exporter's free waits for ga_ipc_unexport.
 */
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fixture.h"

TestSuite(ipc, .fini = fx_close);

#define SHARED "expandable_segments:True,shareable_handles:posix_fd"
#define FABRIC "expandable_segments:True,shareable_handles:fabric"

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

/* ---- Fabric handles ---- */

/* Calls of the driver entry points named (0 on the simulated device). */
static uint64_t driver_calls(const char *calls) {
#ifdef GA_HAVE_CUDA
  if (fx_on_cuda()) return fx_cu.cudadouble_calls(calls);
#endif
  (void)calls;
  return 0;
}

Test(ipc, fabric_bytes_alone_map_the_allocation_in_another_process_and_the_free_waits_for_unexport) {
  fx_open(FABRIC, 1024 * MiB);
  void *keep = fx_alloc(3 * MiB); /* the exported one does not start at a granule */
  size_t size = 45 * MiB + 4096;
  void *p = fx_alloc(size);
  memset(p, 0x5a, size);
  uint64_t exports = driver_calls("cuMemExportToShareableHandle");
  ga_ipc_fabric_desc_t d;
  cr_assert_eq(ga_ipc_export_fabric(fx_a, p, &d), GA_OK, "ga_ipc_export_fabric: %s", ga_last_error());
  cr_assert_eq(d.version, GA_IPC_FABRIC_VERSION);
  cr_assert_gt(d.npieces, 0);
  cr_assert_eq(d.size, size);
  if (fx_on_cuda()) /* one cuMemExportToShareableHandle(CU_MEM_HANDLE_TYPE_FABRIC) per piece */
    cr_assert_eq(driver_calls("cuMemExportToShareableHandle") - exports, d.npieces);
  peer_start("fabric");
  uint64_t imports = driver_calls("cuMemImportFromShareableHandle");
  cr_assert_eq(write(sock, &d, sizeof d), (ssize_t)sizeof d, "plain bytes, no SCM_RIGHTS");
  cr_assert_eq(hear(), 'S');
  cr_assert_eq(hear(), GA_OK, "the peer could not import from the bytes");
  cr_assert_eq(hear(), 'R', "the peer did not read the exporter's bytes");
  cr_assert_eq(hear(), 'W');
  all_bytes(p, size, 0xc3); /* the peer's writes, here */
  cr_assert_eq(driver_calls("cuMemImportFromShareableHandle"), imports, "the import is the peer's, not ours");
  /* Exported as fabric handles: the free is refused and changes nothing. */
  cr_assert_eq(ga_free(fx_a, p), GA_ERR_INVALID);
  cr_assert(strstr(ga_last_error(), "ga_ipc_unexport"), "%s", ga_last_error());
  cr_assert_eq(ga_check(fx_a), 0);
  size_t req = 0;
  cr_assert_eq(ga_allocation_size(fx_a, p, &req, NULL), GA_OK, "still live");
  cr_assert_eq(req, size);
  cr_assert_eq(write(sock, "C", 1), 1);
  cr_assert_eq(hear(), 'D');
  peer_end();
  /* The peer is done, but only the exporter's word frees it. */
  cr_assert_eq(ga_free(fx_a, p), GA_ERR_INVALID);
  cr_assert_eq(ga_tag(fx_a, p, "weights"), GA_ERR_INVALID, "an exported allocation must not sleep");
  cr_assert_eq(ga_ipc_unexport(fx_a, p), GA_OK, "%s", ga_last_error());
  cr_assert_eq(ga_ipc_unexport(fx_a, p), GA_ERR_INVALID);
  cr_assert(strstr(ga_last_error(), "not exported as fabric handles"), "%s", ga_last_error());
  cr_assert_eq(ga_free(fx_a, p), GA_OK, "%s", ga_last_error());
  cr_assert_eq(ga_ipc_unexport(fx_a, p), GA_ERR_BAD_POINTER);
  cr_assert_eq(ga_check(fx_a), 0);
  fx_free(keep);
}

Test(ipc, fabric_handles_keep_posix_fd_sharing_and_import_in_the_same_process) {
  fx_open(FABRIC, 1024 * MiB);
  size_t size = 10 * MiB;
  ga_ipc_desc_t fdd;
  void *p = exported(size, &fdd); /* the fd export works on fabric-shareable memory */
  ga_ipc_fabric_desc_t d;
  cr_assert_eq(ga_ipc_export_fabric(fx_a, p, &d), GA_OK, "%s", ga_last_error());
  void *q = NULL, *r = NULL;
  cr_assert_eq(ga_ipc_import_fabric(fx_a, &d, &q), GA_OK, "%s", ga_last_error());
  cr_assert_eq(ga_ipc_import(fx_a, &fdd, &r), GA_OK, "%s", ga_last_error());
  all_bytes(q, size, 0x5a);
  memset(q, 0x22, size);
  all_bytes(p, size, 0x22);
  all_bytes(r, size, 0x22);
  cr_assert_eq(ga_check(fx_a), 0);
  cr_assert_eq(ga_free(fx_a, q), GA_ERR_BAD_POINTER, "an import is not an allocation");
  cr_assert_eq(ga_ipc_unexport(fx_a, p), GA_OK, "%s", ga_last_error());
  /* The fd import still holds it. */
  cr_assert_eq(ga_free(fx_a, p), GA_ERR_INVALID);
  cr_assert(strstr(ga_last_error(), "still imported"), "%s", ga_last_error());
  cr_assert_eq(ga_ipc_close(fx_a, r), GA_OK, "%s", ga_last_error());
  cr_assert_eq(ga_ipc_close(fx_a, q), GA_OK, "%s", ga_last_error());
  cr_assert_eq(ga_ipc_close(fx_a, q), GA_ERR_BAD_POINTER);
  ga_ipc_desc_close(&fdd);
  cr_assert_eq(ga_free(fx_a, p), GA_OK, "%s", ga_last_error());
  cr_assert_eq(ga_check(fx_a), 0);
}

Test(ipc, a_bad_or_foreign_fabric_descriptor_is_refused_clearly) {
  fx_open(FABRIC, 1024 * MiB);
  void *p = fx_alloc(4 * MiB);
  ga_ipc_fabric_desc_t d, bad;
  cr_assert_eq(ga_ipc_export_fabric(fx_a, p, &d), GA_OK, "%s", ga_last_error());
  void *q = (void *)1;
  memset(&bad, 0, sizeof bad);
  cr_assert_eq(ga_ipc_import_fabric(fx_a, &bad, &q), GA_ERR_INVALID);
  cr_assert_null(q);
  cr_assert(strstr(ga_last_error(), "not a descriptor ga_ipc_export_fabric wrote"), "%s", ga_last_error());
  bad = d;
  bad.start = bad.pieces[0].size * bad.npieces;
  cr_assert_eq(ga_ipc_import_fabric(fx_a, &bad, &q), GA_ERR_INVALID);
  cr_assert(strstr(ga_last_error(), "not inside its pieces"), "%s", ga_last_error());
  /* Handles that name nothing exported (bytes from elsewhere): the device refuses them. */
  bad = d;
  for (size_t i = 0; i < GA_IPC_FABRIC_BYTES; i++) bad.pieces[0].handle[i] ^= 0xa5;
#ifdef GA_HAVE_CUDA
  if (fx_on_cuda()) fx_cu.cudadouble_quiet(1); /* the driver's refusal is the point */
#endif
  cr_assert_eq(ga_ipc_import_fabric(fx_a, &bad, &q), GA_ERR_INVALID);
  cr_assert(strstr(ga_last_error(), "ga_ipc_import_fabric: importing a piece"), "%s", ga_last_error());
#ifdef GA_HAVE_CUDA
  if (fx_on_cuda()) fx_cu.cudadouble_quiet(0);
#endif
  cr_assert_eq(ga_check(fx_a), 0, "nothing is left mapped");
  /* A descriptor of the fd kind is not a fabric descriptor. */
  ga_ipc_desc_t fdd;
  cr_assert_eq(ga_ipc_export(fx_a, p, &fdd), GA_OK, "%s", ga_last_error());
  memcpy(&bad, &fdd, sizeof fdd < sizeof bad ? sizeof fdd : sizeof bad);
  ga_ipc_desc_close(&fdd);
  cr_assert_eq(ga_ipc_import_fabric(fx_a, &bad, &q), GA_ERR_INVALID);
  cr_assert_eq(ga_ipc_import_fabric(fx_a, NULL, &q), GA_ERR_INVALID);
  cr_assert_eq(ga_ipc_import_fabric(fx_a, &d, NULL), GA_ERR_INVALID);
  cr_assert_eq(ga_ipc_export_fabric(fx_a, p, NULL), GA_ERR_INVALID);
  cr_assert_eq(ga_ipc_export_fabric(fx_a, (char *)p + 512, &d), GA_ERR_BAD_POINTER);
  cr_assert_eq(ga_ipc_unexport(fx_a, (char *)p + 512), GA_ERR_BAD_POINTER);
  cr_assert_eq(ga_ipc_unexport(fx_a, p), GA_OK, "%s", ga_last_error());
  fx_free(p);
  cr_assert_eq(ga_check(fx_a), 0);
}

Test(ipc, fabric_export_needs_shareable_handles_fabric) {
  fx_open(SHARED, 256 * MiB);
  void *p = fx_alloc(4 * MiB);
  ga_ipc_fabric_desc_t d;
  cr_assert_eq(ga_ipc_export_fabric(fx_a, p, &d), GA_ERR_UNSUPPORTED);
  cr_assert(strstr(ga_last_error(), "shareable_handles:fabric"), "%s", ga_last_error());
  cr_assert_eq(ga_free(fx_a, p), GA_OK, "a refused export leaves the free alone: %s", ga_last_error());
}

static void fabric_refused(int why, const char *words) {
  fx_open(FABRIC, 256 * MiB);
  fx_refuse_fabric(why);
  void *p = NULL;
  ga_status_t st = ga_malloc(fx_a, 4 * MiB, 0, &p);
  cr_assert_eq(st, GA_ERR_UNSUPPORTED, "%s: %s", ga_status_str(st), ga_last_error());
  const char *e = ga_last_error();
  cr_assert(strstr(e, "fabric handles") && strstr(e, words) && strstr(e, "shareable_handles:posix_fd"), "%s",
            e);
  cr_assert_eq(ga_check(fx_a), 0);
  fx_refuse_fabric(0);
  cr_assert_eq(ga_malloc(fx_a, 4 * MiB, 0, &p), GA_OK, "still usable: %s", ga_last_error());
  fx_free(p);
  cr_assert_eq(ga_check(fx_a), 0);
}

Test(ipc, fabric_without_an_imex_channel_is_refused_clearly) {
  fabric_refused(GA_SIM_FABRIC_NOT_PERMITTED, "IMEX channel");
}

Test(ipc, fabric_on_a_device_without_fabric_support_is_refused_clearly) {
  fabric_refused(GA_SIM_FABRIC_NOT_SUPPORTED, "no fabric support");
}
