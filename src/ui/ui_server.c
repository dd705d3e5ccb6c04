/* ui_server.c — the device's HTTP server on libmicrohttpd: the embedded page (GET /, /app.css, /app.js), the page's
 * own endpoints (GET /api/info and /api/status, POST /api/generate streaming the page's events, POST /api/cancel)
 * and the OpenAI-compatible API (ui_openai.c: POST /v1/chat/completions, POST /v1/completions, GET /v1/models).
 *
 * libmicrohttpd runs one thread per connection, so handlers may block: a request waiting for a generation slot, a
 * whole reply waiting for its generation, the event reader waiting for output (it sends an SSE comment line every
 * second while there is none). Those waits notice a client that went away (ui_client_gone, or the heartbeat's
 * failed write) and cancel its generation. Every error is OpenAI's object {"error": {message, type, param, code}};
 * a wrong method is 405 with Allow. POST bodies must be declared application/json, so other sites' pages cannot
 * start generations here through a simple cross-origin form post. With a key (tr_ui_params.api_key, required when
 * bound to anything but loopback) every /api/ and /v1/ request needs "Authorization: Bearer KEY". */
#include <cjson/cJSON.h>
#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>

#include "common/error.h"
#include "common/openai_api.h"
#include "route/route_internal.h"
#include "ui/ui_internal.h"
#include "ui/ui_page.h"

#define MAX_BODY_BYTES (256 * 1024)
#define HEARTBEAT_MS 1000
#define STOP_DRAIN_MS 2000

/* ---------------------------------------------------------------- responses */

static enum MHD_Result queue(struct MHD_Connection *c, unsigned status, struct MHD_Response *r, const char *type,
                             int retry_after_s) {
    if (!r) return MHD_NO;
    MHD_add_response_header(r, "Content-Type", type);
    MHD_add_response_header(r, "Cache-Control", "no-store");
    MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
    if (retry_after_s > 0) {
        char s[16];
        snprintf(s, sizeof s, "%d", retry_after_s);
        MHD_add_response_header(r, "Retry-After", s);
    }
    if (status == MHD_HTTP_UNAUTHORIZED) MHD_add_response_header(r, "WWW-Authenticate", "Bearer");
    enum MHD_Result ret = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result send_bytes(struct MHD_Connection *c, unsigned status, const char *type, const void *data,
                                  size_t size, enum MHD_ResponseMemoryMode mode) {
    return queue(c, status, MHD_create_response_from_buffer(size, (void *)data, mode), type, 0);
}

int ui_send_json_text(struct MHD_Connection *c, unsigned status, const char *json, int retry_after_s) {
    static const char oom[] = "{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\",\"param\":null,"
                              "\"code\":\"server_error\"}}";
    if (!json) status = 500, json = oom;
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(json), (void *)json, MHD_RESPMEM_MUST_COPY);
    return queue(c, status, r, "application/json", retry_after_s);
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

bool ui_client_gone(void *connection) {
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci) return false;
    struct pollfd p = {.fd = ci->connect_fd, .events = POLLIN | POLLRDHUP};
    if (poll(&p, 1, 0) <= 0) return false;
    if (p.revents & (POLLHUP | POLLERR | POLLRDHUP)) return true;
    if (p.revents & POLLIN) { /* readable: the next pipelined request, or the end of the stream */
        char b;
        return recv(ci->connect_fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
    }
    return false;
}

static ssize_t read_events(void *cls, uint64_t pos, char *buf, size_t max) {
    ui_job *job = cls;
    tr_ui *ui = job->ui;
    ssize_t n;
    pthread_mutex_lock(&ui->mu);
    while (job->sent == job->len && !job->finished) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += (long)HEARTBEAT_MS * 1000000L;
        ts.tv_sec += ts.tv_nsec / 1000000000L;
        ts.tv_nsec %= 1000000000L;
        if (pthread_cond_timedwait(&ui->cv, &ui->mu, &ts) == ETIMEDOUT) break;
    }
    if (job->sent < job->len) {
        const size_t k = job->len - job->sent < max ? job->len - job->sent : max;
        memcpy(buf, job->buf + job->sent, k);
        job->sent += k;
        n = (ssize_t)k;
    } else if (job->finished) { /* tr_ui_stop waits for every job to finish, so this ends every stream */
        n = MHD_CONTENT_READER_END_OF_STREAM;
    } else {
        static const char heartbeat[] = ":\n\n"; /* an SSE comment: keeps the connection checked */
        n = max >= sizeof heartbeat - 1 ? (ssize_t)(sizeof heartbeat - 1) : 0;
        memcpy(buf, heartbeat, (size_t)n);
    }
    pthread_mutex_unlock(&ui->mu);
    return n;
}

