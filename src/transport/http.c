/* http.c — libcurl under the remote backends. Each client drives its transfers through one curl multi handle with
 * two easy handles; libcurl keeps their connections alive between requests to the same host, so a routed token
 * costs one request on an open connection.
 *
 * Time: every request runs against an absolute deadline that the backend sets once per next-token call, so
 * retries, backoff and a 409 resync together never exceed the call's timeout_ms. Each attempt gets the time left
 * (connect capped by connect_timeout_ms). Certificates are always verified; --cacert only changes the trust
 * store.
 *
 * Streamed replies (http_request_lines): the write callback decides per reply, on its first bytes, whether to
 * collect the body or to split it into lines for the caller — only a 200 of type application/x-ndjson is split,
 * so error bodies read as always. buf then holds the line being assembled. A caller that wants no more of a
 * stream leaves it: the request returns at once while the rest of the reply is read and discarded in the
 * background (whenever the client next drives its transfers), and the next request goes out on the other
 * connection instead of waiting behind it. When both are taken, the stream left longest ago is cut off (its
 * connection closed). */
#include "transport/http.h"

#include <curl/curl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/error.h"

#define HTTP_CONNS 2
#define ABORT_POLL_MS 50 /* how often a waiting request asks its abort callback */

typedef struct http_conn {
    http_client *c;
    CURL *e;
    char *buf;
    size_t len, cap;
    /* the reply in progress */
    http_lines lines;      /* on_line NULL: collect every body */
    enum { BODY_UNDECIDED, BODY_COLLECT, BODY_LINES, BODY_DISCARD } body_mode;
    size_t received;       /* body bytes of this attempt */
    bool delivered;        /* a line went to on_line: no retry */
    bool leave;            /* the caller wants no more of this reply */
    bool busy;             /* a transfer runs on it (it is in the multi handle) */
    bool left;             /* its caller has gone: the rest is discarded */
    bool done;             /* the transfer ended with result */
    CURLcode result;
    uint64_t left_order;   /* when it was left (the oldest is cut off first) */
    tr_abort_fn abort_fn;
    void *abort_user;
    char errbuf[CURL_ERROR_SIZE];
} http_conn;

struct http_client {
    CURLM *multi;
    http_conn conn[HTTP_CONNS];
    uint64_t n_left;
    char *base;            /* URL without trailing '/' */
    struct curl_slist *headers;
    char *cacert;
    int32_t timeout_ms, connect_timeout_ms, retries;
    size_t max_body;       /* replies above this are an error (bounded memory) */
};

static pthread_once_t global_once = PTHREAD_ONCE_INIT;
static CURLcode global_rc = CURLE_OK;
static void global_init(void) { global_rc = curl_global_init(CURL_GLOBAL_DEFAULT); }

double http_deadline(const http_client *c) { return http_now_ms() + c->timeout_ms; }

/* Appends n bytes to buf (kept NUL-terminated); false when out of memory. */
static bool buf_append(http_conn *x, const char *p, size_t n) {
    if (x->len + n + 1 > x->cap) {
        size_t cap = x->cap ? x->cap : 4096;
        while (cap < x->len + n + 1) cap *= 2;
        char *b = realloc(x->buf, cap);
        if (!b) return false;
        x->buf = b;
        x->cap = cap;
    }
    memcpy(x->buf + x->len, p, n);
    x->len += n;
    x->buf[x->len] = '\0';
    return true;
}

static void deliver_line(http_conn *x) {
    size_t n = x->len;
    if (n > 0 && x->buf[n - 1] == '\r') x->buf[--n] = '\0';
    x->delivered = true;
    if (!x->lines.on_line(x->lines.user, x->buf, n)) x->leave = true;
    x->len = 0;
    x->buf[0] = '\0';
}

/* Splits p into lines for on_line; buf carries an unfinished line over to the next call. Once the caller leaves
 * the reply, the rest is discarded. */
static bool take_lines(http_conn *x, const char *p, size_t n) {
    while (!x->leave) {
        const char *nl = memchr(p, '\n', n);
        const size_t k = nl ? (size_t)(nl - p) : n;
        if (x->len + k > HTTP_MAX_LINE_BYTES || !buf_append(x, p, k)) return false;
        if (!nl) return true;
        deliver_line(x);
        p = nl + 1;
        n -= k + 1;
    }
    x->body_mode = BODY_DISCARD;
    return true;
}

static bool lines_wanted(http_conn *x) {
    long status = 0;
    const char *type = NULL;
    curl_easy_getinfo(x->e, CURLINFO_RESPONSE_CODE, &status);
    curl_easy_getinfo(x->e, CURLINFO_CONTENT_TYPE, &type);
    return x->lines.on_line && status == 200 && type &&
           (strncasecmp(type, "application/x-ndjson", 20) == 0 || strncasecmp(type, "text/event-stream", 17) == 0);
}

