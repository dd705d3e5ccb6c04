/* backend.c — the common part of every LLM backend: argument checks, wall-clock timing, the simulated round trip
 * (--simulate-rtt), call/token statistics, the allowed-id range (padded vocabularies) and the circuit breaker.
 *
 * The breaker is here, not in each remote backend, so that a dead server costs one timeout and then nothing: after
 * a network or timeout failure, calls fail at once until the cooldown has passed; then one call probes again. Each
 * failed probe doubles the cooldown (capped); a success closes the breaker.
 *
 * Asynchronous calls (tr_llm_start/ready/finish) run the same call on one helper thread per backend, started on
 * first use and joined when the backend is freed. The helper owns the backend's state while a request is in flight;
 * the mutex hands it over in both directions, and the error message (thread-local) travels in the request. */
#include "transport/backend.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/error.h"

struct tr_llm_backend {
    const tr_llm_backend_ops *ops;
    void *impl;
    double rtt_ms;
    int32_t n_allowed;
    tr_abort_fn abort_fn;
    void *abort_user;
    int32_t cooldown_ms, max_cooldown_ms;
    double open_until_ms;      /* breaker open while now < open_until_ms */
    int32_t current_cooldown_ms;
    tr_llm_stats stats;
    double jitter_ms;          /* test hook: extra random delay per call */
    uint64_t jitter_state;
    /* the helper thread */
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool thread_started, quit, in_flight, done;
    int32_t *req_tokens;
    int32_t req_n, req_cap, req_lookahead;
    tr_llm_draft req_draft;
    bool req_has_draft;
    tr_llm_reply reply;
    char error[512];
};

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static void sleep_ms(double ms) {
    if (ms <= 0) return;
    struct timespec ts = {(time_t)(ms / 1e3), (long)((ms - (double)(time_t)(ms / 1e3) * 1e3) * 1e6)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

tr_status tr_llm_backend_create(const tr_llm_backend_ops *ops, void *impl, tr_llm_backend **out) {
    if (!ops || !ops->next_token || !out) {
        if (ops && ops->free) ops->free(impl);
        return tr_fail(TR_ERR_ARG, "tr_llm_backend_create: need ops with next_token and an output pointer");
    }
    tr_llm_backend *b = calloc(1, sizeof *b);
    if (!b) {
        if (ops->free) ops->free(impl);
        return tr_fail(TR_ERR_NOMEM, "out of memory");
    }
    b->ops = ops;
    b->impl = impl;
    b->cooldown_ms = 1000;
    b->max_cooldown_ms = 16000;
    *out = b;
    return TR_OK;
}

void tr_llm_backend_free(tr_llm_backend *b) {
    if (!b) return;
    if (b->thread_started) {
        pthread_mutex_lock(&b->mu);
        while (b->in_flight && !b->done) pthread_cond_wait(&b->cv, &b->mu);
        b->quit = true;
        pthread_cond_broadcast(&b->cv);
        pthread_mutex_unlock(&b->mu);
        pthread_join(b->thread, NULL);
        pthread_mutex_destroy(&b->mu);
        pthread_cond_destroy(&b->cv);
    }
    free(b->req_tokens);
    if (b->ops->free) b->ops->free(b->impl);
    free(b);
}

void tr_llm_backend_set_rtt(tr_llm_backend *b, double rtt_ms) {
    if (b) b->rtt_ms = rtt_ms > 0 ? rtt_ms : 0;
}

void tr_llm_backend_set_allowed(tr_llm_backend *b, int32_t n_allowed) {
    if (b) b->n_allowed = n_allowed > 0 ? n_allowed : 0;
}

void tr_llm_backend_set_breaker(tr_llm_backend *b, int32_t cooldown_ms, int32_t max_cooldown_ms) {
    if (!b) return;
    b->cooldown_ms = cooldown_ms > 0 ? cooldown_ms : 0;
    b->max_cooldown_ms = max_cooldown_ms > b->cooldown_ms ? max_cooldown_ms : b->cooldown_ms;
    b->open_until_ms = 0;
    b->current_cooldown_ms = 0;
}

void tr_llm_backend_set_abort(tr_llm_backend *b, tr_abort_fn abort_fn, void *user) {
    if (!b) return;
    b->abort_fn = abort_fn;
    b->abort_user = user;
}

void tr_llm_backend_set_jitter(tr_llm_backend *b, double max_ms, uint64_t seed) {
    if (!b) return;
    b->jitter_ms = max_ms > 0 ? max_ms : 0;
    b->jitter_state = seed;
}

static double next_jitter_ms(tr_llm_backend *b) {
    if (b->jitter_ms <= 0) return 0;
    uint64_t z = (b->jitter_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return b->jitter_ms * (double)(z >> 11) / 9007199254740992.0;
}

int32_t tr_llm_backend_n_vocab(tr_llm_backend *b) {
    tr_clear_error();
    if (!b || !b->ops->n_vocab) return 0;
    int32_t n = b->ops->n_vocab(b->impl);
    return n > 0 ? n : 0;
}

static void breaker_record(tr_llm_backend *b, tr_status st, double t_end) {
    if (b->cooldown_ms <= 0) return;
    if (st == TR_OK) {
        b->current_cooldown_ms = 0;
        b->open_until_ms = 0;
    } else if (st == TR_ERR_NETWORK || st == TR_ERR_TIMEOUT) {
        int32_t c = b->current_cooldown_ms ? b->current_cooldown_ms * 2 : b->cooldown_ms;
        if (c > b->max_cooldown_ms) c = b->max_cooldown_ms;
        b->current_cooldown_ms = c;
        b->open_until_ms = t_end + c;
    }
}

tr_status draft_check(const tr_llm_draft *d) {
    if (d->n_branches < 0 || d->n_branches > TR_DRAFT_BRANCHES_MAX)
        return tr_fail(TR_ERR_ARG, "draft: %d branches (at most %d)", d->n_branches, TR_DRAFT_BRANCHES_MAX);
    if (d->n_branches > 0 && d->start[0] != 0) return tr_fail(TR_ERR_ARG, "draft: the first branch must start at 0");
    for (int32_t b = 0; b < d->n_branches; b++) {
        if (d->parent[b] < -1 || d->parent[b] >= b)
            return tr_fail(TR_ERR_ARG, "draft: branch %d has parent %d (must be -1 or an earlier branch)", b,
                           d->parent[b]);
        if (d->start[b + 1] <= d->start[b] || d->start[b + 1] > TR_DRAFT_TOKENS_MAX)
            return tr_fail(TR_ERR_ARG, "draft: branch %d is empty or beyond %d tokens", b, TR_DRAFT_TOKENS_MAX);
        for (int32_t i = d->start[b]; i < d->start[b + 1]; i++)
            if (d->tokens[i] < 0) return tr_fail(TR_ERR_ARG, "draft: negative token id %d", d->tokens[i]);
    }
    return TR_OK;
}

int32_t draft_child(const tr_llm_draft *d, int32_t node, int32_t token) {
    for (int32_t b = node + 1; b < d->n_branches; b++)
        if (d->parent[b] == node && d->tokens[d->start[b]] == token) return b;
    return -1;
}

int32_t draft_walk(const tr_llm_draft *d, const int32_t *answers, int32_t n_answers, int32_t *path) {
    int32_t n = 0, node = -1;
    while (n < n_answers && (node = draft_child(d, node, answers[n])) >= 0) path[n++] = node;
    return n;
}

/* One call, synchronous: the simulated delay, the implementation, the checks and the accounting. */
static tr_status do_call(tr_llm_backend *b, const int32_t *tokens, int32_t n, int32_t lookahead,
                         const tr_llm_draft *draft, tr_llm_reply *reply) {
    reply->id = -1;
    reply->logprob = NAN;
    reply->n_lookahead = 0;
    reply->n_verify = 0;
    const double t0 = now_ms();
    if (b->open_until_ms > t0) {
        b->stats.short_circuited++;
        return reply->status = tr_fail(TR_ERR_NETWORK, "LLM backend %s: unavailable (circuit open, next probe in %.0f ms)",
                                       b->ops->name, b->open_until_ms - t0);
    }
    sleep_ms(b->rtt_ms + next_jitter_ms(b));
    if (lookahead < 0) lookahead = 0;
    if (lookahead > TR_LOOKAHEAD_MAX) lookahead = TR_LOOKAHEAD_MAX;
    tr_llm_call call = {.tokens = tokens, .n_tokens = n, .n_allowed = b->n_allowed, .abort_fn = b->abort_fn,
                        .abort_user = b->abort_user, .id = -1, .logprob = NAN, .lookahead = lookahead,
                        .lookahead_ids = reply->lookahead, .draft = draft && draft->n_branches > 0 ? draft : NULL,
                        .verify_ids = reply->verify};
    tr_status st = b->ops->next_token(b->impl, &call);
    const double t1 = now_ms();
    b->stats.calls++;
    b->stats.time_ms += t1 - t0;
    if (call.n_evaluated > 0) b->stats.tokens_evaluated += call.n_evaluated;
    if (call.bytes_sent > 0) b->stats.bytes_sent += call.bytes_sent;
    if (call.bytes_received > 0) b->stats.bytes_received += call.bytes_received;
    if (st == TR_OK && (call.id < 0 || (b->n_allowed > 0 && call.id >= b->n_allowed)))
        st = tr_fail(TR_ERR_RANGE, "returned token %d, outside the shared vocabulary (0..%d)", call.id,
                     (b->n_allowed > 0 ? b->n_allowed : 1) - 1);
    breaker_record(b, st, t1);
    if (st != TR_OK) {
        b->stats.failures++;
        return reply->status = tr_fail_prefix(st, "LLM backend %s", b->ops->name);
    }
    /* Verify ids only count along the walk they claim: an id that selects no branch ends it (the ids after it
     * would answer positions the reply never evaluated). An id outside the shared range ends it too. */
    int32_t n_verify = 0;
    if (call.draft && call.n_verify > 0) {
        int32_t answers[TR_DRAFT_BRANCHES_MAX + 1], path[TR_DRAFT_BRANCHES_MAX + 1];
        const int32_t claimed = call.n_verify > TR_DRAFT_BRANCHES_MAX ? TR_DRAFT_BRANCHES_MAX : call.n_verify;
        answers[0] = call.id;
        memcpy(answers + 1, reply->verify, (size_t)claimed * sizeof *answers);
        n_verify = draft_walk(call.draft, answers, claimed, path);
        for (int32_t i = 0; i < n_verify; i++) {
            if (reply->verify[i] < 0 || (b->n_allowed > 0 && reply->verify[i] >= b->n_allowed)) n_verify = i;
            else b->stats.draft_tokens_verified += draft->start[path[i] + 1] - draft->start[path[i]];
        }
        if (n_verify < claimed) call.n_lookahead = 0; /* it followed an answer we do not take */
    }
    reply->n_verify = n_verify;
    if (call.draft) b->stats.draft_tokens_sent += draft->start[draft->n_branches];
    /* Lookahead ids outside the shared range end the lookahead there (they are only hints, never shown). */
    int32_t n_la = call.n_lookahead < 0 ? 0 : call.n_lookahead > lookahead ? lookahead : call.n_lookahead;
    for (int32_t i = 0; i < n_la; i++)
        if (reply->lookahead[i] < 0 || (b->n_allowed > 0 && reply->lookahead[i] >= b->n_allowed)) n_la = i;
    reply->n_lookahead = n_la;
    b->stats.lookahead_tokens += n_la;
    reply->id = call.id;
    reply->logprob = call.logprob;
    return reply->status = TR_OK;
}

tr_status tr_llm_next_token_ex(tr_llm_backend *b, const int32_t *tokens, int32_t n, int32_t *next, float *logprob) {
    if (!b || !tokens || n <= 0 || !next) return tr_fail(TR_ERR_ARG, "tr_llm_next_token: empty sequence");
    if (b->in_flight) return tr_fail(TR_ERR_STATE, "tr_llm_next_token: an asynchronous request is in flight");
    tr_llm_reply reply;
    tr_status st = do_call(b, tokens, n, 0, NULL, &reply);
    if (st != TR_OK) return st;
    *next = reply.id;
    if (logprob) *logprob = reply.logprob;
    return TR_OK;
}

static void *helper_main(void *arg) {
    tr_llm_backend *b = arg;
    pthread_mutex_lock(&b->mu);
    for (;;) {
        while (!b->quit && !(b->in_flight && !b->done)) pthread_cond_wait(&b->cv, &b->mu);
        if (b->quit) break;
        pthread_mutex_unlock(&b->mu);
        tr_llm_reply reply;
        const tr_status st =
            do_call(b, b->req_tokens, b->req_n, b->req_lookahead, b->req_has_draft ? &b->req_draft : NULL, &reply);
        pthread_mutex_lock(&b->mu);
        b->reply = reply;
        snprintf(b->error, sizeof b->error, "%s", st == TR_OK ? "" : tr_last_error());
        b->done = true;
        pthread_cond_broadcast(&b->cv);
    }
    pthread_mutex_unlock(&b->mu);
    return NULL;
}

tr_status tr_llm_start(tr_llm_backend *b, const int32_t *tokens, int32_t n, int32_t lookahead) {
    return tr_llm_start_draft(b, tokens, n, NULL, lookahead);
}

tr_status tr_llm_start_draft(tr_llm_backend *b, const int32_t *tokens, int32_t n, const tr_llm_draft *draft,
                             int32_t lookahead) {
    if (!b || !tokens || n <= 0) return tr_fail(TR_ERR_ARG, "tr_llm_start: empty sequence");
    if (b->in_flight) return tr_fail(TR_ERR_STATE, "tr_llm_start: a request is already in flight");
    if (draft && draft_check(draft) != TR_OK) return TR_ERR_ARG;
    if (!b->thread_started) {
        if (pthread_mutex_init(&b->mu, NULL) != 0) return tr_fail(TR_ERR_NOMEM, "cannot create a mutex");
        if (pthread_cond_init(&b->cv, NULL) != 0) {
            pthread_mutex_destroy(&b->mu);
            return tr_fail(TR_ERR_NOMEM, "cannot create a condition variable");
        }
        if (pthread_create(&b->thread, NULL, helper_main, b) != 0) {
            pthread_cond_destroy(&b->cv);
            pthread_mutex_destroy(&b->mu);
            return tr_fail(TR_ERR_NOMEM, "cannot start the LLM helper thread");
        }
        b->thread_started = true;
    }
    if (n > b->req_cap) {
        int32_t cap = b->req_cap ? b->req_cap : 256;
        while (cap < n) cap = cap > INT32_MAX / 2 ? n : cap * 2;
        int32_t *t = realloc(b->req_tokens, (size_t)cap * sizeof *t);
        if (!t) return tr_fail(TR_ERR_NOMEM, "out of memory");
        b->req_tokens = t;
        b->req_cap = cap;
    }
    pthread_mutex_lock(&b->mu);
    memcpy(b->req_tokens, tokens, (size_t)n * sizeof *tokens);
    b->req_n = n;
    b->req_lookahead = lookahead;
    b->req_has_draft = draft && draft->n_branches > 0;
    if (b->req_has_draft) b->req_draft = *draft;
    b->done = false;
    b->in_flight = true;
    pthread_cond_broadcast(&b->cv);
    pthread_mutex_unlock(&b->mu);
    return TR_OK;
}

bool tr_llm_ready(tr_llm_backend *b) {
    if (!b || !b->in_flight) return true;
    pthread_mutex_lock(&b->mu);
    const bool done = b->done;
    pthread_mutex_unlock(&b->mu);
    return done;
}

tr_status tr_llm_finish(tr_llm_backend *b, tr_llm_reply *reply) {
    if (!b || !reply) return tr_fail(TR_ERR_ARG, "tr_llm_finish: NULL argument");
    if (!b->in_flight) return reply->status = tr_fail(TR_ERR_STATE, "tr_llm_finish: no request in flight");
    pthread_mutex_lock(&b->mu);
    while (!b->done) pthread_cond_wait(&b->cv, &b->mu);
    *reply = b->reply;
    b->in_flight = false;
    b->done = false;
    pthread_mutex_unlock(&b->mu);
    if (reply->status != TR_OK) return tr_fail(reply->status, "%s", b->error);
    return TR_OK;
}

tr_status tr_llm_next_token(tr_llm_backend *b, const int32_t *tokens, int32_t n, int32_t *next) {
    return tr_llm_next_token_ex(b, tokens, n, next, NULL);
}

tr_llm_stats tr_llm_backend_stats(const tr_llm_backend *b) {
    tr_llm_stats none = {0};
    return b ? b->stats : none;
}

const char *tr_llm_backend_name(const tr_llm_backend *b) { return b ? b->ops->name : ""; }
