/* test_fork.c — fork(): a child never hangs on, writes through or frees its
 * parent's allocator. Every call on an inherited allocator returns
 * GA_ERR_FORKED at once, even when the fork copied its lock held; the child
 * may make allocators of its own; the parent goes on as before.
 *
 * Each check runs in a child that reports through its exit status (0: every
 * promise held; a number: the first that broke, printed on stderr) and is
 * killed by an alarm if it hangs. */
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fixture.h"

TestSuite(fork, .fini = fx_close);

/* Runs fn in a forked child with a time limit; returns its exit status, or
 * 100 + the signal that ended it (SIGALRM: it hung). */
static int in_child(int (*fn)(void *), void *arg) {
  fflush(NULL);
  pid_t pid = fork();
  cr_assert_neq(pid, -1, "fork");
  if (pid == 0) {
    alarm(10);
    _exit(fn(arg));
  }
  int status = 0;
  cr_assert_eq(waitpid(pid, &status, 0), pid);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 100 + WTERMSIG(status);
}

#define CHILD_CHECK(n, cond)                                                                      \
  do {                                                                                            \
    if (!(cond)) {                                                                                \
      fprintf(stderr, "child check %d failed: %s (last error: %s)\n", n, #cond, ga_last_error()); \
      return n;                                                                                   \
    }                                                                                             \
  } while (0)

/* Every entry point on the inherited allocator: refused, named, at once. */
static int child_uses_parent(void *arg) {
  char *live = arg;
  void *p = (void *)1;
  CHILD_CHECK(1, ga_malloc(fx_a, MiB, S1, &p) == GA_ERR_FORKED && p == NULL);
  CHILD_CHECK(2, strstr(ga_last_error(), "ga_malloc: this allocator belongs to process") != NULL);
  CHILD_CHECK(3, strstr(ga_last_error(), "the parent of this one (fork)") != NULL);
  CHILD_CHECK(4, ga_free(fx_a, live) == GA_ERR_FORKED);
  CHILD_CHECK(5, ga_record_stream(fx_a, live, S2) == GA_ERR_FORKED);
  ga_stats_t stats;
  CHILD_CHECK(6, ga_stats(fx_a, &stats) == GA_ERR_FORKED);
  CHILD_CHECK(7, ga_empty_cache(fx_a) == GA_ERR_FORKED);
  CHILD_CHECK(8, ga_stats_json(fx_a, NULL, 0) == 0);
  CHILD_CHECK(9, ga_snapshot_json(fx_a, NULL, 0) == 0);
  CHILD_CHECK(10, ga_check(fx_a) != 0);
  CHILD_CHECK(11, ga_sleep(fx_a, NULL, 0) == GA_ERR_FORKED && ga_wake(fx_a) == GA_ERR_FORKED);
  CHILD_CHECK(12, ga_record_history(fx_a, 1, 0) == GA_ERR_FORKED);
  CHILD_CHECK(13, ga_set_memory_fraction(fx_a, 0.5) == GA_ERR_FORKED);
  CHILD_CHECK(14, strcmp(ga_status_str(GA_ERR_FORKED), "GA_ERR_FORKED") == 0);
  ga_destroy(fx_a); /* frees nothing: the parent's */
  return 0;
}

/* A new allocator in the child is the child's own: its bytes are not the parent's. */
static int child_makes_its_own(void *arg) {
  char *live = arg;
  ga_allocator_t *mine = NULL;
  CHILD_CHECK(20, ga_create("backend:sim,sim_capacity_mb:64", 0, &mine) == GA_OK);
  char *p = NULL;
  CHILD_CHECK(21, ga_malloc(mine, 4 * MiB, NULL, (void **)&p) == GA_OK && p);
  memset(p, 0x5a, 4 * MiB);
  CHILD_CHECK(22, fx_verify(live, 4 * MiB, 9)); /* the parent's allocation, as inherited */
  CHILD_CHECK(23, ga_free(mine, p) == GA_OK && ga_check(mine) == 0);
  ga_destroy(mine);
  return 0;
}

static void *hold_lock(void *arg) {
  ga_allocator_t *a = arg;
  ga_lock_acquire(&a->mu); /* as a thread inside an allocator call would */
  return NULL;
}

Test(fork, a_child_forked_while_a_call_holds_the_lock_is_refused_at_once) {
  fx_open(NULL, GiB);
  char *live = fx_alloc(4 * MiB);
  fx_fill(live, 4 * MiB, 9);
  pthread_t t;
  cr_assert_eq(pthread_create(&t, NULL, hold_lock, fx_a), 0);
  pthread_join(t, NULL); /* the lock stays held by a thread that is gone */
  int st = in_child(child_uses_parent, live);
  cr_assert_neq(st, 100 + SIGALRM, "the child hung on its parent's lock");
  cr_assert_eq(st, 0, "child check %d failed (see stderr)", st);
  cr_assert_eq(in_child(child_makes_its_own, live), 0);
  ga_lock_release(&fx_a->mu);
  cr_assert(fx_verify(live, 4 * MiB, 9), "the parent's bytes are untouched");
  fx_free(live);
}

/* A thread allocates and frees without pause while the main thread forks:
 * every child answers at once, and the parent goes on. */
static volatile int stop;
static void *churn(void *arg) {
  (void)arg;
  while (!stop) {
    void *p = NULL;
    if (ga_malloc(fx_a, 3 * MiB, S1, &p) == GA_OK) ga_free(fx_a, p);
  }
  return NULL;
}

static int child_allocates(void *arg) {
  (void)arg;
  void *p = NULL;
  CHILD_CHECK(30, ga_malloc(fx_a, 3 * MiB, S1, &p) == GA_ERR_FORKED && p == NULL);
  return 0;
}

Test(fork, children_forked_during_calls_never_hang_and_the_parent_goes_on) {
  fx_open("expandable_segments:True", GiB);
  pthread_t t;
  stop = 0;
  cr_assert_eq(pthread_create(&t, NULL, churn, NULL), 0);
  for (int i = 0; i < 20; i++) {
    int st = in_child(child_allocates, NULL);
    cr_assert_eq(st, 0, "fork %d: child status %d (%d: it hung)", i, st, 100 + SIGALRM);
  }
  stop = 1;
  pthread_join(t, NULL);
  char *p = fx_alloc(5 * MiB);
  fx_fill(p, 5 * MiB, 3);
  cr_assert(fx_verify(p, 5 * MiB, 3));
  fx_free(p);
  cr_assert_eq(ga_check(fx_a), 0);
}

/* PyTorch's entry points in a child: alloc fails with the reason, free of an
 * inherited tensor is a silent no-op (a data-loader worker that drops it). */
static int child_torch(void *arg) {
  void *inherited = arg;
  CHILD_CHECK(40, ga_torch_alloc_nothrow(MiB, 0, NULL) == NULL);
  CHILD_CHECK(41, strstr(ga_last_error(), "(fork)") != NULL);
  ga_torch_free(inherited, 2 * (ssize_t)MiB, 0, NULL);
  ga_torch_record_stream(inherited, S2);
  ga_torch_reset();
  CHILD_CHECK(42, ga_torch_base_alloc(inherited, NULL) == inherited);
  return 0;
}

Test(fork, pytorch_entry_points_in_a_child) {
  setenv("GARDENALLOC_CONF", "backend:sim,sim_capacity_mb:256", 1);
  void *t = ga_torch_alloc_nothrow(2 * (ssize_t)MiB, 0, NULL);
  cr_assert_not_null(t, "%s", ga_last_error());
  fflush(NULL);
  int err[2];
  cr_assert_eq(pipe(err), 0);
  pid_t pid = fork();
  if (pid == 0) {
    dup2(err[1], 2); /* what the child says on stderr */
    alarm(10);
    _exit(child_torch(t));
  }
  close(err[1]);
  int status = 0;
  cr_assert_eq(waitpid(pid, &status, 0), pid);
  char said[512] = "";
  ssize_t n = read(err[0], said, sizeof said - 1);
  said[n > 0 ? n : 0] = 0;
  close(err[0]);
  cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child: %d %s", status, said);
  cr_assert_eq(said[0], 0, "the child printed: %s", said);
  ga_allocator_t *a = ga_torch_allocator(0);
  size_t req = 0;
  cr_assert_eq(ga_allocation_size(a, t, &req, NULL), GA_OK, "still live in the parent");
  ga_torch_free(t, 2 * (ssize_t)MiB, 0, NULL);
  cr_assert_eq(ga_check(a), 0);
}
