/* backend.c — the common part of every LLM backend: argument checks, wall-clock timing, the simulated round trip
 * (--simulate-rtt), call/token statistics, the allowed-id range (padded vocabularies) and the circuit breaker.
 *
 * The breaker is here, not in each remote backend, so that a dead server costs one timeout and then nothing: after
 * a network or timeout failure, calls fail at once until the cooldown has passed; then one call probes again. Each
 * failed probe doubles the cooldown (capped); a success closes the breaker.
 *
 * Asynchronous calls (tr_llm_start/ready/finish) run the same call on one helper thread per backend, started on
 * first use and joined when the backend is freed. The helper owns the implementation while it runs a call; the
 * mutex hands requests and replies over, and the error message (thread-local) travels in the reply.
 *
 * Streaming: an implementation that calls tr_llm_call_answered publishes the answer before computing its lookahead
 * and each lookahead token as it comes (tr_llm_call_push_lookahead). tr_llm_finish then returns at the answer while
 * the helper goes on; tr_llm_lookahead reads what has arrived since. A newer request (or settling, or freeing)
 * cancels the rest: the next push returns false. The request waits in a second slot until the helper is free, so
 * starting it never blocks the caller.
 *
 * The simulated round trip (--simulate-rtt) models each direction: the helper waits half of it (plus the test
 * jitter) after the request left before computing, and everything it publishes becomes visible half a round trip
 * after it was computed — the answer, then each lookahead token — as over a real network. */
#include "transport/backend.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/error.h"
#include "model/sample_math.h"

typedef struct request {
    int32_t *tokens;
    int32_t n, cap, lookahead;
    tr_llm_draft draft;
    bool has_draft;
    double t_sent_ms;
} request;

struct tr_llm_backend {
    const tr_llm_backend_ops *ops;
    void *impl;
    double rtt_ms;
    int32_t n_allowed;
    int32_t end_id;            /* -1: unknown */
    tr_abort_fn abort_fn;
    void *abort_user;
    int32_t cooldown_ms, max_cooldown_ms;
    double open_until_ms;      /* breaker open while now < open_until_ms */
    int32_t current_cooldown_ms;
    tr_llm_stats stats;
    tr_llm_score_stats score_stats;
    double jitter_ms;          /* test hook: extra random delay per call */
    uint64_t jitter_state;
    /* the helper thread */
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool thread_started, quit;
    bool in_flight;            /* the caller started a request and has not finished it */
    bool queued;               /* a request waits in the slot for the helper */
    bool running;              /* the helper is inside a call (its answer may be out; the lookahead goes on) */
    bool cancel;               /* the running call's remaining lookahead is not wanted */
    bool published;            /* the in-flight request's reply (answer or failure) is out */
    double visible_at_ms;      /* ... and can be seen from then on (the simulated return trip) */
    request slot;              /* the queued request */
    request work;              /* the running one (the helper's) */
    tr_llm_reply reply;
    char error[512];
    /* the streamed lookahead of the last published reply */
    int64_t generation;        /* bumped per published reply */
    int64_t finished_generation; /* the generation the caller last finished */
    int32_t la_ids[TR_LOOKAHEAD_MAX];
    double la_visible_ms[TR_LOOKAHEAD_MAX];
    int32_t la_n;
    bool la_complete;
};

static void settle_locked(tr_llm_backend *b);

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
    b->end_id = -1;
    b->cooldown_ms = 1000;
    b->max_cooldown_ms = 16000;
    *out = b;
    return TR_OK;
}

void tr_llm_backend_free(tr_llm_backend *b) {
    if (!b) return;
    if (b->thread_started) {
        pthread_mutex_lock(&b->mu);
        settle_locked(b);
        b->quit = true;
        pthread_cond_broadcast(&b->cv);
        pthread_mutex_unlock(&b->mu);
        pthread_join(b->thread, NULL);
        pthread_mutex_destroy(&b->mu);
        pthread_cond_destroy(&b->cv);
    }
    free(b->slot.tokens);
    free(b->work.tokens);
    if (b->ops->free) b->ops->free(b->impl);
    free(b);
}

