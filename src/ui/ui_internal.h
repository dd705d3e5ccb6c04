/* ui_internal.h — shared between the device server's HTTP layer (ui_server.c), its generations (ui_gen.c), the
 * page's event stream (ui_page_events.c) and the OpenAI-compatible endpoints (ui_openai.c).
 *
 * One mutex (ui->mu) guards every job's output buffer, the slot pool, the waiting queue and the job list; one
 * condition variable (ui->cv) is broadcast on any change. Contention is negligible next to a forward pass, and one
 * lock keeps the hand-offs between the HTTP layer's threads and the generations' threads easy to check.
 *
 * A generation (job) is run by a worker thread; what it writes for the client is up to its sink: the page's event
 * stream or an OpenAI reply (streamed chunks, or one JSON body once finished). Sinks append to job->buf. */
#ifndef TR_UI_INTERNAL_H
#define TR_UI_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include "tokroute.h"

struct httpd;
struct cJSON;

#define UI_STOP_MAX 4 /* OAI_STOP_MAX */

/* One generation context: the SLM's KV cache, an LLM backend and a router file, reused by later generations
 * (the KV cache keeps the prompt prefix they share). */
typedef struct ui_slot {
    tr_context *ctx;
    tr_llm_backend *llm;   /* opened on first use */
    tr_router *router;     /* the router file, loaded on first use */
    bool busy;
} ui_slot;

/* What a request asks for (validated by the HTTP layer). */
typedef struct ui_request {
    int32_t *prompt;       /* malloc'ed ids */
    int32_t n_prompt;
    tr_route_mode mode;
    bool router_file;      /* route with the router file (else with policy) */
    tr_policy policy;
    float tau;
    int32_t max_tokens;
    double target_routed, max_routed;
    tr_sampler_params sampling; /* the SLM's draws and, where the backend can, the LLM's (greedy: temperature 0) */
    char *stop[UI_STOP_MAX];    /* malloc'ed */
    int32_t n_stop;
} ui_request;

typedef struct ui_job ui_job;

/* How a job's generation reaches its client. Callbacks run on the worker thread, without ui->mu. */
typedef struct ui_sink {
    void (*start)(ui_job *job);
    void (*token)(ui_job *job, const tr_route_token *t);                       /* every decided token */
    void (*text)(ui_job *job, const char *text, size_t len, const tr_route_token *t); /* shown text; t NULL: the tail */
    void (*warning)(ui_job *job, const char *message);
    /* A failure before or during the generation: st says what kind (the HTTP status of a reply not yet sent). */
    void (*error)(ui_job *job, tr_status st, const char *message);
    /* The end: stop is "eog", "string", "length" or "cancelled"; llm is this generation's share of the backend's
     * statistics. */
    void (*done)(ui_job *job, const tr_route_stats *s, const tr_llm_stats *llm, const char *stop);
    void (*free)(void *state);
} ui_sink;

struct ui_job {
    struct tr_ui *ui;
    uint64_t id;
    ui_slot *slot;
    ui_request req;
    const ui_sink *sink;
    void *state;           /* the sink's */
    char *buf;             /* output not yet read by the connection */
    size_t len, cap, sent;
    int http_status;       /* a whole (not streamed) reply: its status once finished */
    bool finished;
    atomic_bool cancel;
    int refs;              /* the worker and the connection */
    struct ui_job *next;   /* in ui->jobs while running */
};

/* A request waiting for a slot (first in line at ui->waiting). */
typedef struct ui_waiter {
    struct ui_waiter *next;
} ui_waiter;

struct tr_ui {
    tr_ui_params p;
    char *host, *slm_name, *llm_name, *router_path, *api_key;
    struct httpd *httpd;   /* the HTTP layer shared with serve (src/server/httpd.h) */
    int32_t port;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    ui_slot *slots;
    int32_t active;
    int32_t streams;       /* streamed responses whose producer has not ended */
    ui_waiter *waiting;    /* FIFO of requests waiting for a slot */
    int32_t n_waiting;
    double mean_gen_ms;    /* recent generations' mean wall time (Retry-After) */
    uint64_t next_id;
    ui_job *jobs;
    time_t started;
    bool stopping;
};

