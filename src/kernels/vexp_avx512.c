/* vexp_avx512.c — vexp.h's rows eight or sixteen lanes at a time. expf8 is glibc's expf (sysdeps/ieee754/flt-32/
 * e_expf.c, as its FMA build compiles it) lane by lane: z = x·32/ln2 rounded by adding 0x1.8p52, r = x·32/ln2 - k
 * (fused), s = 2^(k/32) from the table entry k mod 32 with k/32 added to its exponent, y = (c0 r + c1) r² +
 * (c2 r + 1) (fused), times s, rounded to float. Lanes whose |x| >= 88 or NaN take the scalar expf. */
#include "kernels/vexp.h"

#include <immintrin.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#define INLINE static inline __attribute__((always_inline))

typedef struct regs {
    __m512d inv, shift, c0, c1, c2, one;
    __m512i t0, t1, t2, t3;
} regs;

INLINE regs load_regs(const vexp_consts *c) {
    regs r = {_mm512_set1_pd(c->invln2n), _mm512_set1_pd(c->shift), _mm512_set1_pd(c->c0), _mm512_set1_pd(c->c1),
              _mm512_set1_pd(c->c2),      _mm512_set1_pd(1.0),      _mm512_loadu_si512(c->tab),
              _mm512_loadu_si512(c->tab + 8), _mm512_loadu_si512(c->tab + 16), _mm512_loadu_si512(c->tab + 24)};
    return r;
}

/* Whether any lane needs glibc's special path (|x| >= 88, infinities, NaN). */
INLINE bool any_special(__m256 x) {
    const __m256i top = _mm256_and_si256(_mm256_srli_epi32(_mm256_castps_si256(x), 20), _mm256_set1_epi32(0x7ff));
    return _mm256_cmpge_epu32_mask(top, _mm256_set1_epi32(0x42a)) != 0;
}

INLINE __m256 expf8_fast(const regs *g, __m256 x) {
    const __m512d xd = _mm512_cvtps_pd(x);
    __m512d kd = _mm512_fmadd_pd(g->inv, xd, g->shift);
    const __m512i ki = _mm512_castpd_si512(kd);
    kd = _mm512_sub_pd(kd, g->shift);
    const __m512d r = _mm512_fmsub_pd(g->inv, xd, kd);
    const __m512i lo = _mm512_permutex2var_epi64(g->t0, ki, g->t1), hi = _mm512_permutex2var_epi64(g->t2, ki, g->t3);
    const __mmask8 upper = _mm512_test_epi64_mask(ki, _mm512_set1_epi64(16));
    const __m512i t = _mm512_add_epi64(_mm512_mask_blend_epi64(upper, lo, hi), _mm512_slli_epi64(ki, 47));
    const __m512d z = _mm512_fmadd_pd(g->c0, r, g->c1), r2 = _mm512_mul_pd(r, r);
    __m512d y = _mm512_fmadd_pd(g->c2, r, g->one);
    y = _mm512_fmadd_pd(z, r2, y);
    return _mm512_cvtpd_ps(_mm512_mul_pd(y, _mm512_castsi512_pd(t)));
}

INLINE __m256 expf8(const regs *g, __m256 x) {
    if (!any_special(x)) return expf8_fast(g, x);
    float v[8];
    _mm256_storeu_ps(v, x);
    for (int i = 0; i < 8; i++) v[i] = expf(v[i]);
    return _mm256_loadu_ps(v);
}

void vexp_expf_avx512(const vexp_consts *c, const float *x, float *y, int64_t n) {
    const regs g = load_regs(c);
    for (int64_t i = 0; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, expf8(&g, _mm256_loadu_ps(x + i)));
}

void vexp_silu_mul_avx512(const vexp_consts *c, float *gate, const float *up, int64_t n) {
    const regs g = load_regs(c);
    const __m256 one = _mm256_set1_ps(1.0f), sign = _mm256_set1_ps(-0.0f);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 x = _mm256_loadu_ps(gate + i);
        const __m256 e = expf8(&g, _mm256_xor_ps(x, sign));
        _mm256_storeu_ps(gate + i, _mm256_mul_ps(_mm256_div_ps(x, _mm256_add_ps(one, e)), _mm256_loadu_ps(up + i)));
    }
    vexp_silu_mul_scalar(gate + i, up + i, n - i);
}

