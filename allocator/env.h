/* env.h — the configuration PyTorch's entry points take from the environment
 * (env.c): GARDENALLOC_CONF, else PyTorch's PYTORCH_CUDA_ALLOC_CONF /
 * PYTORCH_ALLOC_CONF with the keys gardenalloc applies as PyTorch does. */
#ifndef GA_ENV_H
#define GA_ENV_H

#include <stddef.h>

/* The configuration string for the allocators behind the PyTorch entry
 * points, read from the environment once per process (the first call names
 * on stderr whatever is not applied, or why the setting is refused). "" (the
 * defaults) when no variable is set; NULL when PyTorch's variable is refused
 * (ga_env_error() says why). `source` (may be NULL) gets the variable's name,
 * or "defaults". */
const char *ga_env_conf(const char **source);

/* Why PyTorch's variable was refused ("" when it was not). */
const char *ga_env_error(void);

/* The translation itself, for tests: PyTorch's string `pytorch` (read from
 * variable `var`, named in the messages) into `out` (the items gardenalloc
 * applies, in order, each checked by the parser), one line per item without
 * effect into `notes`; `ignore` (may be NULL) is a comma-separated list of
 * keys let through without effect. Returns 0; 1 when the string is refused,
 * with the reason in `err`; -1 for an unusable buffer. */
int ga_env_translate(const char *var, const char *pytorch, const char *ignore, char *out, size_t outlen,
                     char *notes, size_t noteslen, char *err, size_t errlen);

#endif /* GA_ENV_H */
