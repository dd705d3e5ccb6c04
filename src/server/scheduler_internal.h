/* scheduler_internal.h — what scheduler.c (the queue, the worker and its passes), scheduler_plan.c (what goes into
 * the next pass) and scheduler_sessions.c (the session table under the KV budget) share: the scheduler's, its
 * sessions' and its jobs' structures. Only the worker thread touches sessions; the mutex guards the queue. */
#ifndef TR_SERVER_SCHEDULER_INTERNAL_H
#define TR_SERVER_SCHEDULER_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "kernels/kernels.h" /* thread_pool */
#include "server/server_internal.h"

#define MAX_SEQS 64
#define CHOOSE_THREADS_MAX 512 /* multi_engine_create's most threads */

typedef struct session {
    char id[SESSION_NAME_MAX + 2];
    kv_seq *seq;
    double last_used_ms;
    bool busy;             /* a job on it has started and not finished */
    bool cached;           /* a finished completion kept for its prefix: no request can name it */
    int32_t owner;         /* the API key whose completion made it (route_request.owner); cached: only it reuses */
    int64_t last_pass;     /* the pass that last evaluated a job of it */
    struct session *next;
} session;

typedef enum job_kind { JOB_ROUTE, JOB_DELETE, JOB_PARK, JOB_SCORE } job_kind;

typedef struct job {
    job_kind kind;
    const route_request *req;
    const char *delete_id;
    const score_request *sreq; /* JOB_SCORE: the sequence; fed / n_feed count its rows */
    score_result *sres;
    route_result *res;
    api_error *err;
    int status;
    bool started, done, main_done;
    session *sess;
    const int32_t *feed;   /* tokens to evaluate: the request's, or own_feed */
    int32_t n_feed, fed, chunk;
    int32_t own_feed[1];
    int32_t la_left;
    int32_t node;          /* the draft branch last entered (-1: the requested position) */
    bool walking;          /* still walking the draft */
    bool runnable;         /* may join the pass being filled (scheduler.c, fill_pass) */
    int32_t passed_over;   /* a prompt: passes that ran without it while it could have joined (its age) */
    double t_enqueue_ms, t_start_ms;
    int64_t enqueue_pass;  /* the scheduler's n_passes when it was queued */
    route_result *answer;  /* streamed: the result as it was when the answer became known (NULL: not streamed) */
    bool answered;         /* streamed: answer holds the answer and the draft walk */
    bool cancelled;        /* streamed: the client is gone; no more lookahead */
    pthread_cond_t cv;
    struct job *next;
} job;

struct route_stream {
    scheduler *s;
    job j;
    route_request req;     /* owned: the job reads it until done */
    route_result res, answer;
    api_error err;
    int32_t n_taken;       /* lookahead tokens handed out by scheduler_stream_next */
};

/* The token a pass's row chose for its job, drawn with the mutex released (choose) and taken under it. */
typedef struct choice {
    int32_t token;
    float logprob;
    top_entry top[TOP_LOGPROBS_MAX];
    int32_t n_top;
} choice;

/* A pass's cost against its rows, fitted over recent passes (scheduler_plan.c): exponentially weighted sums. */
typedef struct pass_cost {
    double w, sx, sy, sxx, sxy;
} pass_cost;

struct scheduler {
    const tr_model *model;
    sched_params p;
    server_metrics *metrics;
    multi_engine *engine;
    float *logits;          /* [MAX_SEQS][n_vocab] */
    choice choices[MAX_SEQS];
    token_sampler *samplers[CHOOSE_THREADS_MAX]; /* one per thread of the engine's pool, which chooses the pass's
                                                  * rows' tokens (choose_all); [0] also the scoring's (worker only) */
    pthread_mutex_t mu;
    pthread_cond_t wake;
    pthread_t worker;
    bool worker_started, stop;
    job *queue;
    session *sessions;
    int32_t n_sessions;
    int64_t kv_bytes;
    int32_t last_pass_seqs;   /* sessions in the last pass: their clients are likely to send the next token soon */
    int64_t n_passes;         /* passes run so far; the last one's number marks its sessions (session.last_pass) */
    tr_context *score_ctx;    /* the scoring context (worker only; NULL until the first score job) */
    int64_t score_kv_bytes;   /* its KV cache's bytes, counted in kv_bytes */
    int32_t score_rows;       /* rows per scoring chunk */
    double last_pass_ms, last_pass_end_ms;
    pass_cost cost;           /* the batched passes' ms against their rows */
    bool last_pass_had_prompt; /* with one session a pass, calls and waiting prompts take turns */
};

