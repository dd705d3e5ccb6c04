/* attn_scores_avx512.c — the attention-score kernel (attn_scores.h) in AVX-512: 16 positions at a time, their K rows
 * converted from F16 and transposed (in registers, 16 × 16 at a time) into head_dim vectors of 16 lanes (one per
 * position), then each query row's scores for those positions are head_dim FMAs with the row's value broadcast,
 * eight rows at once to hide the FMA latency. */
#include "kernels/attn_scores.h"

#include <immintrin.h>
#include <string.h>

#define INLINE static inline __attribute__((always_inline))

/* Rows [r, r + NR) against the transposed block kt (hd vectors): the first np lanes stored. */
INLINE void rows_block(const float *kt, int32_t hd, const float *q, int32_t r, const int NR, float *scores, int64_t ldy,
                       __mmask16 mask) {
    __m512 acc[8];
    _Pragma("GCC unroll 8") for (int j = 0; j < NR; j++) acc[j] = _mm512_setzero_ps();
    const float *qr = q + (size_t)r * (size_t)hd;
    for (int32_t d = 0; d < hd; d++) {
        const __m512 k = _mm512_load_ps(kt + (size_t)d * 16);
        _Pragma("GCC unroll 8") for (int j = 0; j < NR; j++)
            acc[j] = _mm512_fmadd_ps(_mm512_set1_ps(qr[(size_t)j * (size_t)hd + (size_t)d]), k, acc[j]);
    }
    _Pragma("GCC unroll 8") for (int j = 0; j < NR; j++)
        _mm512_mask_storeu_ps(scores + (size_t)(r + j) * (size_t)ldy, mask, acc[j]);
}

/* Transposes 16 vectors of 16 floats in place: r[c] lane p becomes the old r[p] lane c. Unpacks and shuffles within
 * 128-bit lanes gather each lane's 4 × 4 block, then 128-bit lanes move across the vectors (64 shuffles). */
INLINE void transpose_16x16(__m512 r[16]) {
    __m512 t[16], u[16];
    _Pragma("GCC unroll 8") for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    /* u[4i + e], 128-bit lane L: element 4L + e of rows 4i .. 4i+3 */
    _Pragma("GCC unroll 4") for (int i = 0; i < 4; i++) {
        u[4 * i + 0] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
        u[4 * i + 1] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0xEE);
        u[4 * i + 2] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
        u[4 * i + 3] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
    }
    _Pragma("GCC unroll 4") for (int e = 0; e < 4; e++) { /* element 4L + e of all rows: lane L of u[e], u[4+e], ... */
        const __m512 a0 = _mm512_shuffle_f32x4(u[e], u[4 + e], 0x44), a1 = _mm512_shuffle_f32x4(u[e], u[4 + e], 0xEE);
        const __m512 a2 = _mm512_shuffle_f32x4(u[8 + e], u[12 + e], 0x44);
        const __m512 a3 = _mm512_shuffle_f32x4(u[8 + e], u[12 + e], 0xEE);
        r[0 + e] = _mm512_shuffle_f32x4(a0, a2, 0x88);
        r[4 + e] = _mm512_shuffle_f32x4(a0, a2, 0xDD);
        r[8 + e] = _mm512_shuffle_f32x4(a1, a3, 0x88);
        r[12 + e] = _mm512_shuffle_f32x4(a1, a3, 0xDD);
    }
}

void attn_scores_f16_avx512(const uint16_t *K, size_t k_stride, int32_t n_pos, int32_t hd, const float *q,
                            int32_t rows, float *scores, int64_t ldy) {
    _Alignas(64) float kt[ATTN_SCORES_HD_MAX * 16];
    for (int32_t p0 = 0; p0 < n_pos; p0 += 16) {
        const int32_t np = n_pos - p0 < 16 ? n_pos - p0 : 16;
        for (int32_t d = 0; d < hd; d += 16) { /* values d .. d+15 of the 16 rows, on their side */
            __m512 v[16];
            for (int32_t p = 0; p < 16; p++) {
                const uint16_t *row = (const uint16_t *)((const char *)K + (size_t)(p0 + p) * k_stride);
                v[p] = p < np ? _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(row + d))) : _mm512_setzero_ps();
            }
            transpose_16x16(v);
            for (int c = 0; c < 16; c++) _mm512_store_ps(kt + (size_t)(d + c) * 16, v[c]);
        }
        const __mmask16 mask = (__mmask16)((1u << np) - 1);
        float *out = scores + p0;
        int32_t r = 0;
        for (; r + 8 <= rows; r += 8) rows_block(kt, hd, q, r, 8, out, ldy, mask);
        switch (rows - r) {
        case 7: rows_block(kt, hd, q, r, 7, out, ldy, mask); break;
        case 6: rows_block(kt, hd, q, r, 6, out, ldy, mask); break;
        case 5: rows_block(kt, hd, q, r, 5, out, ldy, mask); break;
        case 4: rows_block(kt, hd, q, r, 4, out, ldy, mask); break;
        case 3: rows_block(kt, hd, q, r, 3, out, ldy, mask); break;
        case 2: rows_block(kt, hd, q, r, 2, out, ldy, mask); break;
        case 1: rows_block(kt, hd, q, r, 1, out, ldy, mask); break;
        default: break;
        }
    }
}
