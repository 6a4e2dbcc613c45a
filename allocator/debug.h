/* debug.h — preconditions, asserted. GA_ASSERT(rule) states a rule a function
 * relies on ("in no tree", "0 < at < size", "ncache > 0"). It is checked in
 * Debug and sanitizer builds (GA_ASSERTS defined by the build) and compiles
 * away in Release. A broken rule prints where it was stated and aborts. A leaf.
 */
#ifndef GA_DEBUG_H
#define GA_DEBUG_H

/* Prints the rule and where it was stated, then aborts. */
_Noreturn void ga_assert_fail(const char *file, int line, const char *rule);

#ifdef GA_ASSERTS
#define GA_ASSERT(rule) ((rule) ? (void)0 : ga_assert_fail(__FILE__, __LINE__, #rule))
#else
#define GA_ASSERT(rule) ((void)0)
#endif

#endif /* GA_DEBUG_H */
