/* error.c — status names and the thread-local last-error message. */
#include "common/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static _Thread_local char last_error[1024];

const char *tr_version(void) { return TR_VERSION; }

const char *tr_status_name(tr_status status) {
    switch (status) {
    case TR_OK: return "ok";
    case TR_ERR_ARG: return "invalid argument";
    case TR_ERR_IO: return "i/o error";
    case TR_ERR_FORMAT: return "malformed input";
    case TR_ERR_UNSUPPORTED: return "unsupported";
    case TR_ERR_NOMEM: return "out of memory";
    case TR_ERR_RANGE: return "out of range";
    case TR_ERR_NETWORK: return "network error";
    case TR_ERR_TIMEOUT: return "timeout";
    case TR_ERR_STATE: return "invalid state";
    }
    return "unknown status";
}

const char *tr_last_error(void) { return last_error; }

void tr_clear_error(void) { last_error[0] = '\0'; }

tr_status tr_fail(tr_status status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    return status;
}

tr_status tr_fail_prefix(tr_status status, const char *fmt, ...) {
    char prefix[512];
    char old[sizeof last_error];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, last_error, sizeof old);
    snprintf(last_error, sizeof last_error, "%s: %s", prefix, old);
    return status;
}
