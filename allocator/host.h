/* host.h — every host allocation of the allocator (its records, trees,
 * arrays, history, the simulated device's bookkeeping) goes through these
 * wrappers, so that a test can make the Nth one fail and check that each
 * public call answers GA_ERR_HOST_MEMORY, stays consistent and leaks nothing
 * (tests/test_hostoom.c). Memory from them is released with free(). A leaf.
 */
#ifndef GA_HOST_H
#define GA_HOST_H

#include <stddef.h>
#include <stdint.h>

void *ga_host_malloc(size_t size);
void *ga_host_calloc(size_t n, size_t size);
void *ga_host_realloc(void *p, size_t size);
void *ga_host_aligned_alloc(size_t align, size_t size);
char *ga_host_strdup(const char *str);
/* `size` zeroed bytes of fresh pages, made only as they are first touched
 * (a large table that is mostly never written costs what is written);
 * released with ga_host_zeroed_free(p, size), not free(). */
void *ga_host_zeroed(size_t size);
void ga_host_zeroed_free(void *p, size_t size);
/* `size` zeroed bytes aligned to GA_HOST_TABLE_ALIGN, for a table or slab
 * the allocator reads at random (its block map, its block records). From
 * GA_HOST_HUGE bytes up they are fresh pages aligned to GA_HOST_HUGE with
 * transparent huge pages advised (MADV_HUGEPAGE): one TLB entry then covers
 * 2 MiB of records where 4 KiB pages would cost a page walk on almost every
 * random lookup among 10^6 blocks. Below it (and in a build under
 * AddressSanitizer, whose leak check reads only the heap) they come from the
 * C library.
 * Released with ga_host_table_free(p, size), with the same size. */
#define GA_HOST_TABLE_ALIGN 128
#define GA_HOST_HUGE        ((size_t)2 << 20)
void *ga_host_table(size_t size);
void ga_host_table_free(void *p, size_t size);

/* ---- For tests ----
 * The nth host allocation from now (1 = the next one) fails, and with sticky
 * every one after it too; nth 0 disarms. Returns nothing; ga_host_faults_fired
 * counts the allocations made to fail since the last arming. */
void ga_host_fault(uint64_t nth, int sticky);
uint64_t ga_host_faults_fired(void);
/* Host allocations made through the wrappers since the process started. */
uint64_t ga_host_allocations(void);

#endif /* GA_HOST_H */
