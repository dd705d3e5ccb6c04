/* kv_q8_avx512.c — the Q8_0 KV kernels of kv_q8.h for 32-value blocks on AVX-512: as kv_q8_avx2.c with 16-lane
 * vectors (a block is two), so the tiles are wider: 8 query rows for scores, 8 rows over a whole block for the mix. */
#include <immintrin.h>

#include "kernels/kv_q8.h"

#define INLINE static inline __attribute__((always_inline))
#define QK KVQ8_QK
#define BLOCK_BYTES KVQ8_BLOCK_BYTES

INLINE float scale_of(const uint8_t *b) { return _cvtsh_ss(kvq8_scale_bits(b)); }

INLINE void widen(const uint8_t *b, __m512 v[2]) {
    for (int k = 0; k < 2; k++)
        v[k] = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(b + 2 + 16 * k))));
}

INLINE void scores_tile(const kvq8_rows *K, const float *q, kvq8_causal c, float *scores, size_t ld, int32_t r0,
                        const int NR) {
    const int64_t nb = K->hd / QK;
    int32_t valid[8];
    for (int rr = 0; rr < NR; rr++) valid[rr] = kvq8_row_valid(c, r0 + rr);
    for (int32_t p = 0; p < valid[NR - 1]; p++) {
        const uint8_t *b = K->data + (size_t)p * K->stride;
        __m512 acc[8];
        for (int rr = 0; rr < NR; rr++) acc[rr] = _mm512_setzero_ps();
        for (int64_t j = 0; j < nb; j++, b += BLOCK_BYTES) {
            __m512 kv[2];
            widen(b, kv);
            const __m512 d = _mm512_set1_ps(scale_of(b));
            for (int k = 0; k < 2; k++) kv[k] = _mm512_mul_ps(kv[k], d);
            for (int rr = 0; rr < NR; rr++) {
                const float *qr = q + (size_t)(r0 + rr) * K->hd + j * QK;
                for (int k = 0; k < 2; k++) acc[rr] = _mm512_fmadd_ps(_mm512_loadu_ps(qr + 16 * k), kv[k], acc[rr]);
            }
        }
        for (int rr = 0; rr < NR; rr++)
            if (p < valid[rr]) scores[(size_t)(r0 + rr) * ld + p] = _mm512_reduce_add_ps(acc[rr]);
    }
}

static void scores_avx512(const kvq8_rows *K, const float *q, kvq8_causal c, float *scores, size_t ld) {
    int32_t r = 0;
    for (; r + 8 <= c.rows; r += 8) scores_tile(K, q, c, scores, ld, r, 8);
    for (; r + 4 <= c.rows; r += 4) scores_tile(K, q, c, scores, ld, r, 4);
    for (; r < c.rows; r++) scores_tile(K, q, c, scores, ld, r, 1);
}

INLINE void mix_tile(const kvq8_rows *V, const float *P, size_t ldp, kvq8_causal c, float *out, int32_t r0,
                     const int NR) {
    const int32_t n = kvq8_row_valid(c, r0 + NR - 1); /* the tile's longest row; P is zero past shorter ones */
    for (int64_t j = 0; j < V->hd / QK; j++) {
        __m512 acc[8][2];
        for (int rr = 0; rr < NR; rr++) acc[rr][0] = acc[rr][1] = _mm512_setzero_ps();
        const uint8_t *b = V->data + j * BLOCK_BYTES;
        for (int32_t p = 0; p < n; p++, b += V->stride) {
            __m512 v[2];
            widen(b, v);
            const __m512 d = _mm512_set1_ps(scale_of(b));
            v[0] = _mm512_mul_ps(v[0], d);
            v[1] = _mm512_mul_ps(v[1], d);
            for (int rr = 0; rr < NR; rr++) {
                const __m512 w = _mm512_set1_ps(P[(size_t)(r0 + rr) * ldp + p]);
                acc[rr][0] = _mm512_fmadd_ps(w, v[0], acc[rr][0]);
                acc[rr][1] = _mm512_fmadd_ps(w, v[1], acc[rr][1]);
            }
        }
        for (int rr = 0; rr < NR; rr++)
            for (int k = 0; k < 2; k++)
                _mm512_storeu_ps(out + (size_t)(r0 + rr) * V->hd + j * QK + 16 * k, acc[rr][k]);
    }
}

static void mix_avx512(const kvq8_rows *V, const float *P, size_t ldp, kvq8_causal c, float *out) {
    int32_t r = 0;
    for (; r + 8 <= c.rows; r += 8) mix_tile(V, P, ldp, c, out, r, 8);
    switch (c.rows - r) {
    case 7: mix_tile(V, P, ldp, c, out, r, 7); break;
    case 6: mix_tile(V, P, ldp, c, out, r, 6); break;
    case 5: mix_tile(V, P, ldp, c, out, r, 5); break;
    case 4: mix_tile(V, P, ldp, c, out, r, 4); break;
    case 3: mix_tile(V, P, ldp, c, out, r, 3); break;
    case 2: mix_tile(V, P, ldp, c, out, r, 2); break;
    case 1: mix_tile(V, P, ldp, c, out, r, 1); break;
    default: break;
    }
}

const kvq8_kernels kvq8_avx512 = {scores_avx512, mix_avx512};