double sched_now_ms(void); /* monotonic milliseconds */

/* ---------------------------------------------------------------- the session table (scheduler_sessions.c;
 * worker thread, mutex held) */

void sched_publish_gauges(scheduler *s);
session *sched_find_session(scheduler *s, const char *id);
/* owner's cached prefix (another API key's is never considered) sharing the most tokens with tokens[0..n), at most
 * n - 1 of them (the last token is evaluated for its logits); NULL when none shares any. One that would keep less than half of what it holds is left for a
 * request that shares more. *common: how many it shares. */
session *sched_find_prefix(scheduler *s, int32_t owner, const int32_t *tokens, int32_t n, int32_t *common);
void sched_remove_session(scheduler *s, session *victim);
/* Evicts the least recently used idle session other than keep (a cached prefix first); false when there is none. */
bool sched_evict_lru(scheduler *s, const session *keep);
void sched_expire_idle(scheduler *s);
/* Makes room for extra bytes of KV within the budget by evicting idle sessions. */
bool sched_make_room(scheduler *s, int64_t extra, const session *keep);
/* Grows x's KV cache to hold n_positions (evicting others within the budget); false when it cannot. */
bool sched_ensure_capacity(scheduler *s, session *x, int32_t n_positions);
/* A new session named id (evicting the LRU one at max_sessions); NULL when there is no room. */
session *sched_create_session(scheduler *s, const char *id);

/* ---------------------------------------------------------------- the next pass's order and size
 * (scheduler_plan.c; worker thread, mutex held) */

/* Rows the route job has left to evaluate (before it starts: its tokens, or the one it re-evaluates). */
int32_t plan_rows_left(const job *j);
/* A call (few rows left: joins the next pass before any prompt) rather than a prompt (chunked, after the calls). */
bool plan_is_call(const job *j);
/* The prompts' order: lowest key first (rows left, less a share per pass that passed it over). */
int64_t plan_prompt_key(const job *j);
/* The most rows the calls may take, leaving prompts a few when any wait. */
int32_t plan_calls_max_rows(const scheduler *s, bool prompts_wait);
/* The rows prompts may take in chunks in a pass that holds call_rows rows of calls; calls_due: sessions of the last
 * pass are still to send their next calls, so the prompts' share is held to what the measured cost allows. */
int32_t plan_prompt_rows(const scheduler *s, int32_t call_rows, bool calls_due);
/* The next prompt to join the pass (runnable, not in it yet; lowest plan_prompt_key first), NULL when none may:
 * within budget (what plan_prompt_rows allowed, less what prompts took) in chunks, and beyond it a prompt whose
 * rows left all fit in room (the pass's rows left), which ends in this pass: a burst's short prompts are not held
 * up by the calls of the sessions served first; but when the budget is the whole room and the short prompts not begun
 * yet hold more rows than it, each of them takes an equal chunk (a burst's prompts end together in the next pass).
 * *max_rows: the rows it may take. */
job *plan_next_prompt(const scheduler *s, int32_t budget, int32_t room, int32_t *max_rows);
/* How many sessions of the last pass have a route job queued again (or still: a prompt fed over several passes). */
int32_t plan_count_returned(scheduler *s);
/* Whether calls are due: some sessions of the last pass (several) have not sent their next request yet, and the
 * pass ended recently (last_pass_recent; else they have gone quiet). When all are back, nobody waits on the next
 * pass but those queued, so prompts with no call beside them take the whole pass. */
bool plan_calls_due(scheduler *s, bool last_pass_recent);
/* Feeds the cost fit with a batched pass's rows and duration. */
void plan_observe_pass(scheduler *s, int32_t rows, double ms);

#endif /* TR_SERVER_SCHEDULER_INTERNAL_H */
