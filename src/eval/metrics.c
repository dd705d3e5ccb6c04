/* metrics.c — token-level routing metrics over per-position arrays: a policy's scores sorted once with a prefix
 * sum of what routing each position gains (LLM right minus SLM right), from which the τ for a target share, the
 * accuracy at any τ and the oracle follow in O(log n).
 *
 * Routing is "score < τ", so the achievable routed counts are the boundaries between groups of equal scores: τ =
 * the first score of a group routes everything before it. A target share between two boundaries gets the closer
 * one (the smaller on a draw), never a split group, so the reported share is the one τ really gives.
 *
 * The bound (scripts/router_bound.py) is a curve like a policy's over the negated expected gain p(l) - p(s) under
 * the LLM's distribution, read at each policy's own routed count, so both route the same share. */
#include <math.h>
#include <stdlib.h>

#include "common/error.h"
#include "eval/eval_internal.h"
#include "model/sample_math.h"

typedef struct scored {
    float score;
    int64_t index;
} scored;

static int by_score(const void *a, const void *b) {
    const scored *x = a, *y = b;
    if (x->score != y->score) return x->score < y->score ? -1 : 1;
    return x->index < y->index ? -1 : x->index > y->index;
}

tr_status eval_curve_build(const float *scores, const uint8_t *slm_ok, const uint8_t *llm_ok, int64_t n,
                           eval_curve *out) {
    if (!out || n < 0 || (n > 0 && (!scores || !slm_ok || !llm_ok)))
        return tr_fail(TR_ERR_ARG, "eval_curve_build: invalid argument");
    *out = (eval_curve){0};
    scored *s = malloc((size_t)(n ? n : 1) * sizeof *s);
    out->sorted = malloc((size_t)(n ? n : 1) * sizeof *out->sorted);
    out->gain_prefix = malloc((size_t)(n + 1) * sizeof *out->gain_prefix);
    if (!s || !out->sorted || !out->gain_prefix) {
        free(s);
        eval_curve_free(out);
        return tr_fail(TR_ERR_NOMEM, "eval: out of memory");
    }
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(scores[i])) { /* a τ above every score must exist */
            free(s);
            eval_curve_free(out);
            return tr_fail(TR_ERR_RANGE, "eval: score of position %lld is not finite", (long long)i);
        }
        s[i] = (scored){scores[i], i};
        out->slm_correct += slm_ok[i] != 0;
        out->llm_correct += llm_ok[i] != 0;
    }
    qsort(s, (size_t)n, sizeof *s, by_score);
    out->gain_prefix[0] = 0;
    for (int64_t k = 0; k < n; k++) {
        const int64_t i = s[k].index;
        out->sorted[k] = s[k].score;
        out->gain_prefix[k + 1] = out->gain_prefix[k] + (llm_ok[i] != 0) - (slm_ok[i] != 0);
    }
    out->n = n;
    free(s);
    return TR_OK;
}

void eval_curve_free(eval_curve *c) {
    if (!c) return;
    free(c->sorted);
    free(c->gain_prefix);
    *c = (eval_curve){0};
}

int64_t eval_curve_count_below(const eval_curve *c, float tau) {
    int64_t lo = 0, hi = c->n; /* first index with sorted >= tau */
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (c->sorted[mid] < tau) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

/* The τ that routes exactly the first k positions, k a group boundary. */
static float tau_routing(const eval_curve *c, int64_t k) {
    if (k < c->n) return c->sorted[k];
    return nextafterf(c->sorted[c->n - 1], INFINITY);
}

float eval_tau_for_share(const eval_curve *c, double share, int64_t *n_routed) {
    if (c->n == 0) {
        if (n_routed) *n_routed = 0;
        return 0.0f;
    }
    if (!(share > 0)) share = 0;
    if (share > 1) share = 1;
    const double want = share * (double)c->n;
    int64_t k = (int64_t)floor(want);
    if (k >= c->n) k = c->n - 1;
    /* The group containing position k spans [lo, hi): routing can stop at lo or at hi. */
    const float v = c->sorted[k];
    const int64_t lo = eval_curve_count_below(c, v);
    int64_t hi = k + 1;
    while (hi < c->n && c->sorted[hi] == v) hi++;
    const int64_t pick = (want - (double)lo) <= ((double)hi - want) ? lo : hi;
    if (n_routed) *n_routed = pick;
    return tau_routing(c, pick);
}

double eval_curve_accuracy_routing(const eval_curve *c, int64_t k) {
    if (c->n == 0) return NAN;
    k = k < 0 ? 0 : k > c->n ? c->n : k;
    return (double)(c->slm_correct + c->gain_prefix[k]) / (double)c->n;
}

double eval_curve_accuracy_at(const eval_curve *c, float tau) {
    return eval_curve_accuracy_routing(c, eval_curve_count_below(c, tau));
}

float eval_expected_gain(const tr_llm_position *lp, int32_t slm_top1) {
    if (lp->n_top < 1 || lp->top_ids[0] == slm_top1) return 0.0f;
    float p_slm = 0.0f;
    for (int32_t j = 1; j < lp->n_top; j++)
        if (lp->top_ids[j] == slm_top1) p_slm = expf(lp->top_logprobs[j]);
    const float g = expf(lp->top_logprobs[0]) - p_slm;
    return g > 0 ? g : 0.0f;
}

double eval_gap_closed(double acc, double slm, double llm) {
    if (!(llm != slm) || isnan(acc)) return NAN;
    return (acc - slm) / (llm - slm);
}

double eval_oracle_accuracy(int64_t n, int64_t slm_correct, int64_t n_gain, double share, int64_t *n_routed) {
    if (n <= 0) {
        if (n_routed) *n_routed = 0;
        return NAN;
    }
    if (!(share > 0)) share = 0;
    if (share > 1) share = 1;
    int64_t budget = (int64_t)floor(share * (double)n + 0.5);
    int64_t k = n_gain < budget ? n_gain : budget;
    if (n_routed) *n_routed = k;
    return (double)(slm_correct + k) / (double)n;
}

float eval_random_score(uint64_t seed, int64_t i) {
    /* splitmix64 of (seed, i): independent of evaluation order. */
    const uint64_t z = splitmix64_mix(seed + SPLITMIX64_GAMMA * (uint64_t)(i + 1));
    return (float)((z >> 40) * (1.0 / 16777216.0)); /* 24 bits: exact in a float, < 1 */
}
