/* http_common.c — what both HTTP clients share: libcurl's (http.c, native) and the browser's (http_fetch.c,
 * emscripten; one of the two is linked): the monotonic clock deadlines are measured on, the backoff sleep between
 * attempts, the message of an error body, the checks of a client's parameters, and a whole-body request as a request
 * of lines with no line reader. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "common/error.h"
#include "transport/http.h"

tr_status http_params_check(const tr_remote_params *p) {
    if (!p || !p->url || !*p->url) return tr_fail(TR_ERR_ARG, "remote backend: no URL");
    if (strncmp(p->url, "http://", 7) != 0 && strncmp(p->url, "https://", 8) != 0)
        return tr_fail(TR_ERR_ARG, "remote backend: URL '%s' must start with http:// or https://", p->url);
    if (p->timeout_ms <= 0 || p->retries < 0 || p->retries > 100)
        return tr_fail(TR_ERR_ARG, "remote backend: timeout_ms must be > 0 and retries in 0..100");
    if (p->api_key && strpbrk(p->api_key, "\r\n"))
        return tr_fail(TR_ERR_ARG, "remote backend: the API key contains a line break");
    return TR_OK;
}

double http_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

void http_sleep_ms(double ms) {
    if (ms <= 0) return;
    struct timespec ts = {(time_t)(ms / 1e3), (long)((ms - (double)(time_t)(ms / 1e3) * 1e3) * 1e6)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

const char *http_error_text(const http_response *resp, char *buf, size_t cap) {
    const char *b = resp->body ? resp->body : "";
    /* Cheap extraction without a JSON parse: the backends parse bodies they need; this is for messages only. */
    const char *m = strstr(b, "\"message\"");
    if (m && (m = strchr(m + 9, '"'))) {
        m++;
        size_t n = 0;
        while (m[n] && m[n] != '"' && n + 1 < cap) n++;
        memcpy(buf, m, n);
        buf[n] = '\0';
        return buf;
    }
    snprintf(buf, cap, "%.*s", (int)(resp->len < 200 ? resp->len : 200), b);
    return buf;
}

tr_status http_request(http_client *c, const char *method, const char *path, const char *body, double deadline_ms,
                       tr_abort_fn abort_fn, void *abort_user, http_response *resp) {
    return http_request_lines(c, method, path, body, deadline_ms, abort_fn, abort_user, NULL, resp);
}
