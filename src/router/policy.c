/* policy.c — the training-free routing policies and the logit statistics the MLP router may take as features.
 *
 * Everything is read off the softmax at temperature 1, computed stably: with m the largest logit and
 * e_i = exp(l_i - m), s = sum e_i and t = sum (l_i - m) e_i (both summed in double),
 *   top-1 probability  p1 = 1 / s                       (the top logit contributes exp(0) = 1)
 *   margin             p1 - p2 = (1 - exp(l2 - m)) / s   (l2 the second largest logit; ties give 0)
 *   entropy            H = ln s - t / s                  (from -sum p ln p with ln p_i = (l_i - m) - ln s)
 * and the entropy is normalized by ln(n_vocab) so every score lies in [0, 1]: maxprob = p1, margin = p1 - p2,
 * entropy = 1 - H / ln V. Results are clamped to [0, 1] against rounding. -inf logits (masked tokens) have
 * probability 0; a NaN or +inf logit leaves no distribution, and every score is then 0 so the token is routed.
 */
#include <math.h>
#include <string.h>
#include <strings.h>

#include "common/error.h"
#include "router/router_internal.h"

static const char *const policy_names[] = {
    [TR_POLICY_MLP] = "mlp",
    [TR_POLICY_MAXPROB] = "maxprob",
    [TR_POLICY_MARGIN] = "margin",
    [TR_POLICY_ENTROPY] = "entropy",
};
#define N_POLICIES (int)(sizeof policy_names / sizeof policy_names[0])

const char *tr_policy_name(tr_policy p) {
    return (int)p >= 0 && (int)p < N_POLICIES ? policy_names[p] : "unknown";
}

tr_status tr_policy_from_name(const char *name, tr_policy *out) {
    if (!name || !out) return tr_fail(TR_ERR_ARG, "tr_policy_from_name: NULL argument");
    for (int i = 0; i < N_POLICIES; i++) {
        if (strcasecmp(name, policy_names[i]) == 0) {
            *out = (tr_policy)i;
            return TR_OK;
        }
    }
    return tr_fail(TR_ERR_ARG, "unknown routing policy '%s' (known: mlp, maxprob, margin, entropy)", name);
}

static float clamp01(double v) {
    if (!(v > 0)) return 0.0f; /* also NaN */
    return v < 1 ? (float)v : 1.0f;
}

void logit_stats_compute(const float *logits, int32_t n_vocab, logit_stats *out) {
    memset(out, 0, sizeof *out);
    /* Pass 1: the two largest logits, and whether the row is a distribution at all. */
    float m = -INFINITY, l2 = -INFINITY;
    for (int32_t i = 0; i < n_vocab; i++) {
        const float l = logits[i];
        if (isnan(l) || l == INFINITY) return;
        if (l > m) {
            l2 = m;
            m = l;
        } else if (l > l2) {
            l2 = l;
        }
    }
    if (m == -INFINITY) return;
    /* Pass 2: the sums. exp in float (the differences are <= 0, so it cannot overflow), sums in double. */
    double s = 0, t = 0;
    for (int32_t i = 0; i < n_vocab; i++) {
        const float d = logits[i] - m;
        const float e = expf(d);
        s += e;
        if (e > 0) t += (double)d * e; /* skips -inf logits, where d * e would be NaN */
    }
    const double p1 = 1.0 / s;
    out->maxprob = clamp01(p1);
    out->margin = clamp01((1.0 - (double)expf(l2 - m)) * p1);
    if (n_vocab > 1) {
        const double h = log(s) - t / s;
        out->entropy_norm = clamp01(h / log((double)n_vocab));
    }
    out->valid = true;
}

float policy_score(tr_policy policy, const logit_stats *st) {
    if (!st->valid) return 0.0f;
    switch (policy) {
    case TR_POLICY_MAXPROB: return st->maxprob;
    case TR_POLICY_MARGIN: return st->margin;
    case TR_POLICY_ENTROPY: return clamp01(1.0 - (double)st->entropy_norm);
    case TR_POLICY_MLP: break;
    }
    return 0.0f;
}

int32_t feature_count(unsigned features) {
    return ((features & TR_FEATURE_MAXPROB) ? 1 : 0) + ((features & TR_FEATURE_ENTROPY) ? 1 : 0);
}

const char *feature_name(unsigned feature_bit) {
    switch (feature_bit) {
    case TR_FEATURE_MAXPROB: return "maxprob";
    case TR_FEATURE_ENTROPY: return "entropy";
    }
    return NULL;
}

unsigned feature_from_name(const char *name) {
    if (name && strcmp(name, "maxprob") == 0) return TR_FEATURE_MAXPROB;
    if (name && strcmp(name, "entropy") == 0) return TR_FEATURE_ENTROPY;
    return 0;
}
