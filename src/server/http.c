/* http.c — tr_server: the libmicrohttpd daemon (one thread per connection, optionally TLS with GnuTLS), request
 * bodies (size-limited: 413), the API key check (Bearer token, constant-time compare: 401), routing, and the JSON
 * bodies of /v1/route/next, DELETE /v1/route/sessions/{id}, /v1/models, /health and /metrics. Completions live in
 * completions.c and chat_completions.c, the streamed /v1/route/next reply in route_stream.c, CORS in cors.c, the
 * sessions and forward passes in scheduler.c.
 *
 * Logging: one line per request with method, route, status and milliseconds; bodies (token ids, text) only with
 * log_requests. A client that hangs up mid-stream leaves one line from the stream's owner; libmicrohttpd's own
 * report of the failed send is dropped (mhd_log). */
#include <arpa/inet.h>
#include <math.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include <cjson/cJSON.h>
#include <microhttpd.h>

#include "common/error.h"
#include "server/server_internal.h"

typedef struct conn_state {
    char *body;
    size_t len, cap;
    bool too_large;
    double t0_ms;
    const char *route;  /* metrics label */
} conn_state;

static const char *route_label(const char *url, const char *method) {
    if (strcmp(url, "/v1/route/next") == 0) return "route_next";
    if (strncmp(url, "/v1/route/sessions/", 19) == 0 && strcmp(method, "DELETE") == 0) return "route_delete";
    if (strcmp(url, "/v1/completions") == 0) return "completions";
    if (strcmp(url, "/v1/chat/completions") == 0) return "chat_completions";
    if (strcmp(url, "/health") == 0) return "health";
    if (strcmp(url, "/metrics") == 0) return "metrics";
    return "other";
}

double server_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

void server_log(const tr_server *srv, const char *fmt, ...) {
    if (!srv->params.log) return;
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    srv->params.log(srv->params.log_user, line);
}

tr_server_params tr_server_default_params(void) {
    tr_server_params p = {0};
    p.host = "127.0.0.1";
    p.port = 8080;
    p.max_sessions = 256;
    p.kv_budget_bytes = (int64_t)1 << 30;
    p.session_idle_s = 600;
    p.max_batch_tokens = 512;
    p.max_body_bytes = (size_t)1 << 20;
    p.batch = true;
    return p;
}

/* A streamed body: the piece being handed to MHD and where its producer stands. */
typedef struct stream_body {
    char *(*next)(void *cls, bool *last);
    void (*done)(void *cls, bool client_gone);
    void *cls;
    char *piece;
    size_t len, off;
    bool last;
    bool ended;  /* the whole body was handed to MHD */
    bool cut;    /* ended early by us (out of memory) */
} stream_body;

static ssize_t read_stream(void *p, uint64_t pos, char *buf, size_t max) {
    stream_body *s = p;
    while (s->off >= s->len) {
        if (s->last) {
            s->ended = true;
            return MHD_CONTENT_READER_END_OF_STREAM;
        }
        free(s->piece);
        s->piece = s->next(s->cls, &s->last);
        if (!s->piece) { /* out of memory: the client sees a cut stream */
            s->cut = true;
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
        s->len = strlen(s->piece);
        s->off = 0;
    }
    size_t n = s->len - s->off;
    if (n > max) n = max;
    memcpy(buf, s->piece + s->off, n);
    s->off += n;
    return (ssize_t)n;
}

/* MHD is done with the response (sent, or the client went away). */
static void free_stream(void *p) {
    stream_body *s = p;
    s->done(s->cls, !s->ended && !s->cut);
    free(s->piece);
    free(s);
}

int http_send_stream(struct MHD_Connection *conn, const char *content_type, char *(*next)(void *cls, bool *last),
                     void *cls, void (*done)(void *cls, bool client_gone)) {
    stream_body *s = calloc(1, sizeof *s);
    struct MHD_Response *r = s ? MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, read_stream, s, free_stream)
                               : NULL;
    if (!r) {
        free(s);
        done(cls, false);
        return http_send_json(conn, 500, NULL);
    }
    *s = (stream_body){.next = next, .done = done, .cls = cls};
    MHD_add_response_header(r, "Content-Type", content_type);
    MHD_add_response_header(r, "Cache-Control", "no-cache");
    const int ret = http_queue_response(conn, 200, r);
    MHD_destroy_response(r);
    return ret;
}

