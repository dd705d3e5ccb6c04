/* http.c — tr_server on the HTTP layer it shares with the ui (httpd.h; optionally TLS with GnuTLS): request
 * bodies, routing, and the JSON bodies of /v1/route/next, DELETE /v1/route/sessions/{id}, /v1/models, /health and /metrics. Completions live in
 * completions.c and chat_completions.c, the streamed /v1/route/next reply in route_stream.c, CORS in cors.c, the
 * sessions and forward passes in scheduler.c.
 *
 * Clients are not trusted until they have shown a key and a well-formed request, so everything before that costs
 * little and is bounded: libmicrohttpd runs a few event threads over epoll (http_threads), so an idle or half-sent
 * connection costs no thread; a request is judged on its headers before any body is read (503 with Retry-After for
 * a connection opened beyond max_connections or max_connections_per_ip, 403 for a Host the server does not answer
 * to, 415 for a POST body not declared application/json (httpd_judge), 401 without a key, 413 for a
 * Content-Length beyond what the route may hold: a session-protocol body holds at most the context's ids); a body
 * is buffered up to that size (large ones in their own mapping, returned to the system when the request ends) and
 * read without a tree for its token arrays (request.c, json_scan.c); a request must be complete within
 * request_timeout_s (httpd_conn.c). Requests that wait on the scheduler run on worker threads (httpd_defer.c);
 * /health, /metrics and /v1/models are answered on the event threads at once, so /health answers however busy the
 * workers are. Keys, session owners and the metrics key: access.c.
 *
 * Logging: one line per request with method, route, status and milliseconds; bodies (token ids, text) only with
 * log_requests. A client that hangs up mid-stream leaves one line from the stream's owner; libmicrohttpd's own
 * report of the failed send is dropped (httpd.c). */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include <cjson/cJSON.h>
#include <microhttpd.h>

#include "common/error.h"
#include "common/openai_api.h"
#include "server/http_internal.h"
#include "server/json_scan.h"

#define HTTP_THREADS_DEFAULT 2
#define DEFER_THREADS 128    /* requests waiting on the scheduler at once */
#define DEFER_QUEUED 1024    /* more waiting for a worker get 503 */
#define BODY_MAP_BYTES (128u << 10) /* bodies this large get their own mapping (freed to the system at once) */
#define SURVEY_FIRST_BYTES (16u << 10) /* an OpenAI body's values are first counted when this much has arrived */

typedef enum route_kind { ROUTE_NONE, ROUTE_NEXT, ROUTE_COMPLETIONS, ROUTE_CHAT, ROUTE_DELETE } route_kind;

/* One request (libmicrohttpd's con_cls). */
typedef struct conn_state {
    tr_server *srv;
    char *body;
    size_t len, cap, limit;  /* limit: the most this route's body may hold */
    bool too_large, mapped, complete;
    bool surveyed;           /* an OpenAI body: its values are counted while it arrives (next_survey) */
    bool too_many;           /* ... and already hold more than a request may: refused, the rest not kept */
    size_t next_survey;      /* the body length at which the part received is counted next */
    json_survey survey;      /* the count that refused it */
    double t0_ms;
    const char *route;  /* metrics label */
    route_kind kind;    /* what a worker runs */
    int32_t owner;      /* the key presented (access.c) */
    char delete_id[SESSION_ID_MAX + 1];
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

double server_now_ms(void) { return httpd_now_ms(); }

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
    p.max_connections = 4096;
    p.max_connections_per_ip = 64;
    p.request_timeout_s = 10;
    p.http_threads = HTTP_THREADS_DEFAULT;
    return p;
}

/* Streams are made on worker threads (httpd_defer.c); every route that streams runs there. */
int http_send_stream(struct MHD_Connection *conn, const char *content_type, char *(*next)(void *cls, bool *last),
                     void *cls, void (*done)(void *cls, bool client_gone)) {
    return httpd_send_stream(conn, content_type, NULL, NULL, next, cls, done);
}

/* httpd's decorate: the CORS header the request earns (cors.c). */
static void add_cors(void *cls, struct MHD_Connection *conn, struct MHD_Response *r, unsigned status) {
    cors_add_headers(cls, conn, r);
}

int http_send_json(struct MHD_Connection *conn, int status, char *json_owned) {
    const size_t len = json_owned ? strlen(json_owned) : 0;
    return httpd_send_buffer(conn, (unsigned)status, "application/json", json_owned, len, NULL, NULL);
}

