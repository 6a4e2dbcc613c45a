/* errors.h — the one error convention of every internal function: return 0,
 * or one of the positive codes below; results go through out-parameters.
 * Device calls (device.h) return the same codes. The public API maps them to
 * ga_status_t at its edge. A leaf.
 */
#ifndef GA_ERRORS_H
#define GA_ERRORS_H

enum {
  GA_DEV_OK = 0,
  GA_DEV_EOOM = 1,      /* not enough device memory */
  GA_DEV_EINVAL = 2,    /* an argument broke the call's rules (alignment, range, handle) */
  GA_DEV_ENOTREADY = 3, /* event_query: the event has not completed (not a failure) */
  GA_DEV_EDRIVER = 4,   /* any other driver failure */
  GA_DEV_ENODEV = 5,    /* no driver or no such device */
  GA_DEV_ECAPTURE = 6,  /* the call is not permitted while the stream is capturing */
  GA_DEV_ENOMEM = 7,    /* the host ran out of memory (bookkeeping) */
  GA_DEV_ENOTSUP = 8,   /* the backend does not provide this optional call */
};

#endif /* GA_ERRORS_H */
