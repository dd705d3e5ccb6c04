/* http.h — the HTTP client the remote backends share. Natively (http.c): two libcurl handles per backend under one
 * multi handle (kept-alive connections are reused; a stream the caller left goes on being read on one while the
 * next request uses the other), JSON bodies, Bearer auth, https with verification (optionally a private CA),
 * bounded retries with exponential backoff inside an absolute deadline, and an abort callback polled while
 * waiting. In the browser (http_fetch.c, emscripten) the same calls over a synchronous XMLHttpRequest. */
#ifndef TR_HTTP_H
#define TR_HTTP_H

#include <stdbool.h>
#include <stddef.h>

#include "tokroute.h"

typedef struct http_client http_client;

typedef struct http_response {
    long status;     /* HTTP status (0 when no response) */
    char *body;      /* NUL-terminated, owned by the client; valid until the next request ("" when streamed) */
    size_t len;      /* body bytes received */
    bool streamed;   /* the body went to the line callback (http_request_lines) */
    bool left;       /* the caller left the streamed reply before its end (the rest is discarded) */
} http_response;

/* What both clients refuse in p before creating one: no URL or not http(s)://, a timeout <= 0, retries outside
 * 0..100, an API key with a line break (it goes into a header). */
tr_status http_params_check(const tr_remote_params *p);
/* Copies what it needs from p (url, api_key, cacert, timeouts, retries). */
tr_status http_client_create(const tr_remote_params *p, http_client **out);
void http_client_free(http_client *c);
/* Wakes a request waiting for data (from any thread), so it polls its wanted() callback. */
void http_client_wake(http_client *c);
/* Monotonic milliseconds, for deadlines. */
double http_now_ms(void);
/* Sleeps ms (the backoff between attempts). */
void http_sleep_ms(double ms);
/* The deadline of a call starting now (now + timeout_ms). */
double http_deadline(const http_client *c);

/* One request: method "GET"/"POST"/"DELETE", path appended to the base URL, body (JSON) or NULL. Transport
 * failures and 502/503/504 are retried with backoff while the deadline allows; the final failure is TR_ERR_TIMEOUT
 * or TR_ERR_NETWORK with a message. Any HTTP status the server sends is a success of this call (resp->status).
 * abort_fn (optional) aborts with TR_ERR_STATE. */
tr_status http_request(http_client *c, const char *method, const char *path, const char *body, double deadline_ms,
                       tr_abort_fn abort_fn, void *abort_user, http_response *resp);

/* The same, but a streamed 200 reply (application/x-ndjson or text/event-stream) is not collected: each line
 * (without its line break) goes to lines->on_line as it arrives, on the calling thread. A line longer than
 * HTTP_MAX_LINE_BYTES or a body beyond the client's limit fails the transfer. Once a line has been delivered the
 * request is never retried: a failure after it returns TR_ERR_NETWORK/TR_ERR_TIMEOUT/TR_ERR_STATE with
 * resp->streamed set, and the caller decides what the lines it got are worth. on_line returning false, or wanted
 * (optional; polled after the first line whenever the client is woken by http_client_wake) returning false, leaves
 * the reply: the call returns TR_OK at once with resp->left set, and the rest is read and discarded in the
 * background while later requests use the other connection — or, with cut_when_left, the connection is closed (a
 * server that stops generating when its client hangs up, like llama.cpp's). Other replies (errors, other types) are
 * collected as by http_request. */
#define HTTP_MAX_LINE_BYTES (64u << 10)
typedef bool (*http_line_fn)(void *user, const char *line, size_t len);
typedef bool (*http_wanted_fn)(void *user);
typedef struct http_lines {
    http_line_fn on_line;
    http_wanted_fn wanted; /* may be NULL */
    void *user;
    bool cut_when_left;
} http_lines;
tr_status http_request_lines(http_client *c, const char *method, const char *path, const char *body,
                             double deadline_ms, tr_abort_fn abort_fn, void *abort_user, const http_lines *lines,
                             http_response *resp);

/* The message of an error body {"error": {"message": ...}} or {"error": "..."}, else the body's first bytes. */
const char *http_error_text(const http_response *resp, char *buf, size_t cap);

#endif /* TR_HTTP_H */
