/* errors.h — the one error type of every internal function that can fail:
 * it returns a ga_err, GA_DEV_OK (0) or one of the positive codes below;
 * results go through out-parameters. Device calls (device.h) return the same
 * codes. Never a bare -1, a ga_status_t or a count in its place: ga_err is an
 * enum of its own, and the build warns (-Wenum-conversion, an error with
 * GA_WERROR) where one enum is used for the other. ga_fail (text.h) is the one
 * place a ga_err becomes a ga_status_t with its message. A leaf.
 */
#ifndef GA_ERRORS_H
#define GA_ERRORS_H

typedef enum ga_err {
  GA_DEV_OK = 0,
  GA_DEV_EOOM = 1,      /* not enough device memory */
  GA_DEV_EINVAL = 2,    /* an argument broke the call's rules (alignment, range, handle) */
  GA_DEV_ENOTREADY = 3, /* event_query: the event has not completed (not a failure) */
  GA_DEV_EDRIVER = 4,   /* any other driver failure */
  GA_DEV_ENODEV = 5,    /* no driver or no such device */
  GA_DEV_ECAPTURE = 6,  /* the call is not permitted while the stream is capturing */
  GA_DEV_ENOMEM = 7,    /* the host ran out of memory (bookkeeping) */
  GA_DEV_ENOTSUP = 8,   /* the backend does not provide this optional call */
} ga_err;

#endif /* GA_ERRORS_H */
