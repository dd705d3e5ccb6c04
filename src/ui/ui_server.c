/* ui_server.c — the device's HTTP server on the HTTP layer it shares with `tokroute serve` (src/server/httpd.h):
 * the embedded page (GET /, /app.css, /app.js), the page's own endpoints (GET /api/info and /api/status, POST
 * /api/generate streaming the page's events, POST /api/cancel) and the OpenAI-compatible API (ui_openai.c: POST
 * /v1/chat/completions, POST /v1/completions, GET /v1/models).
 *
 * libmicrohttpd's few event threads read every connection and answer the quick requests (the page, /api/info,
 * /api/status, /api/cancel, /v1/models) at once; so that no client can hold them, requests that block (waiting
 * for a generation slot, a whole reply waiting for its generation, the event stream waiting for output with an SSE
 * comment line every second while there is none) run on the layer's worker threads, and their streams' producers
 * too. Those waits notice a client that went away (ui_client_gone, or the stream's failed write) and cancel its
 * generation. Connections are limited in all and per address (503 with Retry-After) and must deliver a request
 * within request_timeout_s, as serve's are. Every error is OpenAI's object {"error": {message, type, param,
 * code}}; a wrong method is 405 with Allow. Requests whose Host is not this server's are refused (403: DNS
 * rebinding), POST bodies must be declared application/json (415: other sites' pages cannot post JSON without a
 * preflight). With a key (tr_ui_params.api_key, required when bound to anything but loopback) every /api/ and /v1/
 * request needs "Authorization: Bearer KEY"; refusals are answered from the headers, before any body is read. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <microhttpd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/error.h"
#include "common/openai_api.h"
#include "route/route_internal.h"
#include "server/httpd.h"
#include "ui/ui_internal.h"
#include "ui/ui_page.h"

#define MAX_BODY_BYTES (256 * 1024)
#define HEARTBEAT_MS 1000
#define STOP_DRAIN_MS 2000
#define EVENT_THREADS 2
#define DEFER_QUEUED 256 /* blocking requests waiting for a worker; more get 503 */

/* ---------------------------------------------------------------- responses */

/* httpd's decorate: what every reply of the device's server carries. */
static void add_headers(void *cls, struct MHD_Connection *c, struct MHD_Response *r, unsigned status) {
    if (!MHD_get_response_header(r, "Cache-Control")) MHD_add_response_header(r, "Cache-Control", "no-store");
    MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
}

int ui_send_json_text(struct MHD_Connection *c, unsigned status, const char *json, int retry_after_s) {
    char *copy = json ? strdup(json) : NULL;
    char retry[16];
    snprintf(retry, sizeof retry, "%d", retry_after_s);
    return httpd_send_buffer(c, copy ? status : 500, "application/json", copy, copy ? strlen(copy) : 0,
                             retry_after_s > 0 ? "Retry-After" : NULL, retry);
}

static enum MHD_Result send_json(struct MHD_Connection *c, unsigned status, cJSON *j) {
    char *s = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    const enum MHD_Result ret = ui_send_json_text(c, status, s, 0);
    cJSON_free(s);
    return ret;
}

static const char *status_code_name(unsigned status) {
    switch (status) {
    case 401: return "invalid_api_key";
    case 403: return "forbidden";
    case 404: return "not_found";
    case 405: return "method_not_allowed";
    case 413: return "request_too_large";
    case 415: return "unsupported_media_type";
    case 429: return "rate_limit_exceeded";
    case 503: return "unavailable";
    default: return status >= 500 ? "server_error" : "bad_request";
    }
}

int ui_send_error(struct MHD_Connection *c, unsigned status, const char *code, const char *param, const char *message,
                  int retry_after_s) {
    oai_error e;
    oai_error_set(&e, (int)status, code ? code : status_code_name(status), param, "%s", message);
    char *json = oai_error_json(&e);
    const enum MHD_Result ret = ui_send_json_text(c, status, json, retry_after_s);
    cJSON_free(json);
    return ret;
}

