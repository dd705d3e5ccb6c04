/* http_internal.h — the parts of tr_server's HTTP side that guard it against clients that do not play fair:
 * who may call and what they may touch (access.c), the open connections and their limits and deadlines
 * (http_conn.c), and the threads that run requests which wait on the scheduler, so that libmicrohttpd's few event
 * threads never block (http_defer.c). */
#ifndef TR_SERVER_HTTP_INTERNAL_H
#define TR_SERVER_HTTP_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "server/server_internal.h"

struct MHD_Connection;

/* ---------------------------------------------------------------- access.c */

typedef struct access_ctl access_ctl;
/* Copies the keys of p (api_key, api_keys, metrics_key). */
tr_status access_create(const tr_server_params *p, access_ctl **out);
void access_free(access_ctl *a);
int32_t access_n_keys(const access_ctl *a);
/* The key an Authorization header presents ("Bearer KEY", the scheme in any case, RFC 6750): its index (0 when no
 * key is configured), or -1 for none or a wrong one. Constant time in the keys' contents. */
int32_t access_key_of(const access_ctl *a, const char *authorization);
/* GET /metrics: with a metrics key only that key, otherwise what access_key_of accepts. */
bool access_metrics_allowed(const access_ctl *a, const char *authorization);
/* The scheduler's name of a client's session: the id itself with one key or none; with several, "~OWNER~id", so
 * a session is found only by requests with the key that created it. */
void access_session_name(const access_ctl *a, int32_t owner, const char *id, char *out, size_t cap);
/* The id a client knows from a scheduler name (the owner left out). */
const char *access_client_id(const char *name);
/* request.c: 1-64 characters of [A-Za-z0-9_.-], the only session ids a client may name. */
bool session_id_valid(const char *s);

/* ---------------------------------------------------------------- http_conn.c */

/* What the server knows about one open connection (libmicrohttpd's socket context). */
typedef struct conn_info {
    tr_server *srv;
    struct MHD_Connection *conn;
    struct sockaddr_storage addr;
    double waiting_since_ms;   /* when it opened or last finished a reply: a request must be complete within
                                * request_timeout_s of this (0: a request is complete and being answered) */
    bool over_ip_limit;        /* it opened while its address already had max_connections_per_ip */
    bool over_limit;           /* it opened while max_connections were open */
    int8_t eof_sweeps;         /* deadline sweeps in a row that found its peer gone with nothing left to read */
    struct conn_info *prev, *next;
    struct defer_slot *slot;   /* the reply a worker thread is making for it (http_defer.c), or NULL */
} conn_info;

typedef struct conn_table conn_table;
tr_status conn_table_create(tr_server *srv, conn_table **out);
/* Stops the deadline thread and frees the table (every connection must be closed by then). */
void conn_table_free(conn_table *t);
/* MHD_OPTION_NOTIFY_CONNECTION: STARTED makes the connection's conn_info (counted per address), CLOSED frees it. */
void conn_table_notify(void *cls, struct MHD_Connection *conn, void **socket_context, int code);
/* The connection's conn_info (NULL before STARTED). */
conn_info *conn_info_of(struct MHD_Connection *conn);
/* Marks a request complete (its deadline stops) or answered (the next one's deadline starts). */
void conn_request_complete(conn_info *ci);
void conn_request_answered(conn_info *ci);
int32_t conn_table_open(const conn_table *t);
/* Whether the client of a connection is gone: it closed its side (read end hung up or reset). */
bool conn_client_gone(struct MHD_Connection *conn);

/* ---------------------------------------------------------------- http_defer.c */

typedef struct defer_pool defer_pool;
tr_status defer_pool_create(int32_t max_threads, int32_t max_queued, defer_pool **out);
/* Finishes the queued and running requests (the scheduler has been shut down, so they end quickly), ends the
 * streams and joins the threads. */
void defer_pool_stop(defer_pool *p);
void defer_pool_free(defer_pool *p);
/* Runs work(conn, arg) on a worker thread with the connection suspended: whatever reply work makes (through
 * http_send_json, http_send_stream, ...) is kept and queued when the connection resumes (defer_reply); a stream's
 * producer then runs on that thread. false: no room (every thread busy and the queue full) or out of memory; the
 * caller answers 503 and frees arg itself. */
bool defer_run(defer_pool *p, struct MHD_Connection *conn, conn_info *ci, int (*work)(struct MHD_Connection *conn,
               void *arg), void *arg, void (*free_arg)(void *arg));
/* On the access handler's call after the connection resumed: queues the reply the worker made. Returns the MHD
 * result; *handled false when no deferred reply is waiting for this connection. */
int defer_reply(struct MHD_Connection *conn, conn_info *ci, bool *handled);
/* While a worker makes conn's reply: http.c's senders hand the reply here instead of queuing it. */
bool defer_capturing(struct MHD_Connection *conn);
int defer_capture_buffer(struct MHD_Connection *conn, unsigned status, const char *content_type, char *body_owned,
                         size_t len, const char *header, const char *value);
int defer_capture_stream(struct MHD_Connection *conn, const char *content_type, char *(*next)(void *cls, bool *last),
                         void *cls, void (*done)(void *cls, bool client_gone));
/* The client of the request the calling worker thread serves is gone (false on other threads). */
bool defer_client_gone(void);

/* http.c: a reply queued now on the event thread: body_owned (malloc'ed, taken over; NULL: a 500 "out of memory"
 * error object) with its Content-Type and the headers of a NULL-terminated name, value list (or NULL). */
int http_queue_buffer(struct MHD_Connection *conn, unsigned status, const char *content_type, char *body_owned,
                      size_t len, const char *const *headers);

#endif /* TR_SERVER_HTTP_INTERNAL_H */
