/* quantize_avx2.c — AVX2 activation quantizers for the SIMD tiles (the AVX-512 tiles use them too). They must give
 * exactly the scalar quantizers' bytes: the same float operations in the same order per element, rounding with
 * vcvtps2dq under the default round-to-nearest-even mode, which is what nearest_int computes for |v| < 2^22. */
#include "kernels/blocks.h"
#include "kernels/fp16.h"
#include "kernels/matmul_impl.h"

#include <immintrin.h>
#include <string.h>

static float hmax8(__m256 v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
}

/* 32 int32 (four vectors, element order) → 32 int8 in element order. */
static __m256i pack_32(__m256i a, __m256i b, __m256i c, __m256i d) {
    const __m256i ab = _mm256_packs_epi32(a, b), cd = _mm256_packs_epi32(c, d); /* lanes interleave by 128 bits */
    const __m256i q = _mm256_packs_epi16(ab, cd);
    return _mm256_permutevar8x32_epi32(q, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

/* One 32-value block as llama.cpp does it: amax, q = round(x * 127/amax) to 32 int8 at qs. Returns amax; the
 * quants stay in q[] (int32 lanes) for callers that also need their sum. */
static float quantize_block_32(const float *x, int8_t *qs, __m256i q[4]) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 v[4];
    __m256 amax = _mm256_setzero_ps();
    for (int k = 0; k < 4; k++) {
        v[k] = _mm256_loadu_ps(x + 8 * k);
        amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, v[k]));
    }
    const float am = hmax8(amax);
    const __m256 vid = _mm256_set1_ps(am != 0.0f ? 127.0f / am : 0.0f);
    for (int k = 0; k < 4; k++) q[k] = _mm256_cvtps_epi32(_mm256_mul_ps(v[k], vid));
    _mm256_storeu_si256((__m256i *)qs, pack_32(q[0], q[1], q[2], q[3]));
    return am;
}

void quantize_q8_0_soa_avx2(const float *x, void *dst, int64_t n) {
    int8_t *qs = dst;
    float *d = (float *)(qs + n);
    __m256i q[4];
    for (int64_t i = 0; i < n / QK8_0; i++, x += QK8_0)
        d[i] = fp16_to_fp32(fp32_to_fp16(quantize_block_32(x, qs + 32 * i, q) / 127.0f));
}

size_t q8_0_soa_sums_row_bytes(int64_t cols) { return q8_0_soa_row_bytes(cols) + (size_t)(cols / QK8_0) * 4; }

void quantize_q8_0_soa_sums(const float *x, void *dst, int64_t n) {
    int8_t *qs = dst;
    float *d = (float *)(qs + n);
    int32_t *sums = (int32_t *)(d + n / QK8_0);
    __m256i q[4];
    for (int64_t i = 0; i < n / QK8_0; i++, x += QK8_0) {
        d[i] = fp16_to_fp32(fp32_to_fp16(quantize_block_32(x, qs + 32 * i, q) / 127.0f));
        /* the rounded values are in range: their sum is the sum of the stored int8 quants */
        __m256i t = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
        __m128i h = _mm_add_epi32(_mm256_castsi256_si128(t), _mm256_extracti128_si256(t, 1));
        h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0x4E));
        h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0xB1));
        sums[i] = _mm_cvtsi128_si32(h);
    }
}

void quantize_q8_1_soa_avx2(const float *x, void *dst, int64_t n) {
    int8_t *qs = dst;
    float *d = (float *)(qs + n), *sum = d + n / QK8_1;
    __m256i q[4];
    for (int64_t i = 0; i < n / QK8_1; i++, x += QK8_1) {
        const float am = quantize_block_32(x, qs + 32 * i, q);
        const __m256i t = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
        __m128i h = _mm_add_epi32(_mm256_castsi256_si128(t), _mm256_extracti128_si256(t, 1));
        h = _mm_hadd_epi32(h, h);
        h = _mm_hadd_epi32(h, h);
        d[i] = fp16_to_fp32(fp32_to_fp16(am / 127.0f));
        sum[i] = fp16_to_fp32(fp32_to_fp16(am / 127.0f * (float)_mm_cvtsi128_si32(h)));
    }
}

void quantize_q8_k_avx2(const float *x, void *dst, int64_t n) {
    block_q8_k *b = dst;
    const __m256 sign = _mm256_set1_ps(-0.0f);
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        __m256 amax = _mm256_setzero_ps();
        for (int k = 0; k < 32; k++) amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + 8 * k)));
        const float am = hmax8(amax);
        if (am == 0.0f) {
            memset(&b[i], 0, sizeof b[i]);
            continue;
        }
        /* The reference keeps the first element of largest magnitude, with its sign. */
        const __m256 vam = _mm256_set1_ps(am);
        float max = am;
        for (int k = 0; k < 32; k++) {
            const __m256 v = _mm256_loadu_ps(x + 8 * k);
            const int hit = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_andnot_ps(sign, v), vam, _CMP_EQ_OQ));
            if (hit) {
                max = x[8 * k + __builtin_ctz((unsigned)hit)];
                break;
            }
        }
        const float iscale = -127.0f / max;
        const __m256 vis = _mm256_set1_ps(iscale);
        const __m256i top = _mm256_set1_epi32(127);
        for (int g = 0; g < 8; g++) { /* 32 elements at a time: two bsums groups */
            __m256i q[4];
            for (int k = 0; k < 4; k++)
                q[k] = _mm256_min_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 32 * g + 8 * k), vis)), top);
            _mm256_storeu_si256((__m256i *)(b[i].qs + 32 * g), pack_32(q[0], q[1], q[2], q[3]));
            const __m256i s0 = _mm256_add_epi32(q[0], q[1]), s1 = _mm256_add_epi32(q[2], q[3]);
            /* horizontal sums of s0 and s1 */
            __m256i h = _mm256_hadd_epi32(s0, s1);          /* [s0 pairs, s1 pairs] per 128-bit lane */
            h = _mm256_hadd_epi32(h, h);                     /* lane: s0a s1a s0a s1a */
            const __m128i t = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
            b[i].bsums[2 * g] = (int16_t)_mm_cvtsi128_si32(t);
            b[i].bsums[2 * g + 1] = (int16_t)_mm_extract_epi32(t, 1);
        }
        b[i].d = 1.0f / iscale;
    }
}
