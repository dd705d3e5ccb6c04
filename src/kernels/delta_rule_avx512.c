/* delta_rule_avx512.c — the gated delta rule's step (delta_rule.h) on AVX-512, for d a multiple of 16. */
#include <immintrin.h>
#include <stddef.h>

#include "kernels/delta_rule.h"

void delta_rule_avx512(float *state, int32_t d, const float *q, const float *k, const float *v, float decay, float beta,
                       float scale, float *out) {
    const __m512 g = _mm512_set1_ps(decay);
    for (int32_t r = 0; r < d; r++) {
        float *s = state + (size_t)r * d;
        __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
        int32_t i = 0;
        for (; i + 32 <= d; i += 32) {
            a0 = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_loadu_ps(s + i), g), _mm512_loadu_ps(k + i), a0);
            a1 = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_loadu_ps(s + i + 16), g), _mm512_loadu_ps(k + i + 16), a1);
        }
        if (i < d) a0 = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_loadu_ps(s + i), g), _mm512_loadu_ps(k + i), a0);
        const __m512 dr = _mm512_set1_ps((v[r] - _mm512_reduce_add_ps(_mm512_add_ps(a0, a1))) * beta);
        __m512 b0 = _mm512_setzero_ps(), b1 = _mm512_setzero_ps();
        for (i = 0; i + 32 <= d; i += 32) {
            const __m512 x0 = _mm512_fmadd_ps(_mm512_loadu_ps(k + i), dr, _mm512_mul_ps(_mm512_loadu_ps(s + i), g));
            const __m512 x1 =
                _mm512_fmadd_ps(_mm512_loadu_ps(k + i + 16), dr, _mm512_mul_ps(_mm512_loadu_ps(s + i + 16), g));
            _mm512_storeu_ps(s + i, x0);
            _mm512_storeu_ps(s + i + 16, x1);
            b0 = _mm512_fmadd_ps(x0, _mm512_loadu_ps(q + i), b0);
            b1 = _mm512_fmadd_ps(x1, _mm512_loadu_ps(q + i + 16), b1);
        }
        if (i < d) {
            const __m512 x0 = _mm512_fmadd_ps(_mm512_loadu_ps(k + i), dr, _mm512_mul_ps(_mm512_loadu_ps(s + i), g));
            _mm512_storeu_ps(s + i, x0);
            b0 = _mm512_fmadd_ps(x0, _mm512_loadu_ps(q + i), b0);
        }
        out[r] = _mm512_reduce_add_ps(_mm512_add_ps(b0, b1)) * scale;
    }
}
