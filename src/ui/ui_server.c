/* ui_server.c — the web UI's HTTP layer on libmicrohttpd: the embedded page (GET /, /app.css, /app.js), GET
 * /api/info and /api/status, POST /api/generate (validates and tokenizes the request, then streams the job's
 * server-sent events) and POST /api/cancel.
 *
 * libmicrohttpd runs one thread per connection, so the event reader may block: it waits on the job's events and
 * sends a comment line every second while there are none. That write is also how a closed tab is noticed: the
 * connection fails, libmicrohttpd frees the response, and freeing it cancels the generation. Every bad request
 * gets a 4xx with a JSON {"error": message}. POST bodies must be declared application/json, so other sites' pages
 * cannot start generations here through a simple cross-origin form post. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>

#include "common/error.h"
#include "route/route_internal.h"
#include "ui/ui_internal.h"
#include "ui/ui_page.h"

#define MAX_BODY_BYTES (256 * 1024)
#define HEARTBEAT_MS 1000
#define STOP_DRAIN_MS 2000

/* ---------------------------------------------------------------- responses */

static enum MHD_Result send_bytes(struct MHD_Connection *c, unsigned status, const char *type, const void *data,
                                  size_t size, enum MHD_ResponseMemoryMode mode) {
    struct MHD_Response *r = MHD_create_response_from_buffer(size, (void *)data, mode);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, "Content-Type", type);
    MHD_add_response_header(r, "Cache-Control", "no-store");
    MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
    enum MHD_Result ret = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result send_json(struct MHD_Connection *c, unsigned status, cJSON *j) {
    char *s = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    if (!s) return MHD_NO;
    enum MHD_Result ret = send_bytes(c, status, "application/json", s, strlen(s), MHD_RESPMEM_MUST_COPY);
    cJSON_free(s);
    return ret;
}

static enum MHD_Result send_error(struct MHD_Connection *c, unsigned status, const char *message) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "error", message);
    return send_json(c, status, j);
}

static const char *content_type(const char *name) {
    const char *dot = strrchr(name, '.');
    if (dot && strcmp(dot, ".html") == 0) return "text/html; charset=utf-8";
    if (dot && strcmp(dot, ".css") == 0) return "text/css; charset=utf-8";
    if (dot && strcmp(dot, ".js") == 0) return "text/javascript; charset=utf-8";
    if (dot && strcmp(dot, ".svg") == 0) return "image/svg+xml";
    return "application/octet-stream";
}

static enum MHD_Result send_asset(struct MHD_Connection *c, const char *url) {
    const char *name = strcmp(url, "/") == 0 ? "index.html" : url + 1;
    for (size_t i = 0; i < ui_n_assets; i++)
        if (strcmp(ui_assets[i].name, name) == 0)
            return send_bytes(c, MHD_HTTP_OK, content_type(name), ui_assets[i].data, ui_assets[i].size,
                              MHD_RESPMEM_PERSISTENT);
    return send_error(c, MHD_HTTP_NOT_FOUND, "not found");
}

/* ---------------------------------------------------------------- GET /api/info, /api/status */

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
    return send_json(c, MHD_HTTP_OK, j);
}

static enum MHD_Result send_status(struct MHD_Connection *c, tr_ui *ui) {
    cJSON *j = cJSON_CreateObject();
    pthread_mutex_lock(&ui->mu);
    cJSON_AddNumberToObject(j, "active", ui->active);
    cJSON *ids = cJSON_AddArrayToObject(j, "running");
    for (ui_job *job = ui->jobs; job; job = job->next) cJSON_AddItemToArray(ids, cJSON_CreateNumber((double)job->id));
    pthread_mutex_unlock(&ui->mu);
    cJSON_AddNumberToObject(j, "max_generations", ui->p.max_generations);
    return send_json(c, MHD_HTTP_OK, j);
}

/* ---------------------------------------------------------------- POST /api/generate */

