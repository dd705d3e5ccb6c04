/* backend.c — the common part of every LLM backend: argument checks, wall-clock timing, the simulated round trip
 * (--simulate-rtt) and call/token statistics. */
#include "transport/backend.h"

#include <errno.h>
#include <stdlib.h>
#include <time.h>

#include "common/error.h"

struct tr_llm_backend {
    const backend_ops *ops;
    void *impl;
    double rtt_ms;
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

tr_status backend_create(const backend_ops *ops, void *impl, tr_llm_backend **out) {
    tr_llm_backend *b = calloc(1, sizeof *b);
    if (!b) {
        ops->free(impl);
        return tr_fail(TR_ERR_NOMEM, "out of memory");
    }
    b->ops = ops;
    b->impl = impl;
    *out = b;
    return TR_OK;
}

void tr_llm_backend_free(tr_llm_backend *b) {
    if (!b) return;
    b->ops->free(b->impl);
    free(b);
}

void tr_llm_backend_set_rtt(tr_llm_backend *b, double rtt_ms) {
    if (b) b->rtt_ms = rtt_ms > 0 ? rtt_ms : 0;
}

tr_status tr_llm_next_token(tr_llm_backend *b, const int32_t *tokens, int32_t n, int32_t *next) {
    if (!b || !tokens || n <= 0 || !next) return tr_fail(TR_ERR_ARG, "tr_llm_next_token: empty sequence");
    const double t0 = now_ms();
    sleep_ms(b->rtt_ms);
    tr_status st = b->ops->next_token(b->impl, tokens, n, next, &b->stats.tokens_evaluated);
    b->stats.calls++;
    b->stats.time_ms += now_ms() - t0;
    if (st != TR_OK) return tr_fail_prefix(st, "LLM backend %s", b->ops->name);
    return TR_OK;
}

tr_llm_stats tr_llm_backend_stats(const tr_llm_backend *b) {
    tr_llm_stats none = {0};
    return b ? b->stats : none;
}

const char *tr_llm_backend_name(const tr_llm_backend *b) { return b ? b->ops->name : ""; }
