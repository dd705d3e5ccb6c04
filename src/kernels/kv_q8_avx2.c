/* kv_q8_avx2.c — the Q8_0 KV kernels of kv_q8.h for 32-value blocks on AVX2 + FMA + F16C.
 *
 * Scores: a tile of up to 4 query rows walks the positions; each K block is widened to floats (times its scale)
 * once and multiplied into every row of the tile. Mix: a tile of up to 6 rows keeps 16 output values per row in
 * 2 accumulators while the positions stream past, so each half block of V is widened once per tile and a row's
 * weight costs one broadcast load. */
#include <immintrin.h>

#include "kernels/avx2_inline.h"
#include "kernels/kv_q8.h"

#define QK KVQ8_QK
#define BLOCK_BYTES KVQ8_BLOCK_BYTES

INLINE float scale_of(const uint8_t *b) { return _cvtsh_ss(kvq8_scale_bits(b)); }

/* The block's 32 int8 values as 4 × 8 floats. */
INLINE void widen(const uint8_t *b, __m256 v[4]) {
    for (int k = 0; k < 4; k++)
        v[k] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(b + 2 + 8 * k))));
}

INLINE void scores_tile(const kvq8_rows *K, const float *q, kvq8_causal c, float *scores, size_t ld, int32_t r0,
                        const int NR) {
    const int64_t nb = K->hd / QK;
    int32_t valid[4];
    for (int rr = 0; rr < NR; rr++) valid[rr] = kvq8_row_valid(c, r0 + rr);
    for (int32_t p = 0; p < valid[NR - 1]; p++) {
        const uint8_t *b = K->data + (size_t)p * K->stride;
        __m256 acc[4];
        for (int rr = 0; rr < NR; rr++) acc[rr] = _mm256_setzero_ps();
        for (int64_t j = 0; j < nb; j++, b += BLOCK_BYTES) {
            __m256 kv[4];
            widen(b, kv);
            const __m256 d = _mm256_set1_ps(scale_of(b));
            for (int k = 0; k < 4; k++) kv[k] = _mm256_mul_ps(kv[k], d);
            for (int rr = 0; rr < NR; rr++) {
                const float *qr = q + (size_t)(r0 + rr) * K->hd + j * QK;
                for (int k = 0; k < 4; k++) acc[rr] = _mm256_fmadd_ps(_mm256_loadu_ps(qr + 8 * k), kv[k], acc[rr]);
            }
        }
        for (int rr = 0; rr < NR; rr++)
            if (p < valid[rr]) scores[(size_t)(r0 + rr) * ld + p] = hsum8(acc[rr]);
    }
}

static void scores_avx2(const kvq8_rows *K, const float *q, kvq8_causal c, float *scores, size_t ld) {
    int32_t r = 0;
    for (; r + 4 <= c.rows; r += 4) scores_tile(K, q, c, scores, ld, r, 4);
    switch (c.rows - r) {
    case 3: scores_tile(K, q, c, scores, ld, r, 3); break;
    case 2: scores_tile(K, q, c, scores, ld, r, 2); break;
    case 1: scores_tile(K, q, c, scores, ld, r, 1); break;
    default: break;
    }
}

/* 16 output values (half a block) for NR rows: 2 accumulators per row; V widened and scaled once per position for
 * all NR rows, whose weights are broadcast straight from P. */
INLINE void mix_tile(const kvq8_rows *V, const float *P, size_t ldp, kvq8_causal c, float *out, int32_t r0,
                     const int NR) {
    const int32_t n = kvq8_row_valid(c, r0 + NR - 1); /* the tile's longest row; P is zero past shorter ones */
    for (int64_t h = 0; h < V->hd / 16; h++) {
        __m256 acc[6][2];
        for (int rr = 0; rr < NR; rr++) acc[rr][0] = acc[rr][1] = _mm256_setzero_ps();
        const uint8_t *b = V->data + (h / 2) * BLOCK_BYTES;
        const int off = 2 + 16 * (int)(h % 2);
        for (int32_t p = 0; p < n; p++, b += V->stride) {
            const __m256 d = _mm256_set1_ps(scale_of(b));
            const __m256 v0 = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(b + off)))));
            const __m256 v1 = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(b + off + 8)))));
            for (int rr = 0; rr < NR; rr++) {
                const __m256 w = _mm256_broadcast_ss(P + (size_t)(r0 + rr) * ldp + p);
                acc[rr][0] = _mm256_fmadd_ps(w, v0, acc[rr][0]);
                acc[rr][1] = _mm256_fmadd_ps(w, v1, acc[rr][1]);
            }
        }
        for (int rr = 0; rr < NR; rr++) {
            float *o = out + (size_t)(r0 + rr) * V->hd + h * 16;
            _mm256_storeu_ps(o, acc[rr][0]);
            _mm256_storeu_ps(o + 8, acc[rr][1]);
        }
    }
}

static void mix_avx2(const kvq8_rows *V, const float *P, size_t ldp, kvq8_causal c, float *out) {
    int32_t r = 0;
    for (; r + 6 <= c.rows; r += 6) mix_tile(V, P, ldp, c, out, r, 6);
    switch (c.rows - r) {
    case 5: mix_tile(V, P, ldp, c, out, r, 5); break;
    case 4: mix_tile(V, P, ldp, c, out, r, 4); break;
    case 3: mix_tile(V, P, ldp, c, out, r, 3); break;
    case 2: mix_tile(V, P, ldp, c, out, r, 2); break;
    case 1: mix_tile(V, P, ldp, c, out, r, 1); break;
    default: break;
    }
}

const kvq8_kernels kvq8_avx2 = {scores_avx2, mix_avx2};