static enum MHD_Result send_error(struct MHD_Connection *c, unsigned status, const char *message) {
    return ui_send_error(c, status, NULL, NULL, message, 0);
}

static const char *content_type(const char *name) {
    const char *dot = strrchr(name, '.');
    if (dot && strcmp(dot, ".html") == 0) return "text/html; charset=utf-8";
    if (dot && strcmp(dot, ".css") == 0) return "text/css; charset=utf-8";
    if (dot && strcmp(dot, ".js") == 0) return "text/javascript; charset=utf-8";
    if (dot && strcmp(dot, ".svg") == 0) return "image/svg+xml";
    return "application/octet-stream";
}

static const ui_asset *find_asset(const char *url) {
    const char *name = strcmp(url, "/") == 0 ? "index.html" : url + 1;
    for (size_t i = 0; i < ui_n_assets; i++)
        if (strcmp(ui_assets[i].name, name) == 0) return &ui_assets[i];
    return NULL;
}

/* ---------------------------------------------------------------- GET /api/info, /api/status */

const char *ui_model_id(const tr_ui *ui) { return ui->slm_name; }

static enum MHD_Result send_info(struct MHD_Connection *c, tr_ui *ui) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "version", tr_version());
    cJSON_AddStringToObject(j, "slm", ui->slm_name);
    if (ui->p.open_backend) cJSON_AddStringToObject(j, "llm", ui->llm_name ? ui->llm_name : "LLM");
    else cJSON_AddNullToObject(j, "llm");
    if (ui->router_path) cJSON_AddStringToObject(j, "router", ui->router_path);
    else cJSON_AddNullToObject(j, "router");
    cJSON *policies = cJSON_AddArrayToObject(j, "policies");
    for (tr_policy p = TR_POLICY_MAXPROB; p <= TR_POLICY_ENTROPY; p++)
        cJSON_AddItemToArray(policies, cJSON_CreateString(tr_policy_name(p)));
    cJSON *modes = cJSON_AddArrayToObject(j, "modes");
    if (ui->p.open_backend) cJSON_AddItemToArray(modes, cJSON_CreateString("joint"));
    cJSON_AddItemToArray(modes, cJSON_CreateString("small_only"));
    if (ui->p.open_backend) cJSON_AddItemToArray(modes, cJSON_CreateString("llm_only"));
    if (ui->p.chat_template != TR_CHAT_NONE)
        cJSON_AddStringToObject(j, "chat_template", tr_chat_template_name(ui->p.chat_template));
    else cJSON_AddNullToObject(j, "chat_template");
    cJSON_AddNumberToObject(j, "default_tau", ui->p.default_tau);
    cJSON_AddNumberToObject(j, "target_routed", ui->p.target_routed); /* the command line's budget: the page's start */
    cJSON_AddNumberToObject(j, "max_routed", ui->p.max_routed);
    cJSON_AddNumberToObject(j, "max_tokens", ui->p.max_tokens);
    cJSON_AddNumberToObject(j, "n_ctx", tr_context_n_ctx(ui->slots[0].ctx));
    cJSON_AddNumberToObject(j, "max_generations", ui->p.max_generations);
    cJSON_AddNumberToObject(j, "max_queued", ui->p.max_queued);
    cJSON_AddStringToObject(j, "model", ui_model_id(ui));
    return send_json(c, MHD_HTTP_OK, j);
}

static enum MHD_Result send_status(struct MHD_Connection *c, tr_ui *ui) {
    cJSON *j = cJSON_CreateObject();
    pthread_mutex_lock(&ui->mu);
    cJSON_AddNumberToObject(j, "active", ui->active);
    cJSON_AddNumberToObject(j, "waiting", ui->n_waiting);
    cJSON *ids = cJSON_AddArrayToObject(j, "running");
    for (ui_job *job = ui->jobs; job; job = job->next) cJSON_AddItemToArray(ids, cJSON_CreateNumber((double)job->id));
    pthread_mutex_unlock(&ui->mu);
    cJSON_AddNumberToObject(j, "max_generations", ui->p.max_generations);
    cJSON_AddNumberToObject(j, "max_queued", ui->p.max_queued);
    return send_json(c, MHD_HTTP_OK, j);
}