void vexp_softmax_avx512(const vexp_consts *c, float *x, int64_t n) {
    const regs g = load_regs(c);
    /* max: maxps(x, m) is (x > m ? x : m), the scalar loop's step, lane by lane; the lanes' maxima then meet. */
    __m512 m16 = _mm512_set1_ps(-INFINITY);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) m16 = _mm512_max_ps(_mm512_loadu_ps(x + i), m16);
    float lanes[16], max = -INFINITY;
    _mm512_storeu_ps(lanes, m16);
    for (int l = 0; l < 16; l++)
        if (lanes[l] > max) max = lanes[l];
    for (; i < n; i++)
        if (x[i] > max) max = x[i];
    const __m256 vmax = _mm256_set1_ps(max);
    double sum = 0.0;
    for (i = 0; i + 8 <= n; i += 8) {
        const __m256 e = expf8(&g, _mm256_sub_ps(_mm256_loadu_ps(x + i), vmax));
        _mm256_storeu_ps(x + i, e);
        /* in index order, as the scalar loop */
        const __m512d d = _mm512_cvtps_pd(e);
        double v[8];
        _mm512_storeu_pd(v, d);
        sum += v[0];
        sum += v[1];
        sum += v[2];
        sum += v[3];
        sum += v[4];
        sum += v[5];
        sum += v[6];
        sum += v[7];
    }
    for (; i < n; i++) {
        x[i] = expf(x[i] - max);
        sum += (double)x[i];
    }
    const float inv = (float)(1.0 / sum);
    const __m512 vinv = _mm512_set1_ps(inv);
    for (i = 0; i + 16 <= n; i += 16) _mm512_storeu_ps(x + i, _mm512_mul_ps(_mm512_loadu_ps(x + i), vinv));
    for (; i < n; i++) x[i] *= inv;
}

/* Rows of one softmax each, eight at a time: each row scaled, its max found and its exps stored as above, then the
 * eight sums taken together, element by element, each in its own row's index order (eight independent chains
 * instead of one chain waiting on every add). */
void vexp_softmax_rows_avx512(const vexp_consts *c, float *x, int64_t stride, int k, int64_t n, float scale) {
    const regs g = load_regs(c);
    const __m512 vscale = _mm512_set1_ps(scale);
    for (int r0 = 0; r0 < k; r0 += 8) {
        const int kk = k - r0 < 8 ? k - r0 : 8;
        const float *row[8];
        for (int r = 0; r < kk; r++) {
            float *y = x + (size_t)(r0 + r) * (size_t)stride;
            row[r] = y;
            __m512 m16 = _mm512_set1_ps(-INFINITY);
            int64_t i = 0;
            for (; i + 16 <= n; i += 16) {
                const __m512 v = _mm512_mul_ps(_mm512_loadu_ps(y + i), vscale);
                _mm512_storeu_ps(y + i, v);
                m16 = _mm512_max_ps(v, m16);
            }
            float lanes[16], max = -INFINITY;
            _mm512_storeu_ps(lanes, m16);
            for (int l = 0; l < 16; l++)
                if (lanes[l] > max) max = lanes[l];
            for (; i < n; i++) {
                y[i] *= scale;
                if (y[i] > max) max = y[i];
            }
            const __m256 vmax = _mm256_set1_ps(max);
            for (i = 0; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, expf8(&g, _mm256_sub_ps(_mm256_loadu_ps(y + i), vmax)));
            for (; i < n; i++) y[i] = expf(y[i] - max);
        }
        for (int r = kk; r < 8; r++) row[r] = row[0]; /* padding: summed, never used */
        double s0 = 0, s1 = 0, s2 = 0, s3 = 0, s4 = 0, s5 = 0, s6 = 0, s7 = 0;
        for (int64_t i = 0; i < n; i++) {
            s0 += (double)row[0][i];
            s1 += (double)row[1][i];
            s2 += (double)row[2][i];
            s3 += (double)row[3][i];
            s4 += (double)row[4][i];
            s5 += (double)row[5][i];
            s6 += (double)row[6][i];
            s7 += (double)row[7][i];
        }
        const double sums[8] = {s0, s1, s2, s3, s4, s5, s6, s7};
        for (int r = 0; r < kk; r++) {
            float *y = x + (size_t)(r0 + r) * (size_t)stride;
            const float inv = (float)(1.0 / sums[r]);
            const __m512 vinv = _mm512_set1_ps(inv);
            int64_t i = 0;
            for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, _mm512_mul_ps(_mm512_loadu_ps(y + i), vinv));
            for (; i < n; i++) y[i] *= inv;
        }
    }
}

void vexp_round_f16_avx512(float *x, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(x + i, _mm512_cvtph_ps(_mm512_cvtps_ph(_mm512_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT)));
    vexp_round_f16_scalar(x + i, n - i);
}

/* The F16 bits by the hardware's conversion (ties to even, as fp32_to_fp16), the table gathered by them; the two
 * ends blended in. */
void vexp_table_glu_avx512(const float *table, float *gate, const float *up, int64_t n) {
    const __m512 lo = _mm512_set1_ps(-10.0f), hi = _mm512_set1_ps(10.0f);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m512 x = _mm512_loadu_ps(gate + i);
        const __m512i idx = _mm512_cvtepu16_epi32(_mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        __m512 g = _mm512_i32gather_ps(idx, table, 4);
        g = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, hi, _CMP_GE_OQ), g, x);
        g = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x, lo, _CMP_NLE_UQ), g);
        _mm512_storeu_ps(gate + i, _mm512_mul_ps(g, _mm512_loadu_ps(up + i)));
    }
    vexp_table_glu_scalar(table, gate + i, up + i, n - i);
}
