/* policy.c — the training-free routing policies and the logit statistics the MLP router may take as features.
 *
 * Everything is read off the softmax at temperature 1, computed stably: with m the largest logit and
 * e_i = exp(l_i - m), s = sum e_i and t = sum (l_i - m) e_i (both carried in double),
 *   top-1 probability  p1 = 1 / s                       (the top logit contributes exp(0) = 1)
 *   margin             p1 - p2 = (1 - exp(l2 - m)) / s   (l2 the second largest logit; ties give 0)
 *   entropy            H = ln s - t / s                  (from -sum p ln p with ln p_i = (l_i - m) - ln s)
 * and the entropy is normalized by ln(n_vocab) so every score lies in [0, 1]: maxprob = p1, margin = p1 - p2,
 * entropy = 1 - H / ln V. Results are clamped to [0, 1] against rounding. Differences below -87 (and -inf logits,
 * i.e. masked tokens) count as e^-87 ~ 1.6e-38, which is nothing next to the top logit's 1; a NaN or +inf logit
 * leaves no distribution, and every score is then 0 so the token is routed.
 *
 * Speed matters at V = 151936: libm's expf costs several ns a call, so exp is a branch-free polynomial (about
 * 2 ulp), and both passes (the top two logits, then the sums) have AVX2 versions in policy_avx2.c, picked at run
 * time; the portable pass 1 is written in lanes the compiler vectorizes.
 */
#include <math.h>
#include <stdint.h>
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

/* exp(x) for x <= 0 (Cephes' expf: x = n ln2 + r, |r| <= ln2/2, a degree-6 polynomial for e^r, 2^n from the
 * exponent bits; about 2 ulp). x is clamped at -87 so 2^n stays a normal float: e^-87 ~ 1.6e-38 adds nothing next to
 * the top logit's 1. Branch-free and libm-free so the lane loops below vectorize at -O2. */
static float exp_nonpositive(float x) {
    x = x > -87.0f ? x : -87.0f;
    const float magic = 12582912.0f; /* 1.5 * 2^23: adding it rounds to an integer held in the low mantissa bits */
    const float t = x * 1.44269504088896341f + magic;
    const float n = t - magic;
    const float r = (x - n * 0.693359375f) - n * -2.12194440e-4f;
    const float r2 = r * r;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r2 + r + 1.0f;
    /* Unions (not memcpy) for the bit casts: GCC vectorizes these. (bits(t) - bits(magic)) is n. */
    union { float f; int32_t i; } tb = {.f = t}, pb = {.f = p};
    pb.i += (tb.i - 0x4B400000) * (1 << 23);
    return pb.f;
}

#define LANES 8 /* = the AVX2 width, so both paths leave the same per-lane candidates */

/* The AVX2 passes run when the kernels run AVX2 or AVX-512 (TOKROUTE_KERNELS=scalar forces the portable loops). */
static bool use_avx2(void) {
#if TR_HAVE_X86
    return strncmp(kernels_isa(), "avx", 3) == 0;
#else
    return false;
#endif
}

static void top2_push(float *m, float *l2, float l) {
    if (l > *m) {
        *l2 = *m;
        *m = l;
    } else if (l > *l2) {
        *l2 = l;
    }
}

void logit_stats_compute(const float *logits, int32_t n_vocab, logit_stats *out) {
    memset(out, 0, sizeof *out);
    /* Pass 1: the two largest logits and whether any is NaN or +inf, kept per lane (each lane sees every LANES-th
     * logit) and merged at the end. Second largest: m2 = max(m2, min(m1, l)) before m1 = max(m1, l). */
    float m1[LANES], m2[LANES];
    int bad[LANES];
    for (int j = 0; j < LANES; j++) {
        m1[j] = m2[j] = -INFINITY;
        bad[j] = 0;
    }
    const int32_t n_main = n_vocab / LANES * LANES;
    const bool simd = use_avx2();
#if TR_HAVE_X86
    if (simd) {
        int any = 0;
        logit_top2_avx2(logits, n_main, m1, m2, &any);
        bad[0] = any;
    }
#endif
    for (int32_t i = 0; i < (simd ? 0 : n_main); i += LANES) {
        for (int j = 0; j < LANES; j++) {
            const float l = logits[i + j];
            bad[j] |= !(l < INFINITY); /* NaN or +inf */
            const float lo = l < m1[j] ? l : m1[j];
            m2[j] = lo > m2[j] ? lo : m2[j];
            m1[j] = l > m1[j] ? l : m1[j];
        }
    }
    /* Merge: every lane's two candidates, then the tail that did not fill a lane row. */
    float m = -INFINITY, l2 = -INFINITY;
    int any_bad = 0;
    for (int j = 0; j < LANES; j++) {
        any_bad |= bad[j];
        top2_push(&m, &l2, m1[j]);
        top2_push(&m, &l2, m2[j]);
    }
    for (int32_t i = n_main; i < n_vocab; i++) {
        any_bad |= !(logits[i] < INFINITY);
        top2_push(&m, &l2, logits[i]);
    }
    if (any_bad || m == -INFINITY) return;

    /* Pass 2: s = sum e_i and t = sum (l_i - m) e_i in double (AVX2: the multiple-of-8 part). */
    double s = 0, t = 0;
    int32_t done = 0;
#if TR_HAVE_X86
    if (simd) {
        done = n_main;
        logit_sums_avx2(logits, done, m, &s, &t);
    }
#endif
    for (int32_t i = done; i < n_vocab; i++) {
        float d = logits[i] - m;
        d = d > -87.0f ? d : -87.0f; /* also keeps -inf logits (masked tokens) out of t */
        const float e = exp_nonpositive(d);
        s += e;
        t += (double)(d * e);
    }
    const double p1 = 1.0 / s;
    out->maxprob = clamp01(p1);
    out->margin = clamp01((1.0 - (double)exp_nonpositive(l2 - m)) * p1);
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