/* ---------------------------------------------------------------- streams and waiting */

bool ui_client_gone(void *connection) { return conn_client_gone(connection); }

/* The stream's producer (a worker thread): the output the generation wrote since the last piece, or after
 * HEARTBEAT_MS without any an SSE comment line (the client is checked by the write); the last piece once the job
 * finished (tr_ui_stop cancels every job, so this ends every stream). */
static char *next_events(void *cls, bool *last) {
    ui_job *job = cls;
    tr_ui *ui = job->ui;
    pthread_mutex_lock(&ui->mu);
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_nsec += (long)HEARTBEAT_MS * 1000000L;
    until.tv_sec += until.tv_nsec / 1000000000L;
    until.tv_nsec %= 1000000000L;
    while (job->sent == job->len && !job->finished)
        if (pthread_cond_timedwait(&ui->cv, &ui->mu, &until) == ETIMEDOUT) break;
    char *piece;
    if (job->sent < job->len) {
        const size_t k = job->len - job->sent;
        if ((piece = malloc(k + 1))) {
            memcpy(piece, job->buf + job->sent, k);
            piece[k] = 0;
            job->sent += k;
        }
    } else {
        *last = job->finished;
        piece = strdup(job->finished ? "" : ":\n\n"); /* an SSE comment: keeps the connection checked */
    }
    pthread_mutex_unlock(&ui->mu);
    return piece;
}

/* The stream ended (its last piece out, the client gone, or the server stopping): cancel and let go. */
static void events_done(void *cls, bool client_gone) {
    ui_job *job = cls;
    tr_ui *ui = job->ui;
    atomic_store(&job->cancel, true);
    pthread_mutex_lock(&ui->mu);
    ui->streams--;
    ui_job_release_locked(job);
    pthread_cond_broadcast(&ui->cv);
    pthread_mutex_unlock(&ui->mu);
}

int ui_send_stream(tr_ui *ui, struct MHD_Connection *c, ui_job *job, const char *generation_id) {
    pthread_mutex_lock(&ui->mu);
    ui->streams++;
    pthread_mutex_unlock(&ui->mu);
    return httpd_send_stream(c, "text/event-stream; charset=utf-8", generation_id ? "X-Generation-Id" : NULL,
                             generation_id, next_events, job, events_done);
}

/* ---------------------------------------------------------------- POST /api/generate, /api/cancel */

static enum MHD_Result handle_generate(struct MHD_Connection *c, tr_ui *ui, const char *body, size_t size) {
    cJSON *j = cJSON_ParseWithLength(body, size);
    if (!j) return send_error(c, MHD_HTTP_BAD_REQUEST, "the body is not valid JSON");
    ui_request r = {0};
    char msg[512];
    const char *param = "", *code = NULL;
    const char *bad = ui_page_parse(ui, j, &r, &param, &code, msg, sizeof msg);
    if (bad) { /* param may name a field of j */
        ui_request_free(&r);
        const enum MHD_Result ret = ui_send_error(c, MHD_HTTP_BAD_REQUEST, code, param, bad, 0);
        cJSON_Delete(j);
        return ret;
    }
    cJSON_Delete(j);
    void *state = ui_page_state_new();
    if (!state) {
        ui_request_free(&r);
        return send_error(c, 500, "out of memory");
    }
    int status = 0, retry_after = 0;
    ui_job *job = ui_job_start(ui, &r, &ui_page_sink, state, ui_client_gone, c, &status, &retry_after);
    if (!job) return status ? ui_send_error(c, (unsigned)status, NULL, NULL, tr_last_error(), retry_after) : MHD_NO;
    char id[32];
    snprintf(id, sizeof id, "%llu", (unsigned long long)job->id);
    return ui_send_stream(ui, c, job, id);
}

