/* backend.c — the common part of every LLM backend: argument checks, wall-clock timing, the simulated round trip
 * (--simulate-rtt), call/token statistics, the allowed-id range (padded vocabularies) and the circuit breaker.
 *
 * The breaker is here, not in each remote backend, so that a dead server costs one timeout and then nothing: after
 * a network or timeout failure, calls fail at once until the cooldown has passed; then one call probes again. Each
 * failed probe doubles the cooldown (capped); a success closes the breaker. */
#include "transport/backend.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
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

tr_status tr_llm_next_token_ex(tr_llm_backend *b, const int32_t *tokens, int32_t n, int32_t *next, float *logprob) {
    if (!b || !tokens || n <= 0 || !next) return tr_fail(TR_ERR_ARG, "tr_llm_next_token: empty sequence");
    const double t0 = now_ms();
    if (b->open_until_ms > t0) {
        b->stats.short_circuited++;
        return tr_fail(TR_ERR_NETWORK, "LLM backend %s: unavailable (circuit open, next probe in %.0f ms)",
                       b->ops->name, b->open_until_ms - t0);
    }
    sleep_ms(b->rtt_ms);
    tr_llm_call call = {.tokens = tokens, .n_tokens = n, .n_allowed = b->n_allowed, .abort_fn = b->abort_fn,
                        .abort_user = b->abort_user, .id = -1, .logprob = NAN};
    tr_status st = b->ops->next_token(b->impl, &call);
    const double t1 = now_ms();
    b->stats.calls++;
    b->stats.time_ms += t1 - t0;
    if (call.n_evaluated > 0) b->stats.tokens_evaluated += call.n_evaluated;
    if (st == TR_OK && (call.id < 0 || (b->n_allowed > 0 && call.id >= b->n_allowed)))
        st = tr_fail(TR_ERR_RANGE, "returned token %d, outside the shared vocabulary (0..%d)", call.id,
                     (b->n_allowed > 0 ? b->n_allowed : 1) - 1);
    breaker_record(b, st, t1);
    if (st != TR_OK) {
        b->stats.failures++;
        return tr_fail_prefix(st, "LLM backend %s", b->ops->name);
    }
    *next = call.id;
    if (logprob) *logprob = call.logprob;
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
