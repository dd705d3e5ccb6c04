/* http_fetch.c — http.h in the browser (emscripten builds link this instead of http.c): each request is one
 * synchronous XMLHttpRequest made from the Web Worker the decode loop runs in (a worker may block on one, a page
 * may not), so the backends (remote.c, server.c, openai.c) and their reply parsers run unchanged and the C call
 * stack stays synchronous without Asyncify. The browser owns the connections (kept alive, https verified against
 * its own trust store: tr_remote_params.cacert is refused).
 *
 * What a browser does not give: a synchronous request delivers its body whole, so a streamed ndjson reply
 * (lookahead after the answer) reaches on_line line by line only once it has ended, and it cannot be left early;
 * the abort callback is asked before each attempt, not during one; no separate connect timeout (the attempt's
 * time left bounds connecting and reading together, as xhr.timeout). Errors map as natively: no answer (refused,
 * DNS, CORS refused — a browser does not tell these apart) is TR_ERR_NETWORK, xhr.timeout TR_ERR_TIMEOUT, both
 * retried with backoff inside the deadline, as are 502/503/504; any other status is the caller's to judge. */
#include <emscripten.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/error.h"
#include "transport/http.h"

struct http_client {
    char *base;         /* URL without trailing '/' */
    char *auth;         /* "Bearer KEY" or NULL */
    int32_t timeout_ms, retries;
    size_t max_body;    /* replies above this are an error (bounded memory) */
    char *buf;          /* the last reply's body, NUL-terminated */
    size_t cap;
};

/* One attempt. Returns 0 with *status, *len (body bytes, kept on the JS side until fetch_take copies them) and
 * *ndjson (a streamed type); 1 when no answer came (network error, CORS refusal), 2 on timeout. */
EM_JS(int, fetch_attempt, (const char *method, const char *url, const char *auth, const char *body,
                           int timeout_ms, int *status, int *len, int *ndjson), {
    var xhr = new XMLHttpRequest();
    try {
        xhr.open(UTF8ToString(method), UTF8ToString(url), false);
        xhr.responseType = "arraybuffer";
        xhr.timeout = timeout_ms;
        if (body) xhr.setRequestHeader("Content-Type", "application/json");
        if (auth) xhr.setRequestHeader("Authorization", UTF8ToString(auth));
        xhr.send(body ? UTF8ToString(body) : null);
    } catch (e) {
        return e && e.name === "TimeoutError" ? 2 : 1;
    }
    if (xhr.status === 0) return 1;
    var bytes = new Uint8Array(xhr.response || new ArrayBuffer(0));
    var type = (xhr.getResponseHeader("Content-Type") || "").toLowerCase();
    self.tokrouteFetchBody = bytes;
    HEAP32[status >> 2] = xhr.status;
    HEAP32[len >> 2] = bytes.length;
    HEAP32[ndjson >> 2] = type.indexOf("application/x-ndjson") === 0 || type.indexOf("text/event-stream") === 0 ? 1 : 0;
    return 0;
});

/* Copies the last attempt's body into dst (room for its length). */
EM_JS(void, fetch_take, (char *dst), {
    HEAPU8.set(self.tokrouteFetchBody, dst);
    self.tokrouteFetchBody = null;
});

EM_JS(void, fetch_drop, (void), { self.tokrouteFetchBody = null; });

double http_deadline(const http_client *c) { return http_now_ms() + c->timeout_ms; }

tr_status http_client_create(const tr_remote_params *p, http_client **out) {
    *out = NULL;
    tr_status st = http_params_check(p);
    if (st != TR_OK) return st;
    if (p->cacert) return tr_fail(TR_ERR_ARG, "remote backend: a CA file is not used in the browser (its trust store is)");
    http_client *c = calloc(1, sizeof *c);
    if (!c) return tr_fail(TR_ERR_NOMEM, "out of memory");
    c->timeout_ms = p->timeout_ms;
    c->retries = p->retries;
    c->max_body = 64u << 20;
    c->base = strdup(p->url);
    if (c->base && p->api_key && *p->api_key && (c->auth = malloc(strlen(p->api_key) + 8)))
        sprintf(c->auth, "Bearer %s", p->api_key);
    if (!c->base || (p->api_key && *p->api_key && !c->auth)) {
        http_client_free(c);
        return tr_fail(TR_ERR_NOMEM, "out of memory");
    }
    size_t n = strlen(c->base);
    while (n > 0 && c->base[n - 1] == '/') c->base[--n] = '\0';
    *out = c;
    return TR_OK;
}

