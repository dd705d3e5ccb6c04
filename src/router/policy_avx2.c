/* policy_avx2.c — the two passes of the softmax statistics (policy.c) with AVX2 + FMA, 8 logits at a time: the
 * two largest logits per lane (and whether any is NaN or +inf), then s = sum exp(l_i - m) and
 * t = sum (l_i - m) exp(l_i - m). The exponential is the same Cephes polynomial as policy.c's scalar
 * exp_nonpositive (differences clamped at -87, which also keeps -inf logits finite), and the long sums are carried
 * in double (per block of 128 logits in float), so the result matches the scalar path to rounding. Built with
 * -mavx2 -mfma (by file name); called only when the kernels picked AVX2 or AVX-512 at run time.
 */
#include <immintrin.h>
#include <math.h>

#include "router/router_internal.h"

static __m256 exp_nonpositive8(__m256 x) {
    x = _mm256_max_ps(x, _mm256_set1_ps(-87.0f));
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    const __m256 r2 = _mm256_mul_ps(r, r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    p = _mm256_fmadd_ps(p, r2, _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    /* 2^n: n in [-126, 0] goes straight into the exponent field. */
    const __m256i shift = _mm256_slli_epi32(_mm256_cvtps_epi32(n), 23);
    return _mm256_castsi256_ps(_mm256_add_epi32(_mm256_castps_si256(p), shift));
}

void logit_top2_avx2(const float *logits, int32_t n, float *m1_lanes, float *m2_lanes, int *bad) {
    __m256 m1 = _mm256_set1_ps(-INFINITY), m2 = m1;
    __m256 not_finite = _mm256_setzero_ps();
    const __m256 inf = _mm256_set1_ps(INFINITY);
    for (int32_t i = 0; i + 8 <= n; i += 8) {
        const __m256 x = _mm256_loadu_ps(logits + i);
        not_finite = _mm256_or_ps(not_finite, _mm256_cmp_ps(x, inf, _CMP_NLT_UQ)); /* NaN or +inf */
        m2 = _mm256_max_ps(m2, _mm256_min_ps(m1, x));
        m1 = _mm256_max_ps(m1, x);
    }
    _mm256_storeu_ps(m1_lanes, m1);
    _mm256_storeu_ps(m2_lanes, m2);
    *bad = _mm256_movemask_ps(not_finite) != 0;
}

void logit_sums_avx2(const float *logits, int32_t n, float m, double *s_out, double *t_out) {
    /* Blocks of up to 128 logits are summed in float (16 terms per lane, each <= 1 in size), and each block's sums
     * are added to double accumulators, so the long sum is carried in double at a fraction of the conversions. */
    __m256d s_lo = _mm256_setzero_pd(), s_hi = s_lo, t_lo = s_lo, t_hi = s_lo;
    const __m256 vm = _mm256_set1_ps(m), floor = _mm256_set1_ps(-87.0f);
    for (int32_t i = 0; i + 8 <= n;) {
        __m256 sb[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()}, tb[2] = {sb[0], sb[1]};
        const int32_t block_end = n - i > 128 ? i + 128 : n;
        for (int u = 0; i + 8 <= block_end; i += 8, u ^= 1) {
            const __m256 d = _mm256_max_ps(_mm256_sub_ps(_mm256_loadu_ps(logits + i), vm), floor);
            const __m256 e = exp_nonpositive8(d);
            sb[u] = _mm256_add_ps(sb[u], e);
            tb[u] = _mm256_fmadd_ps(d, e, tb[u]);
        }
        const __m256 sf = _mm256_add_ps(sb[0], sb[1]), tf = _mm256_add_ps(tb[0], tb[1]);
        s_lo = _mm256_add_pd(s_lo, _mm256_cvtps_pd(_mm256_castps256_ps128(sf)));
        s_hi = _mm256_add_pd(s_hi, _mm256_cvtps_pd(_mm256_extractf128_ps(sf, 1)));
        t_lo = _mm256_add_pd(t_lo, _mm256_cvtps_pd(_mm256_castps256_ps128(tf)));
        t_hi = _mm256_add_pd(t_hi, _mm256_cvtps_pd(_mm256_extractf128_ps(tf, 1)));
    }
    double s4[4], t4[4];
    _mm256_storeu_pd(s4, _mm256_add_pd(s_lo, s_hi));
    _mm256_storeu_pd(t4, _mm256_add_pd(t_lo, t_hi));
    *s_out = (s4[0] + s4[1]) + (s4[2] + s4[3]);
    *t_out = (t4[0] + t4[1]) + (t4[2] + t4[3]);
}