void tr_llm_backend_set_rtt(tr_llm_backend *b, double rtt_ms) {
    if (b) b->rtt_ms = rtt_ms > 0 ? rtt_ms : 0;
}

void tr_llm_backend_set_allowed(tr_llm_backend *b, int32_t n_allowed) {
    if (b) b->n_allowed = n_allowed > 0 ? n_allowed : 0;
}

void tr_llm_backend_set_end_id(tr_llm_backend *b, int32_t end_id) {
    if (b) b->end_id = end_id >= 0 ? end_id : -1;
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
    const uint64_t z = splitmix64_mix(b->jitter_state += SPLITMIX64_GAMMA);
    return b->jitter_ms * (double)(z >> 11) / 9007199254740992.0;
}

int32_t tr_llm_backend_n_vocab(tr_llm_backend *b) {
    tr_clear_error();
    if (!b || !b->ops->n_vocab) return 0;
    int32_t n = b->ops->n_vocab(b->impl);
    return n > 0 ? n : 0;
}

int32_t tr_llm_backend_n_ctx(tr_llm_backend *b) {
    tr_clear_error();
    if (!b || !b->ops->n_ctx) return 0;
    const int32_t n = b->ops->n_ctx(b->impl);
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

/* ---------------------------------------------------------------- one call */

static void sleep_until(double t_ms) { sleep_ms(t_ms - now_ms()); }

/* What a running call knows about itself (tr_llm_call.internal). */
typedef struct call_ctx {
    tr_llm_backend *b;
    tr_llm_reply *reply;
    int32_t lookahead;           /* tokens asked for */
    bool async;                  /* on the helper thread: publish as it goes */
    bool answered;               /* tr_llm_call_answered ran */
    bool published;              /* ... and the answer went out (async) */
    tr_status answer_status;     /* the answer's check */
    char answer_error[256];
    bool la_closed;              /* no more lookahead is taken */
    int64_t draft_verified;      /* draft tokens the walk evaluated */
    int32_t impl_lookahead[TR_LOOKAHEAD_MAX]; /* a non-streaming implementation's lookahead_ids */
} call_ctx;

/* Makes reply the in-flight request's outcome, visible half a round trip from now (mutex held). */
static void publish_locked(tr_llm_backend *b, const tr_llm_reply *reply, const char *error, double delay_ms) {
    b->reply = *reply;
    b->reply.n_lookahead = 0; /* the lookahead streams in la_ids */
    snprintf(b->error, sizeof b->error, "%s", error);
    b->published = true;
    b->visible_at_ms = now_ms() + delay_ms;
    b->generation++;
    b->la_n = 0;
    b->la_complete = false;
    pthread_cond_broadcast(&b->cv);
}

/* One rule for every log-probability a backend hands back, a next-token answer's as a scoring reply's: a finite
 * number <= 0 (LOGPROB_SLACK of rounding allowed), or -inf (a probability that underflowed) where may_be_neg_inf. */
#define LOGPROB_SLACK 1e-4f
static bool logprob_valid(float lp, bool may_be_neg_inf) {
    return (isfinite(lp) || (lp == -INFINITY && may_be_neg_inf)) && lp <= LOGPROB_SLACK;
}

/* Checks the answer and the draft walk and fills the reply's id, logprob and verify. Verify ids only count along
 * the walk they claim: an id that selects no branch ends it (the ids after it would answer positions the reply
 * never evaluated); an id outside the shared range ends it too, and so does the lookahead after a cut walk. */
static tr_status check_answer(call_ctx *x, const tr_llm_call *call) {
    tr_llm_backend *b = x->b;
    tr_llm_reply *reply = x->reply;
    if (call->id < 0 || (b->n_allowed > 0 && call->id >= b->n_allowed))
        return tr_fail(TR_ERR_RANGE, "returned token %d, outside the shared vocabulary (0..%d)", call->id,
                       (b->n_allowed > 0 ? b->n_allowed : 1) - 1);
    if (!isnan(call->logprob) && !logprob_valid(call->logprob, true)) /* NAN: not reported */
        return tr_fail(TR_ERR_FORMAT, "returned log-probability %g for token %d: not a number <= 0",
                       (double)call->logprob, call->id);
    int32_t n_verify = 0;
    if (call->draft && call->n_verify > 0) {
        int32_t answers[TR_DRAFT_BRANCHES_MAX + 1], path[TR_DRAFT_BRANCHES_MAX + 1];
        const int32_t claimed = call->n_verify > TR_DRAFT_BRANCHES_MAX ? TR_DRAFT_BRANCHES_MAX : call->n_verify;
        answers[0] = call->id;
        memcpy(answers + 1, reply->verify, (size_t)claimed * sizeof *answers);
        n_verify = draft_walk(call->draft, answers, claimed, path);
        for (int32_t i = 0; i < n_verify; i++) {
            if (reply->verify[i] < 0 || (b->n_allowed > 0 && reply->verify[i] >= b->n_allowed)) n_verify = i;
            else x->draft_verified += call->draft->start[path[i] + 1] - call->draft->start[path[i]];
        }
        if (n_verify < claimed) x->la_closed = true; /* it followed an answer we do not take */
    }
    reply->n_verify = n_verify;
    reply->id = call->id;
    reply->logprob = call->logprob;
    return TR_OK;
}

void tr_llm_call_answered(tr_llm_call *call) {
    call_ctx *x = call ? call->internal : NULL;
    if (!x || x->answered) return;
    x->answered = true;
    x->answer_status = check_answer(x, call);
    if (x->answer_status != TR_OK) {
        snprintf(x->answer_error, sizeof x->answer_error, "%s", tr_last_error());
        x->la_closed = true;
        return;
    }
    if (!x->async) return;
    x->reply->status = TR_OK;
    pthread_mutex_lock(&x->b->mu);
    publish_locked(x->b, x->reply, "", x->b->rtt_ms / 2);
    pthread_mutex_unlock(&x->b->mu);
    x->published = true;
}

bool tr_llm_call_push_lookahead(tr_llm_call *call, int32_t id) {
    call_ctx *x = call ? call->internal : NULL;
    if (!x) return false;
    if (!x->answered) tr_llm_call_answered(call);
    tr_llm_reply *reply = x->reply;
    if (x->la_closed || reply->n_lookahead >= x->lookahead) return false;
    if (id < 0 || (x->b->n_allowed > 0 && id >= x->b->n_allowed)) { /* only a hint: it ends there */
        x->la_closed = true;
        return false;
    }
    if (x->async) {
        tr_llm_backend *b = x->b;
        pthread_mutex_lock(&b->mu);
        const bool wanted = !b->cancel && !b->quit;
        if (wanted) { /* in order, each after its return trip (and the test jitter, so tests vary arrivals) */
            double at = now_ms() + b->rtt_ms / 2 + next_jitter_ms(b);
            if (b->la_n > 0 && at < b->la_visible_ms[b->la_n - 1]) at = b->la_visible_ms[b->la_n - 1];
            b->la_ids[b->la_n] = id;
            b->la_visible_ms[b->la_n++] = at;
            pthread_cond_broadcast(&b->cv); /* tr_llm_lookahead_wait */
        }
        pthread_mutex_unlock(&b->mu);
        if (!wanted) return !(x->la_closed = true);
    }
    reply->lookahead[reply->n_lookahead++] = id;
    if (reply->n_lookahead >= x->lookahead) x->la_closed = true;
    return !x->la_closed;
}

bool tr_llm_call_wanted(const tr_llm_call *call) {
    const call_ctx *x = call ? call->internal : NULL;
    if (!x) return false;
    if (x->la_closed || x->reply->n_lookahead >= x->lookahead) return false;
    if (!x->async) return true;
    tr_llm_backend *b = x->b;
    pthread_mutex_lock(&b->mu);
    const bool wanted = !b->cancel && !b->quit;
    pthread_mutex_unlock(&b->mu);
    return wanted;
}

/* The running call's remaining lookahead is not wanted: its next push returns false, and an implementation waiting
 * on the network is woken to notice (ops->interrupt). */
static void cancel_running_locked(tr_llm_backend *b) {
    if (!b->running || b->cancel) return;
    b->cancel = true;
    if (b->ops->interrupt) b->ops->interrupt(b->impl);
}

static void stats_lock(const tr_llm_backend *b) {
    if (b->thread_started) pthread_mutex_lock((pthread_mutex_t *)&b->mu);
}
static void stats_unlock(const tr_llm_backend *b) {
    if (b->thread_started) pthread_mutex_unlock((pthread_mutex_t *)&b->mu);
}

/* One call: the simulated outbound trip, the implementation, the checks and the accounting. Async (on the helper),
 * it publishes the outcome (if the answer did not already go out) and ends the lookahead stream; sync, it sleeps
 * the return trip. */
static tr_status do_call(tr_llm_backend *b, const request *rq, bool async, tr_llm_reply *reply) {
    memset(reply, 0, sizeof *reply);
    reply->id = -1;
    reply->logprob = NAN;
    call_ctx x = {.b = b, .reply = reply, .async = async};
    x.lookahead = rq->lookahead < 0 ? 0 : rq->lookahead > TR_LOOKAHEAD_MAX ? TR_LOOKAHEAD_MAX : rq->lookahead;
    const double t0 = now_ms();
    double return_trip_ms = b->rtt_ms / 2;
    tr_status st;
    tr_llm_call call = {.tokens = rq->tokens, .n_tokens = rq->n, .n_allowed = b->n_allowed, .end_id = b->end_id,
                        .abort_fn = b->abort_fn,
                        .abort_user = b->abort_user, .id = -1, .logprob = NAN, .lookahead = x.lookahead,
                        .lookahead_ids = x.impl_lookahead, .draft = rq->has_draft ? &rq->draft : NULL,
                        .verify_ids = reply->verify, .internal = &x};
    if (b->open_until_ms > t0) {
        st = tr_fail(TR_ERR_NETWORK, "LLM backend %s: unavailable (circuit open, next probe in %.0f ms)", b->ops->name,
                     b->open_until_ms - t0);
        return_trip_ms = 0;
        stats_lock(b);
        b->stats.short_circuited++;
        stats_unlock(b);
    } else {
        /* The request's trip: half the round trip after it left (the helper may have been busy meanwhile). */
        sleep_until(rq->t_sent_ms + b->rtt_ms / 2 + next_jitter_ms(b));
        st = b->ops->next_token(b->impl, &call);
        const double t1 = now_ms();
        if (st == TR_OK && !x.answered) { /* a backend that does not stream: everything arrives now */
            const int32_t n_la = call.n_lookahead < 0 ? 0 : call.n_lookahead;
            tr_llm_call_answered(&call);
            for (int32_t i = 0; i < n_la && tr_llm_call_push_lookahead(&call, x.impl_lookahead[i]); i++) {
            }
        }
        if (x.answered && x.answer_status != TR_OK) {
            st = tr_fail(x.answer_status, "%s", x.answer_error);
        } else if (x.answered && st != TR_OK) {
            tr_clear_error(); /* failed during the lookahead: the answer stands, the lookahead ends there */
            st = TR_OK;
        }
        reply->lookahead_ms = call.lookahead_ms > 0 ? call.lookahead_ms : 0;
        breaker_record(b, st, t1);
        stats_lock(b);
        b->stats.calls++;
        b->stats.time_ms += t1 - t0;
        if (call.n_evaluated > 0) b->stats.tokens_evaluated += call.n_evaluated;
        if (call.bytes_sent > 0) b->stats.bytes_sent += call.bytes_sent;
        if (call.bytes_received > 0) b->stats.bytes_received += call.bytes_received;
        if (call.draft) b->stats.draft_tokens_sent += rq->draft.start[rq->draft.n_branches];
        if (st == TR_OK) {
            b->stats.draft_tokens_verified += x.draft_verified;
            b->stats.lookahead_tokens += reply->n_lookahead;
        } else {
            b->stats.failures++;
        }
        stats_unlock(b);
    }
    if (st != TR_OK) st = tr_fail_prefix(st, "LLM backend %s", b->ops->name);
    reply->status = st;
    if (async) {
        pthread_mutex_lock(&b->mu);
        if (!x.published) publish_locked(b, reply, st == TR_OK ? "" : tr_last_error(), return_trip_ms);
        b->la_complete = true;
        pthread_cond_broadcast(&b->cv);
        pthread_mutex_unlock(&b->mu);
    } else {
        sleep_ms(return_trip_ms);
    }
    return st;
}

/* Stops the helper's running call after its current lookahead token and waits until it is idle. */
static void settle_locked(tr_llm_backend *b) {
    cancel_running_locked(b);
    while (b->running || b->queued) pthread_cond_wait(&b->cv, &b->mu);
}

void backend_settle(tr_llm_backend *b) {
    if (!b || !b->thread_started) return;
    pthread_mutex_lock(&b->mu);
    settle_locked(b);
    pthread_mutex_unlock(&b->mu);
}

tr_status tr_llm_next_token_ex(tr_llm_backend *b, const int32_t *tokens, int32_t n, int32_t *next, float *logprob) {
    if (!b || !tokens || n <= 0 || !next) return tr_fail(TR_ERR_ARG, "tr_llm_next_token: empty sequence");
    if (b->in_flight) return tr_fail(TR_ERR_STATE, "tr_llm_next_token: an asynchronous request is in flight");
    backend_settle(b);
    const request rq = {.tokens = (int32_t *)tokens, .n = n, .t_sent_ms = now_ms()};
    tr_llm_reply reply;
    tr_status st = do_call(b, &rq, false, &reply);
    if (st != TR_OK) return st;
    *next = reply.id;
    if (logprob) *logprob = reply.logprob;
    return TR_OK;
}

/* ---------------------------------------------------------------- scoring a sequence */

/* What an implementation returned, checked before anyone reads it: every position filled with n_top ids (top_k, or
 * the whole vocabulary when smaller), distinct, inside the vocabulary, log-probabilities finite, <= 0 (a rounding
 * slack of 1e-4) and not increasing; the actual token's log-probability finite (or -inf) and <= 0. Then ids outside
 * the allowed range (a padded LLM vocabulary) are dropped from the lists, which may leave fewer than top_k. */
static tr_status check_scores(const tr_llm_backend *b, const tr_llm_score_call *c, int32_t n_vocab) {
    /* A server that does not report its size is held to the allowed range: an id beyond it cannot be told from
     * garbage (SGLang's backend asks for spare alternatives and drops padding ids itself). */
    const int32_t limit = n_vocab > 0 ? n_vocab : b->n_allowed > 0 ? b->n_allowed : INT32_MAX;
    const int32_t vocab = n_vocab > 0 ? n_vocab : b->n_allowed; /* at least this many ids exist (0: unknown) */
    const int32_t want = vocab > 0 && vocab < c->top_k ? vocab : c->top_k;
    for (int32_t p = c->first; p < c->end; p++) {
        tr_llm_position *o = &c->out[p - c->first];
        if (o->n_top < want || o->n_top > c->top_k)
            return tr_fail(TR_ERR_FORMAT, "position %d: %d top log-probabilities, expected %d (a reply missing "
                           "positions or alternatives)", p, o->n_top, want);
        for (int32_t i = 0; i < o->n_top; i++) {
            const int32_t id = o->top_ids[i];
            const float lp = o->top_logprobs[i];
            if (id < 0 || id >= limit)
                return tr_fail(TR_ERR_RANGE, "position %d: token id %d is outside the vocabulary (0..%d)", p, id,
                               limit - 1);
            if (!logprob_valid(lp, i > 0))
                return tr_fail(TR_ERR_FORMAT, "position %d: log-probability %g of token %d is not a number <= 0", p,
                               (double)lp, id);
            if (i > 0 && lp > o->top_logprobs[i - 1] + LOGPROB_SLACK)
                return tr_fail(TR_ERR_FORMAT, "position %d: top log-probabilities are not in descending order", p);
            for (int32_t j = 0; j < i; j++)
                if (o->top_ids[j] == id) return tr_fail(TR_ERR_FORMAT, "position %d: token %d listed twice", p, id);
        }
        if (p < c->n_tokens && isnan(o->logprob))
            return tr_fail(TR_ERR_FORMAT, "position %d: no log-probability for token %d", p, c->tokens[p]);
        if (p < c->n_tokens && !logprob_valid(o->logprob, true))
            return tr_fail(TR_ERR_FORMAT, "position %d: log-probability %g of token %d is not a number <= 0", p,
                           (double)o->logprob, c->tokens[p]);
        if (b->n_allowed > 0) {
            int32_t kept = 0;
            for (int32_t i = 0; i < o->n_top; i++) {
                if (o->top_ids[i] >= b->n_allowed) continue;
                o->top_ids[kept] = o->top_ids[i];
                o->top_logprobs[kept++] = o->top_logprobs[i];
            }
            if (kept == 0) return tr_fail(TR_ERR_RANGE, "position %d: no allowed id among the top %d", p, o->n_top);
            o->n_top = kept;
        }
    }
    return TR_OK;
}

tr_status tr_llm_score(tr_llm_backend *b, const int32_t *tokens, int32_t n_tokens, int32_t first, int32_t end,
                       int32_t top_k, tr_llm_position *out) {
    if (!b || !tokens || n_tokens <= 0 || !out) return tr_fail(TR_ERR_ARG, "tr_llm_score: empty sequence");
    if (first < 1 || end <= first || end > n_tokens + 1)
        return tr_fail(TR_ERR_ARG, "tr_llm_score: positions %d..%d outside 1..%d", first, end - 1, n_tokens);
    if (top_k < 1 || top_k > TR_SCORE_TOPK_MAX)
        return tr_fail(TR_ERR_ARG, "tr_llm_score: top_k %d outside 1..%d", top_k, TR_SCORE_TOPK_MAX);
    for (int32_t i = 0; i < n_tokens; i++)
        if (tokens[i] < 0) return tr_fail(TR_ERR_ARG, "tr_llm_score: negative token id %d", tokens[i]);
    if (!b->ops->score)
        return tr_fail(TR_ERR_UNSUPPORTED, "LLM backend %s cannot score a sequence", b->ops->name);
    if (b->in_flight) return tr_fail(TR_ERR_STATE, "tr_llm_score: an asynchronous request is in flight");
    backend_settle(b);
    for (int32_t p = first; p < end; p++) {
        out[p - first].logprob = NAN;
        out[p - first].n_top = 0;
    }
    const double t0 = now_ms();
    tr_status st;
    tr_llm_score_call call = {.tokens = tokens, .n_tokens = n_tokens, .first = first, .end = end, .top_k = top_k,
                              .n_allowed = b->n_allowed, .abort_fn = b->abort_fn, .abort_user = b->abort_user,
                              .out = out};
    if (b->open_until_ms > t0) {
        st = tr_fail(TR_ERR_NETWORK, "unavailable (circuit open, next probe in %.0f ms)", b->open_until_ms - t0);
        b->stats.short_circuited++;
    } else {
        sleep_ms(b->rtt_ms / 2);
        st = b->ops->score(b->impl, &call);
        if (st == TR_OK) st = check_scores(b, &call, b->ops->n_vocab ? b->ops->n_vocab(b->impl) : 0);
        const double t1 = now_ms();
        breaker_record(b, st, t1);
        sleep_ms(b->rtt_ms / 2);
        b->score_stats.calls++;
        b->score_stats.requests += call.n_requests > 0 ? call.n_requests : 0; /* 0 in process */
        b->score_stats.time_ms += now_ms() - t0;
        b->score_stats.tokens_evaluated += call.n_evaluated;
        b->score_stats.bytes_sent += call.bytes_sent;
        b->score_stats.bytes_received += call.bytes_received;
        if (st == TR_OK) b->score_stats.positions += end - first;
        else b->stats.failures++;
    }
    return st == TR_OK ? TR_OK : tr_fail_prefix(st, "LLM backend %s", b->ops->name);
}

tr_llm_score_stats tr_llm_backend_score_stats(const tr_llm_backend *b) {
    tr_llm_score_stats s;
    memset(&s, 0, sizeof s);
    if (b) s = b->score_stats;
    return s;
}

tr_status tr_llm_backend_set_sampling(tr_llm_backend *b, const tr_sampler_params *sampling) {
    if (!b || !sampling) return tr_fail(TR_ERR_ARG, "tr_llm_backend_set_sampling: NULL argument");
    if (b->in_flight) return tr_fail(TR_ERR_STATE, "tr_llm_backend_set_sampling: a request is in flight");
    backend_settle(b);
    if (!b->ops->set_sampling) {
        if (sampling->temperature <= 0) return TR_OK;
        return tr_fail(TR_ERR_UNSUPPORTED, "LLM backend %s cannot sample (greedy only)", b->ops->name);
    }
    return b->ops->set_sampling(b->impl, sampling);
}

/* ---------------------------------------------------------------- asynchronous calls */

static void *helper_main(void *arg) {
    tr_llm_backend *b = arg;
    pthread_mutex_lock(&b->mu);
    for (;;) {
        while (!b->quit && !b->queued) pthread_cond_wait(&b->cv, &b->mu);
        if (b->quit) break;
        const request taken = b->slot; /* the slot's buffer becomes the running request's, and back */
        b->slot = b->work;
        b->work = taken;
        b->queued = false;
        b->running = true;
        b->cancel = false;
        pthread_mutex_unlock(&b->mu);
        tr_llm_reply reply;
        do_call(b, &b->work, true, &reply);
        pthread_mutex_lock(&b->mu);
        b->running = false;
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
    pthread_mutex_lock(&b->mu); /* the slot is free (nothing in flight), but its buffer may be swapped meanwhile */
    request *q = &b->slot;
    if (n > q->cap) {
        int32_t cap = q->cap ? q->cap : 256;
        while (cap < n) cap = cap > INT32_MAX / 2 ? n : cap * 2;
        int32_t *t = realloc(q->tokens, (size_t)cap * sizeof *t);
        if (!t) {
            pthread_mutex_unlock(&b->mu);
            return tr_fail(TR_ERR_NOMEM, "out of memory");
        }
        q->tokens = t;
        q->cap = cap;
    }
    memcpy(q->tokens, tokens, (size_t)n * sizeof *tokens);
    q->n = n;
    q->lookahead = lookahead;
    q->has_draft = draft && draft->n_branches > 0;
    if (q->has_draft) q->draft = *draft;
    q->t_sent_ms = now_ms();
    b->queued = true;
    b->in_flight = true;
    b->published = false;
    cancel_running_locked(b); /* the previous call's lookahead is not wanted any more */
    pthread_cond_broadcast(&b->cv);
    pthread_mutex_unlock(&b->mu);
    return TR_OK;
}

bool tr_llm_ready(tr_llm_backend *b) {
    if (!b || !b->in_flight) return true;
    pthread_mutex_lock(&b->mu);
    const bool ready = b->published && now_ms() >= b->visible_at_ms;
    pthread_mutex_unlock(&b->mu);
    return ready;
}

/* Copies the visible part of the lookahead stream (mutex held); true when nothing more can come. */
static bool visible_lookahead_locked(const tr_llm_backend *b, int32_t *ids, int32_t *n) {
    const double now = now_ms();
    *n = 0;
    while (*n < b->la_n && b->la_visible_ms[*n] <= now) {
        ids[*n] = b->la_ids[*n];
        (*n)++;
    }
    return b->la_complete && *n == b->la_n;
}

tr_status tr_llm_finish(tr_llm_backend *b, tr_llm_reply *reply) {
    if (!b || !reply) return tr_fail(TR_ERR_ARG, "tr_llm_finish: NULL argument");
    if (!b->in_flight) return reply->status = tr_fail(TR_ERR_STATE, "tr_llm_finish: no request in flight");
    pthread_mutex_lock(&b->mu);
    while (!b->published) pthread_cond_wait(&b->cv, &b->mu);
    const double visible_at = b->visible_at_ms;
    pthread_mutex_unlock(&b->mu);
    sleep_until(visible_at); /* the simulated return trip */
    pthread_mutex_lock(&b->mu);
    *reply = b->reply;
    visible_lookahead_locked(b, reply->lookahead, &reply->n_lookahead);
    b->in_flight = false;
    b->published = false;
    b->finished_generation = b->generation;
    char error[sizeof b->error];
    memcpy(error, b->error, sizeof error);
    pthread_mutex_unlock(&b->mu);
    if (reply->status != TR_OK) return tr_fail(reply->status, "%s", error);
    return TR_OK;
}

int32_t tr_llm_lookahead(tr_llm_backend *b, int32_t *ids, bool *complete) {
    int32_t n = 0;
    bool done = true;
    if (b && ids && b->thread_started) {
        pthread_mutex_lock(&b->mu);
        /* Only the finished request's stream: a newer one's answer may already be out. */
        if (b->generation == b->finished_generation) done = visible_lookahead_locked(b, ids, &n);
        pthread_mutex_unlock(&b->mu);
    }
    if (complete) *complete = done;
    return n;
}

int32_t tr_llm_lookahead_wait(tr_llm_backend *b, int32_t n_have, int32_t *ids, bool *complete) {
    if (b && ids && b->thread_started) {
        pthread_mutex_lock(&b->mu);
        /* Until the next token is out (or the stream ends, or a newer request's reply replaced it)... */
        while (b->generation == b->finished_generation && b->la_n <= n_have && !b->la_complete)
            pthread_cond_wait(&b->cv, &b->mu);
        const double visible_at =
            b->generation == b->finished_generation && b->la_n > n_have && n_have >= 0 ? b->la_visible_ms[n_have] : 0;
        pthread_mutex_unlock(&b->mu);
        sleep_until(visible_at); /* ... and has made its simulated return trip */
    }
    return tr_llm_lookahead(b, ids, complete);
}

tr_status tr_llm_next_token(tr_llm_backend *b, const int32_t *tokens, int32_t n, int32_t *next) {
    return tr_llm_next_token_ex(b, tokens, n, next, NULL);
}

tr_llm_stats tr_llm_backend_stats(const tr_llm_backend *b) {
    tr_llm_stats st = {0};
    if (!b) return st;
    stats_lock(b);
    st = b->stats;
    stats_unlock(b);
    return st;
}

const char *tr_llm_backend_name(const tr_llm_backend *b) { return b ? b->ops->name : ""; }
