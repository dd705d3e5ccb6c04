/* error.h — the library's one way to fail: set a thread-local message and return a status. */
#ifndef TR_ERROR_H
#define TR_ERROR_H

#include "tokroute.h"

#if defined(__GNUC__)
#define TR_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define TR_PRINTF(a, b)
#endif

/* Records "fmt ..." as the calling thread's last error and returns status, so callers write
 * `return tr_fail(TR_ERR_FORMAT, "tensor %s: ...", name);`. */
tr_status tr_fail(tr_status status, const char *fmt, ...) TR_PRINTF(2, 3);

/* Prepends "prefix: " to the current message (adds context on the way up); returns status unchanged. */
tr_status tr_fail_prefix(tr_status status, const char *fmt, ...) TR_PRINTF(2, 3);

/* Clears the message (used by calls that succeed after an expected, handled failure). */
void tr_clear_error(void);

#endif /* TR_ERROR_H */