static size_t on_data(char *ptr, size_t size, size_t nmemb, void *user) {
    http_conn *x = user;
    const size_t n = size * nmemb;
    if (x->received + n + 1 > x->c->max_body) return 0; /* makes curl fail with CURLE_WRITE_ERROR */
    x->received += n;
    if (x->body_mode == BODY_UNDECIDED) x->body_mode = lines_wanted(x) ? BODY_LINES : BODY_COLLECT;
    if (x->body_mode == BODY_DISCARD) return n;
    if (x->body_mode == BODY_LINES) return take_lines(x, ptr, n) ? n : 0;
    return buf_append(x, ptr, n) ? n : 0;
}

static int on_progress(void *user, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal, curl_off_t ulnow) {
    http_conn *x = user;
    return x->abort_fn && x->abort_fn(x->abort_user) ? 1 : 0;
}

static bool conn_init(http_client *c, http_conn *x) {
    x->c = c;
    CURL *e = x->e = curl_easy_init();
    if (!e) return false;
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, c->headers);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, x);
    curl_easy_setopt(e, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(e, CURLOPT_XFERINFOFUNCTION, on_progress);
    curl_easy_setopt(e, CURLOPT_XFERINFODATA, x);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, x->errbuf);
    curl_easy_setopt(e, CURLOPT_TCP_NODELAY, 1L);
    curl_easy_setopt(e, CURLOPT_SSL_VERIFYPEER, 1L);
    curl_easy_setopt(e, CURLOPT_SSL_VERIFYHOST, 2L);
    curl_easy_setopt(e, CURLOPT_PRIVATE, x);
    if (c->cacert) curl_easy_setopt(e, CURLOPT_CAINFO, c->cacert);
    return true;
}

tr_status http_client_create(const tr_remote_params *p, http_client **out) {
    *out = NULL;
    tr_status st = http_params_check(p);
    if (st != TR_OK) return st;
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
    c->multi = curl_multi_init();
    bool ok = c->base && (!p->cacert || c->cacert) && c->multi;
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
    for (int i = 0; ok && i < HTTP_CONNS; i++) ok = conn_init(c, &c->conn[i]);
    if (!ok) {
        http_client_free(c);
        return tr_fail(TR_ERR_NOMEM, "out of memory");
    }
    *out = c;
    return TR_OK;
}

/* Ends whatever runs on x (a transfer still running loses its connection). */
static void conn_stop(http_client *c, http_conn *x) {
    if (x->busy) curl_multi_remove_handle(c->multi, x->e);
    x->busy = x->left = false;
}

void http_client_free(http_client *c) {
    if (!c) return;
    for (int i = 0; i < HTTP_CONNS; i++) {
        http_conn *x = &c->conn[i];
        if (x->e) {
            if (c->multi) conn_stop(c, x);
            curl_easy_cleanup(x->e);
        }
        free(x->buf);
    }
    if (c->multi) curl_multi_cleanup(c->multi);
    curl_slist_free_all(c->headers);
    free(c->base);
    free(c->cacert);
    free(c);
}

void http_client_wake(http_client *c) {
    if (c && c->multi) curl_multi_wakeup(c->multi);
}

/* Takes the results of ended transfers; a left one's connection is free again. */
static void reap(http_client *c) {
    CURLMsg *m;
    int n;
    while ((m = curl_multi_info_read(c->multi, &n))) {
        if (m->msg != CURLMSG_DONE) continue;
        http_conn *x = NULL;
        curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&x);
        if (!x) continue;
        x->result = m->data.result;
        x->done = true;
        curl_multi_remove_handle(c->multi, x->e);
        x->busy = x->left = false;
    }
}

/* A connection for the next request: an idle one, else the one left longest ago, cut off. */
static http_conn *take_conn(http_client *c) {
    int running = 0;
    if (curl_multi_perform(c->multi, &running) == CURLM_OK) reap(c); /* left replies may have ended meanwhile */
    http_conn *oldest = NULL;
    for (int i = 0; i < HTTP_CONNS; i++) {
        http_conn *x = &c->conn[i];
        if (!x->busy) return x;
        if (x->left && (!oldest || x->left_order < oldest->left_order)) oldest = x;
    }
    if (!oldest) return NULL; /* every connection runs a request: only when called re-entrantly */
    conn_stop(c, oldest);
    return oldest;
}

/* Runs x's transfer until it ends or the caller leaves the reply (a line callback returned false, or wanted()
 * did when the client was woken); transfers left earlier progress meanwhile. Returns the transfer's result, or
 * CURLE_OK when it was left. */