/* The response is gone (stream ended, client disconnected or server stopping): cancel and let go. */
static void free_events(void *cls) {
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
    struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, read_events, job, free_events);
    if (!resp) {
        free_events(job);
        return MHD_NO;
    }
    MHD_add_response_header(resp, "Content-Type", "text/event-stream; charset=utf-8");
    MHD_add_response_header(resp, "Cache-Control", "no-store");
    MHD_add_response_header(resp, "X-Accel-Buffering", "no");
    if (generation_id) MHD_add_response_header(resp, "X-Generation-Id", generation_id);
    enum MHD_Result ret = MHD_queue_response(c, MHD_HTTP_OK, resp);
    MHD_destroy_response(resp);
    return ret;
}

/* ---------------------------------------------------------------- POST /api/generate, /api/cancel */

static enum MHD_Result handle_generate(struct MHD_Connection *c, tr_ui *ui, const char *body, size_t size) {
    cJSON *j = cJSON_ParseWithLength(body, size);
    if (!j) return send_error(c, MHD_HTTP_BAD_REQUEST, "the body is not valid JSON");
    ui_request r = {0};
    char msg[512];
    const char *param = "";
    const char *bad = ui_page_parse(ui, j, &r, &param, msg, sizeof msg);
    if (bad) { /* param may name a field of j */
        ui_request_free(&r);
        const enum MHD_Result ret = ui_send_error(c, MHD_HTTP_BAD_REQUEST, NULL, param, bad, 0);
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

/* One request's state across libmicrohttpd's calls: the verdict taken from the headers (0: go on), the body. */
typedef struct req_state {
    route_id route;
    unsigned status;
    const char *message, *code;
    const char *allow; /* with 405 */
    bool post;
    char *data;
    size_t len;
    bool too_large;
} req_state;

/* DNS rebinding: a page on attacker.example whose name later resolves to 127.0.0.1 talks to this server as its own
 * origin, so CORS does not stop it; its requests still carry Host: attacker.example. A server bound to a loopback
 * address therefore answers only Host names that mean this machine (with or without a port). */
static bool is_loopback_host(const char *host) {
    return strncmp(host, "127.", 4) == 0 || strcmp(host, "localhost") == 0 || strcmp(host, "::1") == 0;
}

static bool host_header_allowed(const tr_ui *ui, struct MHD_Connection *c) {
    if (!is_loopback_host(ui->host)) return true; /* bound for other machines: the user chose who may connect */
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_HOST);
    if (!h) return true; /* HTTP/1.0 clients may omit it; a browser always sends it */
    char name[64];
    size_t n;
    if (h[0] == '[') { /* [::1]:port */
        const char *end = strchr(h, ']');
        if (!end) return false;
        n = (size_t)(end - h - 1);
        if (n >= sizeof name) return false;
        memcpy(name, h + 1, n);
        h = end + 1;
    } else {
        n = strcspn(h, ":");
        if (n >= sizeof name) return false;
        memcpy(name, h, n);
        h += n;
    }
    name[n] = 0;
    if (*h == ':') {
        if (!h[1]) return false;
        for (const char *d = h + 1; *d; d++)
            if (*d < '0' || *d > '9') return false;
    } else if (*h) {
        return false;
    }
    return strcasecmp(name, "localhost") == 0 || strcmp(name, "127.0.0.1") == 0 || strcmp(name, "::1") == 0;
}


/* "Authorization: Bearer KEY" (the scheme in any case), compared in constant time. */
static bool authorized(const tr_ui *ui, struct MHD_Connection *c) {
    if (!ui->api_key) return true;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    if (!h || strncasecmp(h, "Bearer ", 7) != 0) return false;
    h += 7;
    while (*h == ' ') h++;
    const size_t n = strlen(h), k = strlen(ui->api_key);
    unsigned diff = n != k;
    for (size_t i = 0; i < n; i++) diff |= (unsigned char)h[i] ^ (unsigned char)ui->api_key[i % (k ? k : 1)];
    return diff == 0;
}

/* The verdict on a request from its method, path and headers: 0 to go on, else the error status. */
static void judge(tr_ui *ui, struct MHD_Connection *c, const char *url, const char *method, req_state *s) {
    const bool get = strcmp(method, MHD_HTTP_METHOD_GET) == 0 || strcmp(method, MHD_HTTP_METHOD_HEAD) == 0;
    s->post = strcmp(method, MHD_HTTP_METHOD_POST) == 0;
    if (!host_header_allowed(ui, c)) {
        s->status = MHD_HTTP_FORBIDDEN;
        s->code = "forbidden_host";
        s->message = "this server answers only Host: 127.0.0.1 or localhost";
        return;
    }
    const bool api = strncmp(url, "/api/", 5) == 0 || strncmp(url, "/v1/", 4) == 0;
    int r = -1;
    for (int i = 0; i < (int)(sizeof routes / sizeof routes[0]) && r < 0; i++)
        if (strcmp(url, routes[i].path) == 0) r = i;
    if (r < 0 && (api || !find_asset(url))) {
        s->status = MHD_HTTP_NOT_FOUND;
        s->message = api ? "no such endpoint" : "not found";
        return;
    }
    s->route = r < 0 ? R_ASSET : routes[r].id;
    const bool wants_post = r >= 0 && routes[r].post;
    if (wants_post ? !s->post : !get) {
        s->status = MHD_HTTP_METHOD_NOT_ALLOWED;
        s->message = wants_post ? "use POST" : "use GET";
        s->allow = wants_post ? "POST" : "GET, HEAD";
        return;
    }
    if (api && !authorized(ui, c)) {
        s->status = MHD_HTTP_UNAUTHORIZED;
        s->message = "a key is required: send \"Authorization: Bearer KEY\" with the server's --ui-key";
        return;
    }
}

static enum MHD_Result answer(tr_ui *ui, struct MHD_Connection *c, const char *url, req_state *s) {
    if (s->too_large && !s->status) {
        s->status = MHD_HTTP_CONTENT_TOO_LARGE;
        s->message = "the request body is too large";
    }
    /* JSON only: a page on another origin cannot send that without a CORS preflight, which gets no approval. */
    const char *type = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_TYPE);
    if (!s->status && s->post && (!type || strncasecmp(type, "application/json", 16) != 0)) {
        s->status = MHD_HTTP_UNSUPPORTED_MEDIA_TYPE;
        s->message = "send the body as Content-Type: application/json";
    }
    if (s->status == MHD_HTTP_METHOD_NOT_ALLOWED) {
        oai_error e;
        oai_error_set(&e, 405, "method_not_allowed", NULL, "%s", s->message);
        char *json = oai_error_json(&e);
        struct MHD_Response *r = json ? MHD_create_response_from_buffer(strlen(json), json, MHD_RESPMEM_MUST_COPY) : NULL;
        cJSON_free(json);
        if (r) MHD_add_response_header(r, "Allow", s->allow);
        return queue(c, 405, r, "application/json", 0);
    }
    if (s->status) return ui_send_error(c, s->status, s->code, NULL, s->message, 0);
    const char *body = s->data ? s->data : "";
    switch (s->route) {
    case R_INFO: return send_info(c, ui);
    case R_STATUS: return send_status(c, ui);
    case R_GENERATE: return handle_generate(c, ui, body, s->len);
    case R_CANCEL: return handle_cancel(c, ui, body, s->len);
    case R_MODELS: return ui_openai_models(ui, c);
    case R_CHAT: return ui_openai_generate(ui, c, true, body, s->len);
    case R_COMPLETIONS: return ui_openai_generate(ui, c, false, body, s->len);
    case R_ASSET: break;
    }
    const ui_asset *a = find_asset(url);
    return send_bytes(c, MHD_HTTP_OK, content_type(a->name), a->data, a->size, MHD_RESPMEM_PERSISTENT);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload_data, size_t *upload_size, void **con_cls) {
    tr_ui *ui = cls;
    req_state *s = *con_cls;
    if (!s) { /* first call: headers only; the verdict now, the answer once the body (if any) is read */
        if (!(s = calloc(1, sizeof *s))) return MHD_NO;
        *con_cls = s;
        judge(ui, c, url, method, s);
        return MHD_YES;
    }
    if (*upload_size) {
        if (s->status || !s->post || s->len + *upload_size > MAX_BODY_BYTES) { /* dropped: answered at the end */
            s->too_large = s->too_large || (s->post && !s->status);
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
    return p;
}

static char *dup_or_null(const char *s) { return s ? strdup(s) : NULL; }

static tr_status listen_on(tr_ui *ui) {
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE}, *ai = NULL;
    char port[16];
    snprintf(port, sizeof port, "%d", (int)ui->p.port);
    const int rc = getaddrinfo(ui->host, port, &hints, &ai);
    if (rc != 0) return tr_fail(TR_ERR_ARG, "cannot use host '%s': %s", ui->host, gai_strerror(rc));
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD;
    if (ai->ai_family == AF_INET6) flags |= MHD_USE_IPv6;
    ui->daemon = MHD_start_daemon(flags, (uint16_t)ui->p.port, NULL, NULL, on_request, ui, MHD_OPTION_SOCK_ADDR,
                                  ai->ai_addr, MHD_OPTION_NOTIFY_COMPLETED, on_completed, ui,
                                  MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)120, MHD_OPTION_CONNECTION_LIMIT,
                                  (unsigned)64, MHD_OPTION_END);
    freeaddrinfo(ai);
    if (!ui->daemon) return tr_fail(TR_ERR_NETWORK, "cannot listen on %s:%d (in use?)", ui->host, (int)ui->p.port);
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(ui->daemon, MHD_DAEMON_INFO_BIND_PORT);
    ui->port = info ? (int32_t)info->port : ui->p.port;
    return TR_OK;
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
    if (ui->daemon) MHD_stop_daemon(ui->daemon);
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
