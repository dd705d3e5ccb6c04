/* httpd.h — the one HTTP connection layer of tokroute's two servers, `tokroute serve` (src/server/http.c) and the
 * device's `tokroute ui` (src/ui/ui_server.c): the libmicrohttpd daemon on a few event threads (httpd.c), the open
 * connections with their limits and deadlines (httpd_conn.c), the worker threads that run requests which block,
 * and their streams, with the connection suspended (httpd_defer.c), and the verdicts every request gets from its
 * headers before its body is read: connection limits (503), Host (403), Content-Type (415) (httpd.c).
 *
 * Each server keeps its own access handler (MHD_AccessHandlerCallback, its routes, keys and error bodies) and
 * calls these: httpd_judge on a request's first call, defer_run for a handler that blocks, defer_reply when the
 * connection resumes, the senders for every reply. */
#ifndef TR_SERVER_HTTPD_H
#define TR_SERVER_HTTPD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include <microhttpd.h>

#include "tokroute.h"

typedef struct httpd httpd;
typedef struct conn_table conn_table;
typedef struct defer_pool defer_pool;

typedef struct httpd_params {
    const char *host;                  /* the address (or name) to bind */
    int32_t port;                      /* 0: any free port */
    const char *const *allowed_hosts;  /* more Host names answered (--allowed-host) */
    int32_t n_allowed_hosts;
    bool keyed;                        /* a key guards the API: bound to anything but loopback, any Host is answered */
    int32_t max_connections, max_connections_per_ip; /* beyond them: 503 with Retry-After */
    int32_t request_timeout_s;         /* a complete request within this of opening or of the previous reply */
    int32_t event_threads;             /* libmicrohttpd's threads reading and writing connections */
    int32_t max_workers, max_queued;   /* blocking requests running at once, and waiting for a worker */
    const char *tls_cert, *tls_key;    /* PEM text (both or neither) */
    MHD_AccessHandlerCallback on_request;
    MHD_RequestCompletedCallback on_completed; /* the server's; httpd restarts the connection's deadline after it */
    void *cls;                         /* for both */
    /* Adds a server's own headers to every reply (CORS, Cache-Control ...), or NULL. */
    void (*decorate)(void *cls, struct MHD_Connection *conn, struct MHD_Response *r, unsigned status);
    void (*log)(void *user, const char *line); /* libmicrohttpd's messages (NULL: none) */
    void *log_user;
} httpd_params;

/* Binds (a port in use is an error saying so), starts the event threads. The strings of p are copied. */
tr_status httpd_start(const httpd_params *p, httpd **out);
int32_t httpd_port(const httpd *h);
/* Ends the workers (their blocking requests must be able to end: the server has failed them), then the daemon,
 * which closes every connection. Idempotent. */
void httpd_stop(httpd *h);
void httpd_free(httpd *h); /* stops first */
int32_t httpd_open_connections(const httpd *h);
defer_pool *httpd_defer_pool(httpd *h);

/* ---------------------------------------------------------------- verdicts on a request's headers */

/* What a request is refused with (status 0: nothing). */
typedef struct httpd_refusal {
    unsigned status;
    const char *code;
    char message[200];
} httpd_refusal;

/* The connection-level verdicts on a request, in order: opened beyond max_connections or max_connections_per_ip
 * (503, unless exempt_from_limits), a Host the server does not answer to (403), a POST whose body is not declared
 * application/json (415; a POST without a body goes on to its route's verdict, a 405 say). */
httpd_refusal httpd_judge(httpd *h, struct MHD_Connection *conn, const char *method, bool exempt_from_limits);
/* The names a server answers to (httpd_host_allowed), as httpd_start finds them. */
typedef struct httpd_hosts {
    const char *host;                  /* as given to bind (an address or a name) */
    const char *bound;                 /* the address bound, numeric */
    bool loopback, any;                /* bound to a loopback address / to every address */
    bool keyed;
    const char *const *allowed;
    int32_t n_allowed;
} httpd_hosts;
/* Whether a Host header value (NULL: none, as HTTP/1.0 may send) names this server: the address it listens on,
 * a loopback name (localhost, 127.x, ::1) when bound to loopback, a name of allowed; bound to every address
 * (0.0.0.0, ::), also any IP literal and the loopback names; bound to anything but loopback with a key, any name.
 * A port may follow. */
bool httpd_host_allowed(const httpd_hosts *hosts, const char *host_header);
/* The credentials of "Authorization: Bearer KEY" (the scheme in any case, RFC 6750; spaces after it), or NULL. */
const char *httpd_bearer_token(const char *authorization);
/* key == got, in time that depends on their lengths only. */
bool httpd_key_equal(const char *key, const char *got);

/* ---------------------------------------------------------------- replies */

/* Every reply goes out through this: the server's decorate, WWW-Authenticate: Bearer on a 401, then
 * MHD_queue_response (event thread only). */
int httpd_queue_response(struct MHD_Connection *conn, unsigned status, struct MHD_Response *r);
/* A reply of body_owned (malloc'ed, taken over; NULL: a 500 "out of memory" error object) with its Content-Type
 * and the headers of a NULL-terminated name, value list (or NULL), queued now (event thread only). */
