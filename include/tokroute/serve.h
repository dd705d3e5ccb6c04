/* tokroute/serve.h — part of tokroute's public API: the LLM server and the web UI.
 * Included by tokroute.h (include that, not this file); the conventions and thread-safety notes are there. */
#ifndef TOKROUTE_SERVE_H
#define TOKROUTE_SERVE_H
#ifndef TOKROUTE_H
#error "include tokroute.h, which includes this file"
#endif

#ifdef __cplusplus
extern "C" {
#endif
#if defined(__GNUC__)
#pragma GCC visibility push(default)
#endif

/* ---------------------------------------------------------------- LLM server */

/* `tokroute serve`: the LLM behind HTTP (libmicrohttpd), speaking the session protocol of docs/protocol.md
 * (POST /v1/route/next, DELETE /v1/route/sessions/{id}), OpenAI-compatible POST /v1/completions, POST
 * /v1/chat/completions and GET /v1/models, GET /health and GET /metrics. Requests waiting together from different
 * sessions are evaluated in one forward pass. */
typedef struct tr_server tr_server;

typedef struct tr_server_params {
    const char *host;           /* address to bind (default "127.0.0.1") */
    int port;                   /* 0 = any free port (tr_server_port says which) (default 8080) */
    const char *api_key;        /* Bearer key every request must carry; NULL or "" = none */
    const char *const *api_keys; /* more keys, each as good as api_key (copied at start). With several keys each
                                  * request's key owns the sessions it creates: another key's requests can neither
                                  * see nor end them (they get what an unknown session gets) */
    int32_t n_api_keys;
    const char *metrics_key;    /* GET /metrics takes only this key (not an API key); NULL: any API key */
    int32_t n_threads;          /* threads of the one pool for forward passes; 0 = physical cores */
    int32_t max_sessions;       /* live sessions at most; the least recently used is evicted (default 256) */
    int64_t kv_budget_bytes;    /* KV memory of all sessions together (default 1 GiB) */
    int32_t session_idle_s;     /* a session unused this long is freed (default 600) */
    int32_t n_ctx;              /* longest session in tokens; 0 = min(training context, 4096) */
    int32_t max_batch_tokens;   /* most tokens in one forward pass over all sessions (default 512) */
    size_t max_body_bytes;      /* larger request bodies get 413 (default 1 MiB; a /v1/route/next body may hold
                                 * at most the context's ids: 64 KiB + 16 bytes per id) */
    int32_t max_connections;    /* requests on connections opened beyond this many get 503 + Retry-After, except
                                 * GET /health (default 4096) */
    int32_t max_connections_per_ip; /* the same per client address (default 64) */
    int32_t request_timeout_s;  /* a connection must send a complete request within this of opening or of its
                                 * previous reply, and is closed after this long silent (default 10) */
    int32_t http_threads;       /* event threads reading and writing connections (default 2; requests that wait
                                 * on the model run on worker threads) */
    const char *tls_cert_path;  /* PEM certificate and key: both or neither; with them the server speaks HTTPS */
    const char *tls_key_path;
    bool batch;                 /* evaluate waiting sessions together (default true; false = one per pass) */
    bool log_requests;          /* log token ids and texts of requests (default false: counts and timings only) */
    void (*log)(void *user, const char *line); /* where log lines go (NULL = nowhere) */
    void *log_user;
    tr_chat_template chat_template; /* renders POST /v1/chat/completions' messages; TR_CHAT_NONE (default): chat
                                     * requests get 400 (the caller detects the model's own: tr_chat_template_detect) */
    const char *const *cors_origins; /* browser origins allowed to call (each "https://host:port", or "*" for any):
                                      * OPTIONS preflights answered, Access-Control-Allow-Origin on their replies;
                                      * NULL (default): no CORS headers and OPTIONS is 405. Copied at start. */
    int32_t n_cors_origins;
    const char *const *allowed_hosts; /* Host names answered besides the address bound (and, bound to loopback, the
                                       * loopback names; bound to 0.0.0.0 or ::, also IP literals; bound to anything
                                       * but loopback with a key, any name): other Hosts get 403 (DNS rebinding).
                                       * NULL: none. Copied */
    int32_t n_allowed_hosts;
} tr_server_params;

tr_server_params tr_server_default_params(void);
/* Starts listening and serving on background threads; model must outlive the server. */
tr_status tr_server_start(const tr_model *model, const tr_server_params *params, tr_server **out);
/* The port actually bound (useful with port 0). */
int tr_server_port(const tr_server *server);
/* Stops accepting, finishes or fails waiting requests, joins every thread. Idempotent. */
void tr_server_stop(tr_server *server);
void tr_server_free(tr_server *server);  /* stops first when still running */

/* ---------------------------------------------------------------- web UI */

/* `tokroute ui`: an HTTP server (libmicrohttpd, its own threads) serving one page compiled into the library and
 * the generation endpoints: POST /api/generate streams server-sent events (one per token, then a summary), POST
 * /api/cancel stops a generation, GET /api/info and /api/status describe the server; and, on the same port, the
 * OpenAI-compatible API answered by the routed system: POST /v1/chat/completions, POST /v1/completions, GET
 * /v1/models (README "The device's OpenAI endpoint"). Each generation runs in its own worker thread on a slot of a
 * small pool (an SLM context, an LLM backend and a router per slot; the models are shared read-only); requests
 * that find every slot busy wait in a bounded queue. A generation stops when its client disconnects. */
typedef struct tr_ui tr_ui;

/* Opens one LLM backend for a slot (called at most once per slot, from a worker thread). */
typedef tr_status (*tr_ui_backend_fn)(void *user, tr_llm_backend **out);

typedef struct tr_ui_params {
    const char *host;              /* address to listen on (default "127.0.0.1") */
    int32_t port;                  /* 0 = any free port (default 8080); tr_ui_port tells which */
    const tr_model *slm;           /* required; not owned */
    const char *slm_name;          /* shown on the page (default: the model's general.name) */
    tr_ui_backend_fn open_backend; /* NULL: no LLM (small_only only) */
    void *backend_user;
    const char *llm_name;          /* shown on the page */
    const char *router_path;       /* trained router file loaded once per slot; NULL: the page picks a policy */
    tr_chat_template chat_template;/* TR_CHAT_NONE: no chat toggle on the page */
    tr_context_params context;     /* for the SLM context of each slot */
    int32_t max_generations;       /* generations running at once (default 1: the SLM runs one at a time) */
    int32_t max_queued;            /* requests waiting for a generation slot (default 4); more get 429 */
    const char *api_key;           /* "Authorization: Bearer KEY" for /api/ and /v1/ (NULL: none); required when
                                      host is not a loopback address */
    tr_policy policy;              /* training-free policy of requests that name none and no router file (default
                                      TR_POLICY_MAXPROB) */
    int32_t max_tokens;            /* upper bound for a request's max_tokens (default 1024) */
    float default_tau;             /* the slider's initial value (default: the router file's, else 0.5) */
    tr_llm_failure on_llm_failure; /* routed tokens when the LLM fails (default: the SLM's, marked "fallback") */
    /* Hiding the round trip in every joint generation: tr_route_params' fields of the same names (default 0: the
     * synchronous loop). `tokroute ui` turns them on for a remote LLM or --simulate-rtt, as `generate` does. */
    int32_t speculate_depth, lookahead, draft_tokens, draft_span, draft_width;
    bool draft_fixed;
    /* Keeping the budget in every joint generation: tr_route_params' fields of the same names (default 0: off);
     * the page's τ is then the controller's start. */
    double target_routed, max_routed;
    /* The HTTP layer, as tr_server_params' fields of the same names: Host names answered besides the address bound
     * (and the loopback names when bound to loopback; bound elsewhere, which needs a key, any Host);
     * connections beyond max_connections (default 256) or max_connections_per_ip (default 32) get 503 with
     * Retry-After; a request must be complete within request_timeout_s (default 10) of its connection opening or
     * of the previous reply. */
    const char *const *allowed_hosts;
    int32_t n_allowed_hosts;
    int32_t max_connections, max_connections_per_ip, request_timeout_s;
} tr_ui_params;

tr_ui_params tr_ui_default_params(void);
/* Starts listening (the server runs in its own threads) and returns at once. */
tr_status tr_ui_start(const tr_ui_params *params, tr_ui **out);
/* The port actually listened on (useful with port 0). */
int32_t tr_ui_port(const tr_ui *ui);
/* Generations running now. */
int32_t tr_ui_active(const tr_ui *ui);
/* Cancels running generations, waits for their threads, closes connections and frees everything. */
void tr_ui_stop(tr_ui *ui);

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif
#ifdef __cplusplus
}
#endif
#endif /* TOKROUTE_SERVE_H */