void http_client_free(http_client *c) {
    if (!c) return;
    free(c->base);
    free(c->auth);
    free(c->buf);
    free(c);
}

void http_client_wake(http_client *c) { (void)c; /* nothing waits in the background */ }

/* Takes the body of the attempt that just answered into c->buf; false when it is too large or memory runs out. */
static bool take_body(http_client *c, size_t len) {
    if (len + 1 > c->max_body) return fetch_drop(), false;
    if (len + 1 > c->cap) {
        char *b = realloc(c->buf, len + 1);
        if (!b) return fetch_drop(), false;
        c->buf = b;
        c->cap = len + 1;
    }
    fetch_take(c->buf);
    c->buf[len] = '\0';
    return true;
}

/* Hands a whole streamed body to on_line, line by line (without line breaks, a trailing '\r' dropped). */
static tr_status deliver_lines(http_client *c, size_t len, const http_lines *lines, http_response *resp) {
    resp->streamed = true;
    resp->body = "";
    for (size_t at = 0; at < len;) {
        char *nl = memchr(c->buf + at, '\n', len - at);
        size_t k = nl ? (size_t)(nl - (c->buf + at)) : len - at;
        if (k > HTTP_MAX_LINE_BYTES) return tr_fail(TR_ERR_NETWORK, "a streamed line is longer than %u bytes", HTTP_MAX_LINE_BYTES);
        char *line = c->buf + at;
        line[k] = '\0';
        size_t n = k > 0 && line[k - 1] == '\r' ? k - 1 : k;
        at += k + 1;
        if (!lines->on_line(lines->user, line, n)) {
            resp->left = at < len;
            break;
        }
    }
    return TR_OK;
}

tr_status http_request_lines(http_client *c, const char *method, const char *path, const char *body,
                             double deadline_ms, tr_abort_fn abort_fn, void *abort_user, const http_lines *lines,
                             http_response *resp) {
    memset(resp, 0, sizeof *resp);
    resp->body = "";
    char *url = malloc(strlen(c->base) + strlen(path) + 1);
    if (!url) return tr_fail(TR_ERR_NOMEM, "out of memory");
    strcpy(url, c->base);
    strcat(url, path);
    const bool has_body = strcmp(method, "GET") != 0;
    tr_status st = TR_OK;
    double backoff_ms = 25.0;
    for (int attempt = 0;; attempt++) {
        const double left = deadline_ms - http_now_ms();
        if (left < 1.0) {
            st = tr_fail(TR_ERR_TIMEOUT, "%s %s: no answer within the timeout (%d ms)", method, path, c->timeout_ms);
            break;
        }
        if (abort_fn && abort_fn(abort_user)) {
            st = tr_fail(TR_ERR_STATE, "%s %s: aborted", method, path);
            break;
        }
        int status = 0, len = 0, ndjson = 0;
        const int rc = fetch_attempt(method, url, c->auth, has_body ? (body ? body : "") : NULL, (int)left, &status,
                                     &len, &ndjson);
        const bool retry_status = rc == 0 && (status == 502 || status == 503 || status == 504);
        if (rc == 0 && !take_body(c, (size_t)len)) {
            st = tr_fail(TR_ERR_NETWORK, "%s %s%s: the reply (%d bytes) is too large", method, c->base, path, len);
            break;
        }
        if (rc == 0 && !retry_status) {
            resp->status = status;
            resp->len = (size_t)len;
            if (lines && lines->on_line && status == 200 && ndjson) {
                st = deliver_lines(c, (size_t)len, lines, resp);
            } else {
                resp->body = c->buf;
            }
            break;
        }
        const bool again = attempt < c->retries && deadline_ms - http_now_ms() > backoff_ms + 1.0;
        if (!again) {
            if (retry_status) {
                resp->status = status;
                resp->len = (size_t)len;
                resp->body = c->buf;
                break;
            }
            st = tr_fail(rc == 2 ? TR_ERR_TIMEOUT : TR_ERR_NETWORK, "%s %s%s: %s (after %d attempt%s)", method,
                         c->base, path, rc == 2 ? "timed out" : "no answer (unreachable, or refused by CORS)",
                         attempt + 1, attempt ? "s" : "");
            break;
        }
        http_sleep_ms(backoff_ms);
        backoff_ms *= 2;
    }
    free(url);
    return st;
}