static enum MHD_Result handle_cancel(struct MHD_Connection *c, tr_ui *ui, const char *body, size_t size) {
    cJSON *j = cJSON_ParseWithLength(body, size);
    const cJSON *id = j ? cJSON_GetObjectItemCaseSensitive(j, "id") : NULL;
    if (!cJSON_IsNumber(id) || id->valuedouble < 1 || id->valuedouble > 9e15) {
        cJSON_Delete(j);
        return ui_send_error(c, MHD_HTTP_BAD_REQUEST, NULL, "id", "the body must be {\"id\": N} with a generation id", 0);
    }
    const bool found = ui_job_cancel(ui, (uint64_t)id->valuedouble);
    cJSON_Delete(j);
    cJSON *out = cJSON_CreateObject();
    cJSON_AddBoolToObject(out, "cancelled", found);
    return send_json(c, MHD_HTTP_OK, out);
}

/* ---------------------------------------------------------------- dispatch */

typedef enum route_id { R_ASSET, R_INFO, R_STATUS, R_GENERATE, R_CANCEL, R_MODELS, R_CHAT, R_COMPLETIONS } route_id;

static const struct {
    const char *path;
    route_id id;
    bool post; /* else GET and HEAD */
} routes[] = {
    {"/api/info", R_INFO, false},     {"/api/status", R_STATUS, false},       {"/api/generate", R_GENERATE, true},
    {"/api/cancel", R_CANCEL, true},  {"/v1/models", R_MODELS, false},        {"/v1/chat/completions", R_CHAT, true},
    {"/v1/completions", R_COMPLETIONS, true},
};

/* One request's state across libmicrohttpd's calls: its route and body. */
typedef struct req_state {
    tr_ui *ui;
    route_id route;
    bool post;
    char *data;
    size_t len;
    bool too_large;
} req_state;

/* Bound to a loopback address (the server then needs no key). */
static bool is_loopback_host(const char *host) {
    return strncmp(host, "127.", 4) == 0 || strcmp(host, "localhost") == 0 || strcmp(host, "::1") == 0;
}

/* "Authorization: Bearer KEY" (the scheme in any case), compared in constant time. */
static bool authorized(const tr_ui *ui, struct MHD_Connection *c) {
    if (!ui->api_key) return true;
    const char *got = httpd_bearer_token(MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION));
    return got && httpd_key_equal(ui->api_key, got);
}

/* A refusal from the headers, before any body is read: it ends the connection, since the body is not drained. */
static enum MHD_Result refuse(struct MHD_Connection *c, unsigned status, const char *code, const char *message,
                              const char *allow) {
    oai_error e;
    oai_error_set(&e, (int)status, code ? code : status_code_name(status), NULL, "%s", message);
    char *json = oai_error_json(&e);
    char *body = json ? strdup(json) : NULL;
    cJSON_free(json);
    const char *headers[] = {"Connection", "close", allow ? "Allow" : status == 503 ? "Retry-After" : NULL,
                             allow ? allow : "1", NULL};
    return (enum MHD_Result)httpd_queue_buffer(c, status, "application/json", body, body ? strlen(body) : 0, headers);
}

