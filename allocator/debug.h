/* debug.h — rules, asserted. GA_ASSERT(rule) states a rule: a precondition a
 * function relies on ("in no tree", "0 < at < size", "ncache > 0"), or a
 * postcondition its header promises ("a FREE block of at least r->rounded
 * bytes in no tree", "a statistic never goes below 0"), stated where the
 * function returns. It is checked in Debug and sanitizer builds (GA_ASSERTS
 * defined by the build). In Release the rule is compiled (its names and types
 * checked, so it cannot rot) but not evaluated. A broken rule prints where it
 * was stated and aborts. A leaf.
 */
#ifndef GA_DEBUG_H
#define GA_DEBUG_H

/* Prints the rule and where it was stated, then aborts. */
_Noreturn void ga_assert_fail(const char *file, int line, const char *rule);

#ifdef GA_ASSERTS
#define GA_ASSERT(rule) ((rule) ? (void)0 : ga_assert_fail(__FILE__, __LINE__, #rule))
#else
#define GA_ASSERT(rule) ((void)sizeof(!(rule)))
#endif

#endif /* GA_DEBUG_H */