/* OpenAI's error object (common/openai_api.c, as the device's server writes it), plus "field": the name tokroute's
 * clients read. Every api_error field fits an oai_error's. */
cJSON *api_error_object(const api_error *err) {
    oai_error o;
    oai_error_set(&o, err->status, err->code, err->field, "%s", err->message);
    cJSON *e = oai_error_object(&o);
    if (e && err->field[0]) cJSON_AddStringToObject(e, "field", err->field);
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
    char *body = err->status == 204 ? strdup("") : error_json(err);
    const char *type = err->status == 204 ? NULL : "application/json";
    /* Busy (503) and rate-limited (429) replies say when to come back. */
    const char *retry = err->status == 503 || err->status == 429 ? "Retry-After" : NULL;
    const size_t len = body ? strlen(body) : 0;
    return httpd_send_buffer(conn, (unsigned)err->status, type, body, len, retry, "1");
}

/* ---------------------------------------------------------------- routes */

char *route_result_json(const char *session, bool with_verify, const route_result *res) {
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "session", access_client_id(session));
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
    cJSON_AddNumberToObject(tm, "queue_passes", res->queue_passes);
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
    char id[SESSION_ID_MAX + 1];
    snprintf(id, sizeof id, "%s", req.session);
    access_session_name(srv->access, cs->owner, id, req.session, sizeof req.session);
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

/* Only ids a client may name (a completion's private session is not one), and only its own key's sessions. */
static int handle_delete(tr_server *srv, struct MHD_Connection *conn, const conn_state *cs) {
    api_error err = {0};
    char name[SESSION_NAME_MAX + 2];
    access_session_name(srv->access, cs->owner, cs->delete_id, name, sizeof name);
    const int status = session_id_valid(cs->delete_id) ? scheduler_delete(srv->sched, name) : 404;
    if (status == 204) api_error_set(&err, 204, "ok", "", "deleted");
    else if (status == 404) api_error_set(&err, 404, "not_found", "session", "no such session");
    else api_error_set(&err, status, "busy", "", "the server is shutting down");
    return http_send_error(srv, conn, "route_delete", &err, cs->t0_ms);
}

/* GET /health: public (load balancers and uptime probes hold no key), so without a valid key it says only that
 * the server is up; the model, its vocabulary and context (what /v1/models tells a key holder) need the key. */
static int handle_health(tr_server *srv, struct MHD_Connection *conn, const conn_state *cs) {
    const double t0 = cs->t0_ms;
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "status", "ok");
    if (cs->owner >= 0) {
        const tr_model_info *mi = tr_model_get_info(srv->model);
        cJSON_AddStringToObject(root, "model", server_model_name(srv));
        cJSON_AddNumberToObject(root, "n_vocab", mi->n_vocab);
        cJSON_AddNumberToObject(root, "n_ctx", scheduler_n_ctx(srv->sched));
    }
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
    const int ret = httpd_queue_response(conn, 405, r);
    MHD_destroy_response(r);
    return ret;
}

static int handle_metrics(tr_server *srv, struct MHD_Connection *conn, double t0) {
    metrics_request(&srv->metrics, "metrics", 200, server_now_ms() - t0);
    char *text = metrics_render(&srv->metrics);
    if (!text) return http_send_json(conn, 500, NULL);
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE);
    MHD_add_response_header(r, "Content-Type", "text/plain; version=0.0.4");
    const int ret = httpd_queue_response(conn, 200, r);
    MHD_destroy_response(r);
    return ret;
}

/* ---------------------------------------------------------------- requests */

/* The most a route's body may hold: a session-protocol body at most the context's ids and a draft (16 bytes an
 * id leaves room for any spacing a client uses), others max_body_bytes; GET and DELETE carry none worth keeping. */
static size_t body_limit(const tr_server *srv, const char *url, const char *method) {
    if (strcmp(method, "POST") != 0) return 4096;
    if (strcmp(url, "/v1/route/next") == 0) {
        const size_t cap = (64u << 10) + 16 * (size_t)(scheduler_n_ctx(srv->sched) + TR_DRAFT_TOKENS_MAX);
        return cap < srv->params.max_body_bytes ? cap : srv->params.max_body_bytes;
    }
    return srv->params.max_body_bytes;
}