/* The server a connection belongs to (set when it was accepted: on_connection). */
static const tr_server *server_of(struct MHD_Connection *conn) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

int http_queue_response(struct MHD_Connection *conn, unsigned status, struct MHD_Response *r) {
    cors_add_headers(server_of(conn), conn, r);
    return MHD_queue_response(conn, status, r);
}

int http_send_json(struct MHD_Connection *conn, int status, char *json_owned) {
    if (!json_owned) {
        static const char oom[] = "{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\","
                                  "\"param\":null,\"code\":\"internal\"}}";
        struct MHD_Response *r = MHD_create_response_from_buffer(sizeof oom - 1, (void *)oom, MHD_RESPMEM_PERSISTENT);
        MHD_add_response_header(r, "Content-Type", "application/json");
        const int ret = http_queue_response(conn, 500, r);
        MHD_destroy_response(r);
        return ret;
    }
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(json_owned), json_owned, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(json_owned);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", "application/json");
    const int ret = http_queue_response(conn, (unsigned)status, r);
    MHD_destroy_response(r);
    return ret;
}

/* OpenAI's error type for a status (what its SDKs map to their exception classes). */
const char *api_error_type(int status) {
    if (status == 401) return "authentication_error";
    if (status == 403) return "permission_error";
    if (status == 404) return "not_found_error";
    if (status == 429) return "rate_limit_error";
    if (status >= 500) return "server_error";
    return "invalid_request_error";
}

cJSON *api_error_object(const api_error *err) {
    cJSON *e = cJSON_CreateObject();
    cJSON_AddStringToObject(e, "message", err->message);
    cJSON_AddStringToObject(e, "type", api_error_type(err->status));
    if (err->field[0]) cJSON_AddStringToObject(e, "param", err->field);
    else cJSON_AddNullToObject(e, "param");
    cJSON_AddStringToObject(e, "code", err->code);
    if (err->field[0]) cJSON_AddStringToObject(e, "field", err->field); /* the name tokroute's clients read */
    return e;
}

static char *error_json(const api_error *err) {
    cJSON *root = cJSON_CreateObject();
    cJSON_AddItemToObject(root, "error", api_error_object(err));
    if (err->status == 409) cJSON_AddNumberToObject(root, "pos", err->pos);
    char *out = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return out;
}

int http_send_error(tr_server *srv, struct MHD_Connection *conn, const char *route, const api_error *err,
                    double t0_ms) {
    const double ms = server_now_ms() - t0_ms;
    metrics_request(&srv->metrics, route, err->status, ms);
    server_log(srv, "%s %d %.2f ms %s%s%s", route, err->status, ms, err->code, err->field[0] ? " field=" : "",
               err->field);
    if (err->status == 204) {
        struct MHD_Response *r = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
        const int ret = http_queue_response(conn, 204, r);
        MHD_destroy_response(r);
        return ret;
    }
    return http_send_json(conn, err->status, error_json(err));
}

/* ---------------------------------------------------------------- routes */

char *route_result_json(const char *session, bool with_verify, const route_result *res) {
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "session", session);
    cJSON_AddNumberToObject(root, "token", res->token);
    cJSON_AddNumberToObject(root, "logprob", res->logprob);
    cJSON *tops = cJSON_AddArrayToObject(root, "top_logprobs");
    for (int32_t i = 0; i < res->n_top; i++) {
        cJSON *t = cJSON_CreateObject();
        cJSON_AddNumberToObject(t, "id", res->top[i].id);
        cJSON_AddNumberToObject(t, "logprob", res->top[i].logprob);
        cJSON_AddItemToArray(tops, t);
    }
    cJSON_AddNumberToObject(root, "pos", res->pos);
    cJSON *la = cJSON_AddArrayToObject(root, "lookahead");
    for (int32_t i = 0; i < res->n_lookahead; i++) cJSON_AddItemToArray(la, cJSON_CreateNumber(res->lookahead[i]));
    if (with_verify) {
        cJSON *v = cJSON_AddArrayToObject(root, "verify");
        for (int32_t i = 0; i < res->n_verify; i++) cJSON_AddItemToArray(v, cJSON_CreateNumber(res->verify[i]));
    }
    cJSON_AddNumberToObject(root, "n_evaluated", res->n_evaluated);
    cJSON *tm = cJSON_AddObjectToObject(root, "timings");
    cJSON_AddNumberToObject(tm, "eval_ms", round(res->eval_ms * 1000) / 1000);
    cJSON_AddNumberToObject(tm, "queue_ms", round(res->queue_ms * 1000) / 1000);
    if (res->n_lookahead > 0) cJSON_AddNumberToObject(tm, "lookahead_ms", round(res->lookahead_ms * 1000) / 1000);
    char *out = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return out;
}

