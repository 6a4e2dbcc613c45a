/* lock.h — the allocator's lock: a futex mutex (Drepper's "mutex2") with a
 * short spin. Uncontended lock and unlock are one atomic instruction each,
 * which matters on the allocate+free hot path; waiters sleep in the kernel.
 * States: 0 free, 1 locked, 2 locked with (possible) waiters. */
#ifndef GA_LOCK_H
#define GA_LOCK_H

#include <linux/futex.h>
#include <stdatomic.h>
#include <sys/syscall.h>
#include <unistd.h>

typedef struct ga_lock {
  atomic_int state;
} ga_lock;

static inline void ga_lock_init(ga_lock *l) { atomic_init(&l->state, 0); }

static inline int ga_lock_cas(ga_lock *l, int expect, int desired) {
  atomic_compare_exchange_strong_explicit(&l->state, &expect, desired, memory_order_acquire, memory_order_relaxed);
  return expect;
}

static inline void ga_lock_slow(ga_lock *l, int c) {
  for (int spin = 0; spin < 100 && c == 1; spin++) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
    c = ga_lock_cas(l, 0, 1);
    if (c == 0) return;
  }
  if (c != 2) c = atomic_exchange_explicit(&l->state, 2, memory_order_acquire);
  while (c != 0) {
    syscall(SYS_futex, &l->state, FUTEX_WAIT_PRIVATE, 2, NULL, NULL, 0);
    c = atomic_exchange_explicit(&l->state, 2, memory_order_acquire);
  }
}

static inline void ga_lock_acquire(ga_lock *l) {
  int c = ga_lock_cas(l, 0, 1);
  if (c != 0) ga_lock_slow(l, c);
}

static inline void ga_lock_release(ga_lock *l) {
  if (atomic_fetch_sub_explicit(&l->state, 1, memory_order_release) != 1) {
    atomic_store_explicit(&l->state, 0, memory_order_release);
    syscall(SYS_futex, &l->state, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
  }
}

#endif