/* The verdict on a request from its method, path and headers: MHD_YES to read its body, else its refusal. */
static enum MHD_Result judge(tr_ui *ui, struct MHD_Connection *c, const char *url, const char *method, req_state *s) {
    const httpd_refusal no = httpd_judge(ui->httpd, c, method, false);
    if (no.status) return refuse(c, no.status, no.code, no.message, NULL);
    const bool get = strcmp(method, MHD_HTTP_METHOD_GET) == 0 || strcmp(method, MHD_HTTP_METHOD_HEAD) == 0;
    s->post = strcmp(method, MHD_HTTP_METHOD_POST) == 0;
    const bool api = strncmp(url, "/api/", 5) == 0 || strncmp(url, "/v1/", 4) == 0;
    int r = -1;
    for (int i = 0; i < (int)(sizeof routes / sizeof routes[0]) && r < 0; i++)
        if (strcmp(url, routes[i].path) == 0) r = i;
    if (r < 0 && (api || !find_asset(url)))
        return refuse(c, MHD_HTTP_NOT_FOUND, NULL, api ? "no such endpoint" : "not found", NULL);
    s->route = r < 0 ? R_ASSET : routes[r].id;
    const bool wants_post = r >= 0 && routes[r].post;
    if (wants_post ? !s->post : !get)
        return refuse(c, MHD_HTTP_METHOD_NOT_ALLOWED, "method_not_allowed", wants_post ? "use POST" : "use GET",
                      wants_post ? "POST" : "GET, HEAD");
    if (api && !authorized(ui, c))
        return refuse(c, MHD_HTTP_UNAUTHORIZED, NULL,
                      "a key is required: send \"Authorization: Bearer KEY\" with the server's --ui-key", NULL);
    const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (cl && strtoull(cl, NULL, 10) > MAX_BODY_BYTES)
        return refuse(c, MHD_HTTP_CONTENT_TOO_LARGE, NULL, "the request body is too large", NULL);
    return MHD_YES;
}

/* The requests that block (a generation slot, a generation), on a worker thread of the HTTP layer. */
static int run_blocking(struct MHD_Connection *c, void *arg) {
    req_state *s = arg;
    const char *body = s->data ? s->data : "";
    switch (s->route) {
    case R_GENERATE: return handle_generate(c, s->ui, body, s->len);
    case R_CHAT: return ui_openai_generate(s->ui, c, true, body, s->len);
    case R_COMPLETIONS: return ui_openai_generate(s->ui, c, false, body, s->len);
    default: return MHD_NO;
    }
}

static enum MHD_Result answer(tr_ui *ui, struct MHD_Connection *c, const char *url, req_state *s) {
    if (s->too_large) return (enum MHD_Result)ui_send_error(c, MHD_HTTP_CONTENT_TOO_LARGE, NULL, NULL,
                                                            "the request body is too large", 0);
    const char *body = s->data ? s->data : "";
    switch (s->route) {
    case R_INFO: return send_info(c, ui);
    case R_STATUS: return send_status(c, ui);
    case R_CANCEL: return handle_cancel(c, ui, body, s->len);
    case R_MODELS: return (enum MHD_Result)ui_openai_models(ui, c);
    case R_GENERATE:
    case R_CHAT:
    case R_COMPLETIONS:
        if (defer_run(httpd_defer_pool(ui->httpd), c, run_blocking, s, NULL)) return MHD_YES;
        return (enum MHD_Result)ui_send_error(c, 503, NULL, NULL, "too many requests in progress: retry later", 1);
    case R_ASSET: break;
    }
    const ui_asset *a = find_asset(url);
    struct MHD_Response *r = MHD_create_response_from_buffer(a->size, (void *)a->data, MHD_RESPMEM_PERSISTENT);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, "Content-Type", content_type(a->name));
    const enum MHD_Result ret = (enum MHD_Result)httpd_queue_response(c, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload_data, size_t *upload_size, void **con_cls) {
    tr_ui *ui = cls;
    req_state *s = *con_cls;
    if (!s) { /* first call: headers only; refused now, or answered once the body (if any) is read */
        if (!(s = calloc(1, sizeof *s))) return MHD_NO;
        s->ui = ui;
        *con_cls = s;
        return judge(ui, c, url, method, s);
    }
    if (*upload_size) {
        if (!s->post || s->len + *upload_size > MAX_BODY_BYTES) { /* dropped: answered at the end */
            s->too_large = s->post;
        } else {
            char *d = realloc(s->data, s->len + *upload_size + 1);
            if (!d) return MHD_NO;
            memcpy(d + s->len, upload_data, *upload_size);
            s->data = d;
            s->len += *upload_size;
            s->data[s->len] = 0;
        }
        *upload_size = 0;
        return MHD_YES;
    }
    bool deferred = false;
    const int ret = defer_reply(c, &deferred); /* called again after a worker made the reply */
    if (deferred) return (enum MHD_Result)ret;
    conn_request_complete(conn_info_of(c));
    return answer(ui, c, url, s);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    req_state *s = *con_cls;
    if (s) free(s->data), free(s);
    *con_cls = NULL;
}

