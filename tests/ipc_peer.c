/* ipc_peer.c — the importing process of tests/test_ipc.c (started with
 * fork and exec): ipc_peer SOCKET_FD CONF MODE.
 *
 * Receives a descriptor (ga_ipc_recv) on the socket, imports it into an
 * allocator of its own made from CONF, and answers on the socket with one
 * byte per step:
 *   'S' + status byte   the import's status (anything but GA_OK ends here)
 *   'R'                 every byte read 0x5a (what the exporter wrote)
 *   'W'                 it wrote 0xc3 over every byte
 * MODE "close": then waits for 'C' and closes the import ('D'); MODE "exit":
 * exits holding the import (as a crash would). MODE "fabric": as "close",
 * but what arrives is a ga_ipc_fabric_desc_t as plain bytes (read(2), no
 * file descriptor passed), imported with ga_ipc_import_fabric. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gardenalloc.h"

static int sock;
static void say(char c) {
  if (write(sock, &c, 1) != 1) _exit(3);
}

int main(int argc, char **argv) {
  if (argc != 4) return 2;
  sock = atoi(argv[1]);
  ga_allocator_t *a;
  if (ga_create(argv[2], 0, &a) != GA_OK) {
    fprintf(stderr, "ipc_peer: %s\n", ga_last_error());
    return 4;
  }
  int fabric = !strcmp(argv[3], "fabric");
  ga_ipc_desc_t d;
  ga_ipc_fabric_desc_t fd;
  void *p = NULL;
  ga_status_t st;
  if (fabric) {
    size_t got = 0;
    while (got < sizeof fd) {
      ssize_t k = read(sock, (char *)&fd + got, sizeof fd - got);
      if (k <= 0) return 5;
      got += (size_t)k;
    }
    st = ga_ipc_import_fabric(a, &fd, &p);
    d.size = fd.size;
  } else {
    if (ga_ipc_recv(sock, &d) != GA_OK) {
      fprintf(stderr, "ipc_peer: %s\n", ga_last_error());
      return 5;
    }
    st = ga_ipc_import(a, &d, &p);
    ga_ipc_desc_close(&d);
  }
  say('S');
  say((char)st);
  if (st != GA_OK) {
    fprintf(stderr, "ipc_peer: import: %s\n", ga_last_error());
    ga_destroy(a);
    return 0;
  }
  unsigned char *b = p;
  size_t bad = 0;
  for (size_t i = 0; i < d.size; i++) bad += b[i] != 0x5a;
  if (!bad) say('R');
  memset(b, 0xc3, d.size);
  say('W');
  if (!strcmp(argv[3], "exit")) _exit(0); /* the import is still held */
  char c = 0;
  if (read(sock, &c, 1) != 1 || c != 'C') return 6;
  st = ga_ipc_close(a, p);
  say(st == GA_OK ? 'D' : 'F');
  if (ga_check(a) != 0) return 7;
  ga_destroy(a);
  return 0;
}
