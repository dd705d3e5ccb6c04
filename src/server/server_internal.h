/* server_internal.h — the LLM server's parts: request parsing (request.c), the session table and the batching
 * worker (scheduler.c), sampling (sample.c), scoring a sequence (score.c), HTTP (http.c), CORS (cors.c), the
 * streamed route reply (route_stream.c), OpenAI completions (completions.c) and chat completions
 * (chat_completions.c) over a shared generation core (generation.c), metrics (metrics.c). One worker thread owns
 * the session table and runs every forward pass on one engine; HTTP threads hand it jobs and wait on them. */
#ifndef TR_SERVER_INTERNAL_H
#define TR_SERVER_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#include "common/openai_request.h"
#include "model/multi.h"
#include "route/stop_text.h"
#include "tokroute.h"

#define SESSION_ID_MAX 64
#define SESSION_NAME_MAX (SESSION_ID_MAX + 8) /* the scheduler's name: "~OWNER~" + the id with several keys */
#define TOP_LOGPROBS_MAX 20
#define LOOKAHEAD_MAX 16

/* A protocol error: HTTP status, stable code, message, the field at fault (or ""), and for 409 the server's pos. */
typedef struct api_error {
    int status;
    char code[24];
    char message[sizeof(((oai_error *)0)->message)]; /* room for every message the shared OpenAI layer writes */
    char field[sizeof(((oai_error *)0)->param)];
    int32_t pos;
} api_error;

typedef oai_logit_bias logit_bias; /* {id, bias} as the OpenAI layer reads it */

typedef struct sampling {
    float temperature;  /* <= 0: greedy */
    int32_t top_k;      /* 0 = off */
    float top_p;        /* 1 = off */
    uint64_t seed;
    const logit_bias *bias; /* added to the logits before the choice (OpenAI's logit_bias); n_bias 0: none */
    int32_t n_bias;
} sampling;

typedef struct route_request {
    char session[SESSION_NAME_MAX + 2]; /* internal sessions (completions) start with '!'; see SESSION_NAME_MAX */
    int32_t pos;
    int32_t *tokens;    /* malloc'ed (may be NULL when n_tokens is 0) */
    int32_t n_tokens;
    int32_t top_logprobs;
    int32_t n_vocab;    /* choice restricted to ids < n_vocab */
    int32_t lookahead;
    sampling samp;
    tr_llm_draft draft; /* n_branches 0: none (see docs/protocol.md, "draft") */
    bool stream;        /* answer first, then the lookahead as it comes (NDJSON; see route_stream.c) */
    bool reuse_prefix;  /* a new private session may start from a cached prefix (completions; scheduler.c) */
    int32_t owner;      /* reuse_prefix: the API key (access_key_of) whose cached prefixes it may take over */
} route_request;

/* Parses a /v1/route/next body. model_n_vocab bounds ids, n_ctx bounds pos + tokens + lookahead. On failure fills
 * err (400, field named) and returns false; req->tokens is then freed. */
bool route_request_parse(const char *body, size_t len, int32_t model_n_vocab, int32_t n_ctx, route_request *req,
                         api_error *err);