int httpd_queue_buffer(struct MHD_Connection *conn, unsigned status, const char *content_type, char *body_owned,
                       size_t len, const char *const *headers);
/* The same from any thread that answers conn: on a worker (defer_run) the reply is kept for the event thread,
 * else queued now. header/value: one more header, or NULL. */
int httpd_send_buffer(struct MHD_Connection *conn, unsigned status, const char *content_type, char *body_owned,
                      size_t len, const char *header, const char *value);
/* A 200 streamed with chunked encoding, made on a worker thread (defer_run): next returns the next piece (a
 * malloc'ed string, taken over; it may block) and sets *last on the final one; NULL cuts the stream. done frees
 * cls afterwards (client_gone: the client went away before the last piece), or at once with a 500 when no stream
 * can be made (not on a worker, out of memory). header/value: one more header, or NULL. */
int httpd_send_stream(struct MHD_Connection *conn, const char *content_type, const char *header, const char *value,
                      char *(*next)(void *cls, bool *last), void *cls, void (*done)(void *cls, bool client_gone));

/* ---------------------------------------------------------------- httpd_conn.c: open connections */

/* What the layer knows about one open connection (libmicrohttpd's socket context). */
typedef struct conn_info {
    httpd *h;
    conn_table *table;
    struct MHD_Connection *conn;
    struct sockaddr_storage addr;
    double waiting_since_ms;   /* when it opened or last finished a reply: a request must be complete within
                                * request_timeout_s of this (0: a request is complete and being answered) */
    bool over_ip_limit;        /* it opened while its address already had max_connections_per_ip */
    bool over_limit;           /* it opened while max_connections were open */
    int8_t eof_sweeps;         /* deadline sweeps in a row that found its peer gone with nothing left to read */
    struct conn_info *prev, *next;
    struct defer_slot *slot;   /* the reply a worker thread is making for it (httpd_defer.c), or NULL */
} conn_info;

tr_status conn_table_create(httpd *h, int32_t max_connections, int32_t max_connections_per_ip,
                            int32_t request_timeout_s, conn_table **out);
/* Stops the deadline thread and frees the table (every connection must be closed by then). */
void conn_table_free(conn_table *t);
/* MHD_OPTION_NOTIFY_CONNECTION (cls: the table): STARTED makes the connection's conn_info (counted per address),
 * CLOSED frees it. */
void conn_table_notify(void *cls, struct MHD_Connection *conn, void **socket_context, int code);
/* The connection's conn_info (NULL before STARTED). */
conn_info *conn_info_of(struct MHD_Connection *conn);
/* Marks a request complete (its deadline stops) or answered (the next one's deadline starts). */
void conn_request_complete(conn_info *ci);
void conn_request_answered(conn_info *ci);
int32_t conn_table_open(const conn_table *t);
/* Whether the client of a connection is gone: a reset, or its socket shut both ways. A client that only shut its
 * sending side (shutdown(SHUT_WR) after its request, as some HTTP/1.0 clients and proxies do) still reads, and is
 * answered; one that closed with a FIN is found out when the next bytes of its reply are written. */
bool conn_client_gone(struct MHD_Connection *conn);

/* ---------------------------------------------------------------- httpd_defer.c: blocking requests */

tr_status defer_pool_create(int32_t max_threads, int32_t max_queued, defer_pool **out);
/* Finishes the queued and running requests (the server has failed what they wait on, so they end quickly), ends
 * the streams and joins the threads. */
void defer_pool_stop(defer_pool *p);
void defer_pool_free(defer_pool *p);
/* Runs work(conn, arg) on a worker thread with the connection suspended: whatever reply work makes (through
 * httpd_send_buffer, httpd_send_stream) is kept and queued when the connection resumes (defer_reply); a stream's
 * producer then runs on that thread. false: no room (every thread busy and the queue full) or out of memory; the
 * caller answers 503 and frees arg itself. */
bool defer_run(defer_pool *p, struct MHD_Connection *conn, int (*work)(struct MHD_Connection *conn, void *arg),
               void *arg, void (*free_arg)(void *arg));
/* On the access handler's call after the connection resumed: queues the reply the worker made. Returns the MHD
 * result; *handled false when no deferred reply is waiting for this connection. */
int defer_reply(struct MHD_Connection *conn, bool *handled);
/* While a worker makes conn's reply: the senders hand the reply here instead of queuing it. */
bool defer_capturing(struct MHD_Connection *conn);
int defer_capture_buffer(struct MHD_Connection *conn, unsigned status, const char *content_type, char *body_owned,
                         size_t len, const char *header, const char *value);
int defer_capture_stream(struct MHD_Connection *conn, const char *content_type, const char *header,
                         const char *value, char *(*next)(void *cls, bool *last), void *cls,
                         void (*done)(void *cls, bool client_gone));
/* The client of the request the calling worker thread serves is gone (false on other threads). */
bool defer_client_gone(void);

double httpd_now_ms(void);

#endif /* TR_SERVER_HTTPD_H */
