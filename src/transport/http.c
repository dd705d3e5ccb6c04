/* http.c — libcurl under the remote backends. One easy handle per client: libcurl keeps its connection alive
 * between requests to the same host, so a routed token costs one request on an open connection.
 *
 * Time: every request runs against an absolute deadline that the backend sets once per next-token call, so
 * retries, backoff and a 409 resync together never exceed the call's timeout_ms. Each attempt gets the time left
 * (connect capped by connect_timeout_ms). Certificates are always verified; --cacert only changes the trust
 * store.
 *
 * Streamed replies (http_request_lines): the write callback decides per reply, on its first bytes, whether to
 * collect the body or to split it into lines for the caller — only a 200 of type application/x-ndjson is split,
 * so error bodies read as always. buf then holds the line being assembled. */
#include "transport/http.h"

#include <curl/curl.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "common/error.h"

struct http_client {
    CURL *curl;
    char *base;            /* URL without trailing '/' */
    struct curl_slist *headers;
    char *cacert;
    int32_t timeout_ms, connect_timeout_ms, retries;
    char *buf;
    size_t len, cap;
    size_t max_body;       /* replies above this are an error (bounded memory) */
    /* the reply in progress */
    http_line_fn on_line;  /* NULL: collect every body */
    void *line_user;
    enum { BODY_UNDECIDED, BODY_COLLECT, BODY_LINES } body_mode;
    size_t received;       /* body bytes of this attempt */
    bool delivered;        /* a line went to on_line: no retry */
    tr_abort_fn abort_fn;
    void *abort_user;
    char errbuf[CURL_ERROR_SIZE];
};

static pthread_once_t global_once = PTHREAD_ONCE_INIT;
static CURLcode global_rc = CURLE_OK;
static void global_init(void) { global_rc = curl_global_init(CURL_GLOBAL_DEFAULT); }

double http_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

double http_deadline(const http_client *c) { return http_now_ms() + c->timeout_ms; }

