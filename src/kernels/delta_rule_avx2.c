/* delta_rule_avx2.c — the gated delta rule's step (delta_rule.h) on AVX2 + FMA, for d a multiple of 8. */
#include <immintrin.h>
#include <stddef.h>

#include "kernels/delta_rule.h"

static float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

void delta_rule_avx2(float *state, int32_t d, const float *q, const float *k, const float *v, float decay, float beta,
                     float scale, float *out) {
    const __m256 g = _mm256_set1_ps(decay);
    for (int32_t r = 0; r < d; r++) {
        float *s = state + (size_t)r * d;
        __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
        int32_t i = 0;
        for (; i + 16 <= d; i += 16) {
            a0 = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_loadu_ps(s + i), g), _mm256_loadu_ps(k + i), a0);
            a1 = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_loadu_ps(s + i + 8), g), _mm256_loadu_ps(k + i + 8), a1);
        }
        if (i < d) a0 = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_loadu_ps(s + i), g), _mm256_loadu_ps(k + i), a0);
        const __m256 dr = _mm256_set1_ps((v[r] - hsum(_mm256_add_ps(a0, a1))) * beta);
        __m256 b0 = _mm256_setzero_ps(), b1 = _mm256_setzero_ps();
        for (i = 0; i + 16 <= d; i += 16) {
            const __m256 x0 = _mm256_fmadd_ps(_mm256_loadu_ps(k + i), dr, _mm256_mul_ps(_mm256_loadu_ps(s + i), g));
            const __m256 x1 =
                _mm256_fmadd_ps(_mm256_loadu_ps(k + i + 8), dr, _mm256_mul_ps(_mm256_loadu_ps(s + i + 8), g));
            _mm256_storeu_ps(s + i, x0);
            _mm256_storeu_ps(s + i + 8, x1);
            b0 = _mm256_fmadd_ps(x0, _mm256_loadu_ps(q + i), b0);
            b1 = _mm256_fmadd_ps(x1, _mm256_loadu_ps(q + i + 8), b1);
        }
        if (i < d) {
            const __m256 x0 = _mm256_fmadd_ps(_mm256_loadu_ps(k + i), dr, _mm256_mul_ps(_mm256_loadu_ps(s + i), g));
            _mm256_storeu_ps(s + i, x0);
            b0 = _mm256_fmadd_ps(x0, _mm256_loadu_ps(q + i), b0);
        }
        out[r] = hsum(_mm256_add_ps(b0, b1)) * scale;
    }
}