/* ---------------------------------------------------------------- life cycle */

tr_ui_params tr_ui_default_params(void) {
    tr_ui_params p;
    memset(&p, 0, sizeof p);
    p.host = "127.0.0.1";
    p.port = 8080;
    p.context = tr_context_default_params();
    p.max_generations = 1;
    p.max_queued = 4;
    p.policy = TR_POLICY_MAXPROB;
    p.max_tokens = 1024;
    p.default_tau = -1; /* resolved at start: the router file's, else 0.5 */
    p.max_connections = 256;
    p.max_connections_per_ip = 32;
    p.request_timeout_s = 10;
    return p;
}

static char *dup_or_null(const char *s) { return s ? strdup(s) : NULL; }

static tr_status listen_on(tr_ui *ui) {
    const httpd_params hp = {
        .host = ui->host, .port = ui->p.port,
        .allowed_hosts = ui->p.allowed_hosts, .n_allowed_hosts = ui->p.n_allowed_hosts,
        .keyed = ui->api_key != NULL,
        .max_connections = ui->p.max_connections, .max_connections_per_ip = ui->p.max_connections_per_ip,
        .request_timeout_s = ui->p.request_timeout_s, .event_threads = EVENT_THREADS,
        /* every generation and waiting request, the streams still draining, and room for the quick ones */
        .max_workers = 2 * ui->p.max_generations + ui->p.max_queued + 8, .max_queued = DEFER_QUEUED,
        .on_request = on_request, .on_completed = on_completed, .cls = ui, .decorate = add_headers,
    };
    const tr_status st = httpd_start(&hp, &ui->httpd);
    ui->p.allowed_hosts = NULL; /* copied by httpd_start */
    if (st == TR_OK) ui->port = httpd_port(ui->httpd);
    return st;
}