/* Fills r from the request's JSON, or returns a message for a 400. msg_buf holds formatted messages. */
static const char *parse_generate(tr_ui *ui, const cJSON *j, ui_request *r, char *msg_buf, size_t msg_cap) {
    if (!cJSON_IsObject(j)) return "the body must be a JSON object";
    const cJSON *prompt = cJSON_GetObjectItemCaseSensitive(j, "prompt");
    if (!cJSON_IsString(prompt) || !prompt->valuestring[0]) return "\"prompt\" must be a non-empty string";

    const cJSON *mode = cJSON_GetObjectItemCaseSensitive(j, "mode");
    r->mode = ui->p.open_backend ? TR_MODE_JOINT : TR_MODE_SLM;
    if (mode) {
        const char *m = cJSON_IsString(mode) ? mode->valuestring : "";
        if (strcmp(m, "joint") == 0) r->mode = TR_MODE_JOINT;
        else if (strcmp(m, "small_only") == 0 || strcmp(m, "slm") == 0) r->mode = TR_MODE_SLM;
        else if (strcmp(m, "llm_only") == 0 || strcmp(m, "llm") == 0) r->mode = TR_MODE_LLM;
        else return "\"mode\" must be \"joint\", \"small_only\" or \"llm_only\"";
    }
    if (r->mode != TR_MODE_SLM && !ui->p.open_backend) return "this server has no LLM: only small_only is possible";

    const cJSON *tau = cJSON_GetObjectItemCaseSensitive(j, "tau");
    r->tau = ui->p.default_tau;
    if (tau) {
        if (!cJSON_IsNumber(tau) || !(tau->valuedouble >= 0 && tau->valuedouble <= 1))
            return "\"tau\" must be a number in [0, 1]";
        r->tau = (float)tau->valuedouble;
    }

    const cJSON *max_tokens = cJSON_GetObjectItemCaseSensitive(j, "max_tokens");
    r->max_tokens = ui->p.max_tokens < 128 ? ui->p.max_tokens : 128;
    if (max_tokens) {
        const double v = cJSON_IsNumber(max_tokens) ? max_tokens->valuedouble : -1;
        if (!(v >= 1 && v <= ui->p.max_tokens) || v != (double)(int32_t)v) {
            snprintf(msg_buf, msg_cap, "\"max_tokens\" must be an integer from 1 to %d", (int)ui->p.max_tokens);
            return msg_buf;
        }
        r->max_tokens = (int32_t)v;
    }

    const cJSON *policy = cJSON_GetObjectItemCaseSensitive(j, "policy");
    r->policy = TR_POLICY_MAXPROB;
    if (policy && !ui->router_path) {
        if (!cJSON_IsString(policy) || tr_policy_from_name(policy->valuestring, &r->policy) != TR_OK ||
            r->policy == TR_POLICY_MLP)
            return "\"policy\" must be \"maxprob\", \"margin\" or \"entropy\"";
    }

    const cJSON *chat = cJSON_GetObjectItemCaseSensitive(j, "chat");
    if (chat && !cJSON_IsBool(chat)) return "\"chat\" must be true or false";
    const bool use_chat = cJSON_IsTrue(chat);
    if (use_chat && ui->p.chat_template == TR_CHAT_NONE) return "the SLM has no chat template";

    char *templated = NULL;
    const char *text = prompt->valuestring;
    if (use_chat) {
        tr_chat_message msg = {"user", text};
        if (tr_chat_apply(ui->p.chat_template, &msg, 1, true, &templated) != TR_OK) {
            snprintf(msg_buf, msg_cap, "%s", tr_last_error());
            return msg_buf;
        }
        text = templated;
    }
    const tr_vocab *vocab = tr_model_vocab(ui->p.slm);
    tr_tokenize_params tp = tr_tokenize_default_params();
    tp.parse_special = use_chat;
    const size_t len = strlen(text);
    int32_t cap = (int32_t)(len + 8), n = 0;
    r->prompt = malloc((size_t)cap * sizeof *r->prompt);
    tr_status st = r->prompt ? tr_tokenize(vocab, text, len, &tp, r->prompt, cap, &n) : TR_ERR_NOMEM;
    free(templated);
    if (st != TR_OK) {
        snprintf(msg_buf, msg_cap, "cannot tokenize the prompt: %s", tr_last_error());
        return msg_buf;
    }
    r->n_prompt = n;
    if (n == 0) return "the prompt is empty after tokenizing";
    const int32_t n_ctx = tr_context_n_ctx(ui->slots[0].ctx);
    if ((int64_t)n + r->max_tokens > n_ctx) {
        snprintf(msg_buf, msg_cap, "context full: the prompt (%d tokens) + max tokens (%d) exceed the context (%d)", n,
                 r->max_tokens, n_ctx);
        return msg_buf;
    }
    return NULL;
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

static enum MHD_Result handle_generate(struct MHD_Connection *c, tr_ui *ui, const char *body, size_t size) {
    cJSON *j = cJSON_ParseWithLength(body, size);
    if (!j) return send_error(c, MHD_HTTP_BAD_REQUEST, "the body is not valid JSON");
    ui_request r = {0};
    char msg[512];
    const char *bad = parse_generate(ui, j, &r, msg, sizeof msg);
    cJSON_Delete(j);
    if (bad) {
        free(r.prompt);
        return send_error(c, MHD_HTTP_BAD_REQUEST, bad);
    }
    int status = 0;
    ui_job *job = ui_job_start(ui, &r, &status);
    if (!job) return send_error(c, (unsigned)status, tr_last_error());
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
    char id[32];
    snprintf(id, sizeof id, "%llu", (unsigned long long)job->id);
    MHD_add_response_header(resp, "X-Generation-Id", id);
    enum MHD_Result ret = MHD_queue_response(c, MHD_HTTP_OK, resp);
    MHD_destroy_response(resp);
    return ret;
}

static enum MHD_Result handle_cancel(struct MHD_Connection *c, tr_ui *ui, const char *body, size_t size) {
    cJSON *j = cJSON_ParseWithLength(body, size);
    const cJSON *id = j ? cJSON_GetObjectItemCaseSensitive(j, "id") : NULL;
    if (!cJSON_IsNumber(id) || id->valuedouble < 1 || id->valuedouble > 9e15) {
        cJSON_Delete(j);
        return send_error(c, MHD_HTTP_BAD_REQUEST, "the body must be {\"id\": N} with a generation id");
    }
    const bool found = ui_job_cancel(ui, (uint64_t)id->valuedouble);
    cJSON_Delete(j);
    cJSON *out = cJSON_CreateObject();
    cJSON_AddBoolToObject(out, "cancelled", found);
    return send_json(c, MHD_HTTP_OK, out);
}

/* ---------------------------------------------------------------- dispatch */

typedef struct req_body {
    char *data;
    size_t len;
    bool too_large;
} req_body;

/* DNS rebinding: a page on attacker.example whose name later resolves to 127.0.0.1 talks to this server as its own
 * origin, so CORS does not stop it; its requests still carry Host: attacker.example. A server bound to a loopback
 * address therefore answers only Host names that mean this machine (with or without a port). */
static bool is_loopback_host(const char *host) {
    return strcmp(host, "127.0.0.1") == 0 || strcmp(host, "localhost") == 0 || strcmp(host, "::1") == 0;
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

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload_data, size_t *upload_size, void **con_cls) {
    tr_ui *ui = cls;
    if (!host_header_allowed(ui, c)) {
        if (*upload_size) { /* drop the body; answer once it is read */
            *upload_size = 0;
            return MHD_YES;
        }
        return send_error(c, MHD_HTTP_FORBIDDEN, "this server answers only Host: 127.0.0.1 or localhost");
    }
    const bool post = strcmp(method, MHD_HTTP_METHOD_POST) == 0;
    const bool get = strcmp(method, MHD_HTTP_METHOD_GET) == 0 || strcmp(method, MHD_HTTP_METHOD_HEAD) == 0;
    if (post) {
        req_body *b = *con_cls;
        if (!b) { /* first call: headers only */
            if (!(b = calloc(1, sizeof *b))) return MHD_NO;
            *con_cls = b;
            return MHD_YES;
        }
        if (*upload_size) {
            if (b->len + *upload_size > MAX_BODY_BYTES) b->too_large = true;
            else {
                char *d = realloc(b->data, b->len + *upload_size + 1);
                if (!d) return MHD_NO;
                memcpy(d + b->len, upload_data, *upload_size);
                b->data = d;
                b->len += *upload_size;
                b->data[b->len] = 0;
            }
            *upload_size = 0;
            return MHD_YES;
        }
        if (b->too_large) return send_error(c, MHD_HTTP_CONTENT_TOO_LARGE, "the request body is too large");
        /* JSON only: a page on another origin cannot send that without a CORS preflight, which gets no approval. */
        const char *type = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_TYPE);
        if (!type || strncasecmp(type, "application/json", 16) != 0)
            return send_error(c, MHD_HTTP_UNSUPPORTED_MEDIA_TYPE, "send the body as Content-Type: application/json");
        if (strcmp(url, "/api/generate") == 0) return handle_generate(c, ui, b->data ? b->data : "", b->len);
        if (strcmp(url, "/api/cancel") == 0) return handle_cancel(c, ui, b->data ? b->data : "", b->len);
        return send_error(c, strncmp(url, "/api/", 5) == 0 ? MHD_HTTP_NOT_FOUND : MHD_HTTP_METHOD_NOT_ALLOWED,
                          "no such endpoint");
    }
    if (!get) return send_error(c, MHD_HTTP_METHOD_NOT_ALLOWED, "method not allowed");
    if (strcmp(url, "/api/info") == 0) return send_info(c, ui);
    if (strcmp(url, "/api/status") == 0) return send_status(c, ui);
    if (strcmp(url, "/api/generate") == 0 || strcmp(url, "/api/cancel") == 0)
        return send_error(c, MHD_HTTP_METHOD_NOT_ALLOWED, "use POST");
    return send_asset(c, url);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    req_body *b = *con_cls;
    if (b) free(b->data), free(b);
    *con_cls = NULL;
}