static void body_free(conn_state *cs) {
    if (cs->mapped) munmap(cs->body, cs->cap);
    else free(cs->body);
    cs->body = NULL;
    cs->cap = cs->len = 0;
    cs->mapped = false;
}

/* Room for need bytes: small bodies on the heap, large ones in a mapping of their own, so that the memory of
 * large bodies goes back to the system when their request ends, whatever the allocator would keep. */
static bool body_reserve(conn_state *cs, size_t need) {
    if (need <= cs->cap) return true;
    size_t cap = cs->cap * 2 > need ? cs->cap * 2 : need;
    if (cap > cs->limit + 1) cap = cs->limit + 1;
    if (cap < need) return false;
    if (cap < BODY_MAP_BYTES && !cs->mapped) {
        char *p = realloc(cs->body, cap);
        if (!p) return false;
        cs->body = p;
        cs->cap = cap;
        return true;
    }
    void *m = cs->mapped ? mremap(cs->body, cs->cap, cap, MREMAP_MAYMOVE)
                         : mmap(NULL, cap, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return false;
    if (!cs->mapped) {
        if (cs->len) memcpy(m, cs->body, cs->len);
        free(cs->body);
    }
    cs->body = m;
    cs->cap = cap;
    cs->mapped = true;
    return true;
}

/* A reply before the body is read (or instead of it): it ends the connection, since the body is not drained. */
static int refuse(tr_server *srv, struct MHD_Connection *conn, conn_state *cs, int status, const char *code,
                  const char *message) {
    api_error err = {0};
    api_error_set(&err, status, code, "", "%s", message);
    const double ms = server_now_ms() - cs->t0_ms;
    metrics_request(&srv->metrics, cs->route, status, ms);
    server_log(srv, "%s %d %.2f ms %s", cs->route, status, ms, code);
    char *body = error_json(&err);
    const char *headers[] = {"Connection", "close", status == 503 ? "Retry-After" : NULL, "1", NULL};
    return httpd_queue_buffer(conn, (unsigned)status, "application/json", body, body ? strlen(body) : 0, headers);
}

/* The first call for a request: its headers are here, its body is not. Judged now, so that nothing is read from
 * a client that may not use the server. */
static int judge_headers(tr_server *srv, struct MHD_Connection *conn, conn_state *cs, const char *url,
                         const char *method) {
    const bool health = strcmp(url, "/health") == 0;
    const httpd_refusal no = httpd_judge(srv->httpd, conn, method, health);
    if (no.status) return refuse(srv, conn, cs, (int)no.status, no.code, no.message);
    /* A CORS preflight comes without the API key: answered before the key is checked. */
    const char *allow = srv->n_cors_origins > 0 && strcmp(method, "OPTIONS") == 0 ? allowed_methods(url) : NULL;
    if (allow) return cors_preflight(srv, conn, cs->route, allow, cs->t0_ms);
    const char *auth = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    const bool metrics = strcmp(url, "/metrics") == 0 && strcmp(method, "GET") == 0;
    cs->owner = access_key_of(srv->access, auth);
    const bool public_health = health && strcmp(method, "GET") == 0; /* handle_health leaves out what keys protect */
    if (!public_health && (metrics ? !access_metrics_allowed(srv->access, auth) : cs->owner < 0))
        return refuse(srv, conn, cs, 401, "unauthorized", metrics ? "missing or wrong metrics key"
                                                                   : "missing or wrong API key");
    cs->limit = body_limit(srv, url, method);
    const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    const unsigned long long declared = cl ? strtoull(cl, NULL, 10) : 0;
    if (declared > cs->limit) {
        char msg[96];
        snprintf(msg, sizeof msg, "the body exceeds %zu bytes", cs->limit);
        return refuse(srv, conn, cs, 413, "too_large", msg);
    }
    cs->surveyed = strcmp(method, "POST") == 0 && (strcmp(url, "/v1/completions") == 0 ||
                                                   strcmp(url, "/v1/chat/completions") == 0);
    cs->next_survey = SURVEY_FIRST_BYTES;
    /* Room for the declared body at once; a surveyed one grows as it proves itself (a refused one stays small). */
    size_t reserve = (size_t)declared;
    if (cs->surveyed && reserve > 2 * SURVEY_FIRST_BYTES) reserve = 2 * SURVEY_FIRST_BYTES;
    if (reserve > 0 && !body_reserve(cs, reserve + 1)) return refuse(srv, conn, cs, 503, "busy", "out of memory");
    return MHD_YES;
}

/* An OpenAI body is parsed into a cJSON tree by its route: refused first when it holds more values than a request
 * may (a prompt of ids longer than the context, say), so the tree stays small. The values of a part of the body
 * are values of the whole (the survey counts each where it starts), so a part already over the limit refuses it. */
static bool values_fit(tr_server *srv, conn_state *cs) {
    json_survey_text(cs->body ? cs->body : "", cs->len, NULL, &cs->survey);
    return cs->survey.n_values <= request_values_max(scheduler_n_ctx(srv->sched));
}

static void values_error(tr_server *srv, const conn_state *cs, api_error *err) {
    const json_survey *sv = &cs->survey;
    const char *at_least = cs->too_many ? "at least " : ""; /* counted in the part received */
    if (sv->biggest[0])
        api_error_set(err, 400, "bad_request", sv->biggest, "'%s' holds %s%lld JSON values: more than a request may "
                      "(the context is %d tokens)", sv->biggest, at_least, (long long)sv->biggest_values,
                      scheduler_n_ctx(srv->sched));
    else /* no top-level member holds them (the body is not an object) */
        api_error_set(err, 400, "bad_request", "", "the body holds %s%lld JSON values: more than a request may (the "
                      "context is %d tokens)", at_least, (long long)sv->n_values, scheduler_n_ctx(srv->sched));
}

static int run_route(struct MHD_Connection *conn, void *arg) {
    conn_state *cs = arg;
    tr_server *srv = cs->srv;
    const char *body = cs->body ? cs->body : "";
    api_error err = {0};
    /* A raw NUL (not valid JSON) would end a string early in cJSON's tree, as \u0000 would. */
    if (cs->len && memchr(body, 0, cs->len)) {
        api_error_set(&err, 400, "bad_request", "", "the body holds a NUL byte");
        return http_send_error(srv, conn, cs->route, &err, cs->t0_ms);
    }
    if ((cs->kind == ROUTE_COMPLETIONS || cs->kind == ROUTE_CHAT) && !values_fit(srv, cs)) {
        values_error(srv, cs, &err);
        return http_send_error(srv, conn, cs->route, &err, cs->t0_ms);
    }
    switch (cs->kind) {
    case ROUTE_NEXT: return handle_route_next(srv, conn, cs);
    case ROUTE_COMPLETIONS: return completions_handle(srv, conn, body, cs->len, cs->owner);
    case ROUTE_CHAT: return chat_completions_handle(srv, conn, body, cs->len, cs->owner);
    case ROUTE_DELETE: return handle_delete(srv, conn, cs);
    case ROUTE_NONE: break;
    }
    return MHD_NO;
}

/* The request is complete: answered here when that is quick, else handed to a worker thread. */
static int dispatch(tr_server *srv, struct MHD_Connection *conn, conn_state *cs, const char *url,
                    const char *method) {
    api_error err = {0};
    if (cs->too_large) {
        api_error_set(&err, 413, "too_large", "", "the body exceeds %zu bytes", cs->limit);
        return http_send_error(srv, conn, cs->route, &err, cs->t0_ms);
    }
    if (cs->too_many) {
        values_error(srv, cs, &err);
        return http_send_error(srv, conn, cs->route, &err, cs->t0_ms);
    }
    const bool get = strcmp(method, "GET") == 0, post = strcmp(method, "POST") == 0;
    static const char del_prefix[] = "/v1/route/sessions/";
    if (strcmp(url, "/health") == 0 && get) return handle_health(srv, conn, cs);
    if (strcmp(url, "/metrics") == 0 && get) return handle_metrics(srv, conn, cs->t0_ms);
    if (strcmp(url, "/v1/models") == 0 && get) return handle_models(srv, conn, cs->t0_ms);
    if (post && strcmp(url, "/v1/route/next") == 0) cs->kind = ROUTE_NEXT;
    else if (post && strcmp(url, "/v1/completions") == 0) cs->kind = ROUTE_COMPLETIONS;
    else if (post && strcmp(url, "/v1/chat/completions") == 0) cs->kind = ROUTE_CHAT;
    else if (strncmp(url, del_prefix, sizeof del_prefix - 1) == 0 && url[sizeof del_prefix - 1] &&
             strcmp(method, "DELETE") == 0) {
        const char *id = url + sizeof del_prefix - 1;
        if (!session_id_valid(id)) { /* a completion's private session ("!cmpl-…") is no client's to end */
            api_error_set(&err, 404, "not_found", "session", "no such session");
            return http_send_error(srv, conn, "route_delete", &err, cs->t0_ms);
        }
        snprintf(cs->delete_id, sizeof cs->delete_id, "%s", id);
        cs->kind = ROUTE_DELETE;
    }
    if (cs->kind != ROUTE_NONE) {
        if (defer_run(httpd_defer_pool(srv->httpd), conn, run_route, cs, NULL)) return MHD_YES;
        api_error_set(&err, 503, "busy", "", "too many requests in progress: retry later");
        return http_send_error(srv, conn, cs->route, &err, cs->t0_ms);
    }
    const char *allow = allowed_methods(url);
    if (allow) return send_method_not_allowed(srv, conn, cs->route, method, allow, cs->t0_ms);
    api_error_set(&err, 404, "not_found", "", "no route %s %s", method, url);
    return http_send_error(srv, conn, "other", &err, cs->t0_ms);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                                  const char *version, const char *upload_data, size_t *upload_data_size,
                                  void **con_cls) {
    tr_server *srv = cls;
    conn_state *cs = *con_cls;
    if (!cs) {
        if (!(cs = calloc(1, sizeof *cs))) return MHD_NO;
        cs->srv = srv;
        cs->t0_ms = server_now_ms();
        cs->route = route_label(url, method);
        *con_cls = cs;
        return (enum MHD_Result)judge_headers(srv, conn, cs, url, method);
    }
    if (*upload_data_size > 0) {
        if (!cs->too_large && cs->len + *upload_data_size > cs->limit) {
            cs->too_large = true;
            body_free(cs);
        }
        if (!cs->too_large && !cs->too_many) {
            if (!body_reserve(cs, cs->len + *upload_data_size + 1)) return MHD_NO;
            memcpy(cs->body + cs->len, upload_data, *upload_data_size);
            cs->len += *upload_data_size;
            cs->body[cs->len] = 0;
            if (cs->surveyed && cs->len >= cs->next_survey) { /* counted at 16 KiB, then each doubling: linear */
                cs->next_survey = cs->len * 2;
                if (!values_fit(srv, cs)) {
                    cs->too_many = true;
                    body_free(cs); /* libmicrohttpd 0.9.75 answers once the body is in: the rest read, not kept */
                }
            }
        }
        *upload_data_size = 0;
        return MHD_YES;
    }
    bool deferred = false;
    const int ret = defer_reply(conn, &deferred); /* called again after a worker made the reply */
    if (deferred) return (enum MHD_Result)ret;
    if (!cs->complete) {
        cs->complete = true;
        conn_request_complete(conn_info_of(conn));
    }
    return (enum MHD_Result)dispatch(srv, conn, cs, url, method);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls, enum MHD_RequestTerminationCode t) {
    conn_state *cs = *con_cls;
    if (cs) {
        body_free(cs);
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

tr_status tr_server_start(const tr_model *model, const tr_server_params *params, tr_server **out) {
    if (!model || !out) return tr_fail(TR_ERR_ARG, "tr_server_start: NULL argument");
    *out = NULL;
    tr_server_params p = params ? *params : tr_server_default_params();
    const tr_model_info *mi = tr_model_get_info(model);
    if (p.port < 0 || p.port > 65535) return tr_fail(TR_ERR_ARG, "port %d is not in 0..65535", p.port);
    if (p.max_sessions <= 0 || p.kv_budget_bytes <= 0 || p.session_idle_s <= 0 || p.max_batch_tokens <= 0 ||
        p.n_ctx < 0 || p.n_threads < 0 || p.max_body_bytes == 0 || p.max_connections <= 0 ||
        p.max_connections_per_ip <= 0 || p.request_timeout_s <= 0 || p.http_threads < 0 || p.http_threads > 64)
        return tr_fail(TR_ERR_ARG, "server parameters must be positive");
    if (!p.tls_cert_path != !p.tls_key_path)
        return tr_fail(TR_ERR_ARG, "TLS needs both a certificate and a key");
    if (p.chat_template != TR_CHAT_NONE && strcmp(tr_chat_template_name(p.chat_template), "none") == 0)
        return tr_fail(TR_ERR_ARG, "chat_template %d is not a known template", (int)p.chat_template);
    if (p.tls_cert_path && MHD_is_feature_supported(MHD_FEATURE_TLS) != MHD_YES)
        return tr_fail(TR_ERR_UNSUPPORTED, "this libmicrohttpd was built without TLS");
    const int32_t n_ctx = p.n_ctx > 0 ? p.n_ctx : (mi->n_ctx_train < 4096 ? mi->n_ctx_train : 4096);
    if (n_ctx <= 0) return tr_fail(TR_ERR_ARG, "the model has no context length; set n_ctx");

    tr_server *srv = calloc(1, sizeof *srv);
    if (!srv) return tr_fail(TR_ERR_NOMEM, "out of memory");
    srv->started = time(NULL);
    srv->model = model;
    srv->params = p;
    srv->params.n_ctx = n_ctx;
    metrics_init(&srv->metrics);
    tr_status st = TR_OK;
    st = access_create(&p, &srv->access);
    char *tls_cert = NULL, *tls_key = NULL;
    if (st == TR_OK && p.tls_cert_path) {
        if (!(tls_cert = read_file(p.tls_cert_path)))
            st = tr_fail(TR_ERR_IO, "cannot read the TLS certificate %s", p.tls_cert_path);
        else if (!(tls_key = read_file(p.tls_key_path)))
            st = tr_fail(TR_ERR_IO, "cannot read the TLS key %s", p.tls_key_path);
    }
    if (st == TR_OK) st = cors_init(srv, p.cors_origins, p.n_cors_origins);
    if (st == TR_OK && p.chat_template != TR_CHAT_NONE && !tr_model_vocab(model))
        st = tr_fail(TR_ERR_ARG, "a chat template needs the model's vocabulary, and this model has none");
    srv->params.api_key = srv->params.metrics_key = NULL;
    srv->params.api_keys = NULL;
    srv->params.tls_cert_path = srv->params.tls_key_path = NULL;
    srv->params.host = NULL;
    srv->params.cors_origins = NULL;
    srv->params.allowed_hosts = NULL;
    if (st == TR_OK) {
        sched_params sp = {p.n_threads, p.max_sessions, n_ctx, p.max_batch_tokens, p.session_idle_s,
                           p.kv_budget_bytes, p.batch};
        st = scheduler_create(model, &sp, &srv->metrics, &srv->sched);
    }
    if (st == TR_OK) {
        const httpd_params hp = {
            .host = p.host ? p.host : "127.0.0.1", .port = p.port,
            .allowed_hosts = p.allowed_hosts, .n_allowed_hosts = p.n_allowed_hosts,
            .keyed = access_n_keys(srv->access) > 0,
            .max_connections = p.max_connections, .max_connections_per_ip = p.max_connections_per_ip,
            .request_timeout_s = p.request_timeout_s,
            .event_threads = p.http_threads > 0 ? p.http_threads : HTTP_THREADS_DEFAULT,
            .max_workers = DEFER_THREADS, .max_queued = DEFER_QUEUED,
            .tls_cert = tls_cert, .tls_key = tls_key,
            .on_request = on_request, .on_completed = on_completed, .cls = srv,
            .decorate = add_cors, .log = p.log, .log_user = p.log_user,
        };
        st = httpd_start(&hp, &srv->httpd);
    }
    free(tls_cert);
    free(tls_key);
    if (st != TR_OK) {
        tr_server_free(srv);
        return st;
    }
    *out = srv;
    return TR_OK;
}

int tr_server_port(const tr_server *srv) { return srv ? httpd_port(srv->httpd) : 0; }

void tr_server_stop(tr_server *srv) {
    if (!srv || srv->stopped) return;
    srv->stopped = true;
    /* Fail queued jobs first so workers blocked on them return (later ones get 503), let the workers finish
     * (their connections resume), then stop the daemon, which closes the connections; only then is the scheduler
     * freed. */
    scheduler_shutdown(srv->sched);
    httpd_stop(srv->httpd);
    scheduler_free(srv->sched);
    srv->sched = NULL;
}

void tr_server_free(tr_server *srv) {
    if (!srv) return;
    tr_server_stop(srv);
    scheduler_free(srv->sched);
    httpd_free(srv->httpd);
    access_free(srv->access);
    cors_free(srv);
    pthread_mutex_destroy(&srv->metrics.mu);
    free(srv);
}