tr_status tr_ui_start(const tr_ui_params *params, tr_ui **out) {
    if (!out) return tr_fail(TR_ERR_ARG, "tr_ui_start: out is NULL");
    *out = NULL;
    if (!params || !params->slm) return tr_fail(TR_ERR_ARG, "tr_ui_start: an SLM is required");
    if (!tr_model_vocab(params->slm)) return tr_fail(TR_ERR_ARG, "tr_ui_start: the SLM has no vocabulary");
    if (params->port < 0 || params->port > 65535) return tr_fail(TR_ERR_ARG, "port %d out of range", params->port);
    if (params->max_generations < 1 || params->max_generations > 64)
        return tr_fail(TR_ERR_ARG, "max_generations must be 1..64");
    if (params->max_tokens < 1) return tr_fail(TR_ERR_ARG, "max_tokens must be at least 1");
    if (params->max_queued < 0 || params->max_queued > 1024) return tr_fail(TR_ERR_ARG, "max_queued must be 0..1024");
    if (params->max_connections <= 0 || params->max_connections_per_ip <= 0 || params->request_timeout_s <= 0)
        return tr_fail(TR_ERR_ARG, "max_connections, max_connections_per_ip and request_timeout_s must be positive");
    if (params->policy < TR_POLICY_MAXPROB || params->policy > TR_POLICY_ENTROPY)
        return tr_fail(TR_ERR_ARG, "policy must be maxprob, margin or entropy (a trained router: router_path)");
    const char *host = params->host ? params->host : "127.0.0.1";
    if (!is_loopback_host(host) && !(params->api_key && *params->api_key))
        return tr_fail(TR_ERR_ARG, "bound to %s, not a loopback address, the server needs a key for its API "
                       "(tr_ui_params.api_key; tokroute ui --ui-key KEY or TOKROUTE_UI_KEY)", host);
    const tr_status hiding = route_check_hiding(params->speculate_depth, params->lookahead, params->draft_tokens,
                                                params->draft_span, params->draft_width);
    if (hiding != TR_OK) return hiding;
    tr_ui *ui = calloc(1, sizeof *ui);
    if (!ui) return tr_fail(TR_ERR_NOMEM, "out of memory");
    ui->p = *params;
    const char *name = params->slm_name ? params->slm_name : tr_model_get_info(params->slm)->name;
    ui->host = strdup(host);
    ui->api_key = params->api_key && *params->api_key ? strdup(params->api_key) : NULL;
    ui->started = time(NULL);
    ui->slm_name = strdup(name && *name ? name : "SLM");
    ui->llm_name = dup_or_null(params->llm_name);
    ui->router_path = dup_or_null(params->router_path);
    ui->slots = calloc((size_t)params->max_generations, sizeof *ui->slots);
    pthread_mutex_init(&ui->mu, NULL);
    pthread_cond_init(&ui->cv, NULL);
    tr_status st = TR_OK;
    if (!ui->host || !ui->slm_name || !ui->slots || (params->llm_name && !ui->llm_name) ||
        (params->router_path && !ui->router_path) || (params->api_key && *params->api_key && !ui->api_key))
        st = tr_fail(TR_ERR_NOMEM, "out of memory");
    /* The first slot's context now: it checks the context parameters and tells requests the context length. */
    if (st == TR_OK) st = tr_context_create(params->slm, &params->context, &ui->slots[0].ctx);
    if (st == TR_OK && ui->router_path) { /* load the router file once up front so a bad one fails here */
        st = tr_router_load(ui->router_path, tr_model_get_info(params->slm), &ui->slots[0].router);
        if (st == TR_OK) st = tr_router_set_slm(ui->slots[0].router, params->slm); /* token-embedding feature */
        if (st == TR_OK && ui->p.default_tau < 0) ui->p.default_tau = tr_router_default_tau(ui->slots[0].router);
    }
    if (st == TR_OK && ui->p.default_tau < 0) ui->p.default_tau = 0.5f;
    if (st == TR_OK && ui->p.default_tau > 1) st = tr_fail(TR_ERR_ARG, "default_tau must be in [0, 1]");
    if (st == TR_OK) st = listen_on(ui);
    if (st != TR_OK) {
        tr_ui_stop(ui);
        return st;
    }
    *out = ui;
    return TR_OK;
}

int32_t tr_ui_port(const tr_ui *ui) { return ui ? ui->port : 0; }

int32_t tr_ui_active(const tr_ui *ui) {
    if (!ui) return 0;
    pthread_mutex_lock((pthread_mutex_t *)&ui->mu);
    const int32_t n = ui->active;
    pthread_mutex_unlock((pthread_mutex_t *)&ui->mu);
    return n;
}

void tr_ui_stop(tr_ui *ui) {
    if (!ui) return;
    pthread_mutex_lock(&ui->mu);
    ui->stopping = true;
    for (ui_job *j = ui->jobs; j; j = j->next) atomic_store(&j->cancel, true);
    pthread_cond_broadcast(&ui->cv);
    while (ui->active > 0) pthread_cond_wait(&ui->cv, &ui->mu);
    /* Let the streams deliver their last events (the "done" of a cancelled generation) before the connections
     * close; a client that stopped reading gets STOP_DRAIN_MS. */
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += STOP_DRAIN_MS / 1000;
    while (ui->streams > 0 && pthread_cond_timedwait(&ui->cv, &ui->mu, &until) != ETIMEDOUT) {}
    pthread_mutex_unlock(&ui->mu);
    httpd_free(ui->httpd); /* the workers end (their waits see stopping), then the connections close */
    ui_slots_free(ui);
    pthread_cond_destroy(&ui->cv);
    pthread_mutex_destroy(&ui->mu);
    free(ui->host);
    free(ui->slm_name);
    free(ui->llm_name);
    free(ui->router_path);
    free(ui->api_key);
    free(ui);
}