static void sleep_ms(double ms) {
    if (ms <= 0) return;
    struct timespec ts = {(time_t)(ms / 1e3), (long)((ms - (double)(time_t)(ms / 1e3) * 1e3) * 1e6)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* Appends n bytes to buf (kept NUL-terminated); false when out of memory. */
static bool buf_append(http_client *c, const char *p, size_t n) {
    if (c->len + n + 1 > c->cap) {
        size_t cap = c->cap ? c->cap : 4096;
        while (cap < c->len + n + 1) cap *= 2;
        char *b = realloc(c->buf, cap);
        if (!b) return false;
        c->buf = b;
        c->cap = cap;
    }
    memcpy(c->buf + c->len, p, n);
    c->len += n;
    c->buf[c->len] = '\0';
    return true;
}

static void deliver_line(http_client *c) {
    size_t n = c->len;
    if (n > 0 && c->buf[n - 1] == '\r') c->buf[--n] = '\0';
    c->delivered = true;
    c->on_line(c->line_user, c->buf, n);
    c->len = 0;
    c->buf[0] = '\0';
}

/* Splits p into lines for on_line; buf carries an unfinished line over to the next call. */
static bool take_lines(http_client *c, const char *p, size_t n) {
    for (;;) {
        const char *nl = memchr(p, '\n', n);
        const size_t k = nl ? (size_t)(nl - p) : n;
        if (c->len + k > HTTP_MAX_LINE_BYTES || !buf_append(c, p, k)) return false;
        if (!nl) return true;
        deliver_line(c);
        p = nl + 1;
        n -= k + 1;
    }
}

static bool lines_wanted(http_client *c) {
    long status = 0;
    const char *type = NULL;
    curl_easy_getinfo(c->curl, CURLINFO_RESPONSE_CODE, &status);
    curl_easy_getinfo(c->curl, CURLINFO_CONTENT_TYPE, &type);
    return c->on_line && status == 200 && type && strncasecmp(type, "application/x-ndjson", 20) == 0;
}

static size_t on_data(char *ptr, size_t size, size_t nmemb, void *user) {
    http_client *c = user;
    const size_t n = size * nmemb;
    if (c->received + n + 1 > c->max_body) return 0; /* makes curl fail with CURLE_WRITE_ERROR */
    c->received += n;
    if (c->body_mode == BODY_UNDECIDED) c->body_mode = lines_wanted(c) ? BODY_LINES : BODY_COLLECT;
    if (c->body_mode == BODY_LINES) return take_lines(c, ptr, n) ? n : 0;
    return buf_append(c, ptr, n) ? n : 0;
}

static int on_progress(void *user, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal, curl_off_t ulnow) {
    http_client *c = user;
    return c->abort_fn && c->abort_fn(c->abort_user) ? 1 : 0;
}

tr_status http_client_create(const tr_remote_params *p, http_client **out) {
    *out = NULL;
    if (!p || !p->url || !*p->url) return tr_fail(TR_ERR_ARG, "remote backend: no URL");
    if (strncmp(p->url, "http://", 7) != 0 && strncmp(p->url, "https://", 8) != 0)
        return tr_fail(TR_ERR_ARG, "remote backend: URL '%s' must start with http:// or https://", p->url);
    if (p->timeout_ms <= 0 || p->retries < 0 || p->retries > 100)
        return tr_fail(TR_ERR_ARG, "remote backend: timeout_ms must be > 0 and retries in 0..100");
    if (p->api_key && strpbrk(p->api_key, "\r\n"))
        return tr_fail(TR_ERR_ARG, "remote backend: the API key contains a line break");
    pthread_once(&global_once, global_init);
    if (global_rc != CURLE_OK) return tr_fail(TR_ERR_NETWORK, "libcurl: %s", curl_easy_strerror(global_rc));
    http_client *c = calloc(1, sizeof *c);
    if (!c) return tr_fail(TR_ERR_NOMEM, "out of memory");
    c->timeout_ms = p->timeout_ms;
    c->connect_timeout_ms = p->connect_timeout_ms > 0 ? p->connect_timeout_ms : p->timeout_ms;
    c->retries = p->retries;
    c->max_body = 64u << 20;
    c->base = strdup(p->url);
    c->cacert = p->cacert ? strdup(p->cacert) : NULL;
    c->curl = curl_easy_init();
    bool ok = c->base && (!p->cacert || c->cacert) && c->curl;
    if (ok) {
        size_t n = strlen(c->base);
        while (n > 0 && c->base[n - 1] == '/') c->base[--n] = '\0';
        struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/json");
        if (h) h = curl_slist_append(h, "Expect:"); /* no 100-continue round trip before large bodies */
        if (h && p->api_key && *p->api_key) {
            char *line = malloc(strlen(p->api_key) + 32);
            if (line) {
                sprintf(line, "Authorization: Bearer %s", p->api_key);
                struct curl_slist *h2 = curl_slist_append(h, line);
                free(line);
                h = h2;
            } else {
                curl_slist_free_all(h);
                h = NULL;
            }
        }
        ok = (c->headers = h) != NULL;
    }
    if (!ok) {
        http_client_free(c);
        return tr_fail(TR_ERR_NOMEM, "out of memory");
    }
    CURL *e = c->curl;
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, c->headers);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, c);
    curl_easy_setopt(e, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(e, CURLOPT_XFERINFOFUNCTION, on_progress);
    curl_easy_setopt(e, CURLOPT_XFERINFODATA, c);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, c->errbuf);
    curl_easy_setopt(e, CURLOPT_TCP_NODELAY, 1L);
    curl_easy_setopt(e, CURLOPT_SSL_VERIFYPEER, 1L);
    curl_easy_setopt(e, CURLOPT_SSL_VERIFYHOST, 2L);
    if (c->cacert) curl_easy_setopt(e, CURLOPT_CAINFO, c->cacert);
    *out = c;
    return TR_OK;
}

void http_client_free(http_client *c) {
    if (!c) return;
    if (c->curl) curl_easy_cleanup(c->curl);
    curl_slist_free_all(c->headers);
    free(c->base);
    free(c->cacert);
    free(c->buf);
    free(c);
}

/* Failures worth another attempt: the server may come back (restart) or the network hiccuped. */
static bool retryable(CURLcode rc) {
    switch (rc) {
    case CURLE_COULDNT_CONNECT:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_PARTIAL_FILE: return true;
    default: return false;
    }
}