static int handle_route_next(tr_server *srv, struct MHD_Connection *conn, const conn_state *cs) {
    route_request req;
    api_error err = {0};
    if (srv->params.log_requests) server_log(srv, "route_next body: %.*s", (int)(cs->len < 900 ? cs->len : 900),
                                             cs->body ? cs->body : "");
    if (!route_request_parse(cs->body ? cs->body : "", cs->len, srv->model->info.n_vocab,
                             scheduler_n_ctx(srv->sched), &req, &err))
        return http_send_error(srv, conn, "route_next", &err, cs->t0_ms);
    if (req.stream) return route_stream_respond(srv, conn, &req, cs->t0_ms);
    route_result res;
    const int status = scheduler_route(srv->sched, &req, &res, &err);
    route_request_free(&req);
    if (status != 200) return http_send_error(srv, conn, "route_next", &err, cs->t0_ms);
    const double ms = server_now_ms() - cs->t0_ms;
    metrics_request(&srv->metrics, "route_next", 200, ms);
    server_log(srv, "route_next 200 %.2f ms n_evaluated=%d", ms, res.n_evaluated);
    return http_send_json(conn, 200, route_result_json(req.session, req.draft.n_branches > 0, &res));
}

static int handle_delete(tr_server *srv, struct MHD_Connection *conn, const char *id, double t0) {
    api_error err = {0};
    const int status = scheduler_delete(srv->sched, id);
    if (status == 204) api_error_set(&err, 204, "ok", "", "deleted");
    else if (status == 404) api_error_set(&err, 404, "not_found", "session", "no such session");
    else api_error_set(&err, status, "busy", "", "the server is shutting down");
    return http_send_error(srv, conn, "route_delete", &err, t0);
}

static int handle_health(tr_server *srv, struct MHD_Connection *conn, double t0) {
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "status", "ok");
    const tr_model_info *mi = tr_model_get_info(srv->model);
    cJSON_AddStringToObject(root, "model", server_model_name(srv));
    cJSON_AddNumberToObject(root, "n_vocab", mi->n_vocab);
    cJSON_AddNumberToObject(root, "n_ctx", scheduler_n_ctx(srv->sched));
    char *out = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    metrics_request(&srv->metrics, "health", 200, server_now_ms() - t0);
    return http_send_json(conn, 200, out);
}

const char *server_model_name(const tr_server *srv) {
    const tr_model_info *mi = tr_model_get_info(srv->model);
    return mi->name && mi->name[0] ? mi->name : mi->arch_name;
}

/* GET /v1/models: the one model, named as every reply's "model" names it; meta carries n_vocab and n_ctx. */
static int handle_models(tr_server *srv, struct MHD_Connection *conn, double t0) {
    cJSON *root = cJSON_CreateObject(), *data = cJSON_AddArrayToObject(root, "data"), *m = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "object", "list");
    cJSON_AddItemToArray(data, m);
    cJSON_AddStringToObject(m, "id", server_model_name(srv));
    cJSON_AddStringToObject(m, "object", "model");
    cJSON_AddNumberToObject(m, "created", (double)srv->started);
    cJSON_AddStringToObject(m, "owned_by", "tokroute");
    cJSON *meta = cJSON_AddObjectToObject(m, "meta");
    cJSON_AddNumberToObject(meta, "n_vocab", tr_model_get_info(srv->model)->n_vocab);
    cJSON_AddNumberToObject(meta, "n_ctx", scheduler_n_ctx(srv->sched));
    char *out = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    metrics_request(&srv->metrics, "other", 200, server_now_ms() - t0);
    return http_send_json(conn, 200, out);
}