/* ---------------------------------------------------------------- ui_gen.c */

/* Polled while a request waits: true when its client has gone. */
typedef bool (*ui_gone_fn)(void *user);

/* Starts a generation with sink (state is the sink's, freed by sink->free with the job). Takes ownership of req's
 * buffers and of state either way. When every slot is busy the request waits in the queue (ui->p.max_queued
 * places), polling gone; a full queue fails with 429 and *retry_after_s, a stopping server with 503, a client gone
 * with status 0. On failure returns NULL with *http_status and a message in tr_last_error(). The job returned has
 * refs 2: the caller's and the worker's. */
ui_job *ui_job_start(struct tr_ui *ui, ui_request *req, const ui_sink *sink, void *state, ui_gone_fn gone,
                     void *gone_user, int *http_status, int *retry_after_s);
/* Waits until the job finished, polling gone; a client gone cancels the job (and still waits for its end). Returns
 * false when the client went. */
bool ui_job_wait(ui_job *job, ui_gone_fn gone, void *gone_user);
/* Drops one reference (the caller holds ui->mu); frees the job at zero. */
void ui_job_release_locked(ui_job *job);
void ui_job_release(ui_job *job);
/* Appends output for the connection (caller holds no lock). */
void ui_job_append(ui_job *job, const char *data, size_t len);
/* Cancels the running generation with this id; false when none. */
bool ui_job_cancel(struct tr_ui *ui, uint64_t id);
/* Frees the slots (after every job ended). */
void ui_slots_free(struct tr_ui *ui);
void ui_request_free(ui_request *req);

/* ---------------------------------------------------------------- ui_page_events.c: the page's event stream */

extern const ui_sink ui_page_sink;
void *ui_page_state_new(void); /* the sink's state for one generation (NULL: out of memory) */
/* Parses a POST /api/generate body into r (the page's fields: prompt, mode, tau, max_tokens, policy, chat,
 * temperature, seed, target_routed, max_routed; any other is refused by name), or
 * returns a message for a 400 (msg_buf holds formatted ones) with *param the field at fault and *code the error's
 * code ("unknown_field" for a field it does not take, as the OpenAI endpoints say; NULL: the status's own). */
const char *ui_page_parse(struct tr_ui *ui, const struct cJSON *j, ui_request *r, const char **param, const char **code,
                          char *msg_buf, size_t msg_cap);

/* ---------------------------------------------------------------- ui_openai.c */

struct MHD_Connection;
struct oai_error;
/* POST /v1/chat/completions (chat true) and /v1/completions; GET /v1/models. */
int ui_openai_generate(struct tr_ui *ui, struct MHD_Connection *c, bool chat, const char *body, size_t len);
int ui_openai_models(struct tr_ui *ui, struct MHD_Connection *c);
/* The budget fields both endpoints take, target_routed and max_routed in [0, 1] (the command line's values as
 * defaults), into r; a cap below the target is refused by name (max_routed), as the command line refuses it. */
bool ui_budget_fields(const struct tr_ui *ui, const struct cJSON *root, ui_request *r, struct oai_error *e);

/* ---------------------------------------------------------------- ui_server.c helpers for ui_openai.c */

/* What every OpenAI reply calls the model: the one /v1/models lists (the SLM's name). */
const char *ui_model_id(const struct tr_ui *ui);
/* A JSON body (copied; NULL: a 500 for out of memory); retry_after_s > 0 adds Retry-After. */
int ui_send_json_text(struct MHD_Connection *c, unsigned status, const char *json, int retry_after_s);
/* An error in OpenAI's shape. */
int ui_send_error(struct MHD_Connection *c, unsigned status, const char *code, const char *param, const char *message,
                  int retry_after_s);
/* Streams the job's buffer as text/event-stream until it finishes (takes the caller's reference); on a worker
 * thread of the HTTP layer (httpd_send_stream). */
int ui_send_stream(struct tr_ui *ui, struct MHD_Connection *c, ui_job *job, const char *generation_id);
/* The gone-poll for this connection (conn_client_gone: a reset, not a half-close). */
bool ui_client_gone(void *connection);

#endif /* TR_UI_INTERNAL_H */