/* ---------------------------------------------------------------- life cycle */

tr_ui_params tr_ui_default_params(void) {
    tr_ui_params p;
    memset(&p, 0, sizeof p);
    p.host = "127.0.0.1";
    p.port = 8080;
    p.context = tr_context_default_params();
    p.max_generations = 4;
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
    const tr_status hiding = route_check_hiding(params->speculate_depth, params->lookahead, params->draft_tokens,
                                                params->draft_span, params->draft_width);
    if (hiding != TR_OK) return hiding;
    tr_ui *ui = calloc(1, sizeof *ui);
    if (!ui) return tr_fail(TR_ERR_NOMEM, "out of memory");
    ui->p = *params;
    const char *name = params->slm_name ? params->slm_name : tr_model_get_info(params->slm)->name;
    ui->host = strdup(params->host ? params->host : "127.0.0.1");
    ui->slm_name = strdup(name && *name ? name : "SLM");
    ui->llm_name = dup_or_null(params->llm_name);
    ui->router_path = dup_or_null(params->router_path);
    ui->slots = calloc((size_t)params->max_generations, sizeof *ui->slots);
    pthread_mutex_init(&ui->mu, NULL);
    pthread_cond_init(&ui->cv, NULL);
    tr_status st = TR_OK;
    if (!ui->host || !ui->slm_name || !ui->slots || (params->llm_name && !ui->llm_name) ||
        (params->router_path && !ui->router_path))
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
    free(ui);
}
