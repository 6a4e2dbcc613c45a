/* lock.h — the allocator's lock: a futex mutex (Drepper's "mutex2") with a
 * read-only spin before sleeping. Uncontended lock and unlock are one atomic
 * instruction each, which matters on the allocate+free hot path; waiters
 * spin on loads for a while, then sleep in the kernel.
 * States: 0 free, 1 locked, 2 locked with (possible) waiters.
 * Where asserts are on (GA_ASSERTS, debug.h), the lock also records which
 * thread holds it, so that ga_lock_held can tell "this thread holds it" from
 * "some thread does"; in Release neither acquire nor release touches it. */
#ifndef GA_LOCK_H
#define GA_LOCK_H

#include <linux/futex.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <unistd.h>

typedef struct ga_lock {
  atomic_int state;
  /* The holding thread (pthread_self) or 0, kept only where GA_ASSERTS is
   * defined. Present in every build, so that every file sees one layout. */
  atomic_uintptr_t owner;
} ga_lock;

static inline void ga_lock_init(ga_lock *l) {
  atomic_init(&l->state, 0);
  atomic_init(&l->owner, 0);
}

static inline uintptr_t ga_lock_self(void) { return (uintptr_t)pthread_self(); }

/* Whether the calling thread holds l (asserts on; elsewhere never asked).
 * Relaxed is enough: only the holder stores its own id, and each thread
 * clears it before its own release, so no other thread can read its id. */
static inline int ga_lock_held(ga_lock *l) {
  return atomic_load_explicit(&l->owner, memory_order_relaxed) == ga_lock_self();
}

static inline int ga_lock_cas(ga_lock *l, int expect, int desired) {
  atomic_compare_exchange_strong_explicit(&l->state, &expect, desired, memory_order_acquire,
                                          memory_order_relaxed);
  return expect;
}

/* Spins reading the word (no stores while it is held, so the holder's cache
 * line is not stolen) for about the length of a typical critical section,
 * then sleeps. Returns the state seen last. */
static inline int ga_lock_spin(ga_lock *l) {
  int c = atomic_load_explicit(&l->state, memory_order_relaxed);
  for (int spin = 0; spin < 2000 && c != 0; spin++) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
    c = atomic_load_explicit(&l->state, memory_order_relaxed);
  }
  return c;
}

/* A thread that has slept takes the lock as contended (2) from then on:
 * others may sleep behind it, and its release must wake one of them. */
static inline void ga_lock_slow(ga_lock *l, int c) {
  int want = 1;
  for (;;) {
    c = ga_lock_spin(l);
    if (c == 0 && (c = ga_lock_cas(l, 0, want)) == 0) return;
    if (c != 2 && atomic_exchange_explicit(&l->state, 2, memory_order_acquire) == 0) return;
    syscall(SYS_futex, &l->state, FUTEX_WAIT_PRIVATE, 2, NULL, NULL, 0);
    want = 2;
  }
}

static inline void ga_lock_acquire(ga_lock *l) {
  int c = ga_lock_cas(l, 0, 1);
  if (c != 0) ga_lock_slow(l, c);
#ifdef GA_ASSERTS
  atomic_store_explicit(&l->owner, ga_lock_self(), memory_order_relaxed);
#endif
}

/* Takes l if it is free and returns 1; returns 0 at once if it is held. */
static inline int ga_lock_try(ga_lock *l) {
  if (ga_lock_cas(l, 0, 1) != 0) return 0;
#ifdef GA_ASSERTS
  atomic_store_explicit(&l->owner, ga_lock_self(), memory_order_relaxed);
#endif
  return 1;
}

static inline void ga_lock_release(ga_lock *l) {
#ifdef GA_ASSERTS
  atomic_store_explicit(&l->owner, 0, memory_order_relaxed);
#endif
  if (atomic_fetch_sub_explicit(&l->state, 1, memory_order_release) != 1) {
    atomic_store_explicit(&l->state, 0, memory_order_release);
    syscall(SYS_futex, &l->state, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
  }
}

#endif