static void fill_response(http_client *c, long status, http_response *resp) {
    resp->status = status;
    resp->streamed = c->body_mode == BODY_LINES;
    resp->body = c->buf && !resp->streamed ? c->buf : "";
    resp->len = c->received;
}

tr_status http_request(http_client *c, const char *method, const char *path, const char *body, double deadline_ms,
                       tr_abort_fn abort_fn, void *abort_user, http_response *resp) {
    return http_request_lines(c, method, path, body, deadline_ms, abort_fn, abort_user, NULL, NULL, resp);
}

tr_status http_request_lines(http_client *c, const char *method, const char *path, const char *body,
                             double deadline_ms, tr_abort_fn abort_fn, void *abort_user, http_line_fn on_line,
                             void *line_user, http_response *resp) {
    char *url = malloc(strlen(c->base) + strlen(path) + 1);
    if (!url) return tr_fail(TR_ERR_NOMEM, "out of memory");
    strcpy(url, c->base);
    strcat(url, path);
    CURL *e = c->curl;
    curl_easy_setopt(e, CURLOPT_URL, url);
    c->abort_fn = abort_fn;
    c->abort_user = abort_user;
    c->on_line = on_line;
    c->line_user = line_user;
    c->delivered = false;
    memset(resp, 0, sizeof *resp);
    resp->body = "";
    if (strcmp(method, "GET") == 0) {
        curl_easy_setopt(e, CURLOPT_HTTPGET, 1L);
    } else {
        curl_easy_setopt(e, CURLOPT_POSTFIELDS, body ? body : "");
        curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE, (long)(body ? strlen(body) : 0));
    }
    curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, strcmp(method, "DELETE") == 0 ? "DELETE" : NULL);
    tr_status st = TR_OK;
    double backoff_ms = 25.0;
    for (int attempt = 0;; attempt++) {
        const double left = deadline_ms - http_now_ms();
        if (left < 1.0) {
            st = tr_fail(TR_ERR_TIMEOUT, "%s %s: no answer within the timeout (%d ms)", method, path, c->timeout_ms);
            break;
        }
        curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)left);
        curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, (long)(left < c->connect_timeout_ms ? left : c->connect_timeout_ms));
        c->len = 0;
        if (c->buf) c->buf[0] = '\0';
        c->errbuf[0] = '\0';
        c->body_mode = BODY_UNDECIDED;
        c->received = 0;
        CURLcode rc = curl_easy_perform(e);
        long status = 0;
        if (rc == CURLE_OK || c->delivered) curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &status);
        if (rc == CURLE_OK && c->body_mode == BODY_LINES && c->len > 0) deliver_line(c); /* no final line break */
        const bool retry_status = rc == CURLE_OK && (status == 502 || status == 503 || status == 504);
        if (rc == CURLE_OK && !retry_status) {
            fill_response(c, status, resp);
            break;
        }
        if (rc == CURLE_ABORTED_BY_CALLBACK) {
            fill_response(c, status, resp);
            st = tr_fail(TR_ERR_STATE, "%s %s: aborted", method, path);
            break;
        }
        const bool again = (retry_status || retryable(rc)) && !c->delivered && attempt < c->retries &&
                           deadline_ms - http_now_ms() > backoff_ms + 1.0;
        if (!again) {
            if (retry_status) {
                fill_response(c, status, resp);
                break;
            }
            if (c->delivered) fill_response(c, status, resp); /* what the lines were worth is the caller's call */
            /* A certificate that does not verify is a configuration error: neither retried nor papered over by a
             * fallback to the SLM. */
            const bool cert = rc == CURLE_PEER_FAILED_VERIFICATION || rc == CURLE_SSL_CACERT_BADFILE ||
                              rc == CURLE_SSL_CERTPROBLEM;
            const tr_status kind = cert ? TR_ERR_ARG : rc == CURLE_OPERATION_TIMEDOUT ? TR_ERR_TIMEOUT : TR_ERR_NETWORK;
            st = tr_fail(kind, "%s %s%s: %s (after %d attempt%s)", method, c->base, path,
                         c->errbuf[0] ? c->errbuf : curl_easy_strerror(rc), attempt + 1, attempt ? "s" : "");
            break;
        }
        sleep_ms(backoff_ms);
        backoff_ms *= 2;
    }
    free(url);
    return st;
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