static CURLcode run_transfer(http_client *c, http_conn *x) {
    x->done = x->leave = x->left = false;
    x->result = CURLE_OK;
    CURLMcode mc = curl_multi_add_handle(c->multi, x->e);
    if (mc != CURLM_OK) return CURLE_OUT_OF_MEMORY;
    x->busy = true;
    for (;;) {
        int running = 0;
        mc = curl_multi_perform(c->multi, &running);
        reap(c);
        if (x->done) return x->result;
        if (!x->leave && x->delivered && x->lines.wanted && !x->lines.wanted(x->lines.user)) x->leave = true;
        if (x->leave && x->lines.cut_when_left) { /* the server stops when its client hangs up */
            conn_stop(c, x);
            x->left = true;
            return CURLE_OK;
        }
        if (x->leave) { /* the rest is read and discarded in the background */
            x->body_mode = BODY_DISCARD;
            x->abort_fn = NULL;
            x->left = true;
            x->left_order = ++c->n_left;
            return CURLE_OK;
        }
        if (x->abort_fn && x->abort_fn(x->abort_user)) { /* also between progress callbacks */
            conn_stop(c, x);
            return CURLE_ABORTED_BY_CALLBACK;
        }
        if (mc == CURLM_OK) mc = curl_multi_poll(c->multi, NULL, 0, x->abort_fn ? ABORT_POLL_MS : 1000, NULL);
        if (mc != CURLM_OK) {
            conn_stop(c, x);
            snprintf(x->errbuf, sizeof x->errbuf, "%s", curl_multi_strerror(mc));
            return CURLE_RECV_ERROR;
        }
    }
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

static void fill_response(http_conn *x, long status, http_response *resp) {
    resp->status = status;
    resp->streamed = x->body_mode == BODY_LINES || x->body_mode == BODY_DISCARD;
    resp->left = x->left;
    resp->body = x->buf && !resp->streamed ? x->buf : "";
    resp->len = x->received;
}

tr_status http_request_lines(http_client *c, const char *method, const char *path, const char *body,
                             double deadline_ms, tr_abort_fn abort_fn, void *abort_user, const http_lines *lines,
                             http_response *resp) {
    memset(resp, 0, sizeof *resp);
    resp->body = "";
    http_conn *x = take_conn(c);
    if (!x) return tr_fail(TR_ERR_STATE, "%s %s: the HTTP client is busy", method, path);
    char *url = malloc(strlen(c->base) + strlen(path) + 1);
    if (!url) return tr_fail(TR_ERR_NOMEM, "out of memory");
    strcpy(url, c->base);
    strcat(url, path);
    CURL *e = x->e;
    curl_easy_setopt(e, CURLOPT_URL, url);
    x->abort_fn = abort_fn;
    x->abort_user = abort_user;
    x->lines = lines ? *lines : (http_lines){0};
    x->delivered = false;
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
        const double connect_ms = left < c->connect_timeout_ms ? left : c->connect_timeout_ms;
        curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, (long)connect_ms);
        x->len = 0;
        if (x->buf) x->buf[0] = '\0';
        x->errbuf[0] = '\0';
        x->body_mode = BODY_UNDECIDED;
        x->received = 0;
        CURLcode rc = run_transfer(c, x);
        long status = 0;
        if (rc == CURLE_OK || x->delivered) curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &status);
        if (rc == CURLE_OK && !x->left && x->body_mode == BODY_LINES && x->len > 0)
            deliver_line(x); /* the last line had no line break */
        const bool retry_status = rc == CURLE_OK && (status == 502 || status == 503 || status == 504);
        if (rc == CURLE_OK && !retry_status) {
            fill_response(x, status, resp);
            break;
        }
        if (rc == CURLE_ABORTED_BY_CALLBACK) {
            fill_response(x, status, resp);
            st = tr_fail(TR_ERR_STATE, "%s %s: aborted", method, path);
            break;
        }
        const bool again = (retry_status || retryable(rc)) && !x->delivered && attempt < c->retries &&
                           deadline_ms - http_now_ms() > backoff_ms + 1.0;
        if (!again) {
            if (retry_status) {
                fill_response(x, status, resp);
                break;
            }
            if (x->delivered) fill_response(x, status, resp); /* what the lines were worth is the caller's call */
            /* A certificate that does not verify is a configuration error: neither retried nor papered over by a
             * fallback to the SLM. */
            const bool cert = rc == CURLE_PEER_FAILED_VERIFICATION || rc == CURLE_SSL_CACERT_BADFILE ||
                              rc == CURLE_SSL_CERTPROBLEM;
            const tr_status kind = cert ? TR_ERR_ARG : rc == CURLE_OPERATION_TIMEDOUT ? TR_ERR_TIMEOUT : TR_ERR_NETWORK;
            st = tr_fail(kind, "%s %s%s: %s (after %d attempt%s)", method, c->base, path,
                         x->errbuf[0] ? x->errbuf : curl_easy_strerror(rc), attempt + 1, attempt ? "s" : "");
            break;
        }
        http_sleep_ms(backoff_ms);
        backoff_ms *= 2;
    }
    free(url);
    return st;
}