/* The methods a known path allows ("DELETE" for a session's path), or NULL for an unknown path. */
static const char *allowed_methods(const char *url) {
    static const struct {
        const char *path, *allow;
    } routes[] = {{"/v1/route/next", "POST"}, {"/v1/completions", "POST"}, {"/v1/chat/completions", "POST"},
                  {"/v1/models", "GET"},      {"/health", "GET"},         {"/metrics", "GET"}};
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++)
        if (strcmp(url, routes[i].path) == 0) return routes[i].allow;
    if (strncmp(url, "/v1/route/sessions/", 19) == 0 && url[19]) return "DELETE";
    return NULL;
}

/* 405 naming the allowed methods (HEAD is not among them: every route answers GET, POST or DELETE only). */
static int send_method_not_allowed(tr_server *srv, struct MHD_Connection *conn, const char *route, const char *method,
                                   const char *allow, double t0) {
    api_error err = {0};
    api_error_set(&err, 405, "method_not_allowed", "", "%s is not allowed here: use %s", method, allow);
    const double ms = server_now_ms() - t0;
    metrics_request(&srv->metrics, route, 405, ms);
    server_log(srv, "%s 405 %.2f ms method_not_allowed", route, ms);
    char *json = error_json(&err);
    if (!json) return http_send_json(conn, 500, NULL);
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(json), json, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(json);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", "application/json");
    MHD_add_response_header(r, "Allow", allow);
    const int ret = http_queue_response(conn, 405, r);
    MHD_destroy_response(r);
    return ret;
}

static int handle_metrics(tr_server *srv, struct MHD_Connection *conn, double t0) {
    metrics_request(&srv->metrics, "metrics", 200, server_now_ms() - t0);
    char *text = metrics_render(&srv->metrics);
    if (!text) return http_send_json(conn, 500, NULL);
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE);
    MHD_add_response_header(r, "Content-Type", "text/plain; version=0.0.4");
    const int ret = http_queue_response(conn, 200, r);
    MHD_destroy_response(r);
    return ret;
}

