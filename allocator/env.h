/* env.h — the configuration PyTorch's entry points take from the environment
 * (env.c): GARDENALLOC_CONF, else PyTorch's PYTORCH_CUDA_ALLOC_CONF /
 * PYTORCH_ALLOC_CONF with the keys gardenalloc applies as PyTorch does. */
#ifndef GA_ENV_H
#define GA_ENV_H

#include <stddef.h>

/* The configuration string for the allocators behind the PyTorch entry
 * points, read from the environment once per process (the first call names
 * whatever is not applied on stderr). "" (the defaults) when no variable is
 * set. `source` (may be NULL) gets the variable's name, or "defaults". */
const char *ga_env_conf(const char **source);

/* The translation itself, for tests: PyTorch's string `pytorch` (read from
 * variable `var`, named in the notes) into `out` (the items gardenalloc
 * applies, in order, each checked by the parser), and one line per item left
 * out or without effect into `notes`. Returns 0, or -1 for an unusable
 * buffer. */
int ga_env_translate(const char *var, const char *pytorch, char *out, size_t outlen, char *notes,
                     size_t noteslen);

#endif /* GA_ENV_H */