void route_request_free(route_request *req);
void api_error_set(api_error *err, int status, const char *code, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* What a route job returns. */
typedef struct top_entry {
    int32_t id;
    float logprob;
} top_entry;

typedef struct route_result {
    int32_t token;
    float logprob;
    top_entry top[TOP_LOGPROBS_MAX];
    int32_t n_top;
    int32_t pos;
    int32_t lookahead[LOOKAHEAD_MAX];
    int32_t n_lookahead;
    int32_t verify[TR_DRAFT_BRANCHES_MAX]; /* answers along the draft walk */
    int32_t n_verify;
    int32_t n_evaluated;
    int32_t n_reused;    /* leading tokens taken from a cached prefix, not evaluated (reuse_prefix) */
    double eval_ms, queue_ms;
    double lookahead_ms; /* passes that evaluated lookahead tokens */
    int32_t queue_passes; /* forward passes that ran while it waited for its first (scheduler.c) */
    int32_t span_passes;  /* forward passes that ran from its queueing to its answer, its own included */
} route_result;

/* sample.c: picks a token among ids < n_vocab of logits with the library's sampler; the draw depends only on
 * (seed, position). Fills the chosen token's log-probability (of the untempered, unbiased distribution; logprob may
 * be NULL) and the n_top best alternatives. A token_sampler holds the samplers and scratch (one thread at a time);
 * NULL from token_sampler_create: out of memory. */
typedef struct token_sampler token_sampler;
token_sampler *token_sampler_create(void);
void token_sampler_free(token_sampler *ts);
int32_t sample_token(token_sampler *ts, const float *logits, int32_t n_vocab, const sampling *s, int32_t position,
                     float *logprob, top_entry *top, int32_t n_top);

/* score.c and scheduler_score: a given token sequence scored in one forward pass keeping every row's logits
 * (/v1/completions with prompt_logprobs). Per position p >= 1 of the sequence: the log-probability and rank of the
 * token at p given the tokens before it, and the top_k most likely ids; normalized over the whole vocabulary as
 * the embedded backend does (src/transport/embedded.c, embedded_score). */
#define SCORE_TOP_MAX 64 /* TR_SCORE_TOPK_MAX */
typedef struct score_row {
    int32_t token;     /* the token at this position */
    float logprob;     /* its log-probability */
    int32_t rank;      /* 1 + the ids ranked before it (equal logits: the lower id first, as in top) */
    int32_t n_top;
    top_entry *top;    /* [n_top] most likely first (storage: score_result.top) */
} score_row;

typedef struct score_request {
    const int32_t *tokens; /* ids checked by the caller */
    int32_t n_tokens;      /* 1 .. n_ctx (n_ctx - 1 with next) */
    int32_t top_k;         /* 0 .. SCORE_TOP_MAX */
    bool next;             /* also choose the token after the sequence from the same pass, as a route job would */
    sampling samp;         /* with next */
    int32_t n_logprobs;    /* with next: alternatives in next.top (0 .. TOP_LOGPROBS_MAX) */
} score_request;

typedef struct score_result {
    score_row *rows;       /* [n_rows]: rows[p - 1] is position p */
    top_entry *top;        /* [n_rows * top_k] */
    int32_t n_rows;        /* n_tokens - 1 */
    route_result next;     /* with next: token, logprob, top, n_top, pos */
    int32_t n_evaluated;
    double eval_ms, queue_ms;
} score_result;

/* Allocates res's rows for req (false: out of memory); score_result_free frees them. */
bool score_result_alloc(const score_request *req, score_result *res);
void score_result_free(score_result *res);
/* Fills row (its token set, top with room for top_k) from one row of logits over n_vocab ids. */
void score_row_fill(const float *logits, int32_t n_vocab, int32_t top_k, score_row *row);
/* The k largest logits' ids (ties: the lower id first), most likely first, by insertion (O(n_vocab) when few beat
 * the k-th): returns how many (k, or n_vocab when smaller). log_sum_exp: model/sample_math.h. */
int32_t top_logits(const float *logits, int32_t n_vocab, int32_t k, top_entry *out);

/* metrics.c */
#define LAT_BUCKETS 12
#define N_STATUS 10
#define N_ROUTES 7       /* route labels (metrics.c); the first N_TIMED_ROUTES have latency histograms */
#define N_TIMED_ROUTES 4
#define WAIT_BUCKETS 7   /* queue wait in passes: 0, 1, 2, 4, 8, 16, 32, +Inf */
typedef struct server_metrics {
    pthread_mutex_t mu;
    int64_t requests[N_ROUTES][N_STATUS]; /* route x status (see metrics.c) */
    int64_t tokens_evaluated, passes, batch_rows, batch_seqs, evictions, expirations, sessions_created;
    int64_t lat_count[N_TIMED_ROUTES][LAT_BUCKETS + 1];
    double lat_sum[N_TIMED_ROUTES];
    int64_t batch_hist[8];
    int64_t wait_passes_hist[WAIT_BUCKETS + 1], wait_ms_hist[LAT_BUCKETS + 1]; /* route jobs' queue wait */
    int64_t wait_passes_sum;
    double wait_ms_sum;
    int32_t active_sessions;
    int64_t kv_bytes;
    int64_t streams[N_TIMED_ROUTES][3]; /* streamed replies by route and how they ended (stream_end) */
} server_metrics;
/* How a streamed reply (already 200) ended: its last event sent, an error event instead (the request failed
 * mid-stream), or its client gone before the end. */
typedef enum stream_end { STREAM_END_COMPLETED, STREAM_END_FAILED, STREAM_END_ABANDONED } stream_end;
void metrics_init(server_metrics *m);
void metrics_request(server_metrics *m, const char *route, int status, double ms);
void metrics_pass(server_metrics *m, int32_t n_seq, int32_t n_rows);
void metrics_stream_end(server_metrics *m, const char *route, stream_end how);
/* A route job's wait from its arrival to its first forward pass: in passes run meanwhile and in milliseconds. */
void metrics_queue_wait(server_metrics *m, int32_t passes, double ms);
char *metrics_render(server_metrics *m);  /* malloc'ed Prometheus text */

/* scheduler.c */
typedef struct scheduler scheduler;
typedef struct sched_params {
    int32_t n_threads, max_sessions, n_ctx, max_batch_tokens, session_idle_s;
    int64_t kv_budget_bytes;
    bool batch;
} sched_params;
tr_status scheduler_create(const tr_model *model, const sched_params *p, server_metrics *metrics, scheduler **out);
/* Stops the worker: waiting and later jobs get 503. Idempotent; scheduler_free calls it. */
void scheduler_shutdown(scheduler *s);
void scheduler_free(scheduler *s);
/* Runs one route request to completion (blocks). Returns the HTTP status; on 200 fills res, otherwise err. */
int scheduler_route(scheduler *s, const route_request *req, route_result *res, api_error *err);
/* Streamed route requests (docs/protocol.md, "stream"). scheduler_stream_start takes req's tokens, queues the
 * request and waits until its answer and draft walk are known: 200 with *out the running stream and answer the
 * reply so far (no lookahead yet), else the status with err filled (*out NULL). scheduler_stream_next then waits
 * for the next event: a lookahead token (*token), the end (totals: the whole request's result) or a failure after
 * the answer (err). scheduler_stream_close stops the lookahead if it still runs (after the pass in flight), waits
 * until the worker has let go of the request, and frees it; it may be called at any point after a 200. */
typedef struct route_stream route_stream;
typedef enum stream_event { STREAM_LOOKAHEAD, STREAM_DONE, STREAM_FAILED } stream_event;
int scheduler_stream_start(scheduler *s, route_request *req, route_result *answer, api_error *err,
                           route_stream **out);
stream_event scheduler_stream_next(route_stream *st, int32_t *token, route_result *totals, api_error *err);
void scheduler_stream_close(route_stream *st);
/* Scores req (allocated res, see score_result_alloc) on the scheduler's scoring context, interleaved with the
 * sessions' passes (blocks). Returns the HTTP status; on 200 res is filled, otherwise err. */
int scheduler_score(scheduler *s, const score_request *req, score_result *res, api_error *err);
/* Frees a session: 204 or 404. scheduler_park keeps a finished completion's session as a cached prefix instead
 * (evicted like an idle session; see reuse_prefix). */
int scheduler_delete(scheduler *s, const char *session);
int scheduler_park(scheduler *s, const char *session);
int32_t scheduler_n_ctx(const scheduler *s);

struct tr_server {
    const tr_model *model;
    tr_server_params params;
    struct access_ctl *access;  /* API keys, the metrics key, session owners (access.c) */
    struct httpd *httpd;        /* the daemon, connections and worker threads (httpd.h) */
    scheduler *sched;
    server_metrics metrics;
    time_t started;             /* /v1/models "created" */
    char **cors_origins;        /* copies of params.cors_origins (params' pointer is cleared) */
    int32_t n_cors_origins;
    int port;
    bool stopped;
};


/* generation.c: one continuation of a prompt on a private session, what /v1/completions and /v1/chat/completions
 * share. The caller parses the body (oai_request_parse, src/common/openai_request.c), sets ids[0 .. n_prompt)
 * (generation_alloc_ids makes room for the prompt and the context) and n_logprobs; generation_apply takes the
 * request's options; then generation_step + generation_take per token until finished. */
typedef struct generation {
    tr_server *srv;
    const char *route;        /* metrics and log label: "completions" or "chat_completions" */
    char id[48];              /* "!" + the reply's id ("cmpl-…", "chatcmpl-…"): the private session's name */
    int32_t *ids;             /* prompt then generated ids */
    int32_t n_prompt, n_gen, max_tokens;
    int32_t n_held;           /* tokens the private session holds */
    int32_t n_cached;         /* prompt tokens taken from a cached prefix (usage's cached_tokens) */
    int32_t owner;            /* the API key (access_key_of): only its own cached prefixes are reused */
    int32_t n_logprobs;       /* alternatives asked per generated token (0 .. TOP_LOGPROBS_MAX) */
    sampling samp;
    bool stream, include_usage, usage_sent;
    bool finished, session_used;
    bool stream_failed;       /* an error event ended the stream */
    const char *finish_reason; /* "stop" (end of generation, a stop string) or "length" */
    tr_detok_stream *detok;
    char *stop[OAI_STOP_MAX]; /* the stop strings (n_stop) and the text they hold back */
    int32_t n_stop;
    stop_text stop_text;
    logit_bias *bias;         /* n_bias entries (samp.bias) */
    int32_t n_bias;
    char *tail;               /* generation_flush's text */
    size_t tail_len;
    double t0_ms;
} generation;

/* A route's limit on generated tokens. */
typedef struct generation_limits {
    int32_t default_max_tokens;       /* when none is given; < 0: what the context leaves */
    bool may_score;                   /* max_tokens 0 only scores the prompt (completions) */
    const char *prompt_field;         /* the field a prompt that fills the context is blamed on */
} generation_limits;

/* A fresh generation with a random id "PREFIX-<24 hex digits>" for the API key owner (access_key_of: its cached
 * prefixes are this key's only) (false: err filled). */
bool generation_init(generation *g, tr_server *srv, const char *route, const char *id_prefix, int32_t owner,
                     api_error *err);
/* Room for n_prompt_max prompt ids and the context after them. */
bool generation_alloc_ids(generation *g, int32_t n_prompt_max, api_error *err);
/* The shared layer's error as this server's. */
void api_error_from_oai(api_error *err, const oai_error *e);
/* Takes the parsed request's sampling (seed: given or drawn), stream, stop strings and logit_bias (moved out of r)
 * and its limit on generated tokens (with n_prompt set: a limit beyond the context is refused, a default is cut to
 * it). False with err filled. */
bool generation_apply(generation *g, oai_request *r, const generation_limits *lim, api_error *err);
/* One scheduler job: what the private session does not hold yet (the whole prompt first; then the last generated
 * token). Returns the HTTP status; on 200 res holds the next token. */
int generation_step(generation *g, route_result *res, api_error *err);
/* Adds res's token and returns the text it completes (may be empty; valid until the next call): text that could
 * begin a stop string is held back, a completed one finishes with "stop" (its text never returned); the
 * end-of-generation token is not added (false) and finishes with "stop"; max_tokens finishes with "length". */
bool generation_take(generation *g, const route_result *res, const char **text, size_t *len);
/* The text still held back at the end (by the detokenizer: an incomplete UTF-8 sequence; by the stop strings). */
void generation_flush(generation *g, const char **text, size_t *len);
void generation_add_usage(const generation *g, struct cJSON *root);
/* Counts and logs a finished request (how: "" or " (stream)"). */
void generation_done(const generation *g, const char *how);
/* A stream that failed after its 200 (err goes out as its last event): logged, and counted as failed when it
 * closes. */
void generation_stream_failed(generation *g, const api_error *err);
/* A streamed response is over (http_send_stream's done): counted in /metrics as completed, failed or abandoned
 * (client_gone, which also leaves the one log line of a client that hung up mid-stream). */
void generation_stream_closed(const generation *g, bool client_gone);
void generation_release(generation *g);
/* "data: JSON\n\n" for root (consumed); NULL when out of memory. */
char *sse_event(struct cJSON *root);
char *sse_error_event(const api_error *err);
/* A token's text (malloc'ed; *len its bytes when len is not NULL). */
char *token_piece(const tr_server *srv, int32_t id, size_t *len);

/* completions.c and chat_completions.c: POST /v1/completions and /v1/chat/completions on an HTTP thread. */
struct MHD_Connection;
int completions_handle(tr_server *srv, struct MHD_Connection *conn, const char *body, size_t len, int32_t owner);
int chat_completions_handle(tr_server *srv, struct MHD_Connection *conn, const char *body, size_t len,
                            int32_t owner);
/* route_stream.c: answers a parsed /v1/route/next request with "stream": true (takes req's tokens). */
int route_stream_respond(tr_server *srv, struct MHD_Connection *conn, route_request *req, double t0_ms);
/* httpd_defer.c: the client of the non-streamed request the calling thread answers has hung up (generation_step
 * then stops with 499: a completion nobody waits for is not generated). */
bool defer_client_gone(void);
/* http.c helpers shared with completions.c and route_stream.c */
/* The /v1/route/next reply object (malloc'ed JSON; NULL when out of memory); verify only with a draft. */
char *route_result_json(const char *session, bool with_verify, const route_result *res);
int http_send_json(struct MHD_Connection *conn, int status, char *json_owned);
struct MHD_Response;
/* A 200 streamed with chunked encoding, piece by piece (httpd_send_stream): next returns the next piece of the
 * body (a malloc'ed string, taken over; it may block: it runs on a worker thread) and sets *last on the final one;
 * NULL cuts the stream (out of memory). done frees cls afterwards — or at once, with a 500, when the response cannot
 * be made; client_gone says the stream ended before its last piece because the client went away (done logs that;
 * MHD's own message about it is not logged). */
int http_send_stream(struct MHD_Connection *conn, const char *content_type, char *(*next)(void *cls, bool *last),
                     void *cls, void (*done)(void *cls, bool client_gone));
int http_send_error(tr_server *srv, struct MHD_Connection *conn, const char *route, const api_error *err,
                    double t0_ms);
/* The "error" object of a reply, in OpenAI's shape: message, type (from the status: invalid_request_error,
 * authentication_error, not_found_error, server_error, ...), param (the field at fault, or null), code (the stable
 * code), and field (param again, under the name tokroute's clients read). */
struct cJSON;
struct cJSON *api_error_object(const api_error *err);
/* cors.c: copies the allowed origins into srv (checked: one origin each, with its scheme, or "*"); cors_free
 * frees them. cors_add_headers adds Access-Control-Allow-Origin (and Vary) when the request's Origin is allowed;
 * cors_preflight answers OPTIONS on a known path (allow: its methods) while origins are configured: 204 with the
 * Access-Control-Allow-* headers, or 403 for an origin not allowed. */
tr_status cors_init(tr_server *srv, const char *const *origins, int32_t n);
void cors_free(tr_server *srv);
void cors_add_headers(const tr_server *srv, struct MHD_Connection *conn, struct MHD_Response *r);
int cors_preflight(tr_server *srv, struct MHD_Connection *conn, const char *route, const char *allow, double t0_ms);
/* What every reply calls the model: the one /v1/models lists. */
const char *server_model_name(const tr_server *srv);
double server_now_ms(void);
void server_log(const tr_server *srv, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif /* TR_SERVER_INTERNAL_H */