/* Constant-time comparison of the presented header with "Bearer KEY": the time depends only on the key's length. */
static bool authorized(const tr_server *srv, struct MHD_Connection *conn) {
    if (!srv->api_key) return true;
    const char *h = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    if (!h || strncmp(h, "Bearer ", 7) != 0) return false;
    const char *got = h + 7;
    const size_t n_key = strlen(srv->api_key), n_got = strlen(got);
    unsigned diff = (unsigned)(n_key != n_got);
    for (size_t i = 0; i < n_key; i++) diff |= (unsigned char)srv->api_key[i] ^ (unsigned char)(n_got ? got[i % n_got] : 0);
    return diff == 0;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                                  const char *version, const char *upload_data, size_t *upload_data_size,
                                  void **con_cls) {
    tr_server *srv = cls;
    conn_state *cs = *con_cls;
    if (!cs) {
        if (!(cs = calloc(1, sizeof *cs))) return MHD_NO;
        cs->t0_ms = server_now_ms();
        cs->route = route_label(url, method);
        *con_cls = cs;
        api_error err = {0};
        /* A CORS preflight comes without the API key: answered before the key is checked. */
        const char *allow = srv->n_cors_origins > 0 && strcmp(method, "OPTIONS") == 0 ? allowed_methods(url) : NULL;
        if (allow) return (enum MHD_Result)cors_preflight(srv, conn, cs->route, allow, cs->t0_ms);
        if (!authorized(srv, conn)) {
            api_error_set(&err, 401, "unauthorized", "", "missing or wrong API key");
            return (enum MHD_Result)http_send_error(srv, conn, cs->route, &err, cs->t0_ms);
        }
        const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (cl && strtoull(cl, NULL, 10) > srv->params.max_body_bytes) {
            api_error_set(&err, 413, "too_large", "", "the body exceeds %zu bytes", srv->params.max_body_bytes);
            return (enum MHD_Result)http_send_error(srv, conn, cs->route, &err, cs->t0_ms);
        }
        return MHD_YES;
    }
    if (*upload_data_size > 0) {
        if (!cs->too_large && cs->len + *upload_data_size > srv->params.max_body_bytes) cs->too_large = true;
        if (!cs->too_large) {
            if (cs->len + *upload_data_size + 1 > cs->cap) {
                size_t cap = (cs->len + *upload_data_size + 1) * 2;
                if (cap > srv->params.max_body_bytes + 1) cap = srv->params.max_body_bytes + 1;
                char *p = realloc(cs->body, cap);
                if (!p) return MHD_NO;
                cs->body = p;
                cs->cap = cap;
            }
            memcpy(cs->body + cs->len, upload_data, *upload_data_size);
            cs->len += *upload_data_size;
            cs->body[cs->len] = 0;
        }
        *upload_data_size = 0;
        return MHD_YES;
    }
    api_error err = {0};
    if (cs->too_large) {
        api_error_set(&err, 413, "too_large", "", "the body exceeds %zu bytes", srv->params.max_body_bytes);
        return (enum MHD_Result)http_send_error(srv, conn, cs->route, &err, cs->t0_ms);
    }
    const bool get = strcmp(method, "GET") == 0, post = strcmp(method, "POST") == 0;
    static const char del_prefix[] = "/v1/route/sessions/";
    if (strcmp(url, "/v1/route/next") == 0 && post) return (enum MHD_Result)handle_route_next(srv, conn, cs);
    if (strcmp(url, "/v1/completions") == 0 && post)
        return (enum MHD_Result)completions_handle(srv, conn, cs->body ? cs->body : "", cs->len);
    if (strcmp(url, "/v1/chat/completions") == 0 && post)
        return (enum MHD_Result)chat_completions_handle(srv, conn, cs->body ? cs->body : "", cs->len);
    if (strcmp(url, "/health") == 0 && get) return (enum MHD_Result)handle_health(srv, conn, cs->t0_ms);
    if (strcmp(url, "/metrics") == 0 && get) return (enum MHD_Result)handle_metrics(srv, conn, cs->t0_ms);
    if (strcmp(url, "/v1/models") == 0 && get) return (enum MHD_Result)handle_models(srv, conn, cs->t0_ms);
    if (strncmp(url, del_prefix, sizeof del_prefix - 1) == 0 && strcmp(method, "DELETE") == 0) {
        const char *id = url + sizeof del_prefix - 1;
        if (strlen(id) > SESSION_ID_MAX) {
            api_error_set(&err, 404, "not_found", "session", "no such session");
            return (enum MHD_Result)http_send_error(srv, conn, "route_delete", &err, cs->t0_ms);
        }
        return (enum MHD_Result)handle_delete(srv, conn, id, cs->t0_ms);
    }
    const char *allow = allowed_methods(url);
    if (allow) return (enum MHD_Result)send_method_not_allowed(srv, conn, cs->route, method, allow, cs->t0_ms);
    api_error_set(&err, 404, "not_found", "", "no route %s %s", method, url);
    return (enum MHD_Result)http_send_error(srv, conn, "other", &err, cs->t0_ms);
}

/* Each connection knows its server, so every reply can add the CORS header (http_queue_response). */
static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                          enum MHD_ConnectionNotificationCode toe) {
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) *socket_context = cls;
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls, enum MHD_RequestTerminationCode t) {
    conn_state *cs = *con_cls;
    if (cs) {
        free(cs->body);
        free(cs);
        *con_cls = NULL;
    }
}

/* ---------------------------------------------------------------- lifecycle */

static char *read_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len + 4096 + 1 > cap) {
            cap = (len + 4096 + 1) * 2;
            char *p = realloc(buf, cap);
            if (!p || cap > (64u << 20)) {
                free(p ? p : buf);
                fclose(f);
                return NULL;
            }
            buf = p;
        }
        const size_t n = fread(buf + len, 1, 4096, f);
        len += n;
        if (n < 4096) break;
    }
    fclose(f);
    buf[len] = 0;
    return buf;
}

/* libmicrohttpd's messages, one log line each. Its report of a reply it could not finish sending ("Failed to send
 * the chunked response body for the request for `/v1/completions'. Error: The connection was forcibly closed by
 * remote peer") is dropped: the stream's owner logs the client that went away in its own words. */
static void mhd_log(void *cls, const char *fmt, va_list ap) {
    const tr_server *srv = cls;
    if (!srv->params.log) return;
    if (strncmp(fmt, "Failed to send", 14) == 0) return;
    char line[512];
    vsnprintf(line, sizeof line, fmt, ap);
    size_t n = strlen(line);
    while (n && (line[n - 1] == '\n' || line[n - 1] == '\r')) line[--n] = 0;
    srv->params.log(srv->params.log_user, line);
}

tr_status tr_server_start(const tr_model *model, const tr_server_params *params, tr_server **out) {
    if (!model || !out) return tr_fail(TR_ERR_ARG, "tr_server_start: NULL argument");
    *out = NULL;
    tr_server_params p = params ? *params : tr_server_default_params();
    const tr_model_info *mi = tr_model_get_info(model);
    if (p.port < 0 || p.port > 65535) return tr_fail(TR_ERR_ARG, "port %d is not in 0..65535", p.port);
    if (p.max_sessions <= 0 || p.kv_budget_bytes <= 0 || p.session_idle_s <= 0 || p.max_batch_tokens <= 0 ||
        p.n_ctx < 0 || p.n_threads < 0 || p.max_body_bytes == 0)
        return tr_fail(TR_ERR_ARG, "server parameters must be positive");
    if (!p.tls_cert_path != !p.tls_key_path)
        return tr_fail(TR_ERR_ARG, "TLS needs both a certificate and a key");
    if (p.chat_template != TR_CHAT_NONE && strcmp(tr_chat_template_name(p.chat_template), "none") == 0)
        return tr_fail(TR_ERR_ARG, "chat_template %d is not a known template", (int)p.chat_template);
    if (p.tls_cert_path && MHD_is_feature_supported(MHD_FEATURE_TLS) != MHD_YES)
        return tr_fail(TR_ERR_UNSUPPORTED, "this libmicrohttpd was built without TLS");
    const int32_t n_ctx = p.n_ctx > 0 ? p.n_ctx : (mi->n_ctx_train < 4096 ? mi->n_ctx_train : 4096);
    if (n_ctx <= 0) return tr_fail(TR_ERR_ARG, "the model has no context length; set n_ctx");

    union {
        struct sockaddr_in v4;
        struct sockaddr_in6 v6;
    } addr;
    memset(&addr, 0, sizeof addr);
    const char *host = p.host ? p.host : "127.0.0.1";
    bool v6 = false;
    if (inet_pton(AF_INET, host, &addr.v4.sin_addr) == 1) {
        addr.v4.sin_family = AF_INET;
        addr.v4.sin_port = htons((uint16_t)p.port);
    } else if (inet_pton(AF_INET6, host, &addr.v6.sin6_addr) == 1) {
        addr.v6.sin6_family = AF_INET6;
        addr.v6.sin6_port = htons((uint16_t)p.port);
        v6 = true;
    } else {
        /* A name (localhost): its first address, as `tokroute ui` binds. */
        struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE}, *ai = NULL;
        const int rc = getaddrinfo(host, NULL, &hints, &ai);
        if (rc != 0) return tr_fail(TR_ERR_ARG, "cannot use host '%s': %s", host, gai_strerror(rc));
        v6 = ai->ai_family == AF_INET6;
        if (v6) memcpy(&addr.v6, ai->ai_addr, sizeof addr.v6), addr.v6.sin6_port = htons((uint16_t)p.port);
        else memcpy(&addr.v4, ai->ai_addr, sizeof addr.v4), addr.v4.sin_port = htons((uint16_t)p.port);
        freeaddrinfo(ai);
    }

    tr_server *srv = calloc(1, sizeof *srv);
    if (!srv) return tr_fail(TR_ERR_NOMEM, "out of memory");
    srv->started = time(NULL);
    srv->model = model;
    srv->params = p;
    srv->params.n_ctx = n_ctx;
    metrics_init(&srv->metrics);
    tr_status st = TR_OK;
    if (p.api_key && p.api_key[0] && !(srv->api_key = strdup(p.api_key))) st = tr_fail(TR_ERR_NOMEM, "out of memory");
    if (st == TR_OK && p.tls_cert_path) {
        if (!(srv->tls_cert = read_file(p.tls_cert_path)))
            st = tr_fail(TR_ERR_IO, "cannot read the TLS certificate %s", p.tls_cert_path);
        else if (!(srv->tls_key = read_file(p.tls_key_path)))
            st = tr_fail(TR_ERR_IO, "cannot read the TLS key %s", p.tls_key_path);
    }
    if (st == TR_OK) st = cors_init(srv, p.cors_origins, p.n_cors_origins);
    if (st == TR_OK && p.chat_template != TR_CHAT_NONE && !tr_model_vocab(model))
        st = tr_fail(TR_ERR_ARG, "a chat template needs the model's vocabulary, and this model has none");
    srv->params.api_key = NULL;
    srv->params.tls_cert_path = srv->params.tls_key_path = NULL;
    srv->params.host = NULL;
    srv->params.cors_origins = NULL;
    if (st == TR_OK) {
        sched_params sp = {p.n_threads, p.max_sessions, n_ctx, p.max_batch_tokens, p.session_idle_s,
                           p.kv_budget_bytes, p.batch};
        st = scheduler_create(model, &sp, &srv->metrics, &srv->sched);
    }
    if (st == TR_OK) {
        unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_ERROR_LOG;
        if (v6) flags |= MHD_USE_IPv6;
        if (srv->tls_cert) flags |= MHD_USE_TLS;
        struct MHD_OptionItem opts[] = {
            {MHD_OPTION_SOCK_ADDR, 0, &addr},
            {MHD_OPTION_NOTIFY_COMPLETED, (intptr_t)on_completed, NULL},
            {MHD_OPTION_NOTIFY_CONNECTION, (intptr_t)on_connection, srv},
            {MHD_OPTION_CONNECTION_TIMEOUT, 120, NULL},
            {MHD_OPTION_CONNECTION_LIMIT, 1024, NULL},
            {srv->tls_cert ? MHD_OPTION_HTTPS_MEM_CERT : MHD_OPTION_END, 0, srv->tls_cert},
            {srv->tls_cert ? MHD_OPTION_HTTPS_MEM_KEY : MHD_OPTION_END, 0, srv->tls_key},
            {MHD_OPTION_END, 0, NULL},
        };
        srv->daemon = MHD_start_daemon(flags, (uint16_t)p.port, NULL, NULL, on_request, srv,
                                       MHD_OPTION_EXTERNAL_LOGGER, mhd_log, srv, MHD_OPTION_ARRAY, opts,
                                       MHD_OPTION_END);
        if (!srv->daemon) st = tr_fail(TR_ERR_NETWORK, "cannot listen on %s port %d (in use, or bad TLS files?)", host, p.port);
    }
    if (st != TR_OK) {
        tr_server_free(srv);
        return st;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(srv->daemon, MHD_DAEMON_INFO_BIND_PORT);
    srv->port = info ? info->port : p.port;
    *out = srv;
    return TR_OK;
}

int tr_server_port(const tr_server *srv) { return srv ? srv->port : 0; }

void tr_server_stop(tr_server *srv) {
    if (!srv || srv->stopped) return;
    srv->stopped = true;
    /* Fail queued jobs first so connection threads blocked on them return (later ones get 503), then stop the
     * daemon, which joins the connection threads; only then is the scheduler freed. */
    scheduler_shutdown(srv->sched);
    if (srv->daemon) MHD_stop_daemon(srv->daemon);
    srv->daemon = NULL;
    scheduler_free(srv->sched);
    srv->sched = NULL;
}

void tr_server_free(tr_server *srv) {
    if (!srv) return;
    tr_server_stop(srv);
    scheduler_free(srv->sched);
    free(srv->api_key);
    free(srv->tls_cert);
    free(srv->tls_key);
    cors_free(srv);
    pthread_mutex_destroy(&srv->metrics.mu);
    free(srv);
}
